"""The typed error for a failure below HTTP (connect errors, resets, timeouts, a body cut
mid-stream), worded for a person rather than as the library's exception reprs."""

from __future__ import annotations

import aiohttp
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError

from agentcore.inference import InferenceError

TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""What the library raises for a failure below HTTP; `transport_error` maps each."""


def transport_error(
    exc: BaseException, *, provider: str, model: str, replying: bool = True
) -> InferenceError:
    """The typed error for a failure below HTTP: timeouts are ``timeout``, the rest
    ``network``. `replying`: the response had begun (its head was read); a connection
    closed before it is not said to have broken mid-reply."""
    if isinstance(exc, InferenceError):
        return exc
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        connecting = isinstance(exc, aiohttp.ConnectionTimeoutError)
        step = "connecting" if connecting else "waiting for data"
        message = f"Timed out {step} ({detail})"
        return InferenceError("timeout", message, provider=provider, model=model)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return InferenceError(
            "invalid_request",
            f"Bad provider URL: {detail}",
            retryable=False,
            provider=provider,
            model=model,
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError) and not replying:
        if isinstance(exc.message, str):  # else the part of a response head it had read
            message = "The provider closed the connection before any reply"
        else:
            message = (
                "The connection to the provider broke mid-reply (the server closed the "
                "connection inside the response head)"
            )
    elif isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        message = f"The connection to the provider broke mid-reply ({_cut(exc, detail)})"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        message = f"Could not connect to the provider ({detail})"
    elif isinstance(exc, aiohttp.ClientError | OSError):
        message = f"Network error talking to the provider ({detail})"
    else:
        return InferenceError(
            "unknown",
            f"{type(exc).__name__}: {detail}",
            retryable=False,
            provider=provider,
            model=model,
        )
    return InferenceError("network", message, provider=provider, model=model)


def _cut(exc: BaseException, detail: str) -> str:
    """How a body was cut, in plain words rather than the library's exception reprs."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc.__cause__, TransferEncodingError):
        return "the connection closed in the middle of a chunked body"
    if isinstance(exc.__cause__, ContentLengthError):
        return "the connection closed before the body's declared length came"
    return detail
