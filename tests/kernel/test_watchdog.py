"""The watchdog against a late-running event loop: after a stall, asyncio runs an expired
timer before the wake-up of a task whose data arrived in the same turn (the soak saw
streams the provider had sent whole cut at the progress timeout under heavy load)."""

from __future__ import annotations

import asyncio
import contextvars
import time

from agentcore.inference.watchdog import TIMER_CONTEXT, Watchdog

PROGRESS_S = 0.05
STALL_S = 2 * PROGRESS_S  # the loop blocked past the deadline: not a timing the test asserts


async def read_one(data: asyncio.Future[str], reading: asyncio.Event) -> str:
    """An attempt's read: wait on the provider under the watchdog, as the kernel does."""
    watchdog = Watchdog(PROGRESS_S, 60.0)
    try:
        watchdog.waiting = True
        reading.set()
        try:
            token = await data
        except asyncio.CancelledError:
            if watchdog.took_cancel():
                return f"cut: {watchdog.expired}"
            raise
        finally:
            watchdog.waiting = False
        watchdog.progress()
        return token
    finally:
        watchdog.cancel()


def stall_the_loop() -> None:
    time.sleep(STALL_S)  # blocks the loop, as a long step of another task would


async def test_data_that_arrived_in_the_turn_the_timer_runs_late_is_read_not_cut() -> None:
    loop = asyncio.get_running_loop()
    data: asyncio.Future[str] = loop.create_future()
    reading = asyncio.Event()
    reader = asyncio.create_task(read_one(data, reading))
    await reading.wait()
    # The provider's bytes are delivered (a ready callback, as a socket's data_received
    # is) in the same turn as the overdue timer runs, ahead of it.
    loop.call_soon(data.set_result, "token")
    stall_the_loop()
    assert await reader == "token"


async def test_a_provider_that_sends_nothing_is_still_cut() -> None:
    loop = asyncio.get_running_loop()
    data: asyncio.Future[str] = loop.create_future()
    reading = asyncio.Event()
    reader = asyncio.create_task(read_one(data, reading))
    await reading.wait()
    stall_the_loop()
    assert await reader == "cut: progress_timeout"


async def test_the_watchdogs_timer_keeps_no_copy_of_the_callers_context_nor_a_method() -> None:
    """A stream holds its watchdog's timer for its whole life: it runs in the one shared
    `TIMER_CONTEXT`, whatever the caller's context holds, re-armed or not."""
    seen = contextvars.ContextVar("seen", default="unset")
    seen.set("the caller's")
    loop = asyncio.get_running_loop()
    watchdog = Watchdog(60.0, 60.0)
    try:
        made = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert made and all(h._context is TIMER_CONTEXT for h in made)
        assert [h._callback for h in made] == [watchdog]  # itself: no bound method held
        assert TIMER_CONTEXT.run(seen.get) == "unset"
    finally:
        watchdog.cancel()
