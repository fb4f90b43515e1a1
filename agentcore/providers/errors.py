"""Reading a provider's errors: stated waits, error bodies, error kinds. Pure functions.

Each step is small so it can be tested on its own, the way a retry policy's inputs
deserve: `retry_after_from_headers` and `retry_after_from_body` read the provider's
stated wait, `parse_error_body` finds code, type and message in any of the error
shapes we meet, `classify` turns those into an error kind, and `error_from_response`
(a non-2xx reply) and `error_from_payload` (an error inside a 200) build the
`InferenceError`. No I/O here, and nothing retries: that is the retry plugin's job.
Failures below HTTP (connect errors, resets, timeouts) are the driver's to map.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from agentcore.inference import ErrorKind, InferenceError
from agentcore.providers.error_names import TYPE_KINDS as _TYPE_KINDS
from agentcore.redaction import excerpt

__all__ = [
    "MID_STREAM",
    "ErrorBody",
    "classify",
    "error_from_payload",
    "error_from_response",
    "parse_duration",
    "parse_error_body",
    "retry_after_from_body",
    "retry_after_from_headers",
]

MID_STREAM = "The provider reported an error mid-stream: "
"""The prefix of an error that arrived as a frame inside an HTTP 200 stream."""


# -- stated waits ------------------------------------------------------------------------


def parse_duration(value: Any) -> float | None:
    """Seconds from a number or a duration string: ``30``, ``"30"``, ``"30s"``, ``"1.5s"``,
    ``"250ms"``, ``"2m"``. None for anything else, or a negative or non-finite value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        scale = 1.0
        if text.endswith("ms"):
            text, scale = text[:-2], 0.001
        elif text.endswith("s"):
            text = text[:-1]
        elif text.endswith("m"):
            text, scale = text[:-1], 60.0
        try:
            seconds = float(text) * scale
        except ValueError:
            return None
    else:
        return None
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return None
    return seconds


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """The stated wait in seconds: ``retry-after-ms`` first (the more precise), then
    ``retry-after`` as seconds or as an HTTP date (a date in the past means 0)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms)
        except ValueError:
            value = -1.0
        if value >= 0 and value != float("inf"):
            return value / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if 0 <= seconds != float("inf") else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


_BODY_WAIT_KEYS = {
    "retry_after_ms": 0.001,
    "retryAfterMs": 0.001,
    "retry_after": 1.0,
    "retryAfter": 1.0,
    "retryDelay": 1.0,
    "retry_delay": 1.0,
}


def retry_after_from_body(body: Any, _depth: int = 0) -> float | None:
    """A stated wait anywhere in a JSON error body: ``retry_after`` (seconds),
    ``retry_after_ms``, or Google's ``retryDelay`` (``"30s"``) inside ``error.details``."""
    if _depth > 5:
        return None
    if isinstance(body, Mapping):
        for key, scale in _BODY_WAIT_KEYS.items():
            if key in body:
                value = body[key]
                if scale != 1.0 and isinstance(value, int | float) and not isinstance(value, bool):
                    return max(0.0, float(value) * scale)
                seconds = parse_duration(value)
                if seconds is not None:
                    return seconds
        children: Any = body.values()
    elif isinstance(body, list):
        children = body
    else:
        return None
    for child in children:
        if isinstance(child, Mapping | list):
            found = retry_after_from_body(child, _depth + 1)
            if found is not None:
                return found
    return None


# -- error bodies -----------------------------------------------------------------------------


@dataclass(slots=True)
class ErrorBody:
    """What an error body says, whatever its shape."""

    message: str | None = None
    code: str | None = None
    """The provider's code: OpenAI's ``code`` (else ``type``), Anthropic's ``error.type``."""
    type: str | None = None
    status: int | None = None
    """A numeric code inside the body (OpenRouter's ``error.code``, Google's ``error.code``)."""
    retry_after_s: float | None = None
    raw: Any = None


def parse_error_body(body: Any) -> ErrorBody:
    """Read Anthropic ``{"type": "error", "error": {"type", "message"}}``, OpenAI
    ``{"error": {"message", "type", "code"}}``, OpenRouter ``{"error": {"code": 429, ...}}``,
    Google ``[{"error": {"code", "status", "message", "details"}}]``, bare strings and bytes."""
    if isinstance(body, bytes | bytearray):
        text = bytes(body).decode("utf-8", errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            return ErrorBody(message=excerpt(text, 500) or None, raw=text)
    elif isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return ErrorBody(message=excerpt(body, 500) or None, raw=body)
    raw = body
    if isinstance(body, list) and body and isinstance(body[0], Mapping):
        body = body[0]
    if not isinstance(body, Mapping):
        return ErrorBody(message=None if body is None else excerpt(str(body), 500), raw=raw)
    error = body.get("error", body)
    if isinstance(error, str):
        return ErrorBody(message=error, raw=raw, retry_after_s=retry_after_from_body(body))
    if not isinstance(error, Mapping):
        error = body
    message = error.get("message") or body.get("message")
    etype = error.get("type") or error.get("status")
    code_value = error.get("code")
    status: int | None = None
    code: str | None = None
    if isinstance(code_value, int) and not isinstance(code_value, bool):
        status = code_value
    elif isinstance(code_value, str) and code_value:
        if code_value.isdigit():
            status = int(code_value)
        else:
            code = code_value
    if code is None and isinstance(etype, str):
        code = etype
    return ErrorBody(
        message=str(message) if message is not None else None,
        code=code,
        type=str(etype) if etype is not None else None,
        status=status,
        retry_after_s=retry_after_from_body(body),
        raw=raw,
    )


# -- classification ---------------------------------------------------------------------------

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "input is too long",
    "reduce the length of the messages",
)
_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "billing_error",
        "billing_hard_limit_reached",
        "billing_not_active",
        "insufficient_credits",
        "payment_required",
        "quota_exceeded",
    }
)
_QUOTA_PHRASES = ("insufficient_quota", "billing", "credit", "exceeded your current quota")
_CAP_PHRASES = ("usage limit", "tokens per day", "daily token", "daily quota")
"""An account's usage cap or daily quota, spent: no retry soon will pass (Anthropic's
usage-limit 400, Bedrock's daily-token throttling)."""


