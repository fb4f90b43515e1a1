"""Scripted endings for the loopback provider server, one small type per family.

A scenario says what one provider call does in terms of the normalized model
(text, a stop reason, a tool call, an error, a cut, a stall), never in wire terms:
`agentcore.testing.wires` renders it on whichever wire was called, streamed or whole
as the call asks. A scenario one wire cannot say (``pause_turn`` on chat completions,
a bare ``finish_reason: "error"`` on Anthropic) is answered with HTTP 400 and a
message that says so, never silently approximated.

The families:

- `Reply`: text (after optional thinking), then a stop; `ToolUse` ends in a tool
  call, `Echo` replies with the caller's last message, `Long` streams N chunks.
- `HttpError`: an error before the stream (any status, stated waits, quota).
- `StreamError`: text, then an error inside the 200 stream; `ErrorBody`: a 200 error body.
- `Cut`: text, then no terminal (the connection drops, or the body just ends).
- `Stall`: text, then nothing (pings at most) until the client leaves.

Build them with `Scenario`'s class methods (``Scenario.text("hi")``); every one
takes the options `Scenario` documents, and ``replace(...)`` adjusts a copy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, ClassVar, Literal, TypeAlias

Wire: TypeAlias = Literal[
    "anthropic", "openai", "openai-responses", "gemini", "bedrock", "bedrock-converse"
]
Ending: TypeAlias = Literal["end", "cut", "stall"]

WIRES: tuple[Wire, ...] = ("anthropic", "openai", "openai-responses", "gemini")

LONG_WORDS = ("The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ")
DEFAULT_TEXT = "Hello from the loopback server."
DEFAULT_INPUT_TOKENS = 12


class Unplayable(Exception):
    """The scenario has no form on this wire; the server answers 400 with this message."""


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """What one provider call does. Build one with the class methods, adjust with `replace`.

    Options every scenario takes: ``model`` (the served model; None means the model
    asked for), ``input_tokens`` / ``output_tokens`` (None: 12 in, output counted from
    the words; input is the total, cached included), ``cache_read_tokens`` /
    ``cache_write_tokens`` (the part of it the prompt cache read / wrote), ``delay_s``
    (before the response starts), ``chunk_delay_s`` (between streamed chunks: a trickle),
    ``timestamps`` (each streamed text chunk carries ``"agentcore_emitted_at":
    time.time()`` and the call records each emission time), ``headers`` (extra response
    headers), ``ping`` (send the wire's keep-alive once inside the stream, where it has one).
    """

    kind: ClassVar[str] = "scenario"

    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    timestamps: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    ping: bool = True
    echo_credentials: bool = False
    """An error family's message is the request's credentials, echoed (`credentials_message`)."""

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed: ``Scenario.text("hi").replace(model="m-2")``."""
        return dataclasses.replace(self, **changes)

    # -- completed calls -----------------------------------------------------------

    @classmethod
    def text(cls, text: str = DEFAULT_TEXT, **options: Any) -> Reply:
        """A normal reply: the text, streamed in pieces, ending ``end_turn``."""
        return Reply(reply=text, **options)

    @classmethod
    def echo(cls, **options: Any) -> Echo:
        """Reply with the last user message's text (handy as a server-wide default)."""
        return Echo(**options)

    @classmethod
    def trickle(cls, text: str = DEFAULT_TEXT, *, every_s: float = 0.05, **options: Any) -> Reply:
        """A normal reply whose chunks come `every_s` apart: slow, but progressing."""
        return Reply(reply=text, chunk_delay_s=every_s, **options)

    @classmethod
    def max_tokens(cls, text: str = "This reply was cut at", **options: Any) -> Reply:
        return Reply(reply=text, stop="max_tokens", **options)

    @classmethod
    def stop_sequence(
        cls, text: str = "Counting: 1 2 3", sequence: str = "END", **options: Any
    ) -> Reply:
        """Stopped by a stop sequence. The openai wire names it vLLM-style, in ``stop_reason``;
        Gemini says only ``STOP``; the Responses API has no stop sequences (unplayable)."""
        return Reply(reply=text, stop="stop_sequence", sequence=sequence, **options)

    @classmethod
    def refusal(cls, text: str = "I can't help with that.", **options: Any) -> Reply:
        """Anthropic ``stop_reason: "refusal"``; openai ``finish_reason: "content_filter"``;
        Responses ``incomplete`` for ``content_filter``; Gemini ``finishReason: "SAFETY"``."""
        return Reply(reply=text, stop="refusal", **options)

    @classmethod
    def pause_turn(cls, text: str = "Still working on it.", **options: Any) -> Reply:
        """Anthropic only (``stop_reason: "pause_turn"``)."""
        return Reply(reply=text, stop="pause_turn", **options)

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
    ) -> ToolUse:
        """A tool call, after optional text. ``cut=True``: the input JSON is cut off
        half-way and the call ends ``max_tokens`` (``length`` on the openai wire)."""
        return ToolUse(
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
    ) -> Reply:
        """Thinking before text: Anthropic thinking deltas (with a signature), openai
        ``delta.reasoning`` (``reasoning_field="reasoning_content"`` for the other form),
        Responses reasoning summary deltas, Gemini ``thought: true`` parts."""
        return Reply(thought=thinking, reply=text, **options)

    @classmethod
    def long(cls, n: int, chunks: tuple[str, ...] = LONG_WORDS, **options: Any) -> Long:
        """`n` text chunks cycling through `chunks` (consecutive chunks differ, as some
        clients refuse a stream that repeats itself), rendered once per server and
        written in large slices: for benchmarks. No keep-alive inside (``ping=False``)."""
        return Long(n=n, words=tuple(chunks), **{"ping": False, **options})

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
    ) -> StreamError:
        """Text, then an error mid-stream: Anthropic ``event: error`` naming `error_type`;
        openai a chunk with an ``error`` object (code: `code`, else `error_type`) and
        ``finish_reason: "error"``, as OpenRouter sends; Responses an ``error`` event
        and ``response.failed``; Gemini an ``{"error": ...}`` chunk. Whole: Anthropic
        and Gemini answer the HTTP status the type implies; openai answers 200 with only
        the error object; Responses a 200 ``failed`` response."""
        return StreamError(
            reply=after, error_type=error_type, message=message, code=code, **options
        )

    @classmethod
    def finish_error(cls, after: str = "Partial ", **options: Any) -> StreamError:
        """openai only: a bare ``finish_reason: "error"`` with no error object."""
        return StreamError(reply=after, bare=True, **options)

    @classmethod
    def error_body(
        cls, message: str = "Provider returned error", code: int | str = 502, **options: Any
    ) -> ErrorBody:
        """HTTP 200 whose whole body is an error object (OpenRouter), streamed or whole."""
        return ErrorBody(message=message, code=code, **options)

    # -- broken and stuck connections ------------------------------------------------------

    @classmethod
    def cut(cls, after: str = "Partial ", *, clean: bool = False, **options: Any) -> Cut:
        """Text, then the connection is closed with no terminal event. ``clean=True`` ends
        the HTTP body properly instead (a stream that simply stops). Whole: the body is
        cut half-way."""
        return Cut(reply=after, clean=clean, **options)

    @classmethod
    def reset(cls, **options: Any) -> Cut:
        """The connection is closed before any response: no status line, no headers."""
        return Cut(reply="", before_response=True, **options)

    @classmethod
    def stall(
        cls,
        after: str = "",
        *,
        ping: bool = True,
        keepalive_s: float | None = None,
        **options: Any,
    ) -> Stall:
        """Optional text, a ping (Anthropic ``event: ping``, openai ``: OPENROUTER
        PROCESSING``, Responses ``response.in_progress``; Gemini has none), then nothing
        until the client leaves; with `keepalive_s`, a ping every so often (pings are not
        progress). Whole: no response at all."""
        return Stall(reply=after, ping=ping, keepalive_s=keepalive_s, **options)

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
    ) -> HttpError:
        """Any status. `body` (dict, list, str or bytes) is sent verbatim; without it, an
        error body in the wire's own shape is built from `message`, `error_type`, `code`."""
        return HttpError(
            status=status,
            message=message or f"loopback HTTP {status}",
            body=body,
            error_type=error_type,
            code=code,
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
    ) -> HttpError:
        """HTTP 429 stating its wait in any form: ``retry-after`` seconds, ``retry-after-ms``,
        ``retry-after`` as an HTTP date (a datetime, or seconds from now), body
        ``retry_after`` / ``retry_after_ms``, or Google's ``RetryInfo.retryDelay``
        (``"30s"``, in the error's ``details``)."""
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
            extra["details"] = [{"@type": RETRY_INFO, "retryDelay": retry_delay}]
        return HttpError(
            status=429,
            message=message,
            extra=extra,
            headers=headers,
            retry_after_date_in=date_in,
            **options,
        )

    @classmethod
    def overloaded(cls, message: str = "Overloaded", **options: Any) -> HttpError:
        """HTTP 529 ``overloaded_error``."""
        return cls.http_error(529, message, error_type="overloaded_error", **options)

    @classmethod
    def server_error(cls, message: str = "Internal server error", **options: Any) -> HttpError:
        return cls.http_error(500, message, **options)

    @classmethod
    def bad_request(cls, message: str = "messages: field required", **options: Any) -> HttpError:
        return cls.http_error(400, message, **options)

    @classmethod
    def unauthorized(cls, message: str = "invalid x-api-key", **options: Any) -> HttpError:
        return cls.http_error(401, message, code="invalid_api_key", **options)

    @classmethod
    def echoes_credentials(
        cls, *, mid_stream: bool = False, **options: Any
    ) -> HttpError | StreamError:
        """An error whose message repeats the request's credentials, as some OpenAI-compatible
        servers do (``401 "Incorrect API key provided: Bearer sk-..."``): HTTP 401, or with
        `mid_stream` text and then an error frame (`stream_error`'s shapes). For tests that
        no key leaves the host."""
        if mid_stream:
            return StreamError(error_type="authentication_error", echo_credentials=True, **options)
        return HttpError(status=401, code="invalid_api_key", echo_credentials=True, **options)

    @classmethod
    def quota(
        cls,
        message: str = (
            "You exceeded your current quota, please check your plan and billing details."
        ),
        **options: Any,
    ) -> HttpError:
        """HTTP 429 that is really a quota failure: openai ``insufficient_quota``,
        Anthropic ``billing_error``, Gemini a per-day ``QuotaFailure``. Not retryable."""
        return HttpError(status=429, message=message, cause="quota", **options)

    @classmethod
    def context_length(
        cls,
        message: str = "prompt is too long: 250000 tokens > 200000 maximum",
        **options: Any,
    ) -> HttpError:
        """HTTP 400 for a prompt over the context window (openai ``context_length_exceeded``)."""
        return HttpError(
            status=400,
            message=message,
            code="context_length_exceeded",
            cause="context_length",
            **options,
        )


RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


# -- the families -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Streamed(Scenario):
    """What a streamed family says before its ending: thinking, then text."""

    reply: str = ""
    """The visible text (for failures: the text sent before the failure)."""
    chunks: tuple[str, ...] | None = None
    """The text deltas, in order; None splits `text` after each space."""
    thought: str = ""
    """Thinking streamed before the text (never visible)."""
    redacted_thinking: str | None = None
    """Encrypted (redacted) reasoning first, with this data: Anthropic and Bedrock only."""
    reasoning_field: str = "reasoning"
    """openai wire: ``reasoning`` (OpenRouter) or ``reasoning_content`` (DeepSeek, vLLM)."""

    def pieces(self) -> list[str]:
        """The text deltas, in order."""
        if self.chunks is not None:
            return list(self.chunks)
        return split_words(self.reply)

    def thought_pieces(self) -> list[str]:
        return split_words(self.thought)


@dataclass(frozen=True, kw_only=True)
class Reply(Streamed):
    """Text, then a stop: ``stop`` is a normalized reason (``end_turn``, ``max_tokens``,
    ``stop_sequence``, ``refusal``, ``tool_use``, ``pause_turn``) each wire says its way;
    ``raw_stop`` is sent verbatim instead (the unknown-stop rule's input); on the openai
    wire ``raw_stop=""`` sends none at all (``finish_reason`` null to the end)."""

    kind: ClassVar[str] = "text"

    reply: str = DEFAULT_TEXT
    stop: str = "end_turn"
    sequence: str | None = None
    """The stop sequence that fired, for ``stop="stop_sequence"``."""
    raw_stop: str | None = None


