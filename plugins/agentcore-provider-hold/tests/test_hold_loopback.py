"""The provider hold alone (no retry) against agentcore.testing's loopback provider."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_provider_hold import HOLD_TOO_LONG, ProviderHold

from agentcore.api import InferenceError, Message, Request
from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, LoopbackServer, Scenario

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides


@pytest.fixture
def kernel_for(loopback_settings: Callable[..., Path], recorder: Any) -> Callable[..., Kernel]:
    def build(**hold: Any) -> Kernel:
        path = loopback_settings(
            providers={"anthropic": "anthropic"}, sections={"provider_hold": hold}
        )
        return Kernel.load(
            path,
            environ=LOOPBACK_ENV,
            discover_plugins=False,
            plugins={"provider-hold": ProviderHold, "recorder": recorder},
        )

    return build


def request(model: str = "model-a") -> Request:
    return Request(f"anthropic:{model}", [Message.user("hi")])


async def refused(kernel: Kernel, model: str = "model-a") -> InferenceError:
    with pytest.raises(InferenceError) as caught:
        await kernel.complete(request(model))
    return caught.value


async def test_held_calls_make_no_request_and_the_first_after_goes_alone(
    kernel_for: Callable[..., Kernel], loopback_provider: LoopbackServer, recorder: Any
) -> None:
    loopback_provider.script(
        # A hold long enough that the three calls below are surely made while it lasts,
        # even on a loaded machine (at 0.1 s, one could come after it and be the probe).
        Scenario.rate_limit(retry_after=0.5),
        Scenario.text("first", delay_s=0.03),  # slow enough that overlap would show
        Scenario.text("ok"),
        Scenario.text("ok"),
        provider="anthropic",
    )
    async with kernel_for() as kernel:
        assert (await refused(kernel)).kind == "rate_limit"  # no retry plugin here
        [hold] = recorder.of("provider:hold")
        results = await asyncio.gather(*(kernel.complete(request()) for _ in range(3)))
    assert sorted(r.text for r in results) == ["first", "ok", "ok"]
    calls = loopback_provider.calls_to("anthropic")
    assert len(calls) == 4
    after = sorted(calls[1:], key=lambda c: c.started_at)
    assert all(c.started_at * 1000 >= hold["untilMs"] - 1 for c in after)  # none during the hold
    probe, rest = after[0], after[1:]
    assert probe.ended_at is not None
    assert all(c.started_at >= probe.ended_at for c in rest)  # the first went alone
    assert (hold["provider"], hold["model"], hold["reason"]) == (
        "anthropic",
        "model-a",
        "rate_limit",
    )
    assert hold["stated"] is True and 0 < hold["durationMs"] <= 550  # 0.5 s + release_jitter
    [release] = recorder.of("provider:release")
    assert (release["provider"], release["model"]) == ("anthropic", "model-a")
    assert sorted(e for e, _ in recorder.waits) == ["end"] * 3 + ["start"] * 3
    await loopback_provider.wait_idle()


async def test_a_second_model_of_the_provider_is_not_held(
    kernel_for: Callable[..., Kernel], loopback_provider: LoopbackServer
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=30), Scenario.text("b"), provider="anthropic"
    )
    async with kernel_for(max_wait_s=1) as kernel:
        await refused(kernel, "model-a")
        assert (await kernel.complete(request("model-b"))).text == "b"
        assert (await refused(kernel, "model-a")).code == HOLD_TOO_LONG
    assert [c.model for c in loopback_provider.calls_to("anthropic")] == ["model-a", "model-b"]
    await loopback_provider.wait_idle()


async def test_keyed_by_provider_the_second_model_is_held_too(
    kernel_for: Callable[..., Kernel], loopback_provider: LoopbackServer, recorder: Any
) -> None:
    loopback_provider.script(Scenario.overloaded(), provider="anthropic")
    async with kernel_for(max_wait_s=1, key="provider", default_hold_s=30) as kernel:
        assert (await refused(kernel, "model-a")).kind == "overloaded"
        held = await refused(kernel, "model-b")
    assert held.code == HOLD_TOO_LONG
    assert "'anthropic'" in str(held) and "'model-b'" in str(held)
    assert len(loopback_provider.calls_to("anthropic")) == 1
    [hold] = recorder.of("provider:hold")
    assert (hold["key"], hold["reason"], hold["stated"]) == ("provider", "overloaded", False)
    await loopback_provider.wait_idle()


async def test_a_wait_over_max_wait_fails_at_once_with_no_request(
    kernel_for: Callable[..., Kernel], loopback_provider: LoopbackServer, recorder: Any
) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_after_ms=45_000), provider="anthropic")
    async with kernel_for(max_wait_s=10) as kernel:
        await refused(kernel)
        held = await refused(kernel)
    assert (held.kind, held.code, held.retryable) == ("rate_limit", HOLD_TOO_LONG, False)
    assert "'anthropic' model 'model-a' is held for another" in str(held)
    assert "(10 s, [provider_hold] max_wait_s)" in str(held)
    assert len(loopback_provider.calls_to("anthropic")) == 1
    assert recorder.waits == []
    [fail_limited, fail_held] = recorder.of("inference:fail")
    assert fail_limited["errorKind"] == "rate_limit" and fail_limited["attempts"] == 1
    assert fail_held["errorKind"] == "rate_limit" and "held for another" in fail_held["error"]
    await loopback_provider.wait_idle()
