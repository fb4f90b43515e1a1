"""Traces in, OpenTelemetry spans and metrics out: the part of the plugin that reads traces.

Everything here is driven by agentcore's trace events alone (their `timestamp`, not
the clock when they are read, so spans stay true when observers run late), and does
only in-memory work: the SDK's processors and readers export on their own threads.

Spans (GenAI semantic conventions, client inference):

- ``chat {model}`` (CLIENT) per inference, from ``inference:start`` to its
  ``inference:complete`` / ``inference:fail``; an error status and ``error.type``
  (agentcore's error kind) when it failed.
- children: one ``attempt`` span per provider attempt, and one ``wait {reason}`` span
  per hold, backoff or limit wait (from the waiting traces), so a trace shows where the
  time went; ``retry`` and ``provider.hold`` span events on the inference span.
- ``mcpl inference/request`` (SERVER) per MCPL request, the parent of the inference it
  caused (``mcpl:inference_start`` ... ``mcpl:inference_complete`` / ``_fail``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from agentcore.api import (
    HoldPayload,
    Request,
    Response,
    SlotsPayload,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    TraceEvent,
    WaitingPayload,
    payload,
    redact,
    redact_value,
)

# -- attribute names (GenAI semantic conventions, and agentcore's own) ----------------------

OPERATION = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
COST_USD = "agentcore.cost.usd"
CONVERSATION_ID = "gen_ai.conversation.id"
TOKEN_TYPE = "gen_ai.token.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"

PROVIDER = "agentcore.provider"
INFERENCE_ID = "agentcore.inference.id"
ATTEMPT = "agentcore.attempt"
ATTEMPTS = "agentcore.attempts"
WAIT_REASON = "agentcore.wait.reason"
HOLD_REASON = "agentcore.hold.reason"
MCPL_SERVER = "mcpl.server.id"
MCPL_REQUEST = "mcpl.request.id"
MCPL_FEATURE_SET = "mcpl.feature_set"

CHAT = "chat"

VENDORS: Mapping[str, str] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "openai-responses": "openai",
    "openai-compatible": "openai",
    "gemini": "gcp.gemini",
    "openrouter": "openrouter",
}
"""`gen_ai.provider.name` by provider kind: who the call goes to, as an instrumentation of
that wire would name it (an OpenAI-compatible server speaks OpenAI's flavour); a kind not
listed here (``echo``, a plugin's) is reported as itself."""

TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
"""The semantic conventions' advice for ``gen_ai.client.token.usage``."""
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
"""The semantic conventions' advice for ``gen_ai.client.operation.duration`` (seconds)."""
WAIT_BUCKETS = [0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600]


def _ns(ms: int | float) -> int:
    return int(ms * 1_000_000)


def _utf8(text: str) -> str:
    """`text` with any lone UTF-16 surrogate as its escape (``\\ud800``). JSON text may hold
    one (an MCPL request id ``"\\ud800"``), but OTLP's protobuf strings must be UTF-8: one
    such attribute would fail the whole export batch, other requests' spans with it. An
    escape, not U+FFFD, keeps two such ids apart. Only non-ASCII text costs a check."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def _utf8_fields(event: TraceEvent) -> TraceEvent:
    """`event`, or a copy whose string fields are `_utf8`: every span name, attribute,
    status and metric attribute the recorder makes from a trace comes from its fields."""
    for value in event.fields.values():
        if isinstance(value, str) and _utf8(value) is not value:
            fields = {k: _utf8(v) if isinstance(v, str) else v for k, v in event.fields.items()}
            return replace(event, fields=fields)
    return event


@dataclass
class _Flight:
    """One inference whose span is open."""

    span: Span
    started_ms: int
    attempt_started_ms: int
    metric_attributes: dict[str, Any]
    provider: str
    parent: tuple[Any, Any] | None = None


@dataclass
class _Request:
    """One MCPL inference/request whose span is open."""

    span: Span
    error_kind: str | None = None
    children: list[str] = field(default_factory=list)


class Recorder:
    """Turns trace events into spans and metric points; see the module docstring."""

    def __init__(self, tracer: Tracer, meter: Meter, *, capture_content: bool = False) -> None:
        self._tracer = tracer
        self._capture = capture_content
        self._flights: dict[str, _Flight] = {}
        self._requests: dict[tuple[Any, Any], _Request] = {}
        self._token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._waited = meter.create_histogram(
            "agentcore.wait.duration",
            unit="s",
            description="Time calls spent waiting before a provider call, by reason.",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        )
        self._holds = meter.create_counter(
            "agentcore.provider.holds",
            unit="{hold}",
            description="Provider holds set or lengthened after a rate limit or overload.",
        )
        self._cost = meter.create_counter(
            "agentcore.inference.cost",
            unit="USD",
            description="What completed inferences cost (priced ones only: costUsd not null).",
        )
        self._refused = meter.create_counter(
            "agentcore.requests.refused",
            unit="{request}",
            description="Inferences refused before any provider call (a wait too long).",
        )
        self._slots = meter.create_gauge(
            "agentcore.rate_limit.slots.in_use",
            unit="{slot}",
            description="Rate-limit slots (max_in_flight) this host holds, by provider.",
        )
        self._handlers = {
            "inference:start": self._start,
            "inference:complete": self._complete,
            "inference:fail": self._fail,
            "inference:retry": self._retry,
            "inference:waiting": self._waiting,
            "provider:hold": self._hold,
            "rate_limit:slots": self._slots_in_use,
            "mcpl:inference_start": self._mcpl_start,
            "mcpl:inference_complete": self._mcpl_end,
            "mcpl:inference_fail": self._mcpl_end,
        }

    @property
    def open_spans(self) -> int:
        """Inferences and MCPL requests whose spans are still open (0 once all ended)."""
        return len(self._flights) + len(self._requests)

    def record(self, event: TraceEvent) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(_utf8_fields(event))

    def end_all(self, ms: int) -> None:
        """At shutdown: end what is still open, so nothing already seen is lost."""
        for flight in self._flights.values():
            flight.span.end(_ns(ms))
        for request in self._requests.values():
            request.span.end(_ns(ms))
        self._flights.clear()
        self._requests.clear()

    # -- MCPL requests ---------------------------------------------------------------

    def _mcpl_start(self, event: TraceEvent) -> None:
        f = event.fields
        key = (f.get("serverId"), f.get("requestId"))
        attributes: dict[str, AttributeValue] = {
            MCPL_SERVER: str(f.get("serverId")),
            MCPL_REQUEST: str(f.get("requestId")),
            REQUEST_STREAM: bool(f.get("streamed")),
        }
        if f.get("featureSet") is not None:
            attributes[MCPL_FEATURE_SET] = str(f["featureSet"])
        span = self._tracer.start_span(
            "mcpl inference/request",
            kind=SpanKind.SERVER,
            start_time=_ns(event.timestamp),
            attributes=attributes,
        )
        self._requests[key] = _Request(span)

    def _mcpl_end(self, event: TraceEvent) -> None:
        f = event.fields
        request = self._requests.pop((f.get("serverId"), f.get("requestId")), None)
        if request is None:  # refused before it started (no routing rule): a span of its own
            if event.type != "mcpl:inference_fail":
                return
            self._mcpl_start(event)
            request = self._requests.pop((f.get("serverId"), f.get("requestId")))
        if event.type == "mcpl:inference_fail":
            request.span.set_attribute(ERROR_TYPE, request.error_kind or "_OTHER")
            request.span.set_status(Status(StatusCode.ERROR, str(f.get("error"))))
        elif f.get("model") is not None:
            request.span.set_attribute(RESPONSE_MODEL, str(f["model"]))
        request.span.end(_ns(event.timestamp))

    # -- inferences ----------------------------------------------------------------------

    def _start(self, event: TraceEvent) -> None:
        f = event.fields
        reference = str(f.get("model", ""))
        model = reference.partition(":")[2] or reference
        kind = str(f.get("providerKind") or f.get("provider") or "")
        metric_attributes: dict[str, Any] = {
            OPERATION: CHAT,
            PROVIDER_NAME: VENDORS.get(kind, kind),
            REQUEST_MODEL: model,
        }
        attributes: dict[str, Any] = {
            **metric_attributes,
            PROVIDER: str(f.get("provider")),
            INFERENCE_ID: str(f.get("inferenceId")),
            REQUEST_STREAM: bool(f.get("streamed")),
        }
        if isinstance(f.get("maxTokens"), int):
            attributes[REQUEST_MAX_TOKENS] = f["maxTokens"]
        if isinstance(f.get("temperature"), int | float):
            attributes[REQUEST_TEMPERATURE] = float(f["temperature"])
        if f.get("conversationId") is not None:
            attributes[CONVERSATION_ID] = str(f["conversationId"])
        parent_key = None
        context = None
        if f.get("serverId") is not None:
            parent_key = (f.get("serverId"), f.get("mcplRequestId"))
            parent = self._requests.get(parent_key)
            if parent is not None:
                context = trace.set_span_in_context(parent.span)
                attributes[MCPL_SERVER] = str(f["serverId"])
        span = self._tracer.start_span(
            f"{CHAT} {model}",
            context=context,
            kind=SpanKind.CLIENT,
            start_time=_ns(event.timestamp),
            attributes=attributes,
        )
        if self._capture and isinstance(event.subject, Request):
            for key, value in request_content(event.subject).items():
                span.set_attribute(key, value)
        self._flights[str(f.get("inferenceId"))] = _Flight(
            span,
            event.timestamp,
            event.timestamp,
            metric_attributes,
            str(f.get("provider")),
            parent_key,
        )

    def _attempt(
        self, flight: _Flight, number: int, end_ms: int, error_kind: str | None = None
    ) -> None:
        """One attempt's child span, from the end of the last wait (or the start) to `end_ms`."""
        span = self._tracer.start_span(
            "attempt",
            context=trace.set_span_in_context(flight.span),
            kind=SpanKind.INTERNAL,
            start_time=_ns(flight.attempt_started_ms),
            attributes={ATTEMPT: number},
        )
        if error_kind is not None:
            span.set_attribute(ERROR_TYPE, error_kind)
            span.set_status(Status(StatusCode.ERROR))
        span.end(_ns(end_ms))
        flight.attempt_started_ms = end_ms

    def _retry(self, event: TraceEvent) -> None:
        f = event.fields
        flight = self._flights.get(str(f.get("inferenceId")))
        if flight is None:
            return
        number = int(f.get("attempt") or 0)
        error = str(f.get("error"))
        self._attempt(flight, number, event.timestamp, str(f.get("errorKind") or "_OTHER"))
        flight.span.add_event(
            "retry",
            {ATTEMPT: number, "agentcore.delay_ms": int(f.get("delayMs") or 0), "error": error},
            timestamp=_ns(event.timestamp),
        )

    def _waiting(self, event: TraceEvent) -> None:
        f = payload(event, WaitingPayload)
        if not f["ended"]:
            return
        reason = f["reason"]
        waited_ms = f["waitedMs"]
        self._waited.record(waited_ms / 1000, {WAIT_REASON: reason, PROVIDER: f["provider"]})
        flight = self._flights.get(f["inferenceId"])
        if flight is None:
            return
        span = self._tracer.start_span(
            f"wait {reason}",
            context=trace.set_span_in_context(flight.span),
            kind=SpanKind.INTERNAL,
            start_time=_ns(event.timestamp - waited_ms),
            attributes={WAIT_REASON: reason, ATTEMPT: f["attempt"]},
        )
        span.end(_ns(event.timestamp))
        flight.attempt_started_ms = event.timestamp  # the next attempt begins after the wait

    def _hold(self, event: TraceEvent) -> None:
        f = payload(event, HoldPayload)
        reason = f["reason"]
        self._holds.add(1, {PROVIDER: f["provider"], HOLD_REASON: reason})
        flight = self._flights.get(f["inferenceId"])
        if flight is not None:
            flight.span.add_event(
                "provider.hold",
                {HOLD_REASON: reason, "agentcore.duration_ms": f["durationMs"]},
                timestamp=_ns(event.timestamp),
            )

    def _slots_in_use(self, event: TraceEvent) -> None:
        f = payload(event, SlotsPayload)
        self._slots.set(f["inUse"], {PROVIDER: f["provider"]})

    def _complete(self, event: TraceEvent) -> None:
        f = event.fields
        flight = self._flights.pop(str(f.get("inferenceId")), None)
        if flight is None:
            return
        span = flight.span
        attempts = int(f.get("attempts") or 1)
        self._attempt(flight, attempts, event.timestamp)
        served = f.get("modelServed")
        input_tokens = int(f.get("inputTokens") or 0)
        output_tokens = int(f.get("outputTokens") or 0)
        span.set_attributes(
            {
                FINISH_REASONS: [str(f.get("finishReason"))],
                INPUT_TOKENS: input_tokens,
                OUTPUT_TOKENS: output_tokens,
                ATTEMPTS: attempts,
            }
        )
        cost = _spend(span, f)
        attributes = dict(flight.metric_attributes)
        if served:
            span.set_attribute(RESPONSE_MODEL, str(served))
            attributes[RESPONSE_MODEL] = str(served)
        if self._capture and isinstance(event.subject, Response):
            span.set_attribute(OUTPUT_MESSAGES, output_content(event.subject))
        span.end(_ns(event.timestamp))
        self._token_usage.record(input_tokens, {**attributes, TOKEN_TYPE: "input"})
        self._token_usage.record(output_tokens, {**attributes, TOKEN_TYPE: "output"})
        self._duration.record((event.timestamp - flight.started_ms) / 1000, attributes)
        if cost is not None:
            self._cost.add(cost, attributes)

    def _fail(self, event: TraceEvent) -> None:
        f = event.fields
        flight = self._flights.pop(str(f.get("inferenceId")), None)
        if flight is None:
            return
        span = flight.span
        kind = str(f.get("errorKind") or "_OTHER")
        attempts = int(f.get("attempts") or 1)
        if not f.get("refused"):
            self._attempt(flight, attempts, event.timestamp, kind)
        else:
            self._refused.add(1, {PROVIDER: flight.provider, ERROR_TYPE: kind})
        span.set_attributes({ERROR_TYPE: kind, ATTEMPTS: attempts})
        span.set_status(Status(StatusCode.ERROR, str(f.get("error"))))
        span.end(_ns(event.timestamp))
        if flight.parent is not None and flight.parent in self._requests:
            self._requests[flight.parent].error_kind = kind
        self._duration.record(
            (event.timestamp - flight.started_ms) / 1000,
            {**flight.metric_attributes, ERROR_TYPE: kind},
        )


# -- content, only with capture_content (semantic conventions' JSON shapes) ---------------


def _parts(blocks: list[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolUseBlock):
            parts.append(
                {"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.input}
            )
        elif isinstance(block, ToolResultBlock):
            parts.append(
                {"type": "tool_call_response", "id": block.tool_use_id, "result": block.content}
            )
    return parts


def _json(value: Any) -> str:
    """JSON with every registered secret masked: content may quote a key. A lone surrogate
    becomes its JSON escape, so the text is UTF-8 and still reads back as what was sent."""
    return _utf8(redact(json.dumps(redact_value(value), ensure_ascii=False, default=str)))


def request_content(request: Request) -> dict[str, str]:
    content = {
        INPUT_MESSAGES: _json(
            [{"role": m.role, "parts": _parts(list(m.content))} for m in request.messages]
        )
    }
    if request.system:
        content[SYSTEM_INSTRUCTIONS] = _json([{"type": "text", "content": request.system}])
    return content


def output_content(response: Response) -> str:
    message = {
        "role": "assistant",
        "parts": _parts(list(response.content)),
        "finish_reason": response.stop.reason,
    }
    return _json([message])


__all__ = ["VENDORS", "Recorder", "output_content", "request_content"]


def _spend(span: Any, fields: Mapping[str, Any]) -> float | None:
    """The GenAI cache-token attributes (each part of the input tokens) and the cost, on
    the span; the cost is returned for the counter (None: unpriced)."""
    for attribute, key in (
        (CACHE_READ_TOKENS, "cacheReadTokens"),
        (CACHE_WRITE_TOKENS, "cacheWriteTokens"),
    ):
        if isinstance(fields.get(key), int):
            span.set_attribute(attribute, fields[key])
    cost = fields.get("costUsd")
    if isinstance(cost, int | float):
        span.set_attribute(COST_USD, float(cost))
        return float(cost)
    return None
