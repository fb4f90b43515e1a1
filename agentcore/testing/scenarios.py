"""Scripted endings for the loopback provider server, and how each is played on each wire.

A `Scenario` says what one provider call does, in terms of the normalized model
(text, a stop reason, a tool call, an error, a cut, a stall), not in wire terms:
the server renders it as Anthropic Messages or OpenAI chat completions depending
on the endpoint that was called, streamed or whole depending on the request's
``stream`` flag. A scenario that one wire cannot express (``pause_turn`` on
chat completions, a bare ``finish_reason: "error"`` on Anthropic) is answered
with HTTP 400 and a message that says so, never silently approximated.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Literal, TypeAlias

Wire: TypeAlias = Literal["anthropic", "openai"]
Ending: TypeAlias = Literal["end", "cut", "stall"]

WIRES: tuple[Wire, ...] = ("anthropic", "openai")

# Anthropic's error.type for an HTTP status, for scripted error bodies.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    529: "server_error",
}
# The HTTP status a whole (non-streamed) Anthropic call gets for an error the stream names.
_STATUS_FOR_TYPE = {
    "overloaded_error": 529,
    "api_error": 500,
    "rate_limit_error": 429,
    "authentication_error": 401,
    "permission_error": 403,
    "invalid_request_error": 400,
    "not_found_error": 404,
    "billing_error": 429,
}
_OPENAI_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


LONG_WORDS = ("The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ")


def _long_text(scenario: Scenario) -> str:
    words = scenario.chunks or LONG_WORDS
    return "".join(words[i % len(words)] for i in range(scenario.n))


def _cycle(deltas: list[bytes], n: int) -> bytes:
    full, rest = divmod(n, len(deltas))
    return b"".join(deltas) * full + b"".join(deltas[:rest])


class Unplayable(Exception):
    """The scenario has no form on this wire; the server answers 400 with this message."""


@dataclass(frozen=True)
class Scenario:
    """What one provider call does. Build one with the class methods, adjust with `replace`.

    Fields shared by every scenario: ``model`` (the served model; None means the
    model asked for), ``input_tokens`` / ``output_tokens`` (None: counted from the
    words), ``delay_s`` (before the response starts), ``chunk_delay_s`` (between
    streamed chunks), ``timestamps`` (each streamed chunk carries
    ``"agentcore_emitted_at": time.time()`` and the call records each emission
    time), ``headers`` (extra response headers).
    """

    kind: str = "text"
    reply: str = "Hello from the loopback server."
    """The visible text (for failures: the text sent before the failure)."""
    chunks: tuple[str, ...] | None = None
    """The text deltas, in order; None splits `reply` after each space."""
    stop: str = "end_turn"
    raw_stop: str | None = None
    """Send this stop token verbatim instead of the wire's token for `stop`."""
    sequence: str | None = None
    """The stop sequence that fired, for ``stop="stop_sequence"``."""
    thought: str = ""
    """Thinking streamed before the text."""
    reasoning_field: str = "reasoning"
    """openai wire: ``reasoning`` (OpenRouter) or ``reasoning_content`` (DeepSeek, vLLM)."""
    tool_name: str = ""
    tool_input: Mapping[str, Any] = field(default_factory=dict)
    tool_id: str = "toolu_loopback_1"
    cut_tool: bool = False
    status: int = 200
    body: Any = None
    error_type: str | None = None
    error_code: str | int | None = None
    message: str = ""
    error_extra: Mapping[str, Any] = field(default_factory=dict)
    """Extra fields inside the built error object (stated waits in the body)."""
    clean: bool = False
    ping: bool = True
    keepalive_s: float | None = None
    n: int = 0
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    timestamps: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_after_date_in: float | None = None
    """Send ``retry-after`` as the HTTP date this many seconds after the reply is sent."""
    echo_credentials: bool = False
    """The error's message is the request's credentials, echoed (`credentials_message`)."""

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed: ``Scenario.text("hi").replace(model="m-2")``."""
        return dataclasses.replace(self, **changes)

    # -- completed calls -----------------------------------------------------------

    @classmethod
    def text(cls, text: str = "Hello from the loopback server.", **options: Any) -> Scenario:
        """A normal reply: the text, streamed in pieces, ending ``end_turn``."""
        return cls(kind="text", reply=text, **options)

    @classmethod
    def echo(cls, **options: Any) -> Scenario:
        """Reply with the last user message's text (handy as a server-wide default)."""
        return cls(kind="echo", **options)

    @classmethod
    def max_tokens(cls, text: str = "This reply was cut at", **options: Any) -> Scenario:
        return cls(kind="text", reply=text, stop="max_tokens", **options)

    @classmethod
    def stop_sequence(
        cls, text: str = "Counting: 1 2 3", sequence: str = "END", **options: Any
    ) -> Scenario:
        """Stopped by a stop sequence. The openai wire names it vLLM-style, in ``stop_reason``."""
        return cls(kind="text", reply=text, stop="stop_sequence", sequence=sequence, **options)

    @classmethod
    def refusal(cls, text: str = "I can't help with that.", **options: Any) -> Scenario:
        """Anthropic ``stop_reason: "refusal"``; openai ``finish_reason: "content_filter"``."""
        return cls(kind="text", reply=text, stop="refusal", **options)

    @classmethod
    def pause_turn(cls, text: str = "Still working on it.", **options: Any) -> Scenario:
        """Anthropic only (``stop_reason: "pause_turn"``)."""
        return cls(kind="text", reply=text, stop="pause_turn", **options)

    @classmethod
    def tool_use(
        cls,
        name: str = "get_weather",
        input: Mapping[str, Any] | None = None,
        *,
        text: str = "",
        id: str = "toolu_loopback_1",
        cut: bool = False,
        **options: Any,
    ) -> Scenario:
        """A tool call, after optional text. ``cut=True``: the input JSON is cut off
        half-way and the call ends ``max_tokens`` (``length`` on the openai wire)."""
        return cls(
            kind="tool_use",
            reply=text,
            tool_name=name,
            tool_input=dict(input if input is not None else {"city": "Paris", "unit": "celsius"}),
            tool_id=id,
            cut_tool=cut,
            stop="max_tokens" if cut else "tool_use",
            **options,
        )

    @classmethod
    def thinking(
        cls,
        thinking: str = "Let me think about this step by step.",
        text: str = "The answer is 42.",
        **options: Any,
    ) -> Scenario:
        """Thinking before text: Anthropic thinking deltas (with a signature), openai
        ``delta.reasoning`` (``reasoning_field="reasoning_content"`` for the other form)."""
        return cls(kind="text", thought=thinking, reply=text, **options)

    @classmethod
    def long(cls, n: int, chunks: tuple[str, ...] = LONG_WORDS, **options: Any) -> Scenario:
        """`n` text chunks cycling through `chunks` (consecutive chunks differ, as some
        clients refuse a stream that repeats itself), rendered once per server and
        written in large slices: for benchmarks."""
        return cls(kind="long", n=n, chunks=tuple(chunks), **options)

    # -- failures inside a 200 ---------------------------------------------------------

    @classmethod
    def stream_error(
        cls,
        after: str = "Partial ",
        *,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        code: str | int | None = None,
        **options: Any,
    ) -> Scenario:
        """Text, then an error mid-stream. Anthropic: ``event: error`` naming `error_type`.
        openai: a chunk with an ``error`` object (code: `code`, else `error_type`) and
        ``finish_reason: "error"``, as OpenRouter sends. Whole: Anthropic answers the
        HTTP status the type implies; openai answers 200 with only the error object."""
        return cls(
            kind="stream_error",
            reply=after,
            error_type=error_type,
            message=message,
            error_code=code,
            **options,
        )

    @classmethod
    def finish_error(cls, after: str = "Partial ", **options: Any) -> Scenario:
        """openai only: a bare ``finish_reason: "error"`` with no error object."""
        return cls(kind="finish_error", reply=after, **options)

    @classmethod
    def error_body(
        cls, message: str = "Provider returned error", code: int | str = 502, **options: Any
    ) -> Scenario:
        """HTTP 200 whose whole body is an error object (OpenRouter), streamed or whole."""
        return cls(kind="error_body", message=message, error_code=code, **options)

    # -- broken and stuck connections ------------------------------------------------------

    @classmethod
    def cut(cls, after: str = "Partial ", *, clean: bool = False, **options: Any) -> Scenario:
        """Text, then the connection is closed with no terminal event. ``clean=True`` ends
        the HTTP body properly instead (a stream that simply stops). Whole: the body is
        cut half-way."""
        return cls(kind="cut", reply=after, clean=clean, **options)

    @classmethod
    def stall(
        cls,
        after: str = "",
        *,
        ping: bool = True,
        keepalive_s: float | None = None,
        **options: Any,
    ) -> Scenario:
        """Optional text, a ping (Anthropic ``event: ping``, openai ``: OPENROUTER
        PROCESSING``), then nothing until the client leaves; with `keepalive_s`, a ping
        every so often (pings are not progress). Whole: no response at all."""
        return cls(kind="stall", reply=after, ping=ping, keepalive_s=keepalive_s, **options)

    # -- HTTP errors -------------------------------------------------------------------------

    @classmethod
    def http_error(
        cls,
        status: int,
        message: str = "",
        *,
        body: Any = None,
        error_type: str | None = None,
        code: str | int | None = None,
        headers: Mapping[str, str] | None = None,
        **options: Any,
    ) -> Scenario:
        """Any status. `body` (dict, list, str or bytes) is sent verbatim; without it, an
        error body in the wire's own shape is built from `message`, `error_type`, `code`."""
        return cls(
            kind="http_error",
            status=status,
            message=message or f"loopback HTTP {status}",
            body=body,
            error_type=error_type,
            error_code=code,
            headers=dict(headers or {}),
            **options,
        )

    @classmethod
    def rate_limit(
        cls,
        *,
        retry_after: float | str | None = None,
        retry_after_ms: float | None = None,
        retry_after_date: datetime | float | None = None,
        body_retry_after: float | None = None,
        body_retry_after_ms: float | None = None,
        retry_delay: str | None = None,
        message: str = "Rate limit exceeded",
        **options: Any,
    ) -> Scenario:
        """HTTP 429 stating its wait in any form: ``retry-after`` seconds, ``retry-after-ms``,
        ``retry-after`` as an HTTP date (a datetime, or seconds from now), body
        ``retry_after`` / ``retry_after_ms``, or Google's ``retryDelay`` (``"30s"``)."""
        headers: dict[str, str] = dict(options.pop("headers", {}) or {})
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        date_in: float | None = None
        if isinstance(retry_after_date, datetime):
            headers["retry-after"] = http_date(retry_after_date)
        elif retry_after_date is not None:
            date_in = float(retry_after_date)  # made into a date when the reply is sent
        extra: dict[str, Any] = {}
        if body_retry_after is not None:
            extra["retry_after"] = body_retry_after
        if body_retry_after_ms is not None:
            extra["retry_after_ms"] = body_retry_after_ms
        if retry_delay is not None:
            extra["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
            ]
        return cls(
            kind="http_error",
            status=429,
            message=message,
            error_extra=extra,
            headers=headers,
            retry_after_date_in=date_in,
            **options,
        )

    @classmethod
    def overloaded(cls, message: str = "Overloaded", **options: Any) -> Scenario:
        """HTTP 529 ``overloaded_error``."""
        return cls.http_error(529, message, error_type="overloaded_error", **options)

    @classmethod
    def server_error(cls, message: str = "Internal server error", **options: Any) -> Scenario:
        return cls.http_error(500, message, **options)

    @classmethod
    def bad_request(cls, message: str = "messages: field required", **options: Any) -> Scenario:
        return cls.http_error(400, message, **options)

    @classmethod
    def unauthorized(cls, message: str = "invalid x-api-key", **options: Any) -> Scenario:
        return cls.http_error(401, message, code="invalid_api_key", **options)

    @classmethod
    def echoes_credentials(cls, *, mid_stream: bool = False, **options: Any) -> Scenario:
        """An error whose message repeats the request's credentials, as some OpenAI-compatible
        servers do (``401 "Incorrect API key provided: Bearer sk-..."``): HTTP 401, or with
        `mid_stream` text and then an error frame (`stream_error`'s shapes). For tests that
        no key leaves the host."""
        if mid_stream:
            base = cls.stream_error(error_type="authentication_error", **options)
        else:
            base = cls.unauthorized(**options)
        return base.replace(echo_credentials=True)

    @classmethod
    def quota(
        cls,
        message: str = (
            "You exceeded your current quota, please check your plan and billing details."
        ),
        **options: Any,
    ) -> Scenario:
        """HTTP 429 that is really a quota failure: openai ``insufficient_quota``,
        Anthropic ``billing_error``. Not retryable."""
        return cls(kind="quota", status=429, message=message, **options)

    @classmethod
    def context_length(
        cls,
        message: str = "prompt is too long: 250000 tokens > 200000 maximum",
        **options: Any,
    ) -> Scenario:
        """HTTP 400 for a prompt over the context window (openai ``context_length_exceeded``)."""
        return cls.http_error(400, message, code="context_length_exceeded", **options)


