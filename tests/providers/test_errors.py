"""Stated waits, error bodies, error kinds: the small functions adapters build errors from;
and the driver's map of transport failures."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import format_datetime

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from agentcore.log import register_secret
from agentcore.providers.driver import transport_error
from agentcore.providers.errors import (
    MID_STREAM,
    classify,
    error_from_payload,
    error_from_response,
    parse_duration,
    parse_error_body,
    retry_after_from_body,
    retry_after_from_headers,
)
from agentcore.providers.wire import fast_loads

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30.0),
        (1.5, 1.5),
        ("30", 30.0),
        ("30s", 30.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("2m", 120.0),
        (" 7s ", 7.0),
        ("soon", None),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        (None, None),
        (True, None),
        ([], None),
    ],
)
def test_parse_duration(value: object, seconds: float | None) -> None:
    assert parse_duration(value) == seconds


def test_retry_after_ms_wins_over_retry_after() -> None:
    headers = {"retry-after-ms": "1500", "retry-after": "9"}
    assert retry_after_from_headers(headers) == 1.5


def test_retry_after_seconds_and_case() -> None:
    assert retry_after_from_headers({"Retry-After": "12"}) == 12.0
    assert retry_after_from_headers({"retry-after": "0.5"}) == 0.5


def test_retry_after_http_date() -> None:
    date = format_datetime(datetime.fromtimestamp(NOW + 42, UTC), usegmt=True)
    assert retry_after_from_headers({"retry-after": date}, now=NOW) == pytest.approx(42.0)


def test_retry_after_date_in_the_past_is_zero() -> None:
    date = format_datetime(datetime.fromtimestamp(NOW - 60, UTC), usegmt=True)
    assert retry_after_from_headers({"retry-after": date}, now=NOW) == 0.0


@pytest.mark.parametrize(
    "headers",
    [{}, {"retry-after": "whenever"}, {"retry-after": "-3"}, {"retry-after-ms": "x"}],
)
def test_no_usable_wait(headers: dict[str, str]) -> None:
    assert retry_after_from_headers(headers) is None


def test_bad_retry_after_ms_falls_back_to_retry_after() -> None:
    assert retry_after_from_headers({"retry-after-ms": "x", "retry-after": "3"}) == 3.0


@pytest.mark.parametrize(
    ("body", "seconds"),
    [
        ({"error": {"message": "slow down", "retry_after": 7}}, 7.0),
        ({"error": {"retry_after_ms": 2500}}, 2.5),
        ({"retry_after": "3s"}, 3.0),
        (
            [
                {
                    "error": {
                        "code": 429,
                        "status": "RESOURCE_EXHAUSTED",
                        "details": [
                            {"@type": "type.googleapis.com/google.rpc.Help"},
                            {
                                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": "30s",
                            },
                        ],
                    }
                }
            ],
            30.0,
        ),
        ({"error": {"message": "no wait here"}}, None),
        ("plain text", None),
    ],
)
def test_retry_after_from_body(body: object, seconds: float | None) -> None:
    assert retry_after_from_body(body) == seconds


def test_parse_error_body_shapes() -> None:
    anthropic = parse_error_body(
        b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    )
    assert (anthropic.code, anthropic.message) == ("overloaded_error", "Overloaded")
    openai = parse_error_body(
        {"error": {"message": "quota", "type": "insufficient_quota", "code": "insufficient_quota"}}
    )
    assert (openai.code, openai.type) == ("insufficient_quota", "insufficient_quota")
    openrouter = parse_error_body({"error": {"code": 502, "message": "Provider returned error"}})
    assert (openrouter.status, openrouter.code) == (502, None)
    google = parse_error_body([{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}}])
    assert (google.status, google.code) == (429, "RESOURCE_EXHAUSTED")
    text = parse_error_body(b"<html>Bad Gateway</html>")
    assert text.message == "<html>Bad Gateway</html>"
    assert parse_error_body(b"").message is None
    assert parse_error_body({"error": "just a string"}).message == "just a string"


@pytest.mark.parametrize(
    ("status", "fields", "kind"),
    [
        (429, {}, "rate_limit"),
        (429, {"code": "rate_limit_exceeded", "message": "Rate limit reached"}, "rate_limit"),
        (
            429,
            {"code": "insufficient_quota", "message": "You exceeded your current quota"},
            "quota",
        ),
        (429, {"etype": "billing_error"}, "quota"),
        (429, {"message": "You exceeded your current quota, check billing"}, "quota"),
        # The same words with a stated wait: Google's per-minute limit, retryable.
        (429, {"message": "You exceeded your current quota", "stated_wait": True}, "rate_limit"),
        (402, {"message": "Insufficient credits"}, "quota"),
        (529, {"code": "overloaded_error"}, "overloaded"),
        (529, {}, "overloaded"),
        (503, {"message": "The engine is currently overloaded"}, "overloaded"),
        (503, {}, "server"),
        (500, {"code": "api_error"}, "server"),
        (502, {}, "server"),
        (500, {"message": "prompt is too long"}, "server"),  # a 5xx stays a 5xx
        (408, {}, "timeout"),
        (401, {"code": "authentication_error"}, "auth"),
        (403, {"code": "permission_error"}, "auth"),
        (403, {"message": "Your input was flagged by moderation"}, "invalid_request"),
        (400, {"code": "invalid_request_error"}, "invalid_request"),
        (404, {"code": "not_found_error"}, "invalid_request"),
        (400, {"message": "prompt is too long: 250000 tokens > 200000 maximum"}, "context_length"),
        (400, {"code": "context_length_exceeded"}, "context_length"),
        (
            400,
            {"message": "This model's maximum context length is 128000 tokens"},
            "context_length",
        ),
        (413, {"message": "input is too long for requested model"}, "context_length"),
        (418, {}, "unknown"),
        # Mid-stream: no status, the code or type decides.
        (None, {"code": "overloaded_error"}, "overloaded"),
        (None, {"code": "rate_limit_error"}, "rate_limit"),
        (None, {"code": "api_error"}, "server"),
        (None, {"code": "server_error"}, "server"),
        (None, {"code": "insufficient_quota"}, "quota"),
        (
            None,
            {"code": "invalid_request_error", "message": "prompt is too long"},
            "context_length",
        ),
        (None, {"message": "Upstream overloaded"}, "overloaded"),
        (None, {"message": "something odd"}, "unknown"),
    ],
)
def test_classify(status: int | None, fields: dict[str, object], kind: str) -> None:
    assert classify(status, **fields) == kind  # type: ignore[arg-type]


def test_error_from_response_429_with_each_stated_wait() -> None:
    error = error_from_response(
        429,
        {"retry-after": "2"},
        b'{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}',
        provider="p",
        model="m",
    )
    assert (error.kind, error.retryable, error.status, error.code) == (
        "rate_limit",
        True,
        429,
        "rate_limit_error",
    )
    assert (error.retry_after_s, error.message, error.provider, error.model) == (
        2.0,
        "slow",
        "p",
        "m",
    )
    body_wait = error_from_response(
        429, {}, b'{"error":{"message":"x","retry_after_ms":400}}', provider="p", model="m"
    )
    assert body_wait.retry_after_s == 0.4
    header_first = error_from_response(
        429, {"retry-after-ms": "100"}, b'{"error":{"retry_after":9}}', provider="p", model="m"
    )
    assert header_first.retry_after_s == 0.1


def test_quota_is_not_retryable() -> None:
    error = error_from_response(
        429,
        {},
        b'{"error":{"message":"You exceeded your current quota","type":"insufficient_quota",'
        b'"code":"insufficient_quota"}}',
        provider="p",
        model="m",
    )
    assert (error.kind, error.retryable) == ("quota", False)


def test_error_without_body_says_the_status() -> None:
    error = error_from_response(503, {}, b"", provider="p", model="m")
    assert (error.kind, error.message) == ("server", "HTTP 503 Service Unavailable")


def test_error_from_payload_mid_stream() -> None:
    error = error_from_payload(
        {"code": "server_error", "message": "Provider disconnected"},
        provider="p",
        model="m",
        prefix=MID_STREAM,
    )
    assert error.kind == "server"
    assert error.message == "The provider reported an error mid-stream: Provider disconnected"
    assert error.status is None
    openrouter = error_from_payload({"code": 429, "message": "busy"}, provider="p", model="m")
    assert (openrouter.kind, openrouter.code) == ("rate_limit", "429")


KEY = ConnectionKey("api.test", 443, True, True, None, None, None)


@pytest.mark.parametrize(
    ("exc", "kind", "says"),
    [
        (aiohttp.ConnectionTimeoutError("t"), "timeout", "Timed out connecting"),
        (aiohttp.SocketTimeoutError("t"), "timeout", "Timed out waiting for data"),
        (TimeoutError(), "timeout", "Timed out"),
        (aiohttp.ClientConnectorError(KEY, OSError(111, "refused")), "network", "connect"),
        (aiohttp.ClientOSError(104, "reset"), "network", "Network error"),
        (aiohttp.ClientPayloadError("Response payload is not completed"), "network", "mid-reply"),
        (aiohttp.ServerDisconnectedError(), "network", "mid-reply"),
        (aiohttp.NonHttpUrlClientError("ftp://x"), "invalid_request", "Bad provider URL"),
        (aiohttp.InvalidURL("http://["), "invalid_request", "Bad provider URL"),
        (ConnectionResetError("reset"), "network", "Network error"),
        (ValueError("bad gzip"), "unknown", "ValueError"),
    ],
)
def test_transport_error(exc: Exception, kind: str, says: str) -> None:
    error = transport_error(exc, provider="p", model="m")
    assert error.kind == kind
    assert says in error.message
    assert error.retryable == (kind in ("timeout", "network"))
    assert (error.provider, error.model) == ("p", "m")


def test_fast_loads_is_json_loads() -> None:
    assert fast_loads('{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "\u00e9"]}
    assert fast_loads(' {"a": 1} ') == {"a": 1}
    for bad in ("", "{", "nope", '{"a": 1} x'):
        with pytest.raises(ValueError):
            fast_loads(bad)


def test_monotonic_clock_unused() -> None:
    # The HTTP-date form is relative to wall-clock time, not the monotonic clock.
    date = format_datetime(datetime.fromtimestamp(time.time() + 100, UTC), usegmt=True)
    wait = retry_after_from_headers({"retry-after": date})
    assert wait is not None and 90 < wait <= 100


@pytest.mark.parametrize("shape", ["bytes", "str", "list"])
def test_an_echoed_key_is_redacted_before_a_long_body_is_cut(shape: str) -> None:
    key = "sk-echoed-at-the-cut-0123456789"
    register_secret(key)
    text = "x" * 490 + f"{key} is not a valid key"  # the cut at 500 falls inside the key
    body = {"bytes": text.encode(), "str": text, "list": [text]}[shape]
    message = parse_error_body(body).message
    assert message is not None
    assert key[:8] not in message  # not even the part before the cut
    assert "x" * 480 in message
