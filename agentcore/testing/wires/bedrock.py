"""Scenarios on Amazon Bedrock's two APIs, in its binary event stream.

``bedrock``: InvokeModel with Anthropic Messages bodies; each stream event is the
Anthropic event's JSON, base64 in a ``chunk`` frame's ``{"bytes": ...}``.
``bedrock-converse``: Converse, whose stream frames are named by ``:event-type``.
Errors are AWS's: an HTTP error names its exception in ``x-amzn-ErrorType`` with a body
``{"message": ...}``; a mid-stream one is an ``exception`` frame (``:exception-type``).

The framing is written here, by hand, because botocore has only the decoder: prelude
(total and headers lengths, their CRC32), string headers, the payload, the message's
CRC32 (`event_message`). The tests read it back with botocore's `EventStreamBuffer` and
with boto3's ``bedrock-runtime`` client, so a framing mistake here fails them.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
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
from agentcore.testing.wires.anthropic import AnthropicRenderer
from agentcore.testing.wires.base import Renderer, unplayable_stop

EVENT_STREAM_HEADERS = {"content-type": "application/vnd.amazon.eventstream"}

# An exception frame's or error reply's name, for the error types scenarios use.
_EXCEPTIONS = {
    "overloaded_error": "serviceUnavailableException",
    "api_error": "internalServerException",
    "rate_limit_error": "throttlingException",
    "invalid_request_error": "validationException",
}
_STATUS = {
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 424,
    "validationException": 400,
    "serviceQuotaExceededException": 400,
    "modelTimeoutException": 408,
}
_BY_STATUS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
_CONVERSE_STOPS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "refusal": "content_filtered",
}


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message with string headers."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack("!B", len(raw_name)) + raw_name
        encoded += struct.pack("!BH", 7, len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(name: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return event_message(headers, json.dumps(payload, separators=(",", ":")).encode())


def exception(name: str, message: str) -> bytes:
    headers = {
        ":exception-type": name,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return event_message(headers, json.dumps({"message": message}).encode())


def _stamped(frame: Frame, emitted_at: float | None) -> Frame:
    if isinstance(frame, bytes) or emitted_at is None:
        return frame
    name, payload = frame
    return name or "", {**payload, "agentcore_emitted_at": emitted_at}


def encode_chunk(frame: Frame, emitted_at: float | None = None) -> bytes:
    """InvokeModel's frame: the Anthropic event's JSON, base64, in a ``chunk`` event."""
    frame = _stamped(frame, emitted_at)
    if isinstance(frame, bytes):
        return frame
    raw = json.dumps(frame[1], separators=(",", ":"), ensure_ascii=False).encode()
    return event("chunk", {"bytes": base64.b64encode(raw).decode(), "p": "abcdefgh"})


def encode_converse(frame: Frame, emitted_at: float | None = None) -> bytes:
    frame = _stamped(frame, emitted_at)
    if isinstance(frame, bytes):
        return frame
    return event(frame[0] or "", frame[1])


def _exception_name(error: StreamError) -> str:
    etype = error.error_type or "api_error"
    return _EXCEPTIONS.get(etype, etype)


def _error_reply(renderer: Renderer, name: str, message: str) -> dict[str, Any]:
    renderer.headers["x-amzn-errortype"] = (
        f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    )
    return {"message": message}


def _http_error(renderer: Renderer, error: HttpError) -> Any:
    if error.cause == "quota":
        name = "ServiceQuotaExceededException"
    else:
        default = "InternalServerException" if error.status >= 500 else "ValidationException"
        name = error.error_type or _BY_STATUS.get(error.status, default)
    return {**_error_reply(renderer, name, error.message), **error.extra}


def _whole_error(renderer: Renderer, error: StreamError) -> tuple[int, Any]:
    if error.bare:
        raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
    name = _exception_name(error)
    upper = name[0].upper() + name[1:]
    return _STATUS.get(name, 500), _error_reply(renderer, upper, error.message)


class InvokeRenderer(AnthropicRenderer):
    """InvokeModel: Anthropic's events and bodies, AWS's framing and errors; no ping."""

    wire: ClassVar[Wire] = "bedrock"
    keepalive: ClassVar[Frame | None] = None
    stream_headers: ClassVar[dict[str, str]] = EVENT_STREAM_HEADERS

    @staticmethod
    def encode(frame: Frame, emitted_at: float | None) -> bytes:
        return encode_chunk(frame, emitted_at)

    def stream_error(self, error: StreamError) -> list[Frame]:
        if error.bare:
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        return [exception(_exception_name(error), error.message)]

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        return _whole_error(self, error)

    def http_error(self, error: HttpError) -> Any:
        return _http_error(self, error)

    @staticmethod
    def refusal(message: str) -> Any:
        return {"message": message}


class ConverseRenderer(Renderer):
    wire: ClassVar[Wire] = "bedrock-converse"
    stream_headers: ClassVar[dict[str, str]] = EVENT_STREAM_HEADERS

    @staticmethod
    def encode(frame: Frame, emitted_at: float | None) -> bytes:
        return encode_converse(frame, emitted_at)

    def __init__(self, model: str, usage: Usage, scenario: Scenario) -> None:
        super().__init__(model, usage, scenario)
        self.index = -1
        self.block: str | None = None

    def _usage(self) -> dict[str, int]:
        out = self.usage.output_tokens
        usage = {"inputTokens": self.usage.input_tokens, "outputTokens": out}
        return {**usage, "totalTokens": self.usage.input_tokens + out}

    def _stop(self, reply: Reply) -> str:
        if reply.raw_stop:
            return reply.raw_stop
        if reply.stop not in _CONVERSE_STOPS:
            raise unplayable_stop("bedrock-converse", reply.stop, "stopReason")
        return _CONVERSE_STOPS[reply.stop]

    # -- the stream ------------------------------------------------------------------------

    def open(self) -> list[Frame]:
        return [("messageStart", {"role": "assistant"})]

    def _close(self) -> list[Frame]:
        if self.block is None:
            return []
        frames: list[Frame] = []
        if self.block == "thinking":
            frames.append(self._delta({"reasoningContent": {"signature": "sig-loopback"}}))
        frames.append(("contentBlockStop", {"contentBlockIndex": self.index}))
        self.block = None
        return frames

    def _open(self, kind: str) -> list[Frame]:
        if self.block == kind:
            return []
        frames = self._close()
        self.index += 1
        self.block = kind
        return frames

    def _delta(self, delta: dict[str, Any]) -> Frame:
        return ("contentBlockDelta", {"contentBlockIndex": self.index, "delta": delta})

    def thinking(self, piece: str) -> list[Frame]:
        return [*self._open("thinking"), self._delta({"reasoningContent": {"text": piece}})]

    def redacted_thinking(self, data: str) -> list[Frame]:
        # A block of its own (no signature follows), its data in one delta.
        return [
            *self._open("redacted"),
            self._delta({"reasoningContent": {"redactedContent": data}}),
        ]

    def text(self, piece: str) -> list[Frame]:
        return [*self._open("text"), self._delta({"text": piece})]

    def tool_call(self, call: ToolUse) -> list[Frame]:
        frames = self._close()
        self.index += 1
        self.block = "tool_use"
        use = {"toolUseId": call.tool_id, "name": call.tool_name}
        frames.append(
            ("contentBlockStart", {"contentBlockIndex": self.index, "start": {"toolUse": use}})
        )
        for piece in call.input_pieces():
            frames.append(self._delta({"toolUse": {"input": piece}}))
        if call.cut_tool:
            self.block = None
        return frames

    def finish(self, reply: Reply) -> list[Frame]:
        stop = self._stop(reply)
        return [
            *self._close(),
            ("messageStop", {"stopReason": stop}),
            ("metadata", {"usage": self._usage(), "metrics": {"latencyMs": 1}}),
        ]

    def stream_error(self, error: StreamError) -> list[Frame]:
        if error.bare:
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        return [exception(_exception_name(error), error.message)]

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        content: list[dict[str, Any]] = []
        if reply.redacted_thinking:
            content.append({"reasoningContent": {"redactedContent": reply.redacted_thinking}})
        if reply.thought:
            text = {"text": reply.thought, "signature": "sig-loopback"}
            content.append({"reasoningContent": {"reasoningText": text}})
        if reply.reply:
            content.append({"text": reply.reply})
        if isinstance(reply, ToolUse):
            use = {"toolUseId": reply.tool_id, "name": reply.tool_name}
            content.append(
                {"toolUse": {**use, "input": {} if reply.cut_tool else dict(reply.tool_input)}}
            )
        message = {"role": "assistant", "content": content}
        return {
            "output": {"message": message},
            "stopReason": self._stop(reply),
            "usage": self._usage(),
            "metrics": {"latencyMs": 1},
        }

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        return _whole_error(self, error)

    def http_error(self, error: HttpError) -> Any:
        return _http_error(self, error)

    def error_body(self, error: ErrorBody) -> Any:
        return {"message": error.message}

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        return (
            not isinstance(frame, bytes)
            and frame[0] == "contentBlockDelta"
            and "text" in frame[1].get("delta", {})
        )

    @staticmethod
    def last_user_text(request: Any) -> str:
        messages = request.get("messages") if isinstance(request, dict) else None
        for message in reversed(messages) if isinstance(messages, list) else []:
            if isinstance(message, dict) and message.get("role") == "user":
                parts = message.get("content") or []
                return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        return ""

    @staticmethod
    def refusal(message: str) -> Any:
        return {"message": message}
