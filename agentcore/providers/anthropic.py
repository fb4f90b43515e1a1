"""The Anthropic Messages API adapter, ``kind = "anthropic"``: POST ``{base_url}/v1/messages``.

Streamed calls read the SSE events ``message_start`` (served model, input and
cache tokens), ``content_block_start`` / ``_delta`` / ``_stop`` (text, thinking
and signature deltas, ``tool_use`` with ``input_json_delta``), ``message_delta``
(stop reason, output tokens), ``message_stop`` and ``ping``; an ``event: error``
mid-stream fails the call with the kind its ``error.type`` names. Whole calls
read the JSON message. Thinking and tool input are streamed as invisible tokens.

The text delta is the hot path: it is handled inline, before any other dispatch,
with one `json.loads` and a few dict lookups per event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx

from agentcore.inference import (
    BlockStart,
    BlockStop,
    BlockType,
    Complete,
    Failed,
    InferenceError,
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
from agentcore.providers.base import normalize_stop
from agentcore.providers.http import (
    MID_STREAM,
    body_chunks,
    build_client,
    drain,
    ended_early,
    error_from_exception,
    error_from_payload,
    fast_loads,
    is_event_stream,
    not_json,
    open_stream,
    post_json,
    read_usage,
    replay_body,
    resolve_key,
    unreadable,
)
from agentcore.providers.sse import SSEDecoder
from agentcore.settings import InferenceSettings, ProviderSettings

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
KEY_ENV = "ANTHROPIC_API_KEY"

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

_loads = json.loads


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
            # The API accepts earlier thinking back only with its signature.
            if block.signature:
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
    return {"role": message.role, "content": content}


USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_creation_tokens",
}


def _usage(data: Any, into: Usage) -> Usage:
    return read_usage(data, into, USAGE_FIELDS)


def _tool_input(raw: str) -> dict[str, Any]:
    """The accumulated input JSON; ``{}`` when there is none or it was cut off mid-way."""
    if not raw:
        return {}
    try:
        value = _loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


class _Block:
    __slots__ = ("id", "ignored", "index", "name", "parts", "signature", "stopped", "type")

    def __init__(
        self, index: int, type: BlockType, id: str = "", name: str = "", ignored: bool = False
    ) -> None:
        self.index = index
        self.type: BlockType = type
        self.parts: list[str] = []
        self.id = id
        self.name = name
        self.signature: str | None = None
        self.stopped = ignored
        self.ignored = ignored

    def build(self) -> OutputBlock:
        text = "".join(self.parts)
        if self.type == "text":
            return TextBlock(text)
        if self.type == "thinking":
            return ThinkingBlock(text, self.signature)
        return ToolUseBlock(self.id, self.name, _tool_input(text))


class AnthropicProvider:
    kind = "anthropic"

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        self.name = name
        self.unknown_stop = inference.unknown_stop
        key = resolve_key(name, config, KEY_ENV, required=True)
        headers = {"anthropic-version": API_VERSION, "accept": "application/json"}
        if key:
            headers["x-api-key"] = key
        self._client = build_client(config, config.base_url or DEFAULT_BASE_URL, headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _stop(self, token: str | None, sequence: str | None) -> StopInfo:
        return normalize_stop(
            self.name, token, STOP_REASONS, unknown_stop=self.unknown_stop, sequence=sequence
        )

    # -- whole -----------------------------------------------------------------------

    async def complete(self, request: Request, model: str) -> Response:
        body = request_body(request, model, stream=False)
        data = await post_json(self._client, "/v1/messages", body, provider=self.name, model=model)
        return self._whole(data, model)

    def _whole(self, data: Any, model: str) -> Response:
        if not isinstance(data, dict) or data.get("type") == "error" or "error" in data:
            raise error_from_payload(data, provider=self.name, model=model, status=200)
        content: list[OutputBlock] = []
        for item in data.get("content") or ():
            kind = item.get("type")
            if kind == "text":
                content.append(TextBlock(item.get("text", "")))
            elif kind == "thinking":
                content.append(ThinkingBlock(item.get("thinking", ""), item.get("signature")))
            elif kind == "tool_use":
                value = item.get("input")
                content.append(
                    ToolUseBlock(
                        item.get("id", ""),
                        item.get("name", ""),
                        value if isinstance(value, dict) else {},
                    )
                )
        stop = self._stop(data.get("stop_reason"), data.get("stop_sequence"))
        return Response(
            content,
            stop,
            _usage(data.get("usage"), Usage()),
            model,
            data.get("model") or model,
            self.name,
        )

    # -- streamed --------------------------------------------------------------------

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        body = request_body(request, model, stream=True)
        name = self.name
        blocks: dict[int, _Block] = {}
        usage = Usage()
        served: str | None = None
        stop_reason: str | None = None
        stop_sequence: str | None = None
        finished = False
        decoder = SSEDecoder()
        loads = fast_loads
        try:
            async with open_stream(
                self._client, "/v1/messages", body, provider=name, model=model
            ) as response:
                if not is_event_stream(response):
                    # A JSON body where a stream was asked for: an error, or a whole reply.
                    for event in await replay_body(
                        response, lambda data: self._whole(data, model), provider=name, model=model
                    ):
                        yield event
                    return
                chunks = body_chunks(response)
                while True:
                    chunk = await anext(chunks, None)
                    events = (
                        decoder.feed_tuples(chunk) if chunk is not None else decoder.close_tuples()
                    )
                    for name_, data, _ in events:
                        try:
                            obj = loads(data)
                            kind = obj["type"]
                        except (ValueError, KeyError, TypeError):
                            if name_ == "ping":
                                continue
                            yield Failed(not_json(data, provider=name, model=model))
                            return
                        if kind == "content_block_delta":
                            delta = obj["delta"]
                            dtype = delta.get("type")
                            index = obj.get("index", 0)
                            if dtype == "text_delta":
                                text = delta["text"]
                                blocks[index].parts.append(text)
                                yield Token(text, "text", index, True)
                            elif dtype == "thinking_delta":
                                text = delta["thinking"]
                                blocks[index].parts.append(text)
                                yield Token(text, "thinking", index, False)
                            elif dtype == "input_json_delta":
                                text = delta.get("partial_json", "")
                                blocks[index].parts.append(text)
                                yield Token(text, "tool_use", index, False)
                            elif dtype == "signature_delta":
                                blocks[index].signature = delta.get("signature")
                            continue
                        if kind == "content_block_start":
                            index = obj.get("index", 0)
                            item = obj.get("content_block") or {}
                            btype = item.get("type")
                            if btype == "text":
                                blocks[index] = _Block(index, "text")
                                yield BlockStart(index, "text")
                                if item.get("text"):
                                    blocks[index].parts.append(item["text"])
                                    yield Token(item["text"], "text", index, True)
                            elif btype == "thinking":
                                blocks[index] = _Block(index, "thinking")
                                yield BlockStart(index, "thinking")
                            elif btype == "tool_use":
                                block = _Block(
                                    index, "tool_use", item.get("id", ""), item.get("name", "")
                                )
                                blocks[index] = block
                                yield BlockStart(index, "tool_use", block.name, block.id)
                            else:
                                # Block types the normalized model has no place for
                                # (redacted thinking, server tools): their deltas are dropped.
                                blocks[index] = _Block(index, "text", ignored=True)
                        elif kind == "content_block_stop":
                            ended = blocks.get(obj.get("index", 0))
                            if ended is not None and not ended.stopped:
                                ended.stopped = True
                                yield BlockStop(ended.index, ended.build())
                        elif kind == "message_start":
                            message = obj.get("message") or {}
                            served = message.get("model") or served
                            _usage(message.get("usage"), usage)
                            yield UsageUpdate(replace(usage))
                        elif kind == "message_delta":
                            delta = obj.get("delta") or {}
                            stop_reason = delta.get("stop_reason") or stop_reason
                            stop_sequence = delta.get("stop_sequence") or stop_sequence
                            if "usage" in obj:
                                _usage(obj["usage"], usage)
                                yield UsageUpdate(replace(usage))
                        elif kind == "message_stop":
                            finished = True
                            break
                        elif kind == "error":
                            yield Failed(
                                error_from_payload(
                                    obj, provider=name, model=model, prefix=MID_STREAM
                                )
                            )
                            return
                        # "ping" and event types added later: nothing to do.
                    if finished or chunk is None:
                        break
                if chunk is not None:
                    await drain(chunks)
        except httpx.HTTPError as exc:
            if stop_reason is None:
                yield Failed(error_from_exception(exc, provider=name, model=model))
                return
            # The stop reason came, only message_stop was lost: the reply is whole.
        except InferenceError as error:
            yield Failed(error)
            return
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            yield Failed(unreadable(exc, provider=name, model=model))
            return
        if not finished and stop_reason is None:
            yield Failed(ended_early(provider=name, model=model))
            return
        try:
            stop = self._stop(stop_reason, stop_sequence)
        except InferenceError as error:
            yield Failed(error)
            return
        content: list[OutputBlock] = []
        for index in sorted(blocks):
            block = blocks[index]
            if block.ignored:
                continue
            built = block.build()
            if not block.stopped:
                block.stopped = True
                yield BlockStop(index, built)
            content.append(built)
        yield Complete(Response(content, stop, usage, model, served or model, name))
