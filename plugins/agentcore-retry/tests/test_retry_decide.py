"""The retry policy's small functions, with no kernel: what is retried, the wait, the verdict."""

from __future__ import annotations

from typing import Any

import pytest
from agentcore_retry import (
    RetrySettings,
    Schedule,
    backoff_s,
    decide,
    exhausted,
    is_retryable,
    stated_wait_s,
    wait_s,
)

from agentcore.api import NO_TERMINAL, PROGRESS_TIMEOUT, GiveUp, InferenceError, Retry

LIMIT = (600.0, "[retry] max_stated_wait_s")


def err(kind: Any, **kw: Any) -> InferenceError:
    return InferenceError(kind, f"scripted {kind}", **kw)


@pytest.mark.parametrize("kind", ["rate_limit", "overloaded", "server", "network", "timeout"])
def test_transient_kinds_are_retried(kind: Any) -> None:
    assert is_retryable(err(kind))


def test_a_stream_with_no_terminal_is_retried() -> None:
    assert is_retryable(err("network", code=NO_TERMINAL))


@pytest.mark.parametrize(
    "kind", ["auth", "invalid_request", "context_length", "quota", "cancelled", "unknown"]
)
def test_permanent_kinds_are_never_retried(kind: Any) -> None:
    assert not is_retryable(err(kind))


@pytest.mark.parametrize("kind", ["auth", "invalid_request", "context_length", "quota"])
def test_permanent_kinds_are_not_retried_even_if_marked_retryable(kind: Any) -> None:
    assert not is_retryable(err(kind, retryable=True))


def test_an_unknown_error_is_retried_only_when_marked_retryable() -> None:
    assert not is_retryable(err("unknown"))
    assert is_retryable(err("unknown", retryable=True))


def test_the_adapter_is_believed_when_it_says_not_retryable() -> None:
    # e.g. a 429 that is really a billing failure, classified rate_limit by a lenient adapter
    assert not is_retryable(err("rate_limit", status=429, retryable=False))