def _is_context_length(message: str, code: str | None) -> bool:
    if code == "context_length_exceeded":
        return True
    lowered = message.lower()
    return any(p in lowered for p in _CONTEXT_PHRASES)


def _is_quota(message: str, code: str | None, etype: str | None, stated_wait: bool) -> bool:
    if code in _QUOTA_CODES or etype in _QUOTA_CODES:
        return True
    # A message alone ("exceeded your current quota") is a quota failure only when no
    # wait is stated: Google says the same words for per-minute limits, with a retryDelay.
    lowered = message.lower()
    return not stated_wait and any(p in lowered for p in _QUOTA_PHRASES)


def classify(
    status: int | None,
    *,
    code: str | None = None,
    etype: str | None = None,
    message: str = "",
    stated_wait: bool = False,
) -> ErrorKind:
    """The error kind for an HTTP status (None mid-stream) and what the body says.

    The body can only sharpen a status: a 400 that says the prompt is too long is
    ``context_length``, a 429 that says ``insufficient_quota`` is ``quota`` (not
    retryable), but a 500 never becomes an ``invalid_request`` because of its text.
    """
    if (status is None or (400 <= status < 500 and status != 429)) and _is_context_length(
        message, code
    ):
        return "context_length"
    if status == 402 or (status in (429, None) and _is_quota(message, code, etype, stated_wait)):
        return "quota"
    if status in (400, 403, 429, None) and any(p in message.lower() for p in _CAP_PHRASES):
        return "quota"
    for name in (code, etype):
        if name is not None and name in _TYPE_KINDS:
            by_type = _TYPE_KINDS[name]
            if status is None or by_type in ("overloaded", "quota", "context_length"):
                return by_type
    if status is None:
        lowered = message.lower()
        if "overloaded" in lowered:
            return "overloaded"
        if "rate limit" in lowered:
            return "rate_limit"
        return "unknown"
    if status == 429:
        return "rate_limit"
    if status == 529 or (status == 503 and "overload" in message.lower()):
        return "overloaded"
    if status in (408, 504):
        return "timeout"
    if status >= 500 or status == 424:  # 424: Bedrock's model failed behind it
        return "server"
    if status in (401, 403):
        if status == 403 and ("moderation" in message.lower() or "flagged" in message.lower()):
            return "invalid_request"
        return "auth"
    if status in (400, 404, 405, 409, 413, 415, 422):
        return "invalid_request"
    return "unknown"


# -- building errors --------------------------------------------------------------------------


def _status_text(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    content: bytes,
    *,
    provider: str,
    model: str,
) -> InferenceError:
    """The typed error for a non-2xx reply: kind, status, code, message and stated wait."""
    parsed = parse_error_body(content)
    if parsed.code is None:
        # AWS names the exception in a header; the body holds only its message.
        aws = next((v for k, v in headers.items() if k.lower() == "x-amzn-errortype"), None)
        parsed.code = parsed.type = aws.split(":", 1)[0] if aws else None
    wait = retry_after_from_headers(headers)
    if wait is None:
        wait = parsed.retry_after_s
    message = parsed.message or f"HTTP {status} {_status_text(status)}"
    kind = classify(
        status,
        code=parsed.code,
        etype=parsed.type,
        message=message,
        stated_wait=wait is not None,
    )
    return InferenceError(
        kind,
        message,
        status=status,
        code=parsed.code,
        retry_after_s=wait,
        provider=provider,
        model=model,
    )


def error_from_payload(
    payload: Any,
    *,
    provider: str,
    model: str,
    prefix: str = "",
    status: int | None = None,
) -> InferenceError:
    """The typed error for an error object that came inside a 200: a stream frame or a body.

    A numeric code in the body (OpenRouter's ``error.code``) stands in for the status
    when classifying; the error's `status` stays the HTTP status actually received.
    """
    parsed = parse_error_body(payload)
    message = parsed.message or "no message"
    kind = classify(
        parsed.status if parsed.status is not None else None,
        code=parsed.code,
        etype=parsed.type,
        message=message,
        stated_wait=parsed.retry_after_s is not None,
    )
    return InferenceError(
        kind,
        f"{prefix}{message}",
        status=status,
        code=parsed.code if parsed.code is not None else _str_or_none(parsed.status),
        retry_after_s=parsed.retry_after_s,
        provider=provider,
        model=model,
    )


def _str_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)