# -- rendering ------------------------------------------------------------------------------------

Frame: TypeAlias = "tuple[str | None, dict[str, Any]] | bytes"
"""A streamed frame: (SSE event name or None, JSON payload), or raw bytes sent as they are."""


@dataclass
class Play:
    """A scenario rendered for one call on one wire."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    streamed: bool = True
    frames: list[Frame] = field(default_factory=list)
    """Streamed: the SSE frames, in order."""
    body: bytes = b""
    """Whole: the body bytes."""
    ending: Ending = "end"
    prerendered: bytes | None = None
    """A long stream, rendered once: written in slices, not frame by frame."""
    ping: Frame | None = None
    """The keep-alive frame a stall repeats."""


def _pieces(scenario: Scenario, text: str) -> list[str]:
    if scenario.chunks is not None:
        return list(scenario.chunks)
    if not text:
        return []
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + ([words[-1]] if words[-1] else [])


def _count(text: str) -> int:
    return max(1, len(text.split()))


def _last_user_text(body: Any) -> str:
    for message in reversed(body.get("messages") or []) if isinstance(body, dict) else []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _tool_json(scenario: Scenario) -> tuple[list[str], str]:
    """The tool input as JSON pieces; cut off half-way when the scenario says so."""
    full = json.dumps(dict(scenario.tool_input))
    if scenario.cut_tool:
        full = full[: max(1, len(full) // 2)]
    step = max(1, len(full) // 3)
    return [full[i : i + step] for i in range(0, len(full), step)], full


def credentials_message(headers: Mapping[str, str]) -> str:
    """What a server that echoes credentials says: the request's Authorization value, then
    every other credential it could carry (``x-api-key``, any ``x-*`` header, cookies)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    echoed = [lowered["authorization"]] if "authorization" in lowered else []
    echoed += [
        f"{name}={value}"
        for name, value in lowered.items()
        if name == "cookie" or name.startswith("x-")
    ]
    return "Incorrect API key provided: " + "; ".join(echoed)


