"""The chat-completions request body (``openai``, ``openrouter``, ``openai-compatible``):
system, messages with tool calls and results, media parts, tools, and `request.extras`."""

from __future__ import annotations

import json
from typing import Any

from agentcore.inference import (
    MediaBlock,
    Message,
    Request,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.providers.wire import content_parts, not_carried

WIRE = "OpenAI chat completions"
AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3"}
MEDIA_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf", *AUDIO_FORMATS}
)
"""Images (``image_url``), wav and mp3 audio (``input_audio``), PDFs (``file``). Whether the
model takes them is the model's business: the wire carries them."""


def request_body(
    request: Request, model: str, *, stream: bool, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    """The chat-completions body. `request.extras` is merged last (``top_p``, ``reasoning``...)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_messages(message))
    body: dict[str, Any] = {"model": model, "messages": messages}
    body[max_tokens_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if request.tools:
        body["tools"] = tools = []
        for t in request.tools:
            function = {"name": t.name, "description": t.description, "parameters": t.input_schema}
            tools.append({"type": "function", "function": function})
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
    parts = content_parts(message, WIRE, _text_part, _media)  # None without media
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            function = {"name": block.name, "arguments": json.dumps(block.input)}
            calls.append({"id": block.id, "type": "function", "function": function})
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
    elif parts:
        out.append({"role": "user", "content": parts})
    elif texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _media(block: MediaBlock) -> dict[str, Any]:
    """An image as a data URL, audio as ``input_audio`` (wav, mp3), a PDF as a file part."""
    if block.mime_type not in MEDIA_TYPES:
        raise not_carried(WIRE, block)
    if block.kind == "image":
        return {"type": "image_url", "image_url": {"url": block.data_url}}
    if block.kind == "audio":
        audio = {"data": block.data, "format": AUDIO_FORMATS[block.mime_type]}
        return {"type": "input_audio", "input_audio": audio}
    file = {"filename": block.name or "context.pdf", "file_data": block.data_url}
    return {"type": "file", "file": file}
