"""Observers never make an inference wait (issue 9, item 2).

An `async def` observer that blocks is caught here by deadlock, not by a clock:
it is let go only after the inference has finished, so an inference that waited
for it would never finish (and pytest's timeout fails the test).
"""

from __future__ import annotations

import asyncio
import math

import pytest
from kernel_support import Traces, collect, reply, request, server_error, text_of

from agentcore import hookimpl, hooks
from agentcore.inference import Complete
from agentcore.inference.calls import Attempt, Retry, Wait


class Stuck:
    """Takes an event, then waits on `release`: never, unless the test sets it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[str] = []
        self.cancelled = False

    @hookimpl
    async def on_trace(self, event):
        self.seen.append(event.type)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class RetryOnce:
    @hookimpl
    def on_inference_error(self, attempt: Attempt) -> Retry | None:
        return Retry(0.001) if attempt.number == 1 else None


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_stuck_observer_costs_the_inference_nothing(make_kernel, scripted, streamed):
    stuck, traces = Stuck(), Traces()
    scripted([server_error()], reply("hi there"))
    kernel = make_kernel(plugins={"stuck": stuck, "traces": traces, "retry": RetryOnce()})
    async with kernel:
        if streamed:
            events = await collect(kernel.stream(request()))
            assert isinstance(events[-1], Complete)
            assert text_of(events) == "hi there"
        else:
            assert (await kernel.complete(request())).text == "hi there"
        # A plain-function sink saw every trace at once; the stuck one holds the first.
        assert traces.types == ["inference:start", "inference:retry", "inference:complete"]
        stuck.release.set()  # only now: an inference that waited for it never got here
    # Once let go, it catches up at stop, in order, and nothing of it was dropped.
    assert stuck.seen == traces.types
    assert kernel.hooks.dropped("stuck") == 0


async def test_a_plugin_still_stuck_at_stop_is_cancelled_and_leaves_no_task(
    make_kernel, scripted, log_lines
):
    stuck = Stuck()
    scripted(reply("hi"))
    before = asyncio.all_tasks()
    kernel = make_kernel(plugins={"stuck": stuck})
    async with kernel:
        assert (await kernel.complete(request())).text == "hi"
    assert asyncio.all_tasks() == before
    assert stuck.cancelled
    assert stuck.seen == ["inference:start"]
    assert kernel.hooks.dropped("stuck") == 1  # inference:complete, never taken
    [line] = [line for line in log_lines if "'stuck'" in line]
    assert "plugin 'stuck' could not take 1 observer events" in line
    assert "cancelled" in line


async def test_what_a_stuck_plugin_cannot_take_is_counted_and_logged_not_per_event(
    make_kernel, log_lines, monkeypatch
):
    # One line while it falls behind however long that takes (no clock in this test),
    # and one with the total at stop.
    monkeypatch.setattr(hooks, "DROP_LOG_INTERVAL_S", math.inf)
    stuck = Stuck()
    kernel = make_kernel(plugins={"stuck": stuck})
    sent = hooks.OBSERVER_BACKLOG + 500
    async with kernel:
        for n in range(sent):
            await kernel.emit("acme:tick", n=n)
        # It holds at most one event and has at most the backlog waiting for it.
        assert kernel.hooks.dropped("stuck") >= 499
    dropped = kernel.hooks.dropped("stuck")
    assert len(stuck.seen) + dropped == sent  # every event was taken or counted
    lines = [line for line in log_lines if "'stuck'" in line]
    assert len(lines) == 2
    assert "plugin 'stuck' is not keeping up with its observer hooks" in lines[0]
    assert f"plugin 'stuck' could not take {dropped} observer events" in lines[1]


class Slow:
    """An async observer of traces and waits that cannot go on until `go` is set.

    Its `on_wait_end` is a plain function: one plugin's sync and async observers
    share its backlog, so they stay in order too."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.seen: list[tuple[str, str]] = []

    async def _see(self, item: tuple[str, str]) -> None:
        await self.go.wait()
        await asyncio.sleep(0)
        self.seen.append(item)

    @hookimpl
    async def on_trace(self, event):
        await self._see(("trace", event.type))

    @hookimpl
    async def on_wait_start(self, wait: Wait) -> None:
        await self._see(("wait_start", wait.reason))

    @hookimpl
    def on_wait_end(self, wait: Wait) -> None:
        self.seen.append(("wait_end", wait.reason))


class Inline:
    """The same observations from plain functions: the order they happened in."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def on_trace(self, event):
        self.seen.append(("trace", event.type))

    @hookimpl
    def on_wait_start(self, wait: Wait) -> None:
        self.seen.append(("wait_start", wait.reason))

    @hookimpl
    def on_wait_end(self, wait: Wait) -> None:
        self.seen.append(("wait_end", wait.reason))


async def test_a_slow_plugin_sees_its_events_in_order_and_all_of_them_by_stop(
    make_kernel, scripted
):
    slow, inline = Slow(), Inline()
    scripted([server_error()], reply("one"), reply("two"))
    kernel = make_kernel(plugins={"slow": slow, "inline": inline, "retry": RetryOnce()})
    async with kernel:
        first = await collect(kernel.stream(request()))
        second = await kernel.complete(request())
        assert slow.seen == []  # it has not been let go yet
        slow.go.set()
    assert (text_of(first), second.text) == ("one", "two")
    assert inline.seen[:5] == [
        ("trace", "inference:start"),
        ("trace", "inference:retry"),
        ("wait_start", "backoff"),
        ("wait_end", "backoff"),
        ("trace", "inference:complete"),
    ]
    assert len(inline.seen) == 7
    assert slow.seen == inline.seen
    assert kernel.hooks.dropped("slow") == 0
