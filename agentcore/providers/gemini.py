"""Google's Gemini wire, ``kind = "gemini"``: POST
``{base_url}/v1beta/models/MODEL:streamGenerateContent?alt=sse`` (streamed) or
``:generateContent`` (whole), the key in the ``x-goog-api-key`` header.

The request: ``contents`` with roles ``user`` and ``model`` (a tool call is a
``functionCall`` part, its result a ``functionResponse`` part), the system prompt as
``systemInstruction``, and ``generationConfig`` with ``maxOutputTokens``,
``stopSequences`` and ``temperature``; tools as ``functionDeclarations`` with their
JSON schema (``parametersJsonSchema``).

Thought signatures: a call's ``functionCall`` part may carry a ``thoughtSignature``
(Gemini 3 signs the first call of each step), kept on its `ToolUseBlock` and sent back
with the call. Gemini 3 refuses a request whose current turn has a step whose first call
has none (400, "missing a thought_signature"), so a call with no signature of its own
(made by another provider, or by the host) goes first in its step with Google's
documented ``skip_thought_signature_validator``.

Every streamed event is a whole ``GenerateContentResponse``: the first candidate's
``content.parts`` (``text``; ``thought: true`` marks thinking, never visible;
``functionCall``, sent whole), its ``finishReason`` on the last, ``usageMetadata``
(the last one counts), ``modelVersion`` (the served model). ``finishReason``: STOP
is ``end_turn`` (``tool_use`` when the reply calls a tool; Gemini says STOP for a
stop sequence too, so that one cannot be told apart), MAX_TOKENS ``max_tokens``,
SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT and SPII ``refusal``; OTHER and
anything else is kept raw for the unknown-stop rule. A prompt blocked before any
candidate (``promptFeedback.blockReason``) is read the same way. Errors are
``{"error": {"code", "message", "status", "details"}}``, also as a stream event;
a 429's wait is its ``RetryInfo.retryDelay``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agentcore.inference import (
    BlockType,
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

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
API_VERSION = "v1beta"

MEDIA_TYPES = frozenset(
    {
        *("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"),
        *("audio/wav", "audio/mpeg", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac"),
        "application/pdf",
    }
)
"""The image, audio and document types Gemini's docs list for inline data."""
GEMINI_MIME = {"audio/mpeg": "audio/mp3"}
"""Where Gemini's docs name a type by another name than `canonical_mime` does."""

FINISH_REASONS: dict[str, StopReason] = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "refusal",
    "RECITATION": "refusal",
    "BLOCKLIST": "refusal",
    "PROHIBITED_CONTENT": "refusal",
    "SPII": "refusal",
}


def request_body(request: Request) -> dict[str, Any]:
    """The generateContent body. `request.extras` is merged last (``safetySettings``...)."""
    names: dict[str, str] = {}  # tool call id -> tool name, for the results' functionResponse
    contents = [_content(message, names) for message in request.messages]
    body: dict[str, Any] = {"contents": contents}
    if request.system:
        body["systemInstruction"] = {"parts": [{"text": request.system}]}
    config: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
    if request.stop_sequences:
        config["stopSequences"] = list(request.stop_sequences)
    if request.temperature is not None:
        config["temperature"] = request.temperature
    body["generationConfig"] = config
    if request.tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.input_schema}
            for t in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    body.update(request.extras)
    return body


SKIP_SIGNATURE_CHECK = "skip_thought_signature_validator"
"""The ``thoughtSignature`` Google documents for a call Gemini did not sign."""


def _content(message: Message, names: dict[str, str]) -> dict[str, Any]:
    """One message as a ``Content``. Earlier thinking is not sent back; the calls' thought
    signatures are (the module's docstring says why)."""
    parts: list[dict[str, Any]] = []
    signed = False  # the message's first call went with a signature
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append({"text": block.text})
        elif isinstance(block, ToolUseBlock):
            names[block.id] = block.name
            part: dict[str, Any] = {
                "functionCall": {"id": block.id, "name": block.name, "args": block.input}
            }
            signature = block.signature or (None if signed else SKIP_SIGNATURE_CHECK)
            if signature is not None:
                part["thoughtSignature"] = signature
            signed = True
            parts.append(part)
        elif isinstance(block, ToolResultBlock):
            name = names.get(block.tool_use_id, "")
            result = {"id": block.tool_use_id, "name": name, "response": {"content": block.content}}
            parts.append({"functionResponse": result})
        elif isinstance(block, MediaBlock):
            parts.append(_media(block))
    return {"role": "model" if message.role == "assistant" else "user", "parts": parts}


def _media(block: MediaBlock) -> dict[str, Any]:
    """Images, audio and PDFs alike, as ``inlineData``."""
    if block.mime_type not in MEDIA_TYPES:
        raise not_carried("Gemini", block)
    mime_type = GEMINI_MIME.get(block.mime_type, block.mime_type)
    return {"inlineData": {"mimeType": mime_type, "data": block.data}}


USAGE_FIELDS = {
    "promptTokenCount": "input_tokens",
    "candidatesTokenCount": "output_tokens",
    "cachedContentTokenCount": "cache_read_tokens",
}


def _usage(data: Any, into: Usage) -> Usage:
    """Prompt and output tokens; thinking tokens count as output, as they are billed."""
    if isinstance(data, dict):
        read_usage(data, into, USAGE_FIELDS)
        thoughts = data.get("thoughtsTokenCount")
        if isinstance(thoughts, int):
            into.output_tokens += thoughts
    return into


