"""The OpenAI Responses wire, ``kind = "openai-responses"``: POST ``{base_url}/responses``.

The request: the conversation as ``input`` items (messages; a tool call as a
``function_call`` item, its result as ``function_call_output``), the system prompt
as ``instructions``, the limit as ``max_output_tokens``, ``store: false`` (agentcore
sends the whole conversation every time). The Responses API has no stop
sequences: a request that asks for them fails at once, saying so.

The stream is typed SSE events, each naming its output item by ``output_index``:
``response.output_text.delta`` (visible text), ``response.reasoning_summary_text.delta``
and ``response.reasoning_text.delta`` (thinking, invisible),
``response.function_call_arguments.delta`` (a tool call's input), and one terminal:
``response.completed`` (``end_turn``, or ``tool_use`` when the reply calls a tool),
``response.incomplete`` with ``incomplete_details.reason`` (``max_output_tokens`` ->
``max_tokens``, ``content_filter`` -> ``refusal``, anything else kept raw for the
unknown-stop rule) or ``response.failed`` (its ``error``). An ``error`` event (its
fields flat, as documented, or nested under ``error``, as the live API sends them)
fails the call. The terminal's ``response`` carries the usage and the served model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agentcore.inference import (
    BlockType,
    InferenceError,
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
from agentcore.providers.sse import EventTuple
from agentcore.providers.wire import (
    Block,
    HttpCall,
    Translator,
    Wire,
    carries_credentials,
    content_parts,
    fast_loads,
    json_object,
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

PATH = "/responses"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

INCOMPLETE_REASONS: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "refusal",
}
WIRE = "OpenAI Responses"
MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf"})
"""Images (``input_image``) and PDFs (``input_file``); the Responses input has no audio part."""
NO_STOP_SEQUENCES = (
    "The OpenAI Responses API has no stop sequences; this request asks for {}. "
    "Send it without stop_sequences, or to a chat-completions provider"
)
_THINKING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")
_TERMINALS = ("response.completed", "response.incomplete")


def request_body(request: Request, model: str, *, stream: bool) -> dict[str, Any]:
    """The Responses body. `request.extras` is merged last (``reasoning``, ``include``...)."""
    if request.stop_sequences:
        raise InferenceError(
            "invalid_request",
            NO_STOP_SEQUENCES.format(request.stop_sequences),
            retryable=False,
        )
    items: list[dict[str, Any]] = []
    for message in request.messages:
        items.extend(_items(message))
    body: dict[str, Any] = {"model": model, "input": items, "store": False}
    if request.system:
        body["instructions"] = request.system
    body["max_output_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            }
            for t in request.tools
        ]
    body.update(request.extras)
    body["stream"] = stream
    return body


def _items(message: Message) -> list[dict[str, Any]]:
    """One normalized message as input items: its text as a message, tool calls and
    results as items of their own. Earlier thinking is not sent back (it would need
    the provider's encrypted reasoning item)."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    parts = content_parts(message, WIRE, _text_part, _media)  # None without media
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input)
            out.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": arguments,
                }
            )
        elif isinstance(block, ToolResultBlock):
            result = {"type": "function_call_output", "call_id": block.tool_use_id}
            out.append({**result, "output": block.content})
    if parts:
        out.insert(0, {"role": "user", "content": parts})
    elif texts or not out:
        out.insert(0, {"role": message.role, "content": "".join(texts)})
    return out


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _media(block: MediaBlock) -> dict[str, Any]:
    """An image as ``input_image`` (a data URL), a PDF as ``input_file``; no audio."""
    if block.mime_type not in MEDIA_TYPES:
        raise not_carried(WIRE, block)
    if block.kind == "image":
        return {"type": "input_image", "image_url": block.data_url, "detail": "auto"}
    filename = block.name or "context.pdf"
    return {"type": "input_file", "filename": filename, "file_data": block.data_url}


USAGE_FIELDS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}


def _usage(data: Any, into: Usage) -> Usage:
    if isinstance(data, dict):
        read_usage(data, into, USAGE_FIELDS)
        read_usage(data.get("input_tokens_details"), into, {"cached_tokens": "cache_read_tokens"})
    return into


class ResponsesWire(Wire):
    """The Responses API for one provider: its key as a bearer token."""

    media_types = MEDIA_TYPES

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        self.name = name
        self.unknown_stop = inference.unknown_stop
        self.base_url = config.base_url or DEFAULT_BASE_URL
        # Credentials in base_url take the Authorization header a key would go in.
        required = not carries_credentials(self.base_url)
        key = resolve_key(name, config, "OPENAI_API_KEY", required=required)
        self.headers = {"accept": "application/json"}
        if key:
            self.headers["authorization"] = f"Bearer {key}"

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        return HttpCall(PATH, request_body(request, model, stream=stream))

    def translator(self, request: Request, model: str) -> ResponsesTranslator:
        return ResponsesTranslator(self.name, model, self.unknown_stop)


