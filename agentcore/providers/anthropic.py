"""The Anthropic Messages API wire, ``kind = "anthropic"``: POST ``{base_url}/v1/messages``.

Streamed calls read the SSE events ``message_start`` (served model, input and
cache tokens), ``content_block_start`` / ``_delta`` / ``_stop`` (text, thinking
and signature deltas, ``redacted_thinking`` whole at its start, ``tool_use`` with
``input_json_delta``), ``message_delta``
(stop reason, output tokens), ``message_stop`` and ``ping``; an ``event: error``
mid-stream fails the call with the kind its ``error.type`` names. Whole calls
read the JSON message. Thinking and tool input are streamed as invisible tokens.

XML tool mode (``tool_mode = "xml"``) is this wire with a request of its own and a
translator that reads the text as markup: `agentcore.providers.anthropic_xml`.

The text delta is the hot path: it is handled inline, before any other dispatch,
with one JSON decode and a few dict lookups per event.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentcore.inference import (
    MediaBlock,
    Message,
    OutputBlock,
    Request,
    Response,
    StopInfo,
    StopReason,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageUpdate,
)
from agentcore.providers.driver import HTTPProvider
from agentcore.providers.errors import MID_STREAM, error_from_payload
from agentcore.providers.prompt_cache import breakpoints, mark_messages_body
from agentcore.providers.sse import EventTuple
from agentcore.providers.wire import (
    HttpCall,
    Translator,
    Wire,
    fast_loads,
    not_carried,
    read_usage,
    resolve_key,
)
from agentcore.settings import (
    DEFAULT_UNKNOWN_STOP,
    InferenceSettings,
    ProviderSettings,
    UnknownStop,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
KEY_ENV = "ANTHROPIC_API_KEY"
PATH = "/v1/messages"

MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "application/pdf"})
"""Images (base64 source) and PDFs (a document block); no audio."""

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    # The output was cut by the context window rather than by max_tokens: a length stop.
    "model_context_window_exceeded": "max_tokens",
}

USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}


# -- the request ----------------------------------------------------------------------------


def request_body(request: Request, model: str, *, stream: bool) -> dict[str, Any]:
    """The Messages API body. `request.extras` is merged last (``thinking``, ``top_k``, ...)."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": [_message(m) for m in request.messages],
    }
    if request.system:
        body["system"] = request.system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    body.update(request.extras)
    body["stream"] = stream
    return body


def _message(message: Message) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            # The API accepts earlier thinking back only as it came: signed, or redacted.
            if block.redacted:
                content.append({"type": "redacted_thinking", "data": block.redacted})
            elif block.signature:
                content.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
        elif isinstance(block, ToolUseBlock):
            content.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
        elif isinstance(block, ToolResultBlock):
            content.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block.tool_use_id,
                    "content": block.content,
                    "is_error": block.is_error,
                }
            )
        elif isinstance(block, MediaBlock):
            content.append(_media(block))
    return {"role": message.role, "content": content}


def _media(block: MediaBlock) -> dict[str, Any]:
    """An image, or a PDF as a document, from base64 data."""
    if block.mime_type not in MEDIA_TYPES:
        raise not_carried("Anthropic Messages", block)
    source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
    return {"type": "image" if block.kind == "image" else "document", "source": source}


# -- the wire -----------------------------------------------------------------------------------


class AnthropicWire(Wire):
    """The Messages API for one provider: its key in ``x-api-key``, the API version pinned."""

    media_types = MEDIA_TYPES

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        self.name = name
        self.unknown_stop = inference.unknown_stop
        self.base_url = config.base_url or DEFAULT_BASE_URL
        key = resolve_key(name, config, KEY_ENV, required=True)
        self.headers = {"anthropic-version": API_VERSION, "accept": "application/json"}
        if key:
            self.headers["x-api-key"] = key
        self.prompt_cache = config.prompt_cache
        self.cache_ttl = config.prompt_cache_ttl

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        body = request_body(request, model, stream=stream)
        points = breakpoints(request, self.prompt_cache, self.cache_ttl)
        if points:
            mark_messages_body(body, points)
        return HttpCall(PATH, body)

    def translator(self, request: Request, model: str) -> AnthropicTranslator:
        return AnthropicTranslator(self.name, model, self.unknown_stop)


