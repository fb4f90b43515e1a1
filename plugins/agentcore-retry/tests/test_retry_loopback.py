"""The retry plugin alone against agentcore.testing's loopback provider, on both wire formats."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from agentcore_retry import RetryPolicy

from agentcore.api import Complete, Failed, InferenceError, Message, Request
from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, LoopbackServer, Scenario

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides

WIRES = ["anthropic", "openai"]
FAST = {
    "initial_delay_s": 0.001,
    "max_delay_s": 0.01,
    "jitter_s": 0,
    "overloaded": {"max_attempts": 6, "initial_delay_s": 0.002, "max_delay_s": 0.02, "jitter_s": 0},
}


@pytest.fixture
def kernel_for(loopback_settings: Callable[..., Path], traces: Any) -> Callable[..., Kernel]:
    def build(inference: dict[str, Any] | None = None, **retry: Any) -> Kernel:
        path = loopback_settings(
            providers={"anthropic": "anthropic", "openai": "openai"},
            inference=inference,
            sections={"retry": {**FAST, **retry}},
        )
        return Kernel.load(
            path,
            environ=LOOPBACK_ENV,
            discover_plugins=False,
            plugins={"retry": RetryPolicy, "trace-log": traces},
        )

    return build


def request(wire: str) -> Request:
    return Request(f"{wire}:model-x", [Message.user("hi")])


STATED_FORMS = {
    "retry-after": {"retry_after": 0.05},
    "retry-after-ms": {"retry_after_ms": 50},
    "retry-after-date": {"retry_after_date": 0.05},  # whole seconds: at most 50 ms from now
    "body-retry_after": {"body_retry_after": 0.05},
    "body-retry_after_ms": {"body_retry_after_ms": 50},
    "retryDelay": {"retry_delay": "0.05s"},
}


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("form", STATED_FORMS)
async def test_a_429_with_a_stated_wait_then_success(
    wire: str,
    form: str,
    kernel_for: Callable[..., Kernel],
    loopback_provider: LoopbackServer,
    traces: Any,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(**STATED_FORMS[form]), Scenario.text("ok"), provider=wire
    )
    async with kernel_for() as kernel:
        response = await kernel.complete(request(wire))
    assert response.text == "ok"
    assert len(loopback_provider.calls_to(wire)) == 2
    [retry] = traces.of("inference:retry")
    assert retry["attempt"] == 1
    assert retry["error"].startswith("rate_limit 429")
    if form != "retry-after-date":
        assert retry["delayMs"] >= 50  # the stated wait, though max_delay_s is 10 ms
    await loopback_provider.wait_idle()


@pytest.mark.parametrize("wire", WIRES)
async def test_529s_follow_the_overloaded_schedule(
    wire: str,
    kernel_for: Callable[..., Kernel],
    loopback_provider: LoopbackServer,
    traces: Any,
) -> None:
    loopback_provider.script(*[Scenario.overloaded()] * 5, Scenario.text("ok"), provider=wire)
    async with kernel_for() as kernel:
        response = await kernel.complete(request(wire))
    assert response.text == "ok"
    assert len(loopback_provider.calls_to(wire)) == 6  # more than [retry] max_attempts (4)
    retries = traces.of("inference:retry")
    assert [r["delayMs"] for r in retries] == [2, 4, 8, 16, 20]
    assert {r["error"].split(":")[0] for r in retries} == {"overloaded 529"}
    await loopback_provider.wait_idle()


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    ("scenario", "kind"),
    [
        (Scenario.bad_request(), "invalid_request"),
        (Scenario.unauthorized(), "auth"),
        (Scenario.quota(), "quota"),
        (Scenario.context_length(), "context_length"),
    ],
    ids=["400", "401", "quota-429", "context-length"],
)
async def test_permanent_failures_are_tried_once(
    wire: str,
    scenario: Scenario,
    kind: str,
    kernel_for: Callable[..., Kernel],
    loopback_provider: LoopbackServer,
    traces: Any,
) -> None:
    loopback_provider.script(scenario, Scenario.text("never sent"), provider=wire)
    async with kernel_for() as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request(wire))
    assert caught.value.kind == kind
    assert len(loopback_provider.calls_to(wire)) == 1
    assert traces.of("inference:retry") == []
    [fail] = traces.of("inference:fail")
    assert (fail["attempts"], fail["errorKind"]) == (1, kind)
    await loopback_provider.wait_idle()


@pytest.mark.parametrize("wire", WIRES)
async def test_a_stated_wait_over_the_limit_fails_at_once(
    wire: str,
    kernel_for: Callable[..., Kernel],
    loopback_provider: LoopbackServer,
    traces: Any,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=900), Scenario.text("never sent"), provider=wire
    )
    async with kernel_for(inference={"max_stated_wait_s": 600}) as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request(wire))
    assert "asked to wait 900 s" in str(caught.value)
    assert len(loopback_provider.calls_to(wire)) == 1
    [fail] = traces.of("inference:fail")
    assert "asked to wait 900 s" in fail["error"]
    await loopback_provider.wait_idle()


@pytest.mark.parametrize("wire", WIRES)
async def test_a_stream_cut_before_any_text_is_retried_but_not_after(
    wire: str,
    kernel_for: Callable[..., Kernel],
    loopback_provider: LoopbackServer,
    traces: Any,
) -> None:
    loopback_provider.script(
        Scenario.cut(""), Scenario.text("ok"), Scenario.cut("Partial "), provider=wire
    )
    async with kernel_for() as kernel:
        async with aclosing(kernel.stream(request(wire))) as events:
            first = [e async for e in events]
        async with aclosing(kernel.stream(request(wire))) as events:
            second = [e async for e in events]
    assert isinstance(first[-1], Complete)
    assert isinstance(second[-1], Failed)  # visible text went out: never retried
    assert len(loopback_provider.calls_to(wire)) == 3
    assert len(traces.of("inference:retry")) == 1
    await loopback_provider.wait_idle()
