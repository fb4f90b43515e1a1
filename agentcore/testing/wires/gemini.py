"""Scenarios on Google's Gemini wire (``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse``
and ``:generateContent``): every streamed chunk is a whole ``GenerateContentResponse``;
errors are ``{"error": {"code", "message", "status", "details"}}``, mid-stream too."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from agentcore.testing.scenarios import (
    ErrorBody,
    Frame,
    HttpError,
    Reply,
    StreamError,
    ToolUse,
    Unplayable,
    Wire,
)
from agentcore.testing.wires.base import Renderer, unplayable_stop

_FINISH = {
    "end_turn": "STOP",
    "tool_use": "STOP",
    "stop_sequence": "STOP",  # Gemini says STOP for a stop sequence too
    "max_tokens": "MAX_TOKENS",
    "refusal": "SAFETY",
}
# google.rpc.Code names for HTTP statuses.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The HTTP status an error type (Anthropic's words, the scenarios' vocabulary) maps to.
_STATUS_FOR_TYPE = {
    "overloaded_error": 503,
    "api_error": 500,
    "rate_limit_error": 429,
    "authentication_error": 401,
    "permission_error": 403,
    "invalid_request_error": 400,
    "not_found_error": 404,
}
_QUOTA_FAILURE = {
    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
    "violations": [
        {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
        }
    ],
}
_BLOCKED = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]
RESPONSE_ID = "loopback-response"
SKIP_SIGNATURE = "skip_thought_signature_validator"


def thought_signature(call_id: object) -> str:
    """The ``thoughtSignature`` the loopback signs call `call_id` with (base64, as Google's)."""
    return base64.b64encode(f"loopback-signature:{call_id}".encode()).decode()


def error_object(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """Google's error envelope for an HTTP status."""
    fields = {"code": status, "message": message, "status": _STATUS_NAMES.get(status, "UNKNOWN")}
    return {"error": {**fields, **extra}}


class GeminiRenderer(Renderer):
    wire: ClassVar[Wire] = "gemini"

    def _chunk(self, candidate: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
        return {
            "candidates": [{**candidate, "index": 0}],
            "usageMetadata": usage,
            "modelVersion": self.model,
            "responseId": RESPONSE_ID,
        }

    def _parts(self, *parts: dict[str, Any]) -> dict[str, Any]:
        return {"content": {"parts": list(parts), "role": "model"}}

    def _usage(self, final: bool) -> dict[str, int]:
        """Every chunk counts the prompt (cached part included); the last one counts the
        candidates too."""
        prompt = self.usage.input_tokens
        cached = (
            {"cachedContentTokenCount": self.usage.cache_read_tokens}
            if self.usage.cache_read_tokens
            else {}
        )
        if not final:
            return {"promptTokenCount": prompt, **cached, "totalTokenCount": prompt}
        out = self.usage.output_tokens
        return {
            "promptTokenCount": prompt,
            **cached,
            "candidatesTokenCount": out,
            "totalTokenCount": prompt + out,
        }

    def _finish_reason(self, reply: Reply) -> str:
        if reply.raw_stop:
            return reply.raw_stop
        if reply.stop not in _FINISH:
            raise unplayable_stop("gemini", reply.stop, "finishReason")
        return _FINISH[reply.stop]

    def _ended(self, reply: Reply) -> dict[str, Any]:
        """The candidate fields a finished reply adds."""
        finish = self._finish_reason(reply)
        return {
            "finishReason": finish,
            **({"safetyRatings": _BLOCKED} if finish == "SAFETY" else {}),
        }

    @staticmethod
    def _call(call: ToolUse) -> dict[str, Any]:
        # Gemini sends a call whole; cut off at MAX_TOKENS it carries what parsed: nothing.
        # As Gemini 3, it signs the call (a reply here makes one call: its step's first).
        args = {} if call.cut_tool else dict(call.tool_input)
        return {
            "functionCall": {"id": call.tool_id, "name": call.tool_name, "args": args},
            "thoughtSignature": thought_signature(call.tool_id),
        }

    def _error(self, error: StreamError) -> dict[str, Any]:
        if error.bare:
            raise Unplayable("a bare finish_reason 'error' exists only on the openai wire")
        status = _STATUS_FOR_TYPE.get(error.error_type or "", 500)
        return error_object(status, error.message)

    # -- the stream ------------------------------------------------------------------------

    def thinking(self, piece: str) -> list[Frame]:
        return [
            (None, self._chunk(self._parts({"text": piece, "thought": True}), self._usage(False)))
        ]

    def text(self, piece: str) -> list[Frame]:
        return [(None, self._chunk(self._parts({"text": piece}), self._usage(False)))]

    def tool_call(self, call: ToolUse) -> list[Frame]:
        return [(None, self._chunk(self._parts(self._call(call)), self._usage(False)))]

    def finish(self, reply: Reply) -> list[Frame]:
        candidate = {**self._parts({"text": ""}), **self._ended(reply)}
        return [(None, self._chunk(candidate, self._usage(True)))]

    def stream_error(self, error: StreamError) -> list[Frame]:
        return [(None, self._error(error))]

    # -- whole bodies ------------------------------------------------------------------------

    def whole(self, reply: Reply) -> Any:
        parts: list[dict[str, Any]] = []
        if reply.thought:
            parts.append({"text": reply.thought, "thought": True})
        if reply.reply:
            parts.append({"text": reply.reply})
        if isinstance(reply, ToolUse):
            parts.append(self._call(reply))
        return self._chunk({**self._parts(*parts), **self._ended(reply)}, self._usage(True))

    def whole_error(self, error: StreamError) -> tuple[int, Any]:
        body = self._error(error)
        return body["error"]["code"], body

    def http_error(self, error: HttpError) -> Any:
        extra = dict(error.extra)
        if error.cause == "quota":
            extra["details"] = [*extra.get("details", []), _QUOTA_FAILURE]
        return error_object(error.status, error.message, **extra)

    def error_body(self, error: ErrorBody) -> Any:
        body = error_object(int(error.code) if str(error.code).isdigit() else 500, error.message)
        return body

    # -- the server's side ---------------------------------------------------------------------

    @staticmethod
    def check(request: Any) -> str | None:
        """What Gemini 3 refuses in the current turn (the steps since the last user text):
        a step whose first call has no ``thoughtSignature``, or a signature it did not make
        (Google's ``skip_thought_signature_validator`` passes)."""
        contents = request.get("contents") if isinstance(request, dict) else None
        if not isinstance(contents, list):
            return None
        steps = [
            (c.get("role", "user"), [p for p in c.get("parts") or () if isinstance(p, dict)])
            for c in contents
            if isinstance(c, dict)
        ]
        turn = 0
        for index, (role, parts) in enumerate(steps):
            if role == "user" and any("functionResponse" not in p for p in parts):
                turn = index + 1
        for index, (_, parts) in enumerate(steps[turn:], start=turn + 1):
            calls = [p for p in parts if isinstance(p.get("functionCall"), dict)]
            for place, part in enumerate(calls):
                name = part["functionCall"].get("name")
                signature = part.get("thoughtSignature")
                if signature is None and place == 0:
                    return (
                        "Function call is missing a thought_signature in functionCall parts. "
                        "This is required for tools to work correctly, and missing "
                        "thought_signature may lead to degraded model performance. Additional "
                        f"data, function call `default_api:{name}`, position {index}."
                    )
                valid = (SKIP_SIGNATURE, thought_signature(part["functionCall"].get("id")))
                if signature is not None and signature not in valid:
                    return "Corrupted thought signature."
        return None

    @staticmethod
    def carries_text(frame: Frame) -> bool:
        if isinstance(frame, bytes):
            return False
        for candidate in frame[1].get("candidates") or ():
            parts = (candidate.get("content") or {}).get("parts") or ()
            if any(p.get("text") and not p.get("thought") for p in parts):
                return True
        return False

    @staticmethod
    def last_user_text(request: Any) -> str:
        contents = request.get("contents") if isinstance(request, dict) else None
        for content in reversed(contents) if isinstance(contents, list) else []:
            if isinstance(content, dict) and content.get("role", "user") == "user":
                parts = content.get("parts") or []
                return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        return ""

    @staticmethod
    def refusal(message: str) -> Any:
        return error_object(400, message)