class GeminiWire(Wire):
    """The Gemini API for one provider: its key in ``x-goog-api-key``."""

    media_types = MEDIA_TYPES

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        self.name = name
        self.unknown_stop = inference.unknown_stop
        self.base_url = config.base_url or DEFAULT_BASE_URL
        key = resolve_key(name, config, "GEMINI_API_KEY", required=True)
        self.headers = {"accept": "application/json", "x-goog-api-key": str(key)}

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        model = model.removeprefix("models/")
        action = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return HttpCall(f"/{API_VERSION}/models/{model}:{action}", request_body(request))

    def translator(self, request: Request, model: str) -> GeminiTranslator:
        return GeminiTranslator(self.name, model, self.unknown_stop)


class GeminiTranslator(Translator):
    """One Gemini reply, streamed or whole."""

    __slots__ = ("calls", "current", "finish", "usage_seen")

    def __init__(
        self, provider: str, model: str, unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    ) -> None:
        super().__init__(provider, model, unknown_stop)
        self.current: Block | None = None
        """The open text or thinking block."""
        self.finish: str | None = None
        self.calls = 0
        self.usage_seen: Any = None
        """The last ``usageMetadata`` (every chunk has one): read once, when the reply ends."""

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        loads = fast_loads
        for _, data, _ in events:
            try:
                chunk = loads(data)
            except ValueError:
                raise self.not_json(data) from None
            candidates = chunk.get("candidates")
            if candidates:
                candidate = candidates[0]
                parts = (candidate.get("content") or {}).get("parts")
                if parts:
                    block = self.current
                    part = parts[0]
                    text = part.get("text") if len(parts) == 1 and len(part) == 1 else None
                    if text and block is not None and block.type == "text":
                        # The usual chunk: one more piece of the open text block.
                        block.parts.append(text)
                        out.append(Token(text, "text", block.index, True))
                    else:
                        self._parts(parts, out)
                if candidate.get("finishReason"):
                    self.finish = candidate["finishReason"]
                    self.finished = True
            else:
                self._no_candidate(chunk)
            served = chunk.get("modelVersion")
            if served:
                self.served = served
            usage = chunk.get("usageMetadata")
            if usage is not None:
                self.usage_seen = usage
                if self.finished:
                    out.append(UsageUpdate(replace(self._usage())))

    def _no_candidate(self, chunk: dict[str, Any], status: int | None = None) -> None:
        """A chunk with no candidate: an error, or a prompt blocked before any output."""
        if chunk.get("error"):
            prefix = "" if status is not None else MID_STREAM
            raise error_from_payload(
                chunk, provider=self.provider, model=self.model, prefix=prefix, status=status
            )
        blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            self.finish = blocked
            self.finished = True

    def _usage(self) -> Usage:
        self.usage = _usage(self.usage_seen, Usage())
        return self.usage

    def _parts(self, parts: list[dict[str, Any]], out: list[StreamEvent]) -> None:
        blocks = self.blocks
        for part in parts:
            call = part.get("functionCall")
            if call is not None:
                blocks.stop(out, self.current)
                self.current = None
                self.calls += 1
                call_id = call.get("id") or f"call_{self.calls}"
                block = blocks.start(
                    out, blocks.next_index, "tool_use", call_id, call.get("name") or ""
                )
                block.signature = part.get("thoughtSignature")
                blocks.add(out, block, json.dumps(call.get("args") or {}))
                blocks.stop(out, block)
                continue
            text = part.get("text")
            type: BlockType = "thinking" if part.get("thought") else "text"
            current = self.current
            signature = part.get("thoughtSignature") if type == "thinking" else None
            if signature and current is not None and current.type == "thinking":
                current.signature = signature  # it may come on a part of its own, empty
            if not isinstance(text, str) or not text:
                continue  # an empty part (the finishing chunk's) starts no block
            if current is None or current.type != type:
                blocks.stop(out, current)
                current = self.current = blocks.start(out, blocks.next_index, type)
                current.signature = signature
            blocks.add(out, current, text)

    def stop(self) -> StopInfo:
        self._usage()  # the last counts, whenever it came
        if self.finish == "STOP" and self.calls:
            return StopInfo("tool_use", "STOP")
        return self.normalized_stop(self.finish, FINISH_REASONS)

    def whole(self, data: Any) -> Response:
        if not isinstance(data, dict):
            raise error_from_payload(data, provider=self.provider, model=self.model, status=200)
        candidates = data.get("candidates")
        content: list[OutputBlock] = []
        if candidates:
            candidate = candidates[0]
            for part in (candidate.get("content") or {}).get("parts") or ():
                content.extend(self._whole_part(part))
            self.finish = candidate.get("finishReason")
        else:
            self._no_candidate(data, status=200)
        self.served = data.get("modelVersion") or self.served
        self.usage_seen = data.get("usageMetadata")
        return self.response(content, self.stop())

    def _whole_part(self, part: dict[str, Any]) -> list[OutputBlock]:
        call = part.get("functionCall")
        if call is not None:
            self.calls += 1
            call_id = call.get("id") or f"call_{self.calls}"
            name, args = call.get("name") or "", dict(call.get("args") or {})
            return [ToolUseBlock(call_id, name, args, signature=part.get("thoughtSignature"))]
        text = part.get("text")
        if not isinstance(text, str) or not text:
            return []
        if part.get("thought"):
            return [ThinkingBlock(text, part.get("thoughtSignature"))]
        return [TextBlock(text)]


class GeminiProvider(HTTPProvider):
    """One ``[providers.NAME]`` of kind ``gemini``."""

    kind = "gemini"

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        super().__init__(name, config, GeminiWire(name, config, inference))