class ResponsesTranslator(Translator):
    """One Responses reply, streamed or whole."""

    __slots__ = ("calls", "items", "reason", "refused", "status")

    def __init__(
        self, provider: str, model: str, unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    ) -> None:
        super().__init__(provider, model, unknown_stop)
        self.items: dict[int, Block] = {}
        """The block of each output item streaming now, by ``output_index``."""
        self.status: str | None = None
        self.reason: str | None = None
        self.refused = False
        self.calls = 0
        """Tool calls in the reply: a completed one that has any ends ``tool_use``."""

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        loads = fast_loads
        for _, data, _ in events:
            try:
                event = loads(data)
            except ValueError:
                raise self.not_json(data) from None
            kind = event.get("type")
            if kind == "response.output_text.delta":
                # The usual event: one more piece of an output message's text.
                block = self.items.get(event["output_index"])
                if block is None or block.type != "text":
                    block = self._open(event["output_index"], "text", out)
                text = event["delta"]
                block.parts.append(text)
                out.append(Token(text, "text", block.index, True))
            else:
                self._event(kind, event, out)

    def _open(
        self, at: int, type: BlockType, out: list[StreamEvent], id: str = "", name: str = ""
    ) -> Block:
        """A new block for output item `at` (one item may hold a text and a refusal)."""
        self.blocks.stop(out, self.items.get(at))
        block = self.items[at] = self.blocks.start(out, self.blocks.next_index, type, id, name)
        return block

    def _event(self, kind: str, event: dict[str, Any], out: list[StreamEvent]) -> None:
        """Every event but a text delta."""
        if kind in _THINKING_DELTAS or kind == "response.function_call_arguments.delta":
            block = self.items.get(event["output_index"])
            if block is None:
                type: BlockType = "tool_use" if kind.startswith("response.f") else "thinking"
                self.calls += type == "tool_use"
                block = self._open(event["output_index"], type, out)
            self.blocks.add(out, block, event["delta"])
        elif kind == "response.refusal.delta":
            self.refused = True
            block = self.items.get(event["output_index"])
            if block is None or block.type != "text":
                block = self._open(event["output_index"], "text", out)
            self.blocks.add(out, block, event["delta"])
        elif kind == "response.output_item.added":
            self._added(event["output_index"], event["item"], out)
        elif kind == "response.output_item.done":
            self._item_done(event["output_index"], event["item"], out)
        elif kind in _TERMINALS:
            self._terminal(event["response"])
            out.append(UsageUpdate(replace(self.usage)))
        elif kind == "response.failed":
            response = event.get("response") or {}
            raise self._error(response.get("error") or response)
        elif kind == "error":
            raise self._error(event)
        elif kind == "response.created" and self.served is None:
            self.served = (event.get("response") or {}).get("model")

    def _added(self, at: int, item: dict[str, Any], out: list[StreamEvent]) -> None:
        kind = item.get("type")
        if kind == "reasoning":
            self._open(at, "thinking", out)
        elif kind == "function_call":
            self.calls += 1
            self._open(at, "tool_use", out, item.get("call_id") or "", item.get("name") or "")

    def _item_done(self, at: int, item: dict[str, Any], out: list[StreamEvent]) -> None:
        block = self.items.pop(at, None)
        if block is not None and block.type == "tool_use" and not block.parts:
            # A server that sends a call's arguments only whole, at its end.
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                self.blocks.add(out, block, arguments)
        self.blocks.stop(out, block)

    def _terminal(self, response: dict[str, Any]) -> None:
        self.status = response.get("status")
        details = response.get("incomplete_details") or {}
        self.reason = details.get("reason")
        self.served = response.get("model") or self.served
        _usage(response.get("usage"), self.usage)
        self.finished = self.done = True

    def _error(self, error: Any, status: int | None = None) -> InferenceError:
        prefix = "" if status is not None else MID_STREAM
        return error_from_payload(
            error, provider=self.provider, model=self.model, prefix=prefix, status=status
        )

    def stop(self) -> StopInfo:
        if self.status == "completed":
            if self.refused:
                return StopInfo("refusal", "completed")
            return StopInfo("tool_use" if self.calls else "end_turn", "completed")
        return self.normalized_stop(self.reason or self.status, INCOMPLETE_REASONS)

    def whole(self, data: Any) -> Response:
        if not isinstance(data, dict) or data.get("error") or data.get("status") == "failed":
            error = data.get("error") if isinstance(data, dict) else data
            raise self._error(error or data, status=200)
        content: list[OutputBlock] = []
        for item in data.get("output") or ():
            content.extend(self._output(item))
        self._terminal(data)
        return self.response(content, self.stop())

    def _output(self, item: dict[str, Any]) -> list[OutputBlock]:
        """The blocks of one output item of a whole reply."""
        kind = item.get("type")
        if kind == "reasoning":
            parts = item.get("content") or item.get("summary") or ()
            thinking = "".join(p.get("text", "") for p in parts)
            return [ThinkingBlock(thinking)] if thinking else []
        if kind == "function_call":
            self.calls += 1
            arguments = item.get("arguments")
            arguments = json_object(arguments) if isinstance(arguments, str) else {}
            return [ToolUseBlock(item.get("call_id") or "", item.get("name") or "", arguments)]
        if kind != "message":
            return []
        text = ""
        for part in item.get("content") or ():
            if part.get("type") == "refusal":
                self.refused = True
                text += part.get("refusal", "")
            else:
                text += part.get("text", "")
        return [TextBlock(text)] if text else []


class ResponsesProvider(HTTPProvider):
    """One ``[providers.NAME]`` of kind ``openai-responses``."""

    kind = "openai-responses"

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        super().__init__(name, config, ResponsesWire(name, config, inference))
