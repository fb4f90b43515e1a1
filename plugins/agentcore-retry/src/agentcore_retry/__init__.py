"""agentcore's default retry policy (entry point ``retry``): retry or give up, per failed attempt.

It answers `on_inference_error` and nothing else. The kernel does the rest: it
emits the ``inference:retry`` trace for every `Retry`, announces the delay as a
``backoff`` wait and sleeps it, and never asks once a visible token of a
streamed call reached the consumer.

Ordering: `on_inference_error` stops at the first non-None answer and this
plugin always answers, so it is *the* decider. Its implementation keeps
pluggy's default order (not ``trylast``): a plugin that wants to decide
instead should replace this one (an entry point named ``retry``) rather
than race it.
"""

from __future__ import annotations

from agentcore.api import (
    Attempt,
    Decision,
    InferenceError,
    PluginContext,
    SettingsSection,
    hookimpl,
)
from agentcore_retry.policy import (
    NEVER_RETRIED,
    backoff_s,
    decide,
    exhausted,
    is_retryable,
    stated_wait_s,
    wait_s,
)
from agentcore_retry.settings import ProviderOverride, RetrySettings, Schedule, ScheduleOverride

LIMIT_KEY = "[inference] max_stated_wait_s"
"""Where the longest stated wait a call may honour is set: the kernel's, shared by every
policy that waits."""


class RetryPolicy:
    """The plugin object; the kernel makes one per kernel."""

    def __init__(self) -> None:
        self.settings = RetrySettings.model_construct()
        self.max_stated_wait: tuple[float, str] = (600.0, LIMIT_KEY)

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("retry", RetrySettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[RetrySettings]) -> None:
        self.settings = context.settings
        self.max_stated_wait = (context.inference.max_stated_wait_s, LIMIT_KEY)

    @hookimpl
    def on_inference_error(self, attempt: Attempt, error: InferenceError) -> Decision:
        return decide(
            error,
            attempt.number,
            attempt.inference.errors,
            attempt.provider,
            self.settings,
            self.max_stated_wait,
        )


__all__ = [
    "LIMIT_KEY",
    "NEVER_RETRIED",
    "ProviderOverride",
    "RetryPolicy",
    "RetrySettings",
    "Schedule",
    "ScheduleOverride",
    "backoff_s",
    "decide",
    "exhausted",
    "is_retryable",
    "stated_wait_s",
    "wait_s",
]