def test_backoff_is_exponential_and_capped() -> None:
    schedule = Schedule(initial_delay_s=1.0, max_delay_s=5.0, jitter_s=0.0)
    assert [backoff_s(schedule, n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_is_added_and_the_cap_holds() -> None:
    schedule = Schedule(initial_delay_s=1.0, max_delay_s=3.0, jitter_s=0.5)
    for _ in range(50):
        assert 1.0 <= backoff_s(schedule, 1) <= 1.5
        assert 2.0 <= backoff_s(schedule, 2) <= 2.5
        assert backoff_s(schedule, 3) <= 3.0


def test_max_attempts_counts_the_first() -> None:
    schedule = Schedule(max_attempts=4)
    assert [exhausted(schedule, n) for n in range(1, 6)] == [False, False, False, True, True]
    assert exhausted(Schedule(max_attempts=1), 1)


def test_the_wait_is_never_shorter_than_the_stated_wait() -> None:
    assert wait_s(2.0, None) == 2.0
    assert wait_s(2.0, 7.5) == 7.5
    assert wait_s(9.0, 7.5) == 9.0
    assert stated_wait_s(err("rate_limit", retry_after_s=-3)) == 0.0


def fast(**kw: Any) -> RetrySettings:
    base = {"initial_delay_s": 0.5, "max_delay_s": 4.0, "jitter_s": 0.0}
    return RetrySettings.model_validate({**base, **kw})


def test_decide_retries_with_the_backoff() -> None:
    assert decide(err("server", status=500), 2, [], "p", fast(), LIMIT) == Retry(1.0)


def test_decide_waits_at_least_the_stated_wait_even_above_max_delay() -> None:
    decision = decide(err("rate_limit", retry_after_s=12.0), 1, [], "p", fast(), LIMIT)
    assert decision == Retry(12.0)


def test_decide_gives_up_when_attempts_are_spent() -> None:
    assert decide(err("server"), 4, [], "p", fast(), LIMIT) == GiveUp()


def test_decide_gives_up_on_a_permanent_error() -> None:
    assert decide(err("auth", status=401), 1, [], "p", fast(), LIMIT) == GiveUp()


def test_a_stated_wait_over_the_limit_fails_at_once_saying_how_long() -> None:
    cause = err("rate_limit", status=429, retry_after_s=900.0, provider="p", model="m")
    decision = decide(cause, 1, [], "p", fast(), (600.0, "[provider_hold] max_wait_s"))
    assert isinstance(decision, GiveUp) and decision.error is not None
    failure = decision.error
    assert "asked to wait 900 s" in str(failure)
    assert "600 s allowed ([provider_hold] max_wait_s)" in str(failure)
    assert (failure.kind, failure.status, failure.retryable) == ("rate_limit", 429, False)
    assert (failure.provider, failure.model, failure.retry_after_s) == ("p", "m", 900.0)


def test_a_progress_timeout_gets_one_fresh_call_only() -> None:
    stalled = err("timeout", code=PROGRESS_TIMEOUT)
    assert isinstance(decide(stalled, 1, [], "p", fast(), LIMIT), Retry)
    assert decide(stalled, 2, [stalled], "p", fast(), LIMIT) == GiveUp()
    # ...while other timeouts keep the schedule
    assert isinstance(decide(err("timeout"), 2, [stalled], "p", fast(), LIMIT), Retry)


def test_overloaded_has_its_own_schedule() -> None:
    settings = fast(overloaded={"max_attempts": 6, "initial_delay_s": 3.0, "jitter_s": 0.0})
    assert decide(err("overloaded", status=529), 1, [], "p", settings, LIMIT) == Retry(3.0)
    assert isinstance(decide(err("overloaded"), 5, [], "p", settings, LIMIT), Retry)
    assert decide(err("overloaded"), 6, [], "p", settings, LIMIT) == GiveUp()
    assert decide(err("rate_limit"), 4, [], "p", settings, LIMIT) == GiveUp()


def test_the_overloaded_defaults_wait_longer_and_try_more() -> None:
    settings = RetrySettings()
    overloaded = settings.schedule_for("p", overloaded=True)
    general = settings.schedule_for("p", overloaded=False)
    assert overloaded.max_attempts > general.max_attempts
    assert overloaded.initial_delay_s > general.initial_delay_s
    assert overloaded.max_delay_s > general.max_delay_s


def test_a_partial_overloaded_table_keeps_the_overload_defaults() -> None:
    settings = RetrySettings.model_validate({"overloaded": {"initial_delay_s": 0.5}})
    overloaded = settings.schedule_for("p", overloaded=True)
    assert overloaded.model_dump() == {
        "max_attempts": 6,
        "initial_delay_s": 0.5,
        "max_delay_s": 60.0,
        "jitter_s": 2.0,
    }
    # So a 529 is retried past the general schedule's 4 attempts.
    assert isinstance(decide(err("overloaded", status=529), 5, [], "p", settings, LIMIT), Retry)
    assert decide(err("overloaded", status=529), 6, [], "p", settings, LIMIT) == GiveUp()


def test_per_provider_overrides() -> None:
    settings = fast(
        max_attempts=3,
        providers={"slow": {"max_attempts": 5, "overloaded": {"initial_delay_s": 9.0}}},
    )
    assert settings.schedule_for("slow", False).max_attempts == 5
    assert settings.schedule_for("slow", False).initial_delay_s == 0.5  # inherited
    assert settings.schedule_for("other", False).max_attempts == 3
    assert settings.schedule_for("slow", True).initial_delay_s == 9.0
    assert settings.schedule_for("slow", True).max_attempts == 6  # the overloaded default
    assert decide(err("server"), 4, [], "slow", settings, LIMIT) == Retry(4.0)
    assert decide(err("server"), 3, [], "other", settings, LIMIT) == GiveUp()
