"""inference:waiting at the start of every wait, every interval_s while it lasts, and at its end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from agentcore_waiting_trace import waiting_fields

from agentcore.api import (
    Attempt,
    Inference,
    InferenceError,
    Message,
    Request,
    Retry,
    SettingsError,
    Wait,
    hookimpl,
)
from agentcore.testing import Kernel, Scenario

Load = Callable[..., Kernel]


def attempt(number: int = 2, inference_id: str = "inf_7") -> Attempt:
    request = Request("anthropic:claude-x", [Message.user("hi")])
    return Attempt(Inference(inference_id, request, "anthropic", "claude-x", True), number)


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds (bounded: a broken test fails, not hangs)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


async def test_a_wait_is_traced_at_its_start_while_it_lasts_and_at_its_end(
    load: Load, recorder: Any
) -> None:
    async with load() as kernel:
        async with kernel.waiting("hold", attempt(), time.monotonic() + 30) as wait:
            assert len(recorder.of("inference:waiting")) == 1  # at once, at the start
            await until(lambda: len(recorder.of("inference:waiting")) >= 4)
        traces = recorder.of("inference:waiting")
    first, *ticks, _ = traces
    common = {
        "reason": "hold",
        "provider": "anthropic",
        "model": "claude-x",
        "attempt": 2,
        "inferenceId": "inf_7",
        "waitId": wait.id,
    }
    for trace in traces:
        assert {k: trace[k] for k in common} == common
        assert set(trace) == {*common, "remainingMs", "waitedMs", "ended"}
    assert [t["ended"] for t in traces] == [False] * (len(traces) - 1) + [True]
    assert 29_000 < first["remainingMs"] <= 30_000
    remaining = [t["remainingMs"] for t in traces]
    assert remaining == sorted(remaining, reverse=True)  # counts down
    waited = [t["waitedMs"] for t in traces]
    assert waited == sorted(waited)
    assert len(ticks) >= 2


async def test_an_open_ended_wait_has_no_remaining_time(load: Load, recorder: Any) -> None:
    async with load() as kernel, kernel.waiting("hold", attempt(), None):
        await until(lambda: len(recorder.of("inference:waiting")) >= 2)
    traces = recorder.of("inference:waiting")
    assert {t["remainingMs"] for t in traces} == {None}
    assert traces[-1]["ended"] is True


async def test_no_tick_after_the_end(load: Load, recorder: Any) -> None:
    async with load() as kernel:
        async with kernel.waiting("backoff", attempt(), time.monotonic() + 5):
            await until(lambda: len(recorder.of("inference:waiting")) >= 2)
        count = len(recorder.of("inference:waiting"))
        await asyncio.sleep(0.05)  # five intervals
        assert len(recorder.of("inference:waiting")) == count
        assert recorder.of("inference:waiting")[-1]["ended"] is True


async def test_each_wait_has_its_own_ticker(load: Load, recorder: Any) -> None:
    async with (
        load() as kernel,
        kernel.waiting("hold", attempt(1, "inf_a"), None) as a,
        kernel.waiting("backoff", attempt(3, "inf_b"), time.monotonic() + 9) as b,
    ):
        await until(lambda: len(recorder.of("inference:waiting")) >= 6)
    traces = recorder.of("inference:waiting")
    by_wait = {w.id: [t for t in traces if t["waitId"] == w.id] for w in (a, b)}
    assert {t["inferenceId"] for t in by_wait[a.id]} == {"inf_a"}
    assert {t["reason"] for t in by_wait[b.id]} == {"backoff"}
    for own in by_wait.values():
        assert [t["ended"] for t in own].count(True) == 1 and own[-1]["ended"]
        assert len(own) >= 3


async def test_stopping_the_kernel_stops_the_tickers(load: Load, recorder: Any) -> None:
    kernel = load()
    await kernel.start()
    opened = asyncio.Event()

    async def waits_forever() -> None:
        async with kernel.waiting("hold", attempt(), None):
            opened.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(waits_forever())
    await opened.wait()
    await kernel.stop()
    count = len(recorder.of("inference:waiting"))
    await asyncio.sleep(0.05)
    assert len(recorder.of("inference:waiting")) == count  # no ticker left running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.of("inference:waiting")[-1]["ended"] is True


def test_the_fields_of_one_trace() -> None:
    wait = Wait("w1", "backoff", attempt(), started=100.0, until=102.5)
    assert waiting_fields(wait, now=101.0) == {
        "reason": "backoff",
        "provider": "anthropic",
        "model": "claude-x",
        "attempt": 2,
        "inferenceId": "inf_7",
        "waitId": "w1",
        "remainingMs": 1500,
        "waitedMs": 1000,
        "ended": False,
    }
    assert waiting_fields(wait, ended=True, now=103.0)["remainingMs"] == 0


def test_the_interval_must_be_positive(load: Load) -> None:
    with pytest.raises(SettingsError) as caught:
        load("[waiting_trace]\ninterval_s = 0\n")
    assert any("waiting_trace.interval_s" in p for p in caught.value.problems)


class RetryOnceAfter50ms:
    """A stand-in decider (the retry plugin is not loaded here): one 50 ms backoff."""

    @hookimpl
    def on_inference_error(self, attempt: Attempt, error: InferenceError) -> Retry | None:
        return Retry(0.05) if attempt.number == 1 else None


async def test_a_retry_backoff_against_the_loopback_server(
    load: Load, recorder: Any, loopback_provider: Any, loopback_settings: Any
) -> None:
    loopback_provider.script(Scenario.server_error(), Scenario.text("ok"))
    path = loopback_settings(
        providers={"anthropic": "anthropic"}, sections={"waiting_trace": {"interval_s": 0.01}}
    )
    async with load(path=path, plugins={"decider": RetryOnceAfter50ms}) as kernel:
        response = await kernel.complete(Request("anthropic:claude-x", [Message.user("hi")]))
    assert response.text == "ok"
    types = [e.type for e in recorder.events]
    waiting = recorder.of("inference:waiting")
    assert types.index("inference:retry") < types.index("inference:waiting")
    assert len(types) - 1 - types[::-1].index("inference:waiting") < types.index(
        "inference:complete"
    )
    [start] = recorder.of("inference:start")
    first, last = waiting[0], waiting[-1]
    assert first["reason"] == "backoff" and first["attempt"] == 1
    assert (first["provider"], first["model"]) == ("anthropic", "claude-x")
    assert first["inferenceId"] == start["inferenceId"]
    assert 0 < first["remainingMs"] <= 50
    assert last["ended"] is True and last["waitId"] == first["waitId"]
    assert last["waitedMs"] >= first["waitedMs"]
    assert [t["ended"] for t in waiting].count(True) == 1
    await loopback_provider.wait_idle()
