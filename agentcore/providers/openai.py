"""The chat-completions wire for ``openai``, ``openrouter`` and ``openai-compatible``.

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

The content delta is the hot path: one JSON decode and a handful of dict
lookups per chunk, the Token built positionally.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, NamedTuple

from agentcore.inference import (
    BlockType,
    InferenceError,
    OutputBlock,
    Request,
    Response,
    StopInfo,
    StopReason,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolUseBlock,
    Usage,
    UsageUpdate,
)
from agentcore.providers.driver import HTTPProvider
from agentcore.providers.errors import MID_STREAM, error_from_payload
from agentcore.providers.openai_request import MEDIA_TYPES, request_body
from agentcore.providers.sse import EventTuple
from agentcore.providers.wire import (
    Block,
    Blocks,
    HttpCall,
    Translator,
    Wire,
    carries_credentials,
    fast_loads,
    json_object,
    read_usage,
    resolve_key,
)
from agentcore.settings import (
    DEFAULT_UNKNOWN_STOP,
    InferenceSettings,
    ProviderSettings,
    UnknownStop,
)

PATH = "/chat/completions"

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

FINISH_ERROR = "The provider ended the inference with an error (finish_reason 'error')"


class Flavor(NamedTuple):
    """What sets one kind of the family apart from the others."""

    base_url: str | None
    key_env: str | None
    key_required: bool
    max_tokens_field: str


FLAVORS: dict[str, Flavor] = {
    "openai": Flavor("https://api.openai.com/v1", "OPENAI_API_KEY", True, "max_completion_tokens"),
    "openrouter": Flavor("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True, "max_tokens"),
    "openai-compatible": Flavor(None, None, False, "max_tokens"),
}


USAGE_FIELDS = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}
USAGE_DETAIL_FIELDS = {
    "cached_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
}


def _usage(data: Any, into: Usage) -> Usage:
    """Prompt and completion tokens; cached prompt tokens where the provider says."""
    if isinstance(data, dict):
        read_usage(data, into, USAGE_FIELDS)
        read_usage(data.get("prompt_tokens_details"), into, USAGE_DETAIL_FIELDS)
        read_usage(data, into, {"prompt_cache_hit_tokens": "cache_read_tokens"})  # DeepSeek
    return into


class OpenAIWire(Wire):
    """Chat completions for one provider of the family: its key as a bearer token."""

    media_types = MEDIA_TYPES

    def __init__(
        self, name: str, config: ProviderSettings, inference: InferenceSettings, kind: str
    ) -> None:
        flavor = FLAVORS[kind]
        self.name = name
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
        self.base_url = base_url
        # Credentials in base_url take the Authorization header a key would go in.
        required = flavor.key_required and not carries_credentials(base_url)
        key = resolve_key(name, config, flavor.key_env, required=required)
        self.headers = {"accept": "application/json"}
        if key:
            self.headers["authorization"] = f"Bearer {key}"

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        body = request_body(request, model, stream=stream, max_tokens_field=self.max_tokens_field)
        return HttpCall(PATH, body)

    def translator(self, request: Request, model: str) -> OpenAITranslator:
        return OpenAITranslator(self.name, model, self.unknown_stop, request.stop_sequences)


class OpenAITranslator(Translator):
    """One chat-completions reply, streamed or whole."""

    __slots__ = (
        "current",
        "finish",
        "native",
        "refused",
        "stop_sequences",
        "text_block",
        "tools",
    )

    def __init__(
        self,
        provider: str,
        model: str,
        unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP,
        stop_sequences: list[str] | tuple[str, ...] = (),
    ) -> None:
        super().__init__(provider, model, unknown_stop)
        self.stop_sequences = stop_sequences
        self.current: Block | None = None
        """The open text or thinking block."""
        self.text_block: Block | None = None
        """The open block when it is text: the hot path appends to it."""
        self.tools: dict[int, Block] = {}
        self.finish: str | None = None
        self.native: Any = None
        self.refused = False

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        loads = fast_loads
        for _, data, _ in events:
            if data == "[DONE]":
                # The server's own end: a reply with no finish_reason (a lax compatible
                # server) is whole all the same; one with nothing in it is no reply.
                self.done = True
                self.finished = self.finished or self.blocks.next_index > 0
                return
            try:
                obj = loads(data)
            except ValueError:
                raise self.not_json(data) from None
            if obj.get("error"):
                raise self._mid_stream(obj["error"])
            choices = obj.get("choices")
            if choices:
                choice = choices[0]
                delta = choice.get("delta")
                if delta:
                    text = delta.get("content")
                    block = self.text_block
                    if text and block is not None and len(delta) == 1:
                        # The usual chunk: one more piece of the open text block.
                        block.parts.append(text)
                        out.append(Token(text, "text", block.index, True))
                    else:
                        self._delta(delta, out)
                reason = choice.get("finish_reason")
                if reason:
                    self._finish(choice, reason)
            elif obj.get("object") == "error":  # vLLM's error shape, mid-stream
                raise self._mid_stream(obj)
            if self.served is None:
                self.served = obj.get("model")
            if obj.get("usage"):
                _usage(obj["usage"], self.usage)
                out.append(UsageUpdate(replace(self.usage)))

    def _mid_stream(self, error: Any, status: int | None = None) -> InferenceError:
        return error_from_payload(
            error, provider=self.provider, model=self.model, prefix=MID_STREAM, status=status
        )

    def _finish(
        self, choice: dict[str, Any], reason: str | None, status: int | None = None
    ) -> None:
        """The choice's finish reason; ``error`` fails the call (status: a whole call's 200)."""
        self.finish = reason
        self.native = choice.get("stop_reason", choice.get("native_finish_reason"))
        # The finish reason came: only the usage chunk or [DONE] may be lost now.
        self.finished = True
        if reason == "error":
            error = choice.get("error")
            if error:
                raise self._mid_stream(error, status)
            raise InferenceError("server", FINISH_ERROR, provider=self.provider, model=self.model)

    def _switch(self, type: BlockType, out: list[StreamEvent]) -> Block:
        current = self.current
        if current is not None and current.type == type:
            return current
        self.blocks.stop(out, current)
        block = self.current = self.blocks.start(out, self.blocks.next_index, type)
        self.text_block = block if type == "text" else None
        return block

    def _delta(self, delta: dict[str, Any], out: list[StreamEvent]) -> None:
        """A delta off the hot path: reasoning, a new block, refusal, tool calls."""
        reasoning = delta.get("reasoning")
        if reasoning is None:
            reasoning = delta.get("reasoning_content")
        if reasoning and isinstance(reasoning, str):
            self.blocks.add(out, self._switch("thinking", out), reasoning)
        text = delta.get("content")
        if not text:
            text = delta.get("refusal")
            if text:
                self.refused = True
        if text and isinstance(text, str):
            self.blocks.add(out, self._switch("text", out), text)
        calls = delta.get("tool_calls")
        if calls:
            self.blocks.stop(out, self.current)
            self.current = self.text_block = None
            _tool_deltas(calls, self.tools, self.blocks, out)

    def stop(self) -> StopInfo:
        """The stop for a finish_reason, sharpened by what else the provider said.

        ``stop`` covers both a natural end and a stop sequence; vLLM names the
        sequence in ``stop_reason`` and OpenRouter says ``native_finish_reason:
        "stop_sequence"``, so either makes it ``stop_sequence``. A refusal delta
        with a plain ``stop`` is a refusal.
        """
        finish, native = self.finish, self.native
        if not finish:
            return self.unnamed_stop(called_tool=bool(self.tools))
        if finish == "stop":
            if isinstance(native, str) and native in self.stop_sequences:
                return StopInfo("stop_sequence", finish, native)
            if native == "stop_sequence":
                return StopInfo("stop_sequence", finish)
            if self.refused:
                return StopInfo("refusal", finish)
        return self.normalized_stop(finish, STOP_REASONS)

    def whole(self, data: Any) -> Response:
        if not isinstance(data, dict) or data.get("error"):
            # OpenRouter answers 200 with only an error object when the model failed.
            error = data.get("error") if isinstance(data, dict) else data
            raise error_from_payload(error, provider=self.provider, model=self.model, status=200)
        choices = data.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        self._finish(choice, choice.get("finish_reason"), status=200)
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
                    else json_object(arguments if isinstance(arguments, str) else ""),
                )
            )
        self.refused = bool(refusal)
        self.served = data.get("model")
        _usage(data.get("usage"), self.usage)
        if not self.finish:
            if not content:
                raise self.no_terminal()
            called_tool = any(isinstance(block, ToolUseBlock) for block in content)
            return self.response(content, self.unnamed_stop(called_tool))
        return self.response(content, self.stop())

    def unnamed_stop(self, called_tool: bool) -> StopInfo:
        """A reply that ended with no finish_reason: ``tool_use`` when it called a tool,
        else ``end_turn`` (`normalize_stop`'s rule for a missing token)."""
        if called_tool:
            return StopInfo("tool_use")
        return self.normalized_stop(None, STOP_REASONS)


def _tool_deltas(
    calls: list[Any], tools: dict[int, Block], blocks: Blocks, out: list[StreamEvent]
) -> None:
    """Accumulate tool-call fragments by their ``index``; a new ``id`` at a known index
    (some servers number every call 0) starts a new call."""
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        index = call.get("index", position)
        function = call.get("function") or {}
        call_id = call.get("id")
        block = tools.get(index)
        if block is None or (call_id and block.id and call_id != block.id):
            name = function.get("name") or ""
            block = blocks.start(out, blocks.next_index, "tool_use", call_id or "", name)
            tools[index] = block
        else:
            if call_id and not block.id:
                block.id = call_id
            if function.get("name") and not block.name:
                block.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        if arguments:
            blocks.add(out, block, arguments)


class OpenAIProvider(HTTPProvider):
    """One ``[providers.NAME]`` of kind ``openai``, ``openrouter`` or ``openai-compatible``."""

    def __init__(
        self, name: str, config: ProviderSettings, inference: InferenceSettings, kind: str
    ) -> None:
        super().__init__(name, config, OpenAIWire(name, config, inference, kind))
        self.kind = kind
