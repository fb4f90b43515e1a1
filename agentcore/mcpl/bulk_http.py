"""The aiohttp parts of a bulk fetch (`agentcore.mcpl.bulk_fetch`, MCPL SPEC §19): a connector
that checks each connection's peer address before a byte is sent, and a resolver that answers
only with addresses already checked. Imported at the first fetch, with aiohttp."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult


class CheckedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, with each new connection's peer address checked (`check`)
    before the request is written on it; a refused one is closed at once."""

    def __init__(self, check: Callable[[asyncio.BaseTransport, str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._check = check

    async def _wrap_create_connection(
        self, *args: Any, req: aiohttp.ClientRequest, **kwargs: Any
    ) -> tuple[asyncio.Transport, Any]:
        transport, protocol = await super()._wrap_create_connection(*args, req=req, **kwargs)
        try:
            self._check(transport, str(req.url.host))
        except BaseException:
            transport.close()
            raise
        return transport, protocol


class PinnedResolver(AbstractResolver):
    """Answers aiohttp with the addresses already checked, and never looks anything up."""

    def __init__(self) -> None:
        self._pinned: dict[tuple[str, int], list[ResolveResult]] = {}

    def pin(self, host: str, port: int, infos: list[tuple[Any, ...]]) -> None:
        self._pinned[(host, port)] = [
            ResolveResult(
                hostname=host,
                host=str(info[4][0]),
                port=port,
                family=info[0],
                proto=info[2],
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for info in infos
        ]

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            return self._pinned[(host, port)]
        except KeyError:  # never: every hop is pinned before it is dialed
            raise OSError(f"{host}:{port} was not checked") from None

    async def close(self) -> None:
        self._pinned.clear()
