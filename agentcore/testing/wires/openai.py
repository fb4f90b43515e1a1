"""Scenarios on the OpenAI chat completions wire (``POST /v1/chat/completions``), as
OpenAI, OpenRouter and the OpenAI-compatible servers (vLLM, DeepSeek) speak it."""

from __future__ import annotations

from typing import Any, ClassVar

from agentcore.testing.scenarios import (
    ErrorBody,
    Frame,
    HttpError,
    Reply,
    Scenario,
    Streamed,
    StreamError,
    ToolUse,
    Usage,
    Wire,
)
from agentcore.testing.wires.base import Renderer, last_chat_text, unplayable_stop

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    529: "server_error",
}
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
CREATED = 1700000000


class OpenAIRenderer(Renderer):
    wire: ClassVar[Wire] = "openai"
    keepalive: ClassVar[Frame | None] = b": OPENROUTER PROCESSING\n\n"

    def __init__(self, model: str, usage: Usage, scenario: Scenario) -> None:
        super().__init__(model, usage, scenario)
        self.reasoning_field = scenario.reasoning_field if isinstance(scenario, Streamed) else ""

    def _usage(self) -> dict[str, Any]:
        prompt, completion = self.usage.input_tokens, self.usage.output_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": self.usage.cache_read_tokens},
        }

    def _finish_reason(self, reply: Reply) -> str | None:
        if reply.raw_stop is not None:
            return reply.raw_stop or None  # "": none at all, as a lax compatible server
        if isinstance(reply, ToolUse) and reply.cut_tool:
            return "length"
        if reply.stop not in _FINISH:
            raise unplayable_stop("openai", reply.stop, "finish_reason")
        return _FINISH[reply.stop]

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> Frame:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        return (None, {**self._envelope("chat.completion.chunk"), "choices": [choice]})

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {"id": "chatcmpl-loopback", "object": kind, "created": CREATED, "model": self.model}

    def _error_object(self, error: StreamError) -> dict[str, Any]:
        code = error.code if error.code is not None else (error.error_type or "server_error")
        return {"code": code, "message": error.message}

    # -- the stream ------------------------------------------------------------------------

    def open(self) -> list[Frame]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def thinking(self, piece: str) -> list[Frame]:
        return [self._chunk({self.reasoning_field: piece})]

    def text(self, piece: str) -> list[Frame]:
        return [self._chunk({"content": piece})]

    def tool_call(self, call: ToolUse) -> list[Frame]:
        function = {"name": call.tool_name, "arguments": ""}
        start = {"index": 0, "id": call.tool_id, "type": "function", "function": function}
        frames = [self._chunk({"tool_calls": [start]})]
        for piece in call.input_pieces():
            frames.append(
                self._chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            )
        return frames

    def finish(self, reply: Reply) -> list[Frame]:
        sequence = reply.sequence if reply.stop == "stop_sequence" else None
        extra = {"stop_reason": sequence} if sequence else {}
        usage_chunk = {**self._envelope("chat.completion.chunk"), "choices": []}
        return [
            self._chunk({}, self._finish_reason(reply), **extra),
            (None, {**usage_chunk, "usage": self._usage()}),
            b"data: [DONE]\n\n",
        ]

    def stream_error(self, error: StreamError) -> list[Frame]:
        if error.bare:
            return [self._chunk({}, "error"), b"data: [DONE]\n\n"]
        frame = self._chunk({"content": ""}, "error")
        assert not isinstance(frame, bytes)
        return [(None, {**frame[1], "error": self._error_object(error)})]

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": reply.reply or None}
        if reply.thought:
            message[reply.reasoning_field] = reply.thought
        if isinstance(reply, ToolUse):
            # Cut off at max_tokens, the arguments string is cut off too.
            function = {"name": reply.tool_name, "arguments": reply.input_json()}
            message["tool_calls"] = [
                {"id": reply.tool_id, "type": "function", "function": function}
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": self._finish_reason(reply),
        }
        if reply.stop == "stop_sequence" and reply.sequence:
            choice["stop_reason"] = reply.sequence
        return {**self._envelope("chat.completion"), "choices": [choice], "usage": self._usage()}

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        if error.bare:
            reply = Reply(reply=error.reply, thought=error.thought, raw_stop="error")
            return 200, self.whole(reply)
        return 200, {"error": self._error_object(error)}

    def http_error(self, error: HttpError) -> Any:
        return http_error_body(error)

    def error_body(self, error: ErrorBody) -> Any:
        return {"error": {"code": error.code, "message": error.message}}

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        if isinstance(frame, bytes):
            return False
        choices = frame[1].get("choices")
        return bool(choices and choices[0].get("delta", {}).get("content"))

    @staticmethod
    def last_user_text(request: Any) -> str:
        return last_chat_text(request.get("messages") if isinstance(request, dict) else None)

    @staticmethod
    def refusal(message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def http_error_body(error: HttpError) -> Any:
    """OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (and the Responses API's)."""
    code: str | int | None
    if error.cause == "quota":
        etype = code = "insufficient_quota"
    else:
        etype = error.error_type or _TYPES.get(
            error.status, "server_error" if error.status >= 500 else "invalid_request_error"
        )
        code = error.code
        if code is None and error.status == 429:
            code = "rate_limit_exceeded"
    fields = {"message": error.message, "type": etype, "param": None, "code": code}
    return {"error": {**fields, **error.extra}}
