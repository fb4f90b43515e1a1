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

Whether the connection was reused is aiohttp's ``on_connection_reuseconn`` trace signal,
recorded per request (`Sending`).
"""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp

from agentcore.inference import InferenceError

__all__ = ["CLOSED_UNREAD", "Sending", "closed_unread", "resent_error", "reuse_tracing"]

CLOSED_UNREAD = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientConnectionResetError,
)
"""What aiohttp raises when the connection ends under a request before its response."""


class Sending:
    """One request's ``trace_request_ctx``: whether it went out on a pooled connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _reused(session: aiohttp.ClientSession, context: SimpleNamespace, params: object) -> None:
    sending = context.trace_request_ctx
    if isinstance(sending, Sending):
        sending.reused = True


def reuse_tracing() -> aiohttp.TraceConfig:
    """The trace config that marks a request's `Sending` when its connection is reused."""
    config = aiohttp.TraceConfig()
    config.on_connection_reuseconn.append(_reused)
    return config


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
