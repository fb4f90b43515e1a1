"""What crosses the wire of a JSON-RPC 2.0 connection, below the peer (`jsonrpc`).

The transport contract and the frames it may refuse, the errors a connection raises,
the one encoder of every frame, and the one boundary (`error_object`) where an
exception becomes a JSON-RPC error object. Nothing here holds state.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from loguru import logger

from agentcore.inference.errors import PluginError
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError
from agentcore.redaction import redact

RequestId = int | str
Params = dict[str, Any] | list[Any] | None


class Transport(Protocol):
    """One JSON-RPC message per `send`/`receive`; framing is the transport's.

    A transport may also offer ``send_nowait(text) -> bool``: queue the message now
    if that needs no waiting (True), else queue nothing (False). The peer then sends
    without a coroutine and a lock round per message while no other send is waiting.
    """

    async def send(self, text: str) -> None:
        """Send one message. Raises `ConnectionError` (or OSError) once closed."""
        ...

    async def receive(self) -> str | None:
        """The next message, or None once the other side has closed.

        Raises `FrameError` for a frame it refused (too large, not text); the
        peer answers that and reads on. Raises `TransportClosed` when refusing
        a frame meant closing the connection itself.
        """
        ...

    async def close(self) -> None:
        """Release the transport; idempotent."""
        ...


class FrameError(Exception):
    """A frame the transport refused to hand over; the peer answers it -32700, id null."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class FrameTooLarge(FrameError):
    """A frame over the transport's size limit, discarded without being read into memory."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"Parse error: frame exceeds the {limit}-byte limit and was discarded",
            {"maxFrameBytes": limit},
        )
        self.limit = limit


class TransportClosed(Exception):
    """The transport closed the connection itself (it refused a frame it could not skip).

    Its message says what happened, for the log and the close reason: it was not
    the other side that closed.
    """


class ConnectionClosed(Exception):
    """The connection closed before (or while) an outbound message could complete."""


class RemoteError(McplError):
    """The other side answered our request with an error object."""


# -- the exception-to-wire boundary -----------------------------------------


def error_object(exc: BaseException) -> dict[str, Any]:
    """The one place an exception becomes a JSON-RPC error object.

    `McplError` is sent as it is; a plugin's failure in its hook (`PluginError`, which
    names the plugin) is -32603 with its message; anything else is -32603 with its
    message, logged with its traceback here, so a bug is never silent.
    """
    if isinstance(exc, McplError):
        return exc.to_wire()
    if isinstance(exc, PluginError):
        return {"code": INTERNAL_ERROR, "message": str(exc)}
    if isinstance(exc, ConnectionClosed):  # the connection went from under it: no bug
        logger.warning("request handler stopped: {}", exc)
    else:
        logger.opt(exception=exc).error("request handler failed: {}", exc)
    return {"code": INTERNAL_ERROR, "message": str(exc) or type(exc).__name__}


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_ENCODE_ASCII: Any = getattr(json.encoder, "c_encode_basestring_ascii", None)


def dumps(value: Any) -> str:
    """A frame's JSON. ASCII-only output: a lone surrogate from the other side's JSON can
    be echoed back without making the frame unencodable; NaN is not JSON.

    One encoder's settings for every frame (`json.dumps` with options builds a new encoder
    per call), fed to the C encoder directly: `JSONEncoder.encode` would go through two
    Python calls first (0.5 µs of a chunk frame's 2.2). Same text, same errors (a fresh
    ``markers`` dict per call keeps the circular-reference check)."""
    if _MAKE_ENCODER is None or _ENCODE_ASCII is None:  # no C accelerator: the plain way
        return _ENCODER.encode(value)
    encode = _MAKE_ENCODER({}, _ENCODER.default, _ENCODE_ASCII, None, ":", ",", False, False, False)
    return "".join(encode(value, 0))


@dataclass(frozen=True, slots=True)
class EncodedParams:
    """A request's params already encoded (and redacted), for a request sent to many peers:
    encoded once, not once per peer. Make one with `encode_params`."""

    json: str


def encode_params(params: dict[str, Any] | list[Any]) -> EncodedParams:
    return EncodedParams(redact(dumps(params)))


class _NotJsonConstant(ValueError):
    """NaN or Infinity in a frame: Python's json reads them, JSON does not have them."""


def _reject_constant(name: str) -> Any:
    raise _NotJsonConstant(f"{name} is not JSON")


_SHARED_KEYS = {
    key: key
    for key in (
        # An `inference/request`'s params (§11), held as read for the request's life
        # (`McplRequest.params`): a stream holds them as long as it streams.
        "featureSet",
        "conversationId",
        "stream",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "preferences",
        "maxTokens",
        "temperature",
    )
}
"""Object keys read as one shared string each, not a copy per frame: json shares a key
only within one document, so each request held its own (~0.4 KB of an open stream's)."""


def _shared_keys(members: dict[str, Any], _shared: Any = _SHARED_KEYS.get) -> dict[str, Any]:
    return {_shared(key, key): value for key, value in members.items()}


def loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant, object_hook=_shared_keys)


def parse_problem(exc: ValueError | RecursionError) -> str:
    """What was wrong with a frame, in the peer's terms: Python's own wording for a number
    too long or nesting too deep names interpreter settings, not the frame."""
    if isinstance(exc, RecursionError):
        return "the message is nested too deeply"
    if isinstance(exc, json.JSONDecodeError | _NotJsonConstant):
        return str(exc)
    return f"a number has more than {sys.get_int_max_str_digits()} digits"


def encode_error(request_id: RequestId | None, error: dict[str, Any]) -> str:
    """An error response; falls back to a plain -32603 if `error.data` is not JSON."""
    try:
        return dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
    except (TypeError, ValueError, RecursionError):
        plain = {"code": error.get("code", INTERNAL_ERROR), "message": str(error.get("message"))}
        if not isinstance(plain["code"], int) or isinstance(plain["code"], bool):
            plain["code"] = INTERNAL_ERROR
        return dumps({"jsonrpc": "2.0", "id": request_id, "error": plain})


def valid_id(value: object) -> TypeGuard[RequestId]:
    # bool is an int in Python but not a JSON-RPC id; floats are refused
    # because 1 and 1.0 would otherwise be two names for one request.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def remote_error(error: object) -> RemoteError:
    if not isinstance(error, dict):
        return RemoteError(INTERNAL_ERROR, "malformed error object")
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = INTERNAL_ERROR
    message = error.get("message")
    return RemoteError(code, message if isinstance(message, str) else "", error.get("data"))


__all__ = [
    "ConnectionClosed",
    "EncodedParams",
    "FrameError",
    "FrameTooLarge",
    "Params",
    "RemoteError",
    "RequestId",
    "Transport",
    "TransportClosed",
    "dumps",
    "encode_error",
    "encode_params",
    "error_object",
    "loads",
    "parse_problem",
    "remote_error",
    "valid_id",
]