def render(scenario: Scenario, wire: Wire, request: Any) -> Play:
    """Render `scenario` for a call whose parsed JSON body is `request`."""
    streamed = bool(isinstance(request, dict) and request.get("stream"))
    model = scenario.model or (request.get("model") if isinstance(request, dict) else None) or "m"
    if scenario.kind == "echo":
        scenario = scenario.replace(kind="text", reply=_last_user_text(request))
    if wire == "anthropic":
        play = _Anthropic(scenario, model).render(streamed)
    else:
        play = _OpenAI(scenario, model).render(streamed)
    play.headers.update(scenario.headers)
    if scenario.retry_after_date_in is not None:
        when = datetime.fromtimestamp(time.time() + scenario.retry_after_date_in, UTC)
        play.headers["retry-after"] = http_date(when)
    return play


def http_date(when: datetime) -> str:
    """An HTTP date (RFC 9110), rounded up to the next second so the wait is never short."""
    if when.tzinfo is None:
        when = when.astimezone()
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return format_datetime(when.astimezone(UTC), usegmt=True)


def _error_body(wire: Wire, scenario: Scenario) -> Any:
    if scenario.body is not None:
        return scenario.body
    extra = dict(scenario.error_extra)
    status = scenario.status
    if wire == "anthropic":
        etype = scenario.error_type or _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": etype, "message": scenario.message, **extra}}
    etype = scenario.error_type or _OPENAI_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    code = scenario.error_code
    if code is None and status == 429:
        code = "rate_limit_exceeded"
    return {
        "error": {
            "message": scenario.message,
            "type": etype,
            "param": None,
            "code": code,
            **extra,
        }
    }


