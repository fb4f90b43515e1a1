"""The retry plugin in a kernel with no other policy: it decides, the kernel traces and waits."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest
from agentcore_retry import RetryPolicy, RetrySettings
from loguru import logger

from agentcore.api import (
    NO_TERMINAL,
    PROGRESS_TIMEOUT,
    Aborted,
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    Retrying,
    Section,
    SettingsError,
    SettingsSection,
    StreamEvent,
)
from agentcore.testing import Kernel

Load = Callable[..., Kernel]


def request(model: str = "fake:m1") -> Request:
    return Request(model, [Message.user("hi")])


def err(kind: Any, **kw: Any) -> InferenceError:
    return InferenceError(kind, f"scripted {kind}", **kw)


async def stream_all(kernel: Kernel, req: Request) -> list[StreamEvent]:
    async with aclosing(kernel.stream(req)) as events:
        return [e async for e in events]


async def test_a_429_with_a_stated_wait_is_retried_no_sooner(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [err("rate_limit", status=429, retry_after_s=0.05)]
    async with load() as kernel:
        response = await kernel.complete(request())
    assert response.text == "hello"
    assert provider.models == ["m1", "m1"]
    [retry] = traces.of("inference:retry")
    assert retry["attempt"] == 1
    assert retry["delayMs"] >= 50  # the stated wait, above max_delay_s (10 ms)
    assert retry["error"] == "rate_limit 429: scripted rate_limit"
    assert retry["inferenceId"] == traces.of("inference:start")[0]["inferenceId"]
    [complete] = traces.of("inference:complete")
    assert complete["attempts"] == 2


async def test_server_errors_use_the_general_schedule_then_give_up(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [err("server", status=500)] * 10
    async with load() as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert caught.value.kind == "server"
    assert len(provider.calls) == 4  # max_attempts, the first included
    assert [r["attempt"] for r in traces.of("inference:retry")] == [1, 2, 3]
    [fail] = traces.of("inference:fail")
    assert (fail["attempts"], fail["errorKind"]) == (4, "server")


async def test_529s_follow_the_overloaded_schedule(load: Load, provider: Any, traces: Any) -> None:
    provider.script = [err("overloaded", status=529)] * 5
    async with load() as kernel:
        response = await kernel.complete(request())
    assert response.text == "hello"
    assert len(provider.calls) == 6  # [retry.overloaded] max_attempts = 6, above [retry]'s 4
    delays = [r["delayMs"] for r in traces.of("inference:retry")]
    assert delays == [2, 4, 8, 16, 20]  # 0.002 s doubling, capped at 0.02 s


@pytest.mark.parametrize(
    "failure",
    [
        err("invalid_request", status=400),
        err("auth", status=401),
        err("quota", status=429),
        err("context_length", status=400),
    ],
    ids=["400", "401", "quota-429", "context-length"],
)
async def test_permanent_errors_are_tried_once(
    load: Load, provider: Any, traces: Any, failure: InferenceError
) -> None:
    provider.script = [failure]
    async with load() as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert caught.value is failure
    assert len(provider.calls) == 1
    assert traces.of("inference:retry") == []
    [fail] = traces.of("inference:fail")
    assert (fail["attempts"], fail["errorKind"]) == (1, failure.kind)


async def test_a_stated_wait_over_the_limit_fails_at_once(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [err("rate_limit", status=429, retry_after_s=900)]
    async with load(AGENTCORE_INFERENCE__MAX_STATED_WAIT_S="60") as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert "asked to wait 900 s" in str(caught.value)
    assert "60 s allowed ([inference] max_stated_wait_s)" in str(caught.value)
    assert len(provider.calls) == 1
    assert traces.of("inference:retry") == []
    [fail] = traces.of("inference:fail")
    assert "asked to wait 900 s" in fail["error"]
    assert fail["errorKind"] == "rate_limit"


class HoldSettings(Section):
    max_wait_s: float = 600.0


class StandInHold:
    """Only the settings of a plugin named provider-hold: retry never reads them."""

    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("provider_hold", HoldSettings)


async def test_the_limit_is_the_kernels_whatever_another_plugin_says(
    load: Load, provider: Any
) -> None:
    provider.script = [err("rate_limit", status=429, retry_after_s=45)]
    hold = {"provider-hold": StandInHold}
    settings = "\n[provider_hold]\nmax_wait_s = 600\n\n[inference]\nmax_stated_wait_s = 30\n"
    async with load(settings, plugins=hold) as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert "asked to wait 45 s" in str(caught.value)
    assert "30 s allowed ([inference] max_stated_wait_s)" in str(caught.value)
    assert len(provider.calls) == 1


def test_the_old_retry_key_for_the_limit_says_where_it_went(load: Load) -> None:
    with pytest.raises(SettingsError) as caught:
        load(AGENTCORE_RETRY__MAX_STATED_WAIT_S="60")
    (problem,) = caught.value.problems
    assert problem.startswith("environment AGENTCORE_RETRY__MAX_STATED_WAIT_S: ")
    assert "retry.max_stated_wait_s: " in problem
    assert "moved to [inference] max_stated_wait_s" in problem


async def test_a_disabled_provider_hold_leaves_the_retry_limit(load: Load, provider: Any) -> None:
    provider.script = [err("rate_limit", status=429, retry_after_s=0.01)]
    hold = {"provider-hold": StandInHold}
    extra = '\n[provider_hold]\nmax_wait_s = 0.001\n\n[plugins]\ndisabled = ["provider-hold"]\n'
    async with load(extra, plugins=hold) as kernel:
        response = await kernel.complete(request())
    assert response.text == "hello"
    assert len(provider.calls) == 2


async def test_a_streamed_failure_before_any_visible_token_is_retried(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [err("server", status=503)]
    async with load() as kernel:
        events = await stream_all(kernel, request())
    retrying = [e for e in events if isinstance(e, Retrying)]
    assert [(r.attempt, r.error.kind) for r in retrying] == [(1, "server")]
    assert isinstance(events[-1], Complete)
    assert len(provider.calls) == 2
    assert [r["attempt"] for r in traces.of("inference:retry")] == [1]


async def test_never_retried_once_a_visible_token_reached_the_consumer(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [provider.Partial(err("server", status=500))]
    async with load() as kernel:
        events = await stream_all(kernel, request())
    assert isinstance(events[-1], Failed) and events[-1].error.kind == "server"
    assert not any(isinstance(e, Retrying) for e in events)
    assert len(provider.calls) == 1
    assert traces.of("inference:retry") == []


async def test_a_stream_with_no_terminal_is_retried(load: Load, provider: Any, traces: Any) -> None:
    # The stream shows text and then just ends: the kernel makes it a network error,
    # but it is not retried because visible text was already handed over...
    provider.script = [provider.NO_TERMINAL]
    async with load() as kernel:
        events = await stream_all(kernel, request())
        assert isinstance(events[-1], Failed) and events[-1].error.code == NO_TERMINAL
        assert len(provider.calls) == 1
        # ...while the same error on a whole call (nothing visible yet) is.
        provider.script = [err("network", code=NO_TERMINAL)]
        response = await kernel.complete(request())
    assert response.text == "hello"
    assert len(provider.calls) == 3
    [retry] = traces.of("inference:retry")
    assert retry["error"].startswith("network")


async def test_a_progress_timeout_gets_one_fresh_call(
    load: Load, provider: Any, traces: Any
) -> None:
    provider.script = [provider.STALL, provider.STALL, provider.STALL]
    async with load("\n[inference]\nprogress_timeout_s = 0.05\n") as kernel:
        events = await stream_all(kernel, request())
    terminal = events[-1]
    assert isinstance(terminal, Aborted) and terminal.error.code == PROGRESS_TIMEOUT
    assert len(provider.calls) == 2  # the first call, and one fresh one
    assert [r["attempt"] for r in traces.of("inference:retry")] == [1]


async def test_per_provider_settings_apply(load: Load, provider: Any) -> None:
    provider.script = [err("server")] * 10
    async with load("\n[retry.providers.fake]\nmax_attempts = 2\n") as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(request())
    assert len(provider.calls) == 2


async def test_environment_overrides_reach_the_plugin(load: Load, provider: Any) -> None:
    provider.script = [err("server")] * 10
    async with load(AGENTCORE_RETRY__MAX_ATTEMPTS="3") as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(request())
        assert isinstance(kernel.settings.section("retry"), RetrySettings)
    assert len(provider.calls) == 3


def test_an_unknown_key_is_reported_with_its_path(load: Load) -> None:
    with pytest.raises(SettingsError) as caught:
        load("\n[retry.providers.x]\nmax_atempts = 2\n")
    assert any("retry.providers.x.max_atempts: unknown key" in p for p in caught.value.problems)


def test_an_override_for_no_configured_provider_is_refused(load: Load, provider: Any) -> None:
    with pytest.raises(SettingsError) as caught:
        load("\n[retry.providers.fakee]\nmax_attempts = 2\n")
    (problem,) = caught.value.problems
    assert problem.endswith(
        "agentcore.toml: retry.providers.fakee: names provider 'fakee', which is not "
        "configured (did you mean 'fake'?) (configured: echo, fake)"
    )


def test_an_environment_override_is_applied_and_not_called_ignored(
    load: Load, provider: Any
) -> None:
    lines: list[str] = []
    handler = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    try:
        kernel = load(AGENTCORE_RETRY__MAX_ATTEMPTS="1")
    finally:
        logger.remove(handler)
    assert kernel.settings.section("retry").max_attempts == 1
    assert [line for line in lines if "ignored" in line] == []


async def test_disabled_retry_means_one_attempt(load: Load, provider: Any) -> None:
    provider.script = [err("server")]
    async with load('\n[plugins]\ndisabled = ["retry"]\n') as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(request())
        assert [r.state for r in kernel.records if r.name == "retry"] == ["disabled"]
    assert len(provider.calls) == 1


def test_the_plugin_class_is_what_the_entry_point_names() -> None:
    from importlib.metadata import entry_points

    [ep] = [
        e
        for e in entry_points(group="agentcore.plugins")
        if e.name == "retry" and e.value.startswith("agentcore_retry")
    ]
    assert ep.load() is RetryPolicy
