"""The retry decision, in small functions: which errors are retried, the backoff, the verdict.

The backoff is tenacity's: `wait_exponential` plus `wait_random` compute the delay and
`stop_after_attempt` the limit, both asked through a `RetryCallState` whose
attempt number is the kernel's, so nothing here writes the exponential by hand.
These strategies read the same from tenacity 8.2 to today (`wait_exponential_jitter`
renamed its first argument in 9.2, and google-genai keeps tenacity below 9.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentcore.api import PROGRESS_TIMEOUT, Decision, GiveUp, InferenceError, Retry
from agentcore_retry.settings import RetrySettings, Schedule

if TYPE_CHECKING:
    import tenacity

NEVER_RETRIED: frozenset[str] = frozenset(
    {"auth", "invalid_request", "context_length", "quota", "cancelled"}
)
"""Kinds another attempt cannot fix, whatever `retryable` says."""


def is_retryable(error: InferenceError) -> bool:
    """rate_limit, overloaded, server, network (a stream with no terminal too) and timeout
    are retryable by default; an adapter can say otherwise (a quota 429), and is believed."""
    return error.retryable and error.kind not in NEVER_RETRIED


def _state(
    schedule: Schedule, attempt_number: int
) -> tuple[tenacity.Retrying, tenacity.RetryCallState]:
    import tenacity  # at the first failed attempt: a host whose calls succeed never loads it

    retrying = tenacity.Retrying(
        wait=tenacity.wait_exponential(multiplier=schedule.initial_delay_s)
        + tenacity.wait_random(0, schedule.jitter_s),
        stop=tenacity.stop_after_attempt(schedule.max_attempts),
    )
    state = tenacity.RetryCallState(retrying, None, (), {})
    state.attempt_number = attempt_number
    return retrying, state


def backoff_s(schedule: Schedule, attempt_number: int) -> float:
    """The wait after failed attempt `attempt_number` (1-based): initial * 2**(n-1) plus
    jitter, capped at max_delay_s."""
    retrying, state = _state(schedule, attempt_number)
    return min(float(retrying.wait(state)), schedule.max_delay_s)


def exhausted(schedule: Schedule, attempt_number: int) -> bool:
    """True when attempt `attempt_number` was the schedule's last."""
    retrying, state = _state(schedule, attempt_number)
    return bool(retrying.stop(state))


def stated_wait_s(error: InferenceError) -> float | None:
    """The provider's stated wait (Retry-After and friends, parsed by the adapter)."""
    if error.retry_after_s is None:
        return None
    return max(0.0, error.retry_after_s)


def wait_s(backoff: float, stated: float | None) -> float:
    """A retry never comes sooner than the provider asked: the larger of the two."""
    return backoff if stated is None else max(backoff, stated)


def stated_wait_too_long(
    error: InferenceError, stated: float, limit: float, key: str
) -> InferenceError:
    """The error a call fails with when the provider asks for a longer wait than allowed."""
    return InferenceError(
        error.kind,
        f"The provider asked to wait {stated:g} s before trying again, longer than the "
        f"{limit:g} s allowed ({key}); the provider said: {error.message}",
        retryable=False,
        status=error.status,
        code=error.code,
        retry_after_s=error.retry_after_s,
        provider=error.provider,
        model=error.model,
    )


def decide(
    error: InferenceError,
    attempt_number: int,
    earlier: list[InferenceError],
    provider: str,
    settings: RetrySettings,
    max_stated_wait: tuple[float, str],
) -> Decision:
    """Retry after how long, or give up: the whole policy, free of kernel state.

    `earlier` are the errors of the inference's earlier attempts; `max_stated_wait`
    is the limit on a stated wait and the settings key it came from.
    """
    if not is_retryable(error):
        return GiveUp()
    if error.code == PROGRESS_TIMEOUT and any(e.code == PROGRESS_TIMEOUT for e in earlier):
        return GiveUp()  # a stalled stream gets one fresh call, not the whole schedule
    stated = stated_wait_s(error)
    limit, key = max_stated_wait
    if stated is not None and stated > limit:
        return GiveUp(stated_wait_too_long(error, stated, limit, key))
    schedule = settings.schedule_for(provider, overloaded=error.kind == "overloaded")
    if exhausted(schedule, attempt_number):
        return GiveUp()
    return Retry(wait_s(backoff_s(schedule, attempt_number), stated))