def _json_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, ensure_ascii=False).encode()


class _Anthropic:
    def __init__(self, scenario: Scenario, model: str) -> None:
        self.s = scenario
        self.model = model

    def usage(self, output: int) -> dict[str, int]:
        s = self.s
        return {
            "input_tokens": s.input_tokens if s.input_tokens is not None else 12,
            "output_tokens": s.output_tokens if s.output_tokens is not None else output,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }

    def render(self, streamed: bool) -> Play:
        s = self.s
        kind = s.kind
        if kind == "finish_error":
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        if kind in ("http_error", "quota"):
            if kind == "quota":
                body: Any = {
                    "type": "error",
                    "error": {"type": "billing_error", "message": s.message},
                }
            else:
                body = _error_body("anthropic", s)
            return Play(
                s.status, {"content-type": "application/json"}, False, body=_json_bytes(body)
            )
        if kind == "error_body":
            body = {"type": "error", "error": {"type": "api_error", "message": s.message}}
            return Play(200, {"content-type": "application/json"}, False, body=_json_bytes(body))
        if not streamed:
            return self.whole()
        return self.stream()

    def _message(self) -> dict[str, Any]:
        return {
            "id": "msg_loopback",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self.usage(1),
        }

    def whole(self) -> Play:
        s = self.s
        headers = {"content-type": "application/json"}
        if s.kind == "stall":
            return Play(200, headers, False, ending="stall")
        if s.kind == "stream_error":
            etype = s.error_type or "api_error"
            body = {"type": "error", "error": {"type": etype, "message": s.message}}
            status = _STATUS_FOR_TYPE.get(etype, 500)
            return Play(status, headers, False, body=_json_bytes(body))
        message = self._message()
        content: list[dict[str, Any]] = []
        text = _long_text(s) if s.kind == "long" else s.reply
        if s.thought:
            content.append({"type": "thinking", "thinking": s.thought, "signature": "sig-loopback"})
        if text:
            content.append({"type": "text", "text": text})
        if s.kind == "tool_use":
            # Cut off at max_tokens, a whole reply carries the call with what input parsed: none.
            content.append(
                {
                    "type": "tool_use",
                    "id": s.tool_id,
                    "name": s.tool_name,
                    "input": {} if s.cut_tool else dict(s.tool_input),
                }
            )
        message["content"] = content
        message["stop_reason"] = s.raw_stop or s.stop
        message["stop_sequence"] = s.sequence
        message["usage"] = self.usage(_count(text))
        raw = _json_bytes(message)
        if s.kind == "cut":
            return Play(
                200, headers, False, body=raw[: len(raw) // 2], ending="end" if s.clean else "cut"
            )
        return Play(200, headers, False, body=raw)

    def stream(self) -> Play:
        s = self.s
        frames: list[Frame] = [
            ("message_start", {"type": "message_start", "message": self._message()})
        ]
        play = Play(200, {"content-type": "text/event-stream", "cache-control": "no-cache"})
        play.ping = ("ping", {"type": "ping"})
        if s.kind == "long":
            head = b"".join(_encode(f) for f in frames)
            start = _encode(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            deltas = [
                _encode(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": word},
                        },
                    )
                )
                for word in s.chunks or LONG_WORDS
            ]
            stop = _encode(("content_block_stop", {"type": "content_block_stop", "index": 0}))
            tail = stop + b"".join(
                _encode(f) for f in self._finish(s.n, s.raw_stop or "end_turn", None)
            )
            play.prerendered = head + start + _cycle(deltas, s.n) + tail
            return play
        index = 0
        if s.thought:
            frames.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": ""},
                    },
                )
            )
            for piece in _pieces(s.replace(chunks=None), s.thought):
                frames.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": piece},
                        },
                    )
                )
            frames.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": "sig-loopback"},
                    },
                )
            )
            frames.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        pieces = _pieces(s, s.reply)
        if pieces or s.kind in ("text", "cut", "stream_error"):
            frames.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            if s.ping:
                frames.append(("ping", {"type": "ping"}))
            for piece in pieces:
                frames.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
            if s.kind == "cut":
                play.frames = frames
                play.ending = "end" if s.clean else "cut"
                return play
            if s.kind == "stall":
                frames.append(("ping", {"type": "ping"}))
                play.frames = frames
                play.ending = "stall"
                return play
            if s.kind == "stream_error":
                frames.append(
                    (
                        "error",
                        {
                            "type": "error",
                            "error": {"type": s.error_type or "api_error", "message": s.message},
                        },
                    )
                )
                play.frames = frames
                return play
            frames.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        elif s.kind == "stall":
            if s.ping:
                frames.append(("ping", {"type": "ping"}))
            play.frames = frames
            play.ending = "stall"
            return play
        if s.kind == "tool_use":
            frames.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": s.tool_id,
                            "name": s.tool_name,
                            "input": {},
                        },
                    },
                )
            )
            pieces_json, _ = _tool_json(s)
            for piece in pieces_json:
                frames.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
            if not s.cut_tool:
                frames.append(
                    ("content_block_stop", {"type": "content_block_stop", "index": index})
                )
        frames.extend(self._finish(_count(s.reply), s.raw_stop or s.stop, s.sequence))
        play.frames = frames
        return play

    def _finish(self, output: int, stop: str, sequence: str | None) -> list[Frame]:
        return [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": sequence},
                    "usage": {"output_tokens": self.usage(output)["output_tokens"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]


class _OpenAI:
    def __init__(self, scenario: Scenario, model: str) -> None:
        self.s = scenario
        self.model = model

    def usage(self, output: int) -> dict[str, Any]:
        s = self.s
        prompt = s.input_tokens if s.input_tokens is not None else 12
        completion = s.output_tokens if s.output_tokens is not None else output
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def finish(self) -> str:
        s = self.s
        if s.raw_stop:
            return s.raw_stop
        if s.stop not in _OPENAI_FINISH:
            raise Unplayable(f"stop reason {s.stop!r} has no finish_reason on the openai wire")
        return _OPENAI_FINISH[s.stop]

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
        choice.update(extra)
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": self.model,
            "choices": [choice],
        }

    def error_object(self) -> dict[str, Any]:
        s = self.s
        code = s.error_code if s.error_code is not None else (s.error_type or "server_error")
        return {"code": code, "message": s.message}

    def render(self, streamed: bool) -> Play:
        s = self.s
        json_headers = {"content-type": "application/json"}
        if s.kind == "http_error":
            return Play(s.status, json_headers, False, body=_json_bytes(_error_body("openai", s)))
        if s.kind == "quota":
            body = {
                "error": {
                    "message": s.message,
                    "type": "insufficient_quota",
                    "param": None,
                    "code": "insufficient_quota",
                }
            }
            return Play(s.status, json_headers, False, body=_json_bytes(body))
        if s.kind == "error_body":
            return Play(200, json_headers, False, body=_json_bytes({"error": self.error_object()}))
        if s.kind in ("text", "long") or (s.kind == "tool_use" and not s.cut_tool):
            self.finish()  # fail early for a stop this wire cannot say
        if not streamed:
            return self.whole()
        return self.stream()

    def whole(self) -> Play:
        s = self.s
        headers = {"content-type": "application/json"}
        if s.kind == "stall":
            return Play(200, headers, False, ending="stall")
        if s.kind == "stream_error":
            return Play(200, headers, False, body=_json_bytes({"error": self.error_object()}))
        text = _long_text(s) if s.kind == "long" else s.reply
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if s.thought:
            message[s.reasoning_field] = s.thought
        finish: str
        if s.kind == "finish_error":
            finish = "error"
        elif s.kind == "cut":
            finish = "stop"
        else:
            finish = self.finish()
        if s.kind == "tool_use":
            # Cut off at max_tokens, the arguments string is cut off too.
            message["tool_calls"] = [
                {
                    "id": s.tool_id,
                    "type": "function",
                    "function": {"name": s.tool_name, "arguments": _tool_json(s)[1]},
                }
            ]
            if s.cut_tool:
                finish = "length"
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
        }
        if s.stop == "stop_sequence" and s.sequence:
            choice["stop_reason"] = s.sequence
        body = {
            "id": "chatcmpl-loopback",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(_count(text)),
        }
        raw = _json_bytes(body)
        if s.kind == "cut":
            return Play(
                200, headers, False, body=raw[: len(raw) // 2], ending="end" if s.clean else "cut"
            )
        return Play(200, headers, False, body=raw)

    def stream(self) -> Play:
        s = self.s
        play = Play(200, {"content-type": "text/event-stream", "cache-control": "no-cache"})
        play.ping = b": OPENROUTER PROCESSING\n\n"
        first = self.chunk({"role": "assistant", "content": ""})
        if s.kind == "long":
            deltas = [_encode((None, self.chunk({"content": w}))) for w in s.chunks or LONG_WORDS]
            tail = b"".join(_encode(f) for f in self._finish(self.finish(), s.n, None))
            play.prerendered = _encode((None, first)) + _cycle(deltas, s.n) + tail
            return play
        frames: list[Frame] = [(None, first)]
        if s.kind == "stall" and s.ping and not s.reply:
            frames.append(play.ping)
            play.frames = frames
            play.ending = "stall"
            return play
        for piece in _pieces(s.replace(chunks=None), s.thought) if s.thought else []:
            frames.append((None, self.chunk({s.reasoning_field: piece})))
        pieces = _pieces(s, s.reply)
        for i, piece in enumerate(pieces):
            frames.append((None, self.chunk({"content": piece})))
            if i == 0 and s.ping:
                frames.append(b": OPENROUTER PROCESSING\n\n")
        if s.kind == "cut":
            play.frames = frames
            play.ending = "end" if s.clean else "cut"
            return play
        if s.kind == "stall":
            frames.append(play.ping)
            play.frames = frames
            play.ending = "stall"
            return play
        if s.kind == "stream_error":
            error_chunk = self.chunk({"content": ""}, "error")
            error_chunk["error"] = self.error_object()
            frames.append((None, error_chunk))
            play.frames = frames
            return play
        if s.kind == "finish_error":
            frames.append((None, self.chunk({}, "error")))
            frames.append(b"data: [DONE]\n\n")
            play.frames = frames
            return play
        if s.kind == "tool_use":
            pieces_json, _ = _tool_json(s)
            frames.append(
                (
                    None,
                    self.chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": s.tool_id,
                                    "type": "function",
                                    "function": {"name": s.tool_name, "arguments": ""},
                                }
                            ]
                        }
                    ),
                )
            )
            for piece in pieces_json:
                frames.append(
                    (
                        None,
                        self.chunk(
                            {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                        ),
                    )
                )
        finish = "length" if s.cut_tool else self.finish()
        sequence = s.sequence if s.stop == "stop_sequence" else None
        frames.extend(self._finish(finish, _count(s.reply), sequence))
        play.frames = frames
        return play

    def _finish(self, finish: str, output: int, sequence: str | None) -> list[Frame]:
        extra = {"stop_reason": sequence} if sequence else {}
        usage_chunk: dict[str, Any] = {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": self.model,
            "choices": [],
            "usage": self.usage(output),
        }
        return [(None, self.chunk({}, finish, **extra)), (None, usage_chunk), b"data: [DONE]\n\n"]


def _encode(frame: Frame, emitted_at: float | None = None) -> bytes:
    if isinstance(frame, bytes):
        return frame
    name, payload = frame
    if emitted_at is not None:
        payload = {**payload, "agentcore_emitted_at": emitted_at}
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    if name is None:
        return f"data: {data}\n\n".encode()
    return f"event: {name}\ndata: {data}\n\n".encode()


encode_frame = _encode


def carries_text(frame: Frame) -> bool:
    """True for a frame that streams a piece of visible text (timestamped when asked)."""
    if isinstance(frame, bytes):
        return False
    payload = frame[1]
    if payload.get("type") == "content_block_delta":
        return bool(payload.get("delta", {}).get("type") == "text_delta")
    choices = payload.get("choices")
    return bool(choices and choices[0].get("delta", {}).get("content"))
