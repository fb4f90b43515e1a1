"""ProviderClient: calls fill one httpx client before the next is opened."""

from __future__ import annotations

import contextlib

from agentcore.providers.http import SHARD_CALLS, build_client
from agentcore.settings import ProviderSettings


async def test_sequential_calls_share_one_client() -> None:
    pool = build_client(ProviderSettings(kind="anthropic"), "http://127.0.0.1:9", {})
    seen = []
    for _ in range(3):
        async with pool.lease() as client:
            seen.append(client)
    assert len(set(map(id, seen))) == 1
    await pool.aclose()


async def test_a_full_client_opens_the_next_and_freed_room_is_reused() -> None:
    pool = build_client(ProviderSettings(kind="anthropic"), "http://127.0.0.1:9", {})
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(pool.lease()) for _ in range(SHARD_CALLS + 1)]
        assert len(set(map(id, clients))) == 2
        assert clients[0]._transport._pool._max_connections == SHARD_CALLS  # type: ignore[attr-defined]
    async with pool.lease() as again:
        assert again is clients[0]  # the first client has room again
    await pool.aclose()


async def test_a_configured_cap_is_one_client_with_that_cap() -> None:
    config = ProviderSettings(kind="anthropic", max_connections=3)
    pool = build_client(config, "http://127.0.0.1:9", {})
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(pool.lease()) for _ in range(SHARD_CALLS + 5)]
    assert len(set(map(id, clients))) == 1
    assert clients[0]._transport._pool._max_connections == 3  # type: ignore[attr-defined]
    await pool.aclose()
