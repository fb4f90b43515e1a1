"""A request sent on a pooled connection the server was closing: sent again, not an attempt.

Servers close keep-alive connections that sat idle (uvicorn after 5 s: LiteLLM's proxy,
many OpenAI-compatible servers). A request that takes such a connection from the pool
just as the server closes it is written into a dying socket, and the server closes it
without reading a byte of it: the client sees the connection end before any response
byte. Nothing was done with that request, so the driver sends it again on a fresh
connection at once, as HTTP clients do for idempotent methods (RFC 9112 §9.3.1; aiohttp
does it for GET, not for POST). It is not an attempt: the retry policy never sees it,
and a provider hold that happens to last as long as the idle timeout (5 s) costs
nothing. Only a reused connection qualifies: one the request opened itself that closes
unanswered is the server's doing, and fails the attempt like any other network error.

Whether the connection was reused is the pooled session's connector's to say
(`ReuseAwareConnector`): it marks the request being sent (`Sending`, which the driver
puts in `SENDING` around the send) when it hands out a connection it handed out before.
(aiohttp's ``on_connection_reuseconn`` trace signal says the same, but a trace config
makes two objects per request that its response keeps while it streams, and a round of
signal coroutines per request: 0.5-0.6 KB of RSS per open streamed response.)
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey

from agentcore.inference import InferenceError

__all__ = [
    "CLOSED_UNREAD",
    "SENDING",
    "ReuseAwareConnector",
    "Sending",
    "closed_unread",
    "resent_error",
]

CLOSED_UNREAD = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientConnectionResetError,
)
"""What aiohttp raises when the connection ends under a request before its response."""


class Sending:
    """One request being sent (`SENDING`): whether it went out on a pooled connection, and
    who is told the connection it goes on (`connected`: a streamed call's `Silence`, which
    times the wait for the response head)."""

    __slots__ = ("connected", "reused")

    def __init__(self, connected: Callable[[ResponseHandler], None] | None = None) -> None:
        self.reused = False
        self.connected = connected


SENDING: dict[asyncio.Task[Any] | None, Sending] = {}
"""The request each task is sending, for `ReuseAwareConnector` (which runs in that task) to
find. Keyed by task, not a context variable: setting one gives the task's context a mapping
of its own, kept for the task's life (~0.25 KB of every stream)."""


class ReuseAwareConnector(aiohttp.TCPConnector):
    """A `TCPConnector` that tells the `Sending` in `SENDING` the connection it hands out
    (`Sending.connected`), and, when `pooled`, marks it when that connection is one it
    handed out before: a pooled connection, reused. It remembers the connections it made
    by weak reference, so a closed one is forgotten with it. It keeps at most `keep_idle`
    connections idle in its pool."""

    def __init__(self, *, pooled: bool = True, keep_idle: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._made: weakref.WeakSet[ResponseHandler] | None = weakref.WeakSet() if pooled else None
        self._keep_idle = keep_idle  # ``max_keepalive_connections``; None: aiohttp's (no cap)

    def _release(
        self,
        key: ConnectionKey,
        protocol: ResponseHandler,
        *,
        should_close: bool = False,
    ) -> None:
        """A connection given back is kept idle for reuse only while fewer than
        `keep_idle` are (aiohttp keeps every one until its keep-alive timeout)."""
        if self._keep_idle is not None and len(self._conns.get(key, ())) >= self._keep_idle:
            should_close = True
        super()._release(key, protocol, should_close=should_close)

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        protocol, made = connection.protocol, self._made
        if protocol is not None:
            sending = SENDING.get(asyncio.current_task())
            if made is not None:
                if protocol not in made:
                    made.add(protocol)
                elif sending is not None:
                    sending.reused = True
            if sending is not None and sending.connected is not None:
                sending.connected(protocol)
        return connection


def closed_unread(exc: BaseException, sending: Sending) -> bool:
    """Whether `exc`, raised before the response head, is a reused connection that ended
    before any response byte: a server closing it as idle, never this request's answer.

    A disconnect carries the part of a response head it had read, if any (then the server
    had begun to answer, and the request is not sent again); a reset cannot say, and
    counts as unanswered.
    """
    if not sending.reused or not isinstance(exc, CLOSED_UNREAD):
        return False
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False  # connecting: never a pooled connection
    return not isinstance(exc, aiohttp.ServerDisconnectedError) or isinstance(exc.message, str)


def resent_error(error: InferenceError) -> InferenceError:
    """`error`, from the fresh connection, saying that the request had been sent again."""
    return InferenceError(
        error.kind,
        f"{error.message}; it had been sent again on a fresh connection, as the reused "
        "connection it first went on closed before any reply",
        retryable=error.retryable,
        status=error.status,
        code=error.code,
        retry_after_s=error.retry_after_s,
        provider=error.provider,
        model=error.model,
    )
