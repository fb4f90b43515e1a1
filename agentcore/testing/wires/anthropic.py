"""Scenarios on the Anthropic Messages wire (``POST /v1/messages``)."""

from __future__ import annotations

from typing import Any, ClassVar

from agentcore.testing.scenarios import (
    ErrorBody,
    Frame,
    HttpError,
    Reply,
    Scenario,
    StreamError,
    ToolUse,
    Unplayable,
    Usage,
    Wire,
)
from agentcore.testing.wires.base import Renderer, last_chat_text

# error.type for an HTTP status, for scripted error bodies.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
# The HTTP status a whole call gets for an error the stream names.
_STATUS_FOR_TYPE = {
    "overloaded_error": 529,
    "api_error": 500,
    "rate_limit_error": 429,
    "authentication_error": 401,
    "permission_error": 403,
    "invalid_request_error": 400,
    "not_found_error": 404,
    "billing_error": 429,
}
SIGNATURE = "sig-loopback"


class AnthropicRenderer(Renderer):
    wire: ClassVar[Wire] = "anthropic"
    keepalive: ClassVar[Frame | None] = ("ping", {"type": "ping"})

    def __init__(self, model: str, usage: Usage, scenario: Scenario) -> None:
        super().__init__(model, usage, scenario)
        self.index = -1
        self.block: str | None = None
        """The kind of the content block open now."""

    def _usage(self, output: int) -> dict[str, int]:
        """Anthropic's ``input_tokens`` leaves out what the cache read or wrote."""
        return {
            "input_tokens": self.usage.uncached_input_tokens,
            "output_tokens": output,
            "cache_read_input_tokens": self.usage.cache_read_tokens,
            "cache_creation_input_tokens": self.usage.cache_write_tokens,
        }

    def _message(self) -> dict[str, Any]:
        return {
            "id": "msg_loopback",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(1),
        }

    # -- the stream ------------------------------------------------------------------------

    def open(self) -> list[Frame]:
        return [("message_start", {"type": "message_start", "message": self._message()})]

    def _start(self, block: dict[str, Any]) -> list[Frame]:
        frames = self._close()
        self.index += 1
        self.block = block["type"]
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*frames, ("content_block_start", start)]

    def _close(self) -> list[Frame]:
        if self.block is None:
            return []
        frames: list[Frame] = []
        if self.block == "thinking":
            frames.append(self._delta({"type": "signature_delta", "signature": SIGNATURE}))
        frames.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        self.block = None
        return frames

    def _delta(self, delta: dict[str, Any]) -> Frame:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": delta},
        )

    def thinking(self, piece: str) -> list[Frame]:
        frames = (
            [] if self.block == "thinking" else self._start({"type": "thinking", "thinking": ""})
        )
        return [*frames, self._delta({"type": "thinking_delta", "thinking": piece})]

    def redacted_thinking(self, data: str) -> list[Frame]:
        return self._start({"type": "redacted_thinking", "data": data})  # whole: no deltas

    def text(self, piece: str) -> list[Frame]:
        frames = [] if self.block == "text" else self._start({"type": "text", "text": ""})
        return [*frames, self._delta({"type": "text_delta", "text": piece})]

    def tool_call(self, call: ToolUse) -> list[Frame]:
        frames = self._start(
            {"type": "tool_use", "id": call.tool_id, "name": call.tool_name, "input": {}}
        )
        for piece in call.input_pieces():
            frames.append(self._delta({"type": "input_json_delta", "partial_json": piece}))
        if call.cut_tool:
            self.block = None  # cut off at max_tokens: the block is never closed
        return frames

    def finish(self, reply: Reply) -> list[Frame]:
        delta = {"stop_reason": reply.raw_stop or reply.stop, "stop_sequence": reply.sequence}
        return [
            *self._close(),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": self._usage(self.usage.output_tokens),
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]

    def stream_error(self, error: StreamError) -> list[Frame]:
        if error.bare:
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        body = {"type": error.error_type or "api_error", "message": error.message}
        return [("error", {"type": "error", "error": body})]

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        content: list[dict[str, Any]] = []
        if reply.redacted_thinking:
            content.append({"type": "redacted_thinking", "data": reply.redacted_thinking})
        if reply.thought:
            content.append({"type": "thinking", "thinking": reply.thought, "signature": SIGNATURE})
        if reply.reply:
            content.append({"type": "text", "text": reply.reply})
        if isinstance(reply, ToolUse):
            # Cut off at max_tokens, a whole reply carries the call with what input parsed: none.
            call = {"type": "tool_use", "id": reply.tool_id, "name": reply.tool_name}
            content.append({**call, "input": {} if reply.cut_tool else dict(reply.tool_input)})
        return {
            **self._message(),
            "content": content,
            "stop_reason": reply.raw_stop or reply.stop,
            "stop_sequence": reply.sequence,
            "usage": self._usage(self.usage.output_tokens),
        }

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        self.stream_error(error)  # the same refusal for a bare finish error
        etype = error.error_type or "api_error"
        body = {"type": "error", "error": {"type": etype, "message": error.message}}
        return _STATUS_FOR_TYPE.get(etype, 500), body

    def http_error(self, error: HttpError) -> Any:
        if error.cause == "quota":
            etype = "billing_error"
        else:
            etype = error.error_type or _TYPES.get(
                error.status, "api_error" if error.status >= 500 else "invalid_request_error"
            )
        return {"type": "error", "error": {"type": etype, "message": error.message, **error.extra}}

    def error_body(self, error: ErrorBody) -> Any:
        return {"type": "error", "error": {"type": "api_error", "message": error.message}}

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        if isinstance(frame, bytes):
            return False
        payload = frame[1]
        return payload.get("type") == "content_block_delta" and bool(
            payload.get("delta", {}).get("type") == "text_delta"
        )

    @staticmethod
    def check(request: Any) -> str | None:
        """What the Messages API would refuse: in the request's ``cache_control`` marks,
        more than 4, one on an empty text or a thinking block, an unknown TTL, or a longer
        TTL after a shorter one (prompt order: tools, system, messages); with thinking on,
        a tool loop whose last assistant message lost the thinking it began with."""
        if not isinstance(request, dict):
            return None
        return cache_control_problem(request) or thinking_problem(request)

    @staticmethod
    def last_user_text(request: Any) -> str:
        return last_chat_text(request.get("messages") if isinstance(request, dict) else None)

    @staticmethod
    def refusal(message: str) -> Any:
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _blocks(request: dict[str, Any]) -> list[Any]:
    """Every block that may carry ``cache_control``, in prompt order."""
    blocks: list[Any] = list(request.get("tools") or [])
    system = request.get("system")
    if isinstance(system, list):
        blocks += system
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            blocks += content
    return [b for b in blocks if isinstance(b, dict)]


