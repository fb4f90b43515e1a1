"""What the tests of the Redis deployments share (test_deploy_*.py): replicas run to their
answers, and the rate limit's window read back from Redis (the MCPL hub: conftest's)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e_support import Hub
from fleet_rig import Replica, start_replicas

RETRY = {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0}
ACL_USER = "agentcore-fleet"
ACL_PASSWORD = "acl-pw-5d1e-redis-fleet"
PASSWORD_ENV = "AGENTCORE_TEST_REDIS_PASSWORD"
SENTINEL_PASSWORD = "sentinel-own-pw-41c2"
SENTINEL_PASSWORD_ENV = "AGENTCORE_TEST_SENTINEL_PASSWORD"
SHORT_WAITS = {"provider_hold": {"max_wait_s": 1.0}, "rate_limit": {"max_wait_s": 1.0}}
"""A store that cannot be used fails a call after this wait (``on_store_error = "closed"``)."""


def prefix() -> str:
    return f"fleet-{uuid.uuid4().hex[:8]}"


async def answers(replicas: list[Replica]) -> list[dict[str, Any]]:
    """Every request's answer; each request answered exactly once."""
    out = []
    for replica in replicas:
        out += [
            (await replica.session.answer(rid, timeout=30.0)).message for rid in replica.requests
        ]
    for replica in replicas:
        assert replica.session.unanswered_or_twice() == {}, replica.tag
    return out


async def run(
    count: int,
    hub: Hub,
    write_settings: Callable[..., Path],
    tmp_path: Path,
    sections: dict[str, Any],
    asks: int = 2,
) -> tuple[list[Replica], list[dict[str, Any]], str]:
    """`count` replicas, `asks` calls on each: every answer, and what the replicas wrote to
    stdout and stderr (they are stopped after)."""
    replicas = await start_replicas(count, hub, write_settings, tmp_path, sections)
    output = ""
    try:
        for replica in replicas:
            for i in range(asks):
                await replica.ask(f"{replica.tag}-{i}")
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            _, stdout, stderr = await replica.stop()
            output += stdout + stderr
    return replicas, answered, output


def limits(per_minute: int = 1000, in_flight: int | None = None) -> dict[str, Any]:
    provider: dict[str, Any] = {"requests_per_minute": per_minute}
    if in_flight is not None:
        provider["max_in_flight"] = in_flight
    return {"max_wait_s": 20.0, "providers": {"a": provider}}


def window_size(client: Any, key_prefix: str) -> int:
    """How many admissions the rate limit's window in Redis holds (0: no such key)."""
    return int(client.zcard("{" + key_prefix + "}:window:a"))
