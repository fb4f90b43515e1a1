"""What a wire's renderer provides: the words of one wire for every scenario family.

A `Renderer` is made per call. Its stream methods each return the frames of one
step (open, a piece of thinking, a piece of text, a tool call, the finish, an
error) and may keep state between steps (an open block, a sequence number); the
order of steps is the family's, decided once for every wire in
`agentcore.testing.wires.render`. Its whole methods return JSON bodies.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from agentcore.testing.scenarios import (
    ErrorBody,
    Frame,
    HttpError,
    Reply,
    Scenario,
    StreamError,
    ToolUse,
    Unplayable,
    Usage,
    Wire,
)

JSON_HEADERS = {"content-type": "application/json"}
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


class Renderer:
    """One call on one wire. Subclasses say every step in their wire's words."""

    wire: ClassVar[Wire]
    keepalive: ClassVar[Frame | None] = None
    """The frame a stall repeats (and a stream sends once, after its first text)."""
    stream_headers: ClassVar[dict[str, str]] = SSE_HEADERS

    def __init__(self, model: str, usage: Usage, scenario: Scenario) -> None:
        self.model = model
        self.usage = usage
        self.scenario = scenario
        self.headers: dict[str, str] = {}
        """Headers a rendering adds to its reply (an error's name, where a wire says it so)."""

    @staticmethod
    def check(request: Any) -> str | None:
        """What the real API would refuse in `request` (the server answers 400 with it)."""
        return None

    # -- the stream ------------------------------------------------------------------------

    def open(self) -> list[Frame]:
        return []

    def thinking(self, piece: str) -> list[Frame]:
        raise NotImplementedError

    def redacted_thinking(self, data: str) -> list[Frame]:
        raise Unplayable("redacted thinking exists only on the anthropic and bedrock wires")

    def text(self, piece: str) -> list[Frame]:
        raise NotImplementedError

    def tool_call(self, call: ToolUse) -> list[Frame]:
        """The call, its input streamed in pieces; left open when ``call.cut_tool``."""
        raise NotImplementedError

    def finish(self, reply: Reply) -> list[Frame]:
        raise NotImplementedError

    def stream_error(self, error: StreamError) -> list[Frame]:
        raise NotImplementedError

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        raise NotImplementedError

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        """The status and body of a whole call that failed as `error` says."""
        raise NotImplementedError

    def http_error(self, error: HttpError) -> Any:
        """The error body for an `HttpError` that has no verbatim body."""
        raise NotImplementedError

    def error_body(self, error: ErrorBody) -> Any:
        """A 200 body that is only an error object."""
        raise NotImplementedError

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def encode(frame: Frame, emitted_at: float | None) -> bytes:
        """How the wire writes a frame (`Play.encode`): server-sent events, unless it says."""
        return encode_frame(frame, emitted_at)

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        """True for a frame that streams a piece of visible text."""
        return False

    @staticmethod
    def last_user_text(request: Any) -> str:
        """The text of the last user message of a request body (for `Echo`)."""
        return ""

    @staticmethod
    def refusal(message: str) -> Any:
        """The body of the server's own 400 (nothing scripted, unplayable)."""
        raise NotImplementedError


def unplayable_stop(wire: str, stop: str, field: str) -> Unplayable:
    """The refusal for a stop reason the wire has no `field` value for."""
    return Unplayable(f"stop reason {stop!r} has no {field} on the {wire} wire")


def last_chat_text(messages: Any) -> str:
    """The last user message's text in a chat-style list (``role`` + string or parts)."""
    for message in reversed(messages) if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def json_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, ensure_ascii=False).encode()


def encode_frame(frame: Frame, emitted_at: float | None = None) -> bytes:
    """A frame as SSE bytes; `emitted_at` is added to its payload when given."""
    if isinstance(frame, bytes):
        return frame
    name, payload = frame
    if emitted_at is not None:
        payload = {**payload, "agentcore_emitted_at": emitted_at}
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    if name is None:
        return f"data: {data}\n\n".encode()
    return f"event: {name}\ndata: {data}\n\n".encode()
