"""Usage caps and exhausted quotas are ``quota`` errors, whatever the provider's words: the
provider hold holds the whole provider on them (reason ``usage_cap``), the retry policy
never retries them. Rate limits that will pass stay ``rate_limit``."""

from __future__ import annotations

import json

import pytest

from agentcore.providers.errors import error_from_payload, error_from_response

CAPS = {
    "anthropic-usage-limit-400": (
        400,
        {},
        {"type": "error", "error": {"type": "invalid_request_error", "message":
         "You have reached your specified API usage limits. You will regain access on "
         "2026-12-31 at 00:00 UTC."}},
    ),
    "openai-insufficient-quota-429": (
        429,
        {},
        {"error": {"message": "You exceeded your current quota, please check your plan.",
                   "type": "insufficient_quota", "code": "insufficient_quota"}},
    ),
    "bedrock-service-quota-400": (
        400,
        {"x-amzn-ErrorType": "ServiceQuotaExceededException:http://internal.amazon.com/"},
        {"message": "Your request exceeded your service quota."},
    ),
    "bedrock-daily-tokens-429": (
        429,
        {"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/"},
        {"message": "Too many tokens per day, please wait before trying again."},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CAPS)
def test_a_usage_cap_is_a_quota_error(case: str) -> None:
    status, headers, body = CAPS[case]
    error = error_from_response(status, headers, json.dumps(body).encode(), provider="p", model="m")
    assert error.kind == "quota" and not error.retryable


def test_a_bedrock_throttle_that_will_pass_is_a_rate_limit() -> None:
    headers = {"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/"}
    body = b'{"message": "Too many requests, please wait before trying again."}'
    error = error_from_response(429, headers, body, provider="p", model="m")
    assert (error.kind, error.code) == ("rate_limit", "ThrottlingException")


def test_a_daily_quota_throttle_mid_stream_is_a_quota_error() -> None:
    frame = {"type": "error", "error": {"type": "throttlingException",
             "message": "Too many tokens per day, please wait before trying again."}}  # fmt: skip
    assert error_from_payload(frame, provider="p", model="m").kind == "quota"
