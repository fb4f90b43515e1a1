"""Scenarios on the OpenAI Responses wire (``POST /v1/responses``): typed SSE events
(``response.created`` ... ``response.completed`` / ``response.incomplete`` /
``response.failed``, ``error``), every event numbered by ``sequence_number``."""

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
from agentcore.testing.wires.base import Renderer, last_chat_text, unplayable_stop
from agentcore.testing.wires.openai import CREATED, http_error_body

# A normalized stop as the Responses API says it: (status, incomplete_details.reason).
_ENDINGS: dict[str, tuple[str, str | None]] = {
    "end_turn": ("completed", None),
    "tool_use": ("completed", None),
    "max_tokens": ("incomplete", "max_output_tokens"),
    "refusal": ("incomplete", "content_filter"),
}
RESPONSE_ID = "resp_loopback"


class ResponsesRenderer(Renderer):
    wire: ClassVar[Wire] = "openai-responses"
    keepalive: ClassVar[Frame | None] = b": keep-alive\n\n"

    def __init__(self, model: str, usage: Usage, scenario: Scenario) -> None:
        super().__init__(model, usage, scenario)
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        """Every output item so far, as it stands (the open one last)."""
        self.open_kind: str | None = None
        self.open_text = ""

    def _event(self, kind: str, **fields: Any) -> Frame:
        frame = (kind, {"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return frame

    def _usage(self) -> dict[str, Any]:
        used = self.usage
        return {
            "input_tokens": used.input_tokens,
            "input_tokens_details": {"cached_tokens": used.cache_read_tokens},
            "output_tokens": used.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used.input_tokens + used.output_tokens,
        }

    def _response(self, status: str, output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return {
            "id": RESPONSE_ID,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": None,
            **fields,
        }

    def _ending(self, reply: Reply) -> tuple[str, dict[str, Any]]:
        """The terminal status and the fields it sets, for `reply`'s stop."""
        reason: str | None
        if reply.raw_stop:
            status, reason = "incomplete", reply.raw_stop
        elif reply.stop in _ENDINGS:
            status, reason = _ENDINGS[reply.stop]
        elif reply.stop == "stop_sequence":
            raise Unplayable("the Responses API has no stop sequences")
        else:
            raise unplayable_stop("openai-responses", reply.stop, "terminal status")
        incomplete = {"reason": reason} if reason else None
        return status, {"incomplete_details": incomplete, "usage": self._usage()}

    # -- output items ----------------------------------------------------------------------

    def _add(self, item: dict[str, Any]) -> list[Frame]:
        frames = self._close()
        self.output.append(item)
        self.open_kind, self.open_text = item["type"], ""
        added = self._event("response.output_item.added", output_index=self._at, item=dict(item))
        return [*frames, added]

    def _snapshot(self) -> list[dict[str, Any]]:
        """The output items as they stand now (frames are encoded later: never share one)."""
        return [dict(item) for item in self.output]

    @property
    def _at(self) -> int:
        return len(self.output) - 1

    def _close(self) -> list[Frame]:
        kind, text = self.open_kind, self.open_text
        if kind is None:
            return []
        self.open_kind = None
        item = self.output[-1]
        where = {"item_id": item["id"], "output_index": self._at}
        frames: list[Frame] = []
        if kind == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            frames += [
                self._event("response.output_text.done", **where, content_index=0, text=text),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
            item.update(content=[part], status="completed")
        elif kind == "reasoning":
            part = {"type": "summary_text", "text": text}
            frames += [
                self._event(
                    "response.reasoning_summary_text.done", **where, summary_index=0, text=text
                ),
                self._event(
                    "response.reasoning_summary_part.done", **where, summary_index=0, part=part
                ),
            ]
            item.update(summary=[part])
        else:
            frames.append(
                self._event("response.function_call_arguments.done", **where, arguments=text)
            )
            item.update(arguments=text, status="completed")
        done = self._event("response.output_item.done", output_index=self._at, item=dict(item))
        return [*frames, done]

    # -- the stream ------------------------------------------------------------------------

    def open(self) -> list[Frame]:
        created = self._response("in_progress", [])
        return [
            self._event("response.created", response=created),
            self._event("response.in_progress", response=created),
        ]

    def thinking(self, piece: str) -> list[Frame]:
        frames: list[Frame] = []
        if self.open_kind != "reasoning":
            frames = self._add(
                {"id": f"rs_loopback_{len(self.output)}", "type": "reasoning", "summary": []}
            )
            part = {"type": "summary_text", "text": ""}
            frames.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=self.output[-1]["id"],
                    output_index=self._at,
                    summary_index=0,
                    part=part,
                )
            )
        self.open_text += piece
        where = {"item_id": self.output[-1]["id"], "output_index": self._at}
        delta = self._event(
            "response.reasoning_summary_text.delta", **where, summary_index=0, delta=piece
        )
        return [*frames, delta]

    def text(self, piece: str) -> list[Frame]:
        frames: list[Frame] = []
        if self.open_kind != "message":
            item = {
                "id": f"msg_loopback_{len(self.output)}",
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            frames = self._add(item)
            part = {"type": "output_text", "text": "", "annotations": []}
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=self._at,
                    content_index=0,
                    part=part,
                )
            )
        self.open_text += piece
        where = {"item_id": self.output[-1]["id"], "output_index": self._at}
        delta = self._event(
            "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
        )
        return [*frames, delta]

    def tool_call(self, call: ToolUse) -> list[Frame]:
        item = {
            "id": f"fc_loopback_{len(self.output)}",
            "type": "function_call",
            "status": "in_progress",
            "call_id": call.tool_id,
            "name": call.tool_name,
            "arguments": "",
        }
        frames = self._add(item)
        for piece in call.input_pieces():
            self.open_text += piece
            frames.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=self._at,
                    delta=piece,
                )
            )
        if call.cut_tool:  # cut off at max_output_tokens: the item never completes
            item.update(arguments=self.open_text, status="incomplete")
            self.open_kind = None
        return frames

    def finish(self, reply: Reply) -> list[Frame]:
        status, fields = self._ending(reply)
        frames = self._close()
        response = self._response(status, self._snapshot(), **fields)
        return [*frames, self._event(f"response.{status}", response=response)]

    def stream_error(self, error: StreamError) -> list[Frame]:
        code, message = self._error(error)
        # Documented flat; the live API nests the same fields under "error": send both.
        nested = {"type": error.error_type, "code": code, "message": message, "param": None}
        failed = self._response(
            "failed", self._snapshot(), error={"code": code, "message": message}
        )
        return [
            self._event("error", code=code, message=message, param=None, error=nested),
            self._event("response.failed", response=failed),
        ]

    def _error(self, error: StreamError) -> tuple[str | int, str]:
        if error.bare:
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        code = error.code if error.code is not None else (error.error_type or "server_error")
        return code, error.message

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        status, fields = self._ending(reply)
        output: list[dict[str, Any]] = []
        if reply.thought:
            summary = [{"type": "summary_text", "text": reply.thought}]
            output.append({"id": "rs_loopback_0", "type": "reasoning", "summary": summary})
        if reply.reply:
            part = {"type": "output_text", "text": reply.reply, "annotations": []}
            output.append(
                {
                    "id": f"msg_loopback_{len(output)}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        if isinstance(reply, ToolUse):
            output.append(
                {
                    "id": f"fc_loopback_{len(output)}",
                    "type": "function_call",
                    "status": "incomplete" if reply.cut_tool else "completed",
                    "call_id": reply.tool_id,
                    "name": reply.tool_name,
                    "arguments": reply.input_json(),
                }
            )
        return self._response(status, output, **fields)

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        code, message = self._error(error)
        return 200, self._response("failed", [], error={"code": code, "message": message})

    def http_error(self, error: HttpError) -> Any:
        return http_error_body(error)

    def error_body(self, error: ErrorBody) -> Any:
        return {"error": {"code": error.code, "message": error.message}}

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        return not isinstance(frame, bytes) and frame[0] == "response.output_text.delta"

    @staticmethod
    def last_user_text(request: Any) -> str:
        items = request.get("input") if isinstance(request, dict) else None
        return items if isinstance(items, str) else last_chat_text(items)

    @staticmethod
    def refusal(message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "code": None}}
