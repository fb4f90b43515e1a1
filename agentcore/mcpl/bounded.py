"""The JSON-RPC peer of one MCPL server, held to its bounds (`agentcore.mcpl.limits`).

An untrusted server (SPEC §13.1) must not make the host hold without limit what it
asks for. Two bounds live here, where requests arrive and frames leave:

- **Requests in flight** (``max_requests_in_flight``). The peer runs a task per
  inbound request (`JsonRpcPeer`); past the limit, counting the tasks still sending
  their answers, the next request is refused at once, -32603 naming the limit
  (``data.reason: "limit"``). The refusal is sent by the reader itself, not by a task:
  a server that stops reading its answers stops being read, so it cannot make the host
  hold a task, or a refusal, per request it writes.
- **Bytes queued toward the server** (``max_queued_bytes``). A frame that cannot be
  written at once waits (the transport's backpressure); the bytes waiting, plus what
  the transport holds that the server has not read (`StdioTransport.queued_bytes`), may
  not pass the limit. Past it the server is not reading: the connection is closed, its
  in-flight requests cancelled (which closes their provider calls) and their answers
  attempted once, without waiting: the send that found the limit passed, and every
  later one that would wait, fails at once.

Each time a bound is met the log says so and an ``mcpl:limit`` trace records it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from loguru import logger

from agentcore.mcpl.jsonrpc import (
    ConnectionClosed,
    JsonRpcPeer,
    NotificationHandler,
    Params,
    RequestHandler,
    RequestId,
    Transport,
    encode_error,
)
from agentcore.mcpl.limits import Limits
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError

LimitReport = Callable[..., None]
"""`report(limit=..., value=..., **fields)`: an ``mcpl:limit`` trace for the server."""


class BoundedPeer(JsonRpcPeer):
    """A `JsonRpcPeer` that holds the other side to `limits` (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        request_handler: RequestHandler,
        notification_handler: NotificationHandler | None = None,
        *,
        name: str = "peer",
        limits: Limits,
        report: LimitReport | None = None,
    ) -> None:
        super().__init__(transport, request_handler, notification_handler, name=name)
        self.limits = limits
        self._report = report
        self._refusal: str | None = None  # set by _spawn, sent by the reader
        self._refused = 0  # refusals since the last request admitted, for the log
        self._waiting_bytes = 0
        self.overflowed = False
        self._closer: asyncio.Task[None] | None = None

    # -- requests in flight ----------------------------------------------------------

    async def _dispatch(self, text: str) -> None:
        await super()._dispatch(text)
        refusal, self._refusal = self._refusal, None
        if refusal is not None:
            await self._send_quietly(refusal)

    def _spawn(self, request_id: RequestId, method: str, params: Params) -> None:
        limit = self.limits.max_requests_in_flight
        if len(self._tasks) < limit:
            self._refused = 0
            super()._spawn(request_id, method, params)
            return
        self._refused += 1
        if self._refused == 1:  # once per run of refusals: a flood is one log line
            logger.warning(
                "{}: {} requests in flight, its limit (max_requests_in_flight); refusing "
                "{} (id {!r}) and any more until one is answered",
                self.name,
                limit,
                method,
                request_id,
            )
        self._refusal = encode_error(
            request_id,
            {
                "code": INTERNAL_ERROR,
                "message": f"Too many requests in flight: this host serves at most {limit} "
                "at once from this server (max_requests_in_flight)",
                "data": {"reason": "limit", "limit": "max_requests_in_flight", "value": limit},
            },
        )
        self._emit("max_requests_in_flight", limit, requestId=request_id, method=method)

    # -- bytes queued ------------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        """Bytes written toward the other side that it has not read yet."""
        held = getattr(self._transport, "queued_bytes", 0)
        return self._waiting_bytes + (held if isinstance(held, int) else 0)

    async def _send_queued(self, text: str) -> None:
        size = len(text)  # frames are ASCII (jsonrpc's encoder): characters are bytes
        self._waiting_bytes += size
        try:
            queued = self.queued_bytes
            if self.overflowed or queued > self.limits.max_queued_bytes:
                self._overflow(queued)
                raise ConnectionClosed(f"{self.name}: {self.close_reason}")
            await super()._send_queued(text)
        finally:
            self._waiting_bytes -= size

    def _overflow(self, queued: int) -> None:
        if self.overflowed:
            return
        self.overflowed = True
        limit = self.limits.max_queued_bytes
        reason = (
            f"the server is not reading: {queued} bytes queued toward it, over its "
            f"max_queued_bytes ({limit})"
        )
        logger.error("{}: {}; closing the connection", self.name, reason)
        self._emit("max_queued_bytes", limit, queuedBytes=queued)
        if not self.closing:
            self.close_reason = reason
            error = McplError(INTERNAL_ERROR, f"Connection closed: {reason}")
            self._closer = asyncio.get_running_loop().create_task(
                self.close(error, reason=reason), name=f"jsonrpc-overflow:{self.name}"
            )

    def _emit(self, limit: str, value: int, **fields: Any) -> None:
        if self._report is not None:
            self._report(limit=limit, value=value, **fields)


__all__ = ["BoundedPeer", "LimitReport"]