class AnthropicTranslator(Translator):
    """One Messages API reply, streamed or whole."""

    __slots__ = ("stop_reason", "stop_sequence", "wire_usage")

    def __init__(
        self, provider: str, model: str, unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    ) -> None:
        super().__init__(provider, model, unknown_stop)
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.wire_usage = Usage()
        """The counts in Anthropic's words: its ``input_tokens`` leaves the cached out."""

    def take_usage(self, data: Any) -> None:
        """Take in a usage object (message_start, message_delta, a whole reply) and restate
        it: `Usage.input_tokens` is the total, the cache's reads and writes included."""
        wire = read_usage(data, self.wire_usage, USAGE_FIELDS)
        usage = self.usage
        usage.input_tokens = (
            wire.input_tokens + (wire.cache_read_tokens or 0) + (wire.cache_write_tokens or 0)
        )
        usage.output_tokens = wire.output_tokens
        usage.cache_read_tokens = wire.cache_read_tokens
        usage.cache_write_tokens = wire.cache_write_tokens

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        blocks = self.blocks.by_index
        loads = fast_loads
        for name, data, _ in events:
            try:
                obj = loads(data)
                kind = obj["type"]
            except (ValueError, KeyError, TypeError):
                if name == "ping":
                    continue
                raise self.not_json(data) from None
            if kind == "content_block_delta":
                delta = obj["delta"]
                dtype = delta.get("type")
                block = blocks[obj.get("index", 0)]
                if dtype == "text_delta":
                    text = delta["text"]
                    block.parts.append(text)
                    out.append(Token(text, "text", block.index, True))
                elif dtype == "thinking_delta":
                    self.blocks.add(out, block, delta["thinking"])
                elif dtype == "input_json_delta":
                    self.blocks.add(out, block, delta.get("partial_json", ""))
                elif dtype == "signature_delta":
                    block.signature = delta.get("signature")
                continue
            self._event(kind, obj, out)
            if self.done:
                return

    def _event(self, kind: str, obj: Any, out: list[StreamEvent]) -> None:
        """Everything but a delta: blocks starting and stopping, the message's own events."""
        if kind == "content_block_start":
            index = obj.get("index", 0)
            item = obj.get("content_block") or {}
            btype = item.get("type")
            if btype == "text":
                block = self.blocks.start(out, index, "text")
                if item.get("text"):
                    self.blocks.add(out, block, item["text"])
            elif btype == "thinking":
                self.blocks.start(out, index, "thinking")
            elif btype == "redacted_thinking":  # whole at its start: no deltas follow
                self.blocks.start(out, index, "thinking").redacted = item.get("data")
            elif btype == "tool_use":
                self.blocks.start(out, index, "tool_use", item.get("id", ""), item.get("name", ""))
            else:
                # Block types the normalized model has no place for (server tools):
                # their deltas are dropped.
                self.blocks.ignore(index)
        elif kind == "content_block_stop":
            self.blocks.stop(out, self.blocks.by_index.get(obj.get("index", 0)))
        elif kind == "message_start":
            message = obj.get("message") or {}
            self.served = message.get("model") or self.served
            self.take_usage(message.get("usage"))
            out.append(UsageUpdate(replace(self.usage)))
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.stop_sequence = delta.get("stop_sequence") or self.stop_sequence
            # The stop reason came: only message_stop may be lost now, the reply is whole.
            self.finished = self.stop_reason is not None
            if "usage" in obj:
                self.take_usage(obj["usage"])
                out.append(UsageUpdate(replace(self.usage)))
        elif kind == "message_stop":
            self.finished = self.done = True
        elif kind == "error":
            raise error_from_payload(
                obj, provider=self.provider, model=self.model, prefix=MID_STREAM
            )
        # "ping" and event types added later: nothing to do.

    def stop(self) -> StopInfo:
        return self.normalized_stop(self.stop_reason, STOP_REASONS, self.stop_sequence)

    def whole(self, data: Any) -> Response:
        if not isinstance(data, dict) or data.get("type") == "error" or "error" in data:
            raise error_from_payload(data, provider=self.provider, model=self.model, status=200)
        content: list[OutputBlock] = []
        for item in data.get("content") or ():
            kind = item.get("type")
            if kind == "text":
                content.append(TextBlock(item.get("text", "")))
            elif kind == "thinking":
                content.append(ThinkingBlock(item.get("thinking", ""), item.get("signature")))
            elif kind == "redacted_thinking":
                content.append(ThinkingBlock("", redacted=item.get("data")))
            elif kind == "tool_use":
                value = item.get("input")
                content.append(
                    ToolUseBlock(
                        item.get("id", ""),
                        item.get("name", ""),
                        value if isinstance(value, dict) else {},
                    )
                )
        self.stop_reason, self.stop_sequence = data.get("stop_reason"), data.get("stop_sequence")
        self.served = data.get("model")
        self.take_usage(data.get("usage"))
        return self.response(content, self.stop())


class AnthropicProvider(HTTPProvider):
    kind = "anthropic"

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        super().__init__(name, config, AnthropicWire(name, config, inference))
