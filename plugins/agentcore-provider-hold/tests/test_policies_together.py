"""The three default policies as installed (found by entry point), together, on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentcore.api import Message, Request
from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, LoopbackServer, Scenario

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides

pytest.importorskip("agentcore_retry")
pytest.importorskip("agentcore_waiting_trace")


async def test_retry_hold_and_waiting_traces_together(
    loopback_settings: Callable[..., Path], loopback_provider: LoopbackServer, recorder: Any
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=0.1),
        Scenario.text("probe", delay_s=0.03),
        Scenario.text("ok"),
        Scenario.text("ok"),
        provider="anthropic",
    )
    path = loopback_settings(
        providers={"anthropic": "anthropic"},
        sections={
            "plugins": {"disabled": ["mcpl-router"]},
            "retry": {"initial_delay_s": 0.001, "max_delay_s": 0.01, "jitter_s": 0},
            "waiting_trace": {"interval_s": 0.02},
        },
    )
    kernel = Kernel.load(path, environ=LOOPBACK_ENV, plugins={"recorder": recorder})
    states = {r.name: (r.distribution, r.state) for r in kernel.records if r.state == "active"}
    assert states["retry"] == ("agentcore-retry", "active")
    assert states["provider-hold"] == ("agentcore-provider-hold", "active")
    assert states["waiting-trace"] == ("agentcore-waiting-trace", "active")
    async with kernel:
        first = asyncio.create_task(kernel.complete(request()))
        await until(lambda: bool(recorder.of("provider:hold")))
        others = [asyncio.create_task(kernel.complete(request())) for _ in range(2)]
        results = await asyncio.gather(first, *others)
    assert sorted(r.text for r in results) == ["ok", "ok", "probe"]
    calls = sorted(loopback_provider.calls_to("anthropic"), key=lambda c: c.started_at)
    assert len(calls) == 4
    [hold] = recorder.of("provider:hold")
    assert all(c.started_at * 1000 >= hold["untilMs"] - 1 for c in calls[1:])
    assert calls[1].ended_at is not None
    assert all(c.started_at >= calls[1].ended_at for c in calls[2:])  # the probe went alone
    [retry] = recorder.of("inference:retry")
    assert retry["delayMs"] >= 100  # the stated wait
    assert len(recorder.of("provider:release")) == 1
    waiting = recorder.of("inference:waiting")
    reasons = {t["waitId"]: t["reason"] for t in waiting}
    assert sorted(reasons.values()).count("hold") >= 2  # the two held calls (and maybe the retry)
    assert "backoff" in reasons.values()  # the retried call's backoff
    assert [t["ended"] for t in waiting].count(True) == len(reasons)  # each wait ended once
    await loopback_provider.wait_idle()


def request() -> Request:
    return Request("anthropic:model-a", [Message.user("hi")])


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")
