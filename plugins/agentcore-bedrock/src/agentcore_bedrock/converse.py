"""The Converse API, for every Bedrock model that is not Anthropic's:
``POST /model/{modelId}/converse`` and ``/converse-stream``.

The stream's events are ``messageStart``, ``contentBlockStart`` (a tool call's id and
name; a text block starts with its first delta), ``contentBlockDelta`` (``text``,
``toolUse.input``, ``reasoningContent``), ``contentBlockStop``, ``messageStop`` (the stop
reason: the reply is whole) and ``metadata`` (usage), then the body ends.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentcore.api import (
    MID_STREAM,
    EventTuple,
    MediaBlock,
    Message,
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
    Translator,
    UsageUpdate,
    error_from_payload,
    fast_loads,
    not_carried,
    read_usage,
)
from agentcore_bedrock.eventstream import ERROR

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "refusal",
    "content_filtered": "refusal",
    "model_context_window_exceeded": "max_tokens",
}
USAGE_FIELDS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadInputTokens": "cache_read_tokens",
    "cacheWriteInputTokens": "cache_write_tokens",
}
_IMAGES = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
MEDIA_TYPES = frozenset({*_IMAGES, "application/pdf"})


def converse_body(request: Request) -> dict[str, Any]:
    """The Converse body (the model is in the path). `request.extras` is merged last
    (``additionalModelRequestFields``, ``guardrailConfig``, ...)."""
    body: dict[str, Any] = {"messages": [_message(m) for m in request.messages]}
    if request.system:
        body["system"] = [{"text": request.system}]
    config: dict[str, Any] = {"maxTokens": request.max_tokens}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.stop_sequences:
        config["stopSequences"] = list(request.stop_sequences)
    body["inferenceConfig"] = config
    if request.tools:
        tools = [
            {"toolSpec": {"name": t.name, "description": t.description or t.name,
                          "inputSchema": {"json": t.input_schema}}}
            for t in request.tools
        ]  # fmt: skip
        body["toolConfig"] = {"tools": tools}
    body.update(request.extras)
    return body


def _message(message: Message) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            if block.text:  # Converse refuses an empty text block
                content.append({"text": block.text})
        elif isinstance(block, ThinkingBlock):  # back as it came: redacted, or signed
            if block.redacted:
                content.append({"reasoningContent": {"redactedContent": block.redacted}})
            elif block.signature:
                text = {"text": block.thinking, "signature": block.signature}
                content.append({"reasoningContent": {"reasoningText": text}})
        elif isinstance(block, ToolUseBlock):
            use = {"toolUseId": block.id, "name": block.name, "input": block.input}
            content.append({"toolUse": use})
        elif isinstance(block, ToolResultBlock):
            result: dict[str, Any] = {
                "toolUseId": block.tool_use_id,
                "content": [{"text": block.content}],
            }
            if block.is_error:
                result["status"] = "error"
            content.append({"toolResult": result})
        elif isinstance(block, MediaBlock):
            content.append(_media(block))
    return {"role": message.role, "content": content}


def _media(block: MediaBlock) -> dict[str, Any]:
    """An image or a PDF document, its bytes base64 in the JSON body."""
    if block.mime_type in _IMAGES:
        return {"image": {"format": _IMAGES[block.mime_type], "source": {"bytes": block.data}}}
    if block.mime_type == "application/pdf":
        return {"document": {"format": "pdf", "name": "document", "source": {"bytes": block.data}}}
    raise not_carried("Bedrock Converse", block)


def total_input(usage: Any) -> None:
    """Input tokens as the total the model read, cached ones included (the definition
    every wire's usage follows): Bedrock counts cache reads and writes apart."""
    usage.input_tokens += (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)


class ConverseTranslator(Translator):
    """One Converse reply, streamed or whole."""

    __slots__ = ("stop_reason",)

    def __init__(self, provider: str, model: str, unknown_stop: Any) -> None:
        super().__init__(provider, model, unknown_stop)
        self.stop_reason: str | None = None

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        blocks = self.blocks
        for name, data, _ in events:
            obj = fast_loads(data)
            if name == "contentBlockDelta":
                index = obj.get("contentBlockIndex", 0)
                delta = obj["delta"]
                block = blocks.by_index.get(index)
                if "text" in delta:
                    text = delta["text"]
                    if block is None:
                        block = blocks.start(out, index, "text")
                    block.parts.append(text)
                    out.append(Token(text, "text", index, True))
                elif "toolUse" in delta and block is not None:
                    blocks.add(out, block, delta["toolUse"].get("input", ""))
                elif "reasoningContent" in delta:
                    reasoning = delta["reasoningContent"]
                    if block is None:
                        block = blocks.start(out, index, "thinking")
                    if reasoning.get("text"):
                        blocks.add(out, block, reasoning["text"])
                    if reasoning.get("signature"):
                        block.signature = reasoning["signature"]
                    if reasoning.get("redactedContent"):
                        block.redacted = reasoning["redactedContent"]
            elif name == "contentBlockStart":
                use = (obj.get("start") or {}).get("toolUse") or {}
                index = obj.get("contentBlockIndex", 0)
                blocks.start(out, index, "tool_use", use.get("toolUseId", ""), use.get("name", ""))
            elif name == "contentBlockStop":
                blocks.stop(out, blocks.by_index.get(obj.get("contentBlockIndex", 0)))
            elif name == "messageStop":
                self.stop_reason = obj.get("stopReason")
                self.finished = True
            elif name == "metadata":
                read_usage(obj.get("usage"), self.usage, USAGE_FIELDS)
                total_input(self.usage)
                out.append(UsageUpdate(replace(self.usage)))
                self.done = self.finished
            elif name == ERROR:
                raise error_from_payload(
                    obj, provider=self.provider, model=self.model, prefix=MID_STREAM
                )

    def stop(self) -> StopInfo:
        return self.normalized_stop(self.stop_reason, STOP_REASONS)

    def whole(self, data: Any) -> Response:
        message = data["output"]["message"]
        out: list[StreamEvent] = []
        for index, item in enumerate(message.get("content") or ()):
            if "text" in item:
                self.blocks.add(out, self.blocks.start(out, index, "text"), item["text"])
            elif "toolUse" in item:
                use = item["toolUse"]
                block = self.blocks.start(out, index, "tool_use", use["toolUseId"], use["name"])
                self.blocks.add(out, block, _json_text(use.get("input")))
            elif "reasoningContent" in item:
                text = item["reasoningContent"].get("reasoningText") or {}
                block = self.blocks.start(out, index, "thinking")
                self.blocks.add(out, block, text.get("text", ""))
                block.signature = text.get("signature")
                block.redacted = item["reasoningContent"].get("redactedContent")
        self.stop_reason = data.get("stopReason")
        read_usage(data.get("usage"), self.usage, USAGE_FIELDS)
        total_input(self.usage)
        return self.response(self.blocks.content(), self.stop())


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value if isinstance(value, dict) else {})