def thinking_problem(request: dict[str, Any]) -> str | None:
    """With thinking on, the last assistant message of a tool loop (the one with its
    ``tool_use``) must start with its thinking block, signed or redacted, as it came."""
    thinking = request.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") in (None, "disabled"):
        return None
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    for index in range(len(messages) - 1, -1, -1):
        content = messages[index].get("content")
        if messages[index].get("role") != "assistant" or not isinstance(content, list):
            continue
        blocks = [b for b in content if isinstance(b, dict)]
        first = blocks[0].get("type") if blocks else None
        if any(b.get("type") == "tool_use" for b in blocks) and first not in (
            "thinking",
            "redacted_thinking",
        ):
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{first}`. When `thinking` is enabled, a final `assistant` message "
                "must start with a thinking block (preceeding the lastmost set of `tool_use` "
                "and `tool_result` blocks)."
            )
        return None
    return None


def cache_control_problem(request: dict[str, Any]) -> str | None:
    marked = [b for b in _blocks(request) if "cache_control" in b]
    if len(marked) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}."
    shortest = "1h"
    for block in marked:
        if block.get("type") in ("thinking", "redacted_thinking"):
            return "Thinking blocks cannot be cached directly (cache_control on a thinking block)"
        if block.get("type") == "text" and not block.get("text"):
            return "cache_control cannot be set for empty text blocks"
        ttl = (block["cache_control"] or {}).get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            return f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})"
        if ttl == "1h" and shortest == "5m":
            return "a ttl='1h' cache_control block must not come after a ttl='5m' one"
        shortest = ttl
    return None
