"""The chat-completions adapter for ``openai``, ``openrouter`` and ``openai-compatible``.

One wire format, three kinds that differ only in defaults: the base URL, the
key's environment variable, whether a key is required (not for
``openai-compatible``: vLLM, llama.cpp and Ollama run without one) and the name
of the output limit (``max_completion_tokens`` for OpenAI, ``max_tokens`` for the
rest). Requests go to POST ``{base_url}/chat/completions``.

Streamed calls ask for ``stream_options.include_usage`` and read
``delta.content`` (visible), ``delta.reasoning`` / ``delta.reasoning_content``
(thinking, invisible), ``delta.tool_calls`` (accumulated by index),
``finish_reason`` and the final usage chunk; ``data: [DONE]`` ends the stream.
Two ways a 200 can still fail, both documented OpenRouter behaviour: an
``error`` object inside a chunk, and a bare ``finish_reason: "error"``; a 200
whose whole body is an error object fails with that error's message.
SSE comments (``: OPENROUTER PROCESSING``) are skipped by the decoder.

The content delta is the hot path: one `json.loads` and a handful of dict
lookups per chunk, the Token built positionally.
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

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

FINISH_ERROR = "The provider ended the inference with an error (finish_reason 'error')"

_loads = json.loads


class Flavor:
    """What sets one kind of the family apart from the others."""

    __slots__ = ("base_url", "key_env", "key_required", "max_tokens_field")

    def __init__(
        self, base_url: str | None, key_env: str | None, key_required: bool, max_tokens_field: str
    ) -> None:
        self.base_url = base_url
        self.key_env = key_env
        self.key_required = key_required
        self.max_tokens_field = max_tokens_field


FLAVORS: dict[str, Flavor] = {
    "openai": Flavor("https://api.openai.com/v1", "OPENAI_API_KEY", True, "max_completion_tokens"),
    "openrouter": Flavor("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True, "max_tokens"),
    "openai-compatible": Flavor(None, None, False, "max_tokens"),
}


def request_body(
    request: Request, model: str, *, stream: bool, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    """The chat-completions body. `request.extras` is merged last (``top_p``, ``reasoning``...)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_messages(message))
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        max_tokens_field: request.max_tokens,
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    body.update(request.extras)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _messages(message: Message) -> list[dict[str, Any]]:
    """One normalized message as chat messages: tool results become ``tool`` messages."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": json.dumps(block.input)},
                }
            )
        elif isinstance(block, ToolResultBlock):
            out.append(
                {"role": "tool", "tool_call_id": block.tool_use_id, "content": block.content}
            )
        # Earlier thinking is not sent back: chat completions has no field for it.
    if message.role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    elif texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


USAGE_FIELDS = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}
USAGE_DETAIL_FIELDS = {
    "cached_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_creation_tokens",
}


def _usage(data: Any, into: Usage) -> Usage:
    """Prompt and completion tokens; cached prompt tokens where the provider says."""
    if isinstance(data, dict):
        read_usage(data, into, USAGE_FIELDS)
        read_usage(data.get("prompt_tokens_details"), into, USAGE_DETAIL_FIELDS)
        read_usage(data, into, {"prompt_cache_hit_tokens": "cache_read_tokens"})  # DeepSeek
    return into


def _arguments(raw: str) -> dict[str, Any]:
    """Tool arguments; ``{}`` when there are none or they were cut off mid-way."""
    if not raw:
        return {}
    try:
        value = _loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


class _Block:
    __slots__ = ("id", "index", "name", "parts", "stopped", "type")

    def __init__(self, index: int, type: BlockType, id: str = "", name: str = "") -> None:
        self.index = index
        self.type: BlockType = type
        self.parts: list[str] = []
        self.id = id
        self.name = name
        self.stopped = False

    def build(self) -> OutputBlock:
        text = "".join(self.parts)
        if self.type == "text":
            return TextBlock(text)
        if self.type == "thinking":
            return ThinkingBlock(text)
        return ToolUseBlock(self.id, self.name, _arguments(text))


class OpenAIProvider:
    """One ``[providers.NAME]`` of kind ``openai``, ``openrouter`` or ``openai-compatible``."""

    def __init__(
        self, name: str, config: ProviderSettings, inference: InferenceSettings, kind: str
    ) -> None:
        flavor = FLAVORS[kind]
        self.name = name
        self.kind = kind
        self.unknown_stop = inference.unknown_stop
        self.max_tokens_field = flavor.max_tokens_field
        base_url = config.base_url or flavor.base_url
        if not base_url:
            raise InferenceError(
                "invalid_request",
                f"provider {name!r} (kind {kind!r}) needs a base_url in its settings",
                retryable=False,
                provider=name,
            )
        key = resolve_key(name, config, flavor.key_env, required=flavor.key_required)
        headers = {"accept": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        self._client = build_client(config, base_url, headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _stop(self, request: Request, finish: str | None, native: Any, refused: bool) -> StopInfo:
        """The stop for a finish_reason, sharpened by what else the provider said.

        ``stop`` covers both a natural end and a stop sequence; vLLM names the
        sequence in ``stop_reason`` and OpenRouter says ``native_finish_reason:
        "stop_sequence"``, so either makes it ``stop_sequence``. A refusal delta
        with a plain ``stop`` is a refusal.
        """
        if finish == "stop":
            if isinstance(native, str) and native in request.stop_sequences:
                return StopInfo("stop_sequence", finish, native)
            if native == "stop_sequence":
                return StopInfo("stop_sequence", finish)
            if refused:
                return StopInfo("refusal", finish)
        return normalize_stop(self.name, finish, STOP_REASONS, unknown_stop=self.unknown_stop)

    # -- whole -----------------------------------------------------------------------

    async def complete(self, request: Request, model: str) -> Response:
        body = request_body(request, model, stream=False, max_tokens_field=self.max_tokens_field)
        data = await post_json(
            self._client, "/chat/completions", body, provider=self.name, model=model
        )
        return self._whole(request, data, model)

    def _whole(self, request: Request, data: Any, model: str) -> Response:
        if not isinstance(data, dict) or data.get("error"):
            # OpenRouter answers 200 with only an error object when the model failed.
            error = data.get("error") if isinstance(data, dict) else data
            raise error_from_payload(error, provider=self.name, model=model, status=200)
        choices = data.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        finish = choice.get("finish_reason")
        if finish == "error":
            error = choice.get("error")
            if error:
                raise error_from_payload(
                    error, provider=self.name, model=model, status=200, prefix=MID_STREAM
                )
            raise InferenceError("server", FINISH_ERROR, provider=self.name, model=model)
        message = choice.get("message") or {}
        content: list[OutputBlock] = []
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            content.append(ThinkingBlock(reasoning))
        text = message.get("content")
        if isinstance(text, list):  # some servers send content parts
            text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            text = (text or "") + refusal
        if text:
            content.append(TextBlock(text))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = function.get("arguments")
            content.append(
                ToolUseBlock(
                    call.get("id", ""),
                    function.get("name", ""),
                    arguments
                    if isinstance(arguments, dict)
                    else _arguments(arguments if isinstance(arguments, str) else ""),
                )
            )
        native = choice.get("stop_reason", choice.get("native_finish_reason"))
        stop = self._stop(request, finish, native, bool(refusal))
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
        body = request_body(request, model, stream=True, max_tokens_field=self.max_tokens_field)
        name = self.name
        state = _StreamState()
        # The open text block, kept in locals: the per-chunk path touches nothing else.
        text_parts: list[str] | None = None
        text_index = 0
        decoder = SSEDecoder()
        loads = fast_loads
        done = False
        try:
            async with open_stream(
                self._client, "/chat/completions", body, provider=name, model=model
            ) as response:
                if not is_event_stream(response):
                    # A JSON body where a stream was asked for: an error object, or a whole reply.
                    for event in await replay_body(
                        response,
                        lambda data: self._whole(request, data, model),
                        provider=name,
                        model=model,
                    ):
                        yield event
                    return
                chunks = body_chunks(response)
                chunk: bytes | None = b""
                while not done:
                    chunk = await anext(chunks, None)
                    if chunk is None:
                        events = decoder.close_tuples()
                        done = True
                    else:
                        events = decoder.feed_tuples(chunk)
                    for _, data, _ in events:
                        if data == "[DONE]":
                            done = True
                            break
                        try:
                            obj = loads(data)
                        except ValueError:
                            yield Failed(not_json(data, provider=name, model=model))
                            return
                        if obj.get("error"):
                            yield Failed(
                                error_from_payload(
                                    obj["error"], provider=name, model=model, prefix=MID_STREAM
                                )
                            )
                            return
                        choices = obj.get("choices")
                        if choices:
                            choice = choices[0]
                            delta = choice.get("delta")
                            if delta:
                                text = delta.get("content")
                                if text and text_parts is not None and len(delta) == 1:
                                    # The usual chunk: one more piece of the open text block.
                                    text_parts.append(text)
                                    yield Token(text, "text", text_index, True)
                                else:
                                    for event in state.delta(delta):
                                        yield event
                                    current = state.current
                                    if current is not None and current.type == "text":
                                        text_parts, text_index = current.parts, current.index
                                    else:
                                        text_parts = None
                            reason = choice.get("finish_reason")
                            if reason:
                                state.finish = reason
                                state.native = choice.get(
                                    "stop_reason", choice.get("native_finish_reason")
                                )
                                if reason == "error":
                                    yield Failed(_finish_error(choice, name, model))
                                    return
                        elif obj.get("object") == "error":  # vLLM's error shape, mid-stream
                            yield Failed(
                                error_from_payload(
                                    obj, provider=name, model=model, prefix=MID_STREAM
                                )
                            )
                            return
                        if state.served is None:
                            state.served = obj.get("model")
                        if obj.get("usage"):
                            _usage(obj["usage"], state.usage)
                            yield UsageUpdate(replace(state.usage))
                if chunk is not None:
                    await drain(chunks)
        except httpx.HTTPError as exc:
            if state.finish is None:
                yield Failed(error_from_exception(exc, provider=name, model=model))
                return
            # The finish reason came, only the usage chunk or [DONE] was lost: the reply is whole.
        except InferenceError as error:
            yield Failed(error)
            return
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            yield Failed(unreadable(exc, provider=name, model=model))
            return
        if state.finish is None:
            yield Failed(ended_early(provider=name, model=model))
            return
        try:
            stop = self._stop(request, state.finish, state.native, state.refused)
        except InferenceError as error:
            yield Failed(error)
            return
        content: list[OutputBlock] = []
        for block in state.blocks:
            built = block.build()
            if not block.stopped:
                block.stopped = True
                yield BlockStop(block.index, built)
            content.append(built)
        yield Complete(Response(content, stop, state.usage, model, state.served or model, name))


def _finish_error(choice: dict[str, Any], provider: str, model: str) -> InferenceError:
    error = choice.get("error")
    if error:
        return error_from_payload(error, provider=provider, model=model, prefix=MID_STREAM)
    return InferenceError("server", FINISH_ERROR, provider=provider, model=model)


class _StreamState:
    """Everything but the hot path of one stream: blocks, tool calls, finish, usage."""

    __slots__ = ("blocks", "current", "finish", "native", "refused", "served", "tools", "usage")

    def __init__(self) -> None:
        self.blocks: list[_Block] = []
        self.current: _Block | None = None  # the open text or thinking block
        self.tools: dict[int, _Block] = {}
        self.usage = Usage()
        self.served: str | None = None
        self.finish: str | None = None
        self.native: Any = None
        self.refused = False

    def _switch(self, type: BlockType, events: list[StreamEvent]) -> _Block:
        current = self.current
        if current is not None and current.type == type:
            return current
        if current is not None:
            current.stopped = True
            events.append(BlockStop(current.index, current.build()))
        block = _Block(len(self.blocks), type)
        self.blocks.append(block)
        self.current = block
        events.append(BlockStart(block.index, type))
        return block

    def delta(self, delta: dict[str, Any]) -> list[StreamEvent]:
        """Events for a delta off the hot path: reasoning, a new block, refusal, tool calls."""
        events: list[StreamEvent] = []
        reasoning = delta.get("reasoning")
        if reasoning is None:
            reasoning = delta.get("reasoning_content")
        if reasoning and isinstance(reasoning, str):
            block = self._switch("thinking", events)
            block.parts.append(reasoning)
            events.append(Token(reasoning, "thinking", block.index, False))
        text = delta.get("content")
        if not text:
            text = delta.get("refusal")
            if text:
                self.refused = True
        if text and isinstance(text, str):
            block = self._switch("text", events)
            block.parts.append(text)
            events.append(Token(text, "text", block.index, True))
        calls = delta.get("tool_calls")
        if calls:
            current = self.current
            if current is not None:
                current.stopped = True
                events.append(BlockStop(current.index, current.build()))
                self.current = None
            events.extend(_tool_deltas(calls, self.tools, self.blocks))
        return events


def _tool_deltas(
    calls: list[Any], tools: dict[int, _Block], blocks: list[_Block]
) -> list[StreamEvent]:
    """Accumulate tool-call fragments by their ``index``; a new ``id`` at a known index
    (some servers number every call 0) starts a new call."""
    events: list[StreamEvent] = []
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        index = call.get("index", position)
        function = call.get("function") or {}
        call_id = call.get("id")
        block = tools.get(index)
        if block is None or (call_id and block.id and call_id != block.id):
            block = _Block(len(blocks), "tool_use", call_id or "", function.get("name") or "")
            tools[index] = block
            blocks.append(block)
            events.append(BlockStart(block.index, "tool_use", block.name, block.id))
        else:
            if call_id and not block.id:
                block.id = call_id
            if function.get("name") and not block.name:
                block.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        if arguments:
            block.parts.append(arguments)
            events.append(Token(arguments, "tool_use", block.index, False))
    return events