@dataclass(frozen=True, kw_only=True)
class ToolUse(Reply):
    """A reply ending in a call to tool `tool_name`; ``cut_tool``: its input is cut off
    half-way and the call ends ``max_tokens``."""

    kind: ClassVar[str] = "tool_use"

    reply: str = ""
    stop: str = "tool_use"
    tool_name: str = "get_weather"
    tool_input: Mapping[str, Any] = field(default_factory=dict)
    tool_id: str = "toolu_loopback_1"
    cut_tool: bool = False

    def input_json(self) -> str:
        """The input as JSON text; cut off half-way when the scenario says so."""
        full = json.dumps(dict(self.tool_input))
        return full[: max(1, len(full) // 2)] if self.cut_tool else full

    def input_pieces(self) -> list[str]:
        full = self.input_json()
        step = max(1, len(full) // 3)
        return [full[i : i + step] for i in range(0, len(full), step)]


@dataclass(frozen=True, kw_only=True)
class Echo(Reply):
    """A reply whose text is the last user message of the request."""

    kind: ClassVar[str] = "echo"


@dataclass(frozen=True, kw_only=True)
class Long(Reply):
    """`n` text chunks cycling through `words`: for benchmarks (rendered once per shape)."""

    kind: ClassVar[str] = "long"

    n: int = 0
    words: tuple[str, ...] = LONG_WORDS

    def as_reply(self) -> Reply:
        """The plain reply it stands for: every chunk spelled out."""
        words = self.words or LONG_WORDS
        chunks = tuple(words[i % len(words)] for i in range(self.n))
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(Reply)}
        return Reply(**{**fields, "reply": "".join(chunks), "chunks": chunks})


@dataclass(frozen=True, kw_only=True)
class StreamError(Streamed):
    """Text, then an error inside the 200 stream. ``bare``: openai's ``finish_reason:
    "error"`` with no error object (the other wires cannot say it)."""

    kind: ClassVar[str] = "stream_error"

    reply: str = "Partial "
    error_type: str | None = "overloaded_error"
    message: str = "Overloaded"
    code: str | int | None = None
    bare: bool = False


@dataclass(frozen=True, kw_only=True)
class ErrorBody(Scenario):
    """HTTP 200 whose whole body (streamed or not) is an error object."""

    kind: ClassVar[str] = "error_body"

    message: str = "Provider returned error"
    code: str | int = 502


@dataclass(frozen=True, kw_only=True)
class Cut(Streamed):
    """Text, then no terminal: the connection drops (``clean``: the body just ends).
    Whole: the body is cut half-way. ``before_response``: dropped before any response."""

    kind: ClassVar[str] = "cut"

    reply: str = "Partial "
    clean: bool = False
    before_response: bool = False
    """Closed before any response (`Scenario.reset`): the call sees no status at all."""


@dataclass(frozen=True, kw_only=True)
class Stall(Streamed):
    """Text, then nothing until the client leaves; a ping every `keepalive_s` if set.
    Whole: no response at all."""

    kind: ClassVar[str] = "stall"

    keepalive_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class HttpError(Scenario):
    """An error before the stream: `status`, and `body` verbatim or an error object in the
    wire's shape built from `message`, `error_type`, `code`, `extra` (fields inside the
    error object: stated waits in the body). ``cause`` names what a wire words its own
    way (``quota``, ``context_length``)."""

    kind: ClassVar[str] = "http_error"

    status: int = 500
    message: str = ""
    body: Any = None
    error_type: str | None = None
    code: str | int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    cause: Literal["quota", "context_length"] | None = None
    retry_after_date_in: float | None = None
    """Send ``retry-after`` as the HTTP date this many seconds after the reply is sent."""


# -- what a rendering produces --------------------------------------------------------------------

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
    """The keep-alive frame a stall repeats (None: the wire has none)."""
    carries_text: Callable[[Frame], bool] = field(default=lambda frame: False)
    """True for a frame that streams a piece of visible text (timestamped when asked)."""
    encode: Callable[[Frame, float | None], bytes] | None = None
    """The wire's framing of one frame (`emitted_at` added to its payload when given);
    None: server-sent events."""


@dataclass(frozen=True)
class Usage:
    """The token counts a rendering reports: `input_tokens` is the total, cached included."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:  # Anthropic's ``input_tokens``
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens


def usage_of(scenario: Scenario, text: str) -> Usage:
    """The scenario's counts, or 12 in and one per word of `text` out."""
    return Usage(
        scenario.input_tokens if scenario.input_tokens is not None else DEFAULT_INPUT_TOKENS,
        scenario.output_tokens if scenario.output_tokens is not None else count_words(text),
        scenario.cache_read_tokens,
        scenario.cache_write_tokens,
    )


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


def split_words(text: str) -> list[str]:
    """`text` split after each space, the spaces kept: ``"a b"`` -> ``["a ", "b"]``."""
    if not text:
        return []
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + ([words[-1]] if words[-1] else [])


def count_words(text: str) -> int:
    return max(1, len(text.split()))


def http_date(when: datetime) -> str:
    """An HTTP date (RFC 9110), rounded up to the next second so the wait is never short."""
    if when.tzinfo is None:
        when = when.astimezone()
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return format_datetime(when.astimezone(UTC), usegmt=True)
