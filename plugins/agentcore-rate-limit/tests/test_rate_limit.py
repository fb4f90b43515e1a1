"""The rate limit in kernels with no other policy, on the memory store and on a real Redis
(several kernels on one Redis prefix are replicas of one fleet)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from agentcore_rate_limit import LIMIT_WAIT_TOO_LONG, SLOTS_TRACE

from agentcore.api import SHUTTING_DOWN, InferenceError, Message, Request
from agentcore.testing import STALL, Kernel, Stall
from agentcore.testing.claims import QuotaPlugin

Load = Callable[..., Kernel]


def most_at_once(provider: Any) -> int:
    """The most calls the provider had in flight at one time."""
    now = most = 0
    for event in provider.log:
        now += 1 if event.event == "start" else -1
        most = max(most, now)
    return most


def req(tag: object = None, model: str = "m1") -> Request:
    return Request(f"fake:{model}", [Message.user("hi")], metadata={"tag": tag})


async def fail(kernel: Kernel, request: Request) -> InferenceError:
    with pytest.raises(InferenceError) as caught:
        await kernel.complete(request)
    return caught.value


async def test_max_in_flight_holds_calls_at_admission(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.latency_s = 0.05
    async with load("[rate_limit.providers.fake]\nmax_in_flight = 2") as kernel:
        results = await asyncio.gather(*(kernel.complete(req(i)) for i in range(6)))
    assert [r.text for r in results] == ["hello"] * 6
    assert most_at_once(provider) == 2
    waits = [(event, w.reason) for event, w in recorder.waits]
    assert waits.count(("start", "limit")) == waits.count(("end", "limit")) >= 4


async def test_every_slot_taken_and_given_back_is_traced_with_the_count_and_the_limit(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.latency_s = 0.05
    async with load("[rate_limit.providers.fake]\nmax_in_flight = 2") as kernel:
        await asyncio.gather(*(kernel.complete(req(i)) for i in range(5)))
    slots = recorder.of(SLOTS_TRACE)
    assert [s["change"] for s in slots].count("taken") == 5
    assert [s["change"] for s in slots].count("released") == 5
    assert {(s["provider"], s["maxInFlight"], s["scope"]) for s in slots} == {
        ("fake", 2, "replica")
    }
    # The count follows the changes one by one, reaches the limit, never passes it.
    held = 0
    for s in slots:
        held += 1 if s["change"] == "taken" else -1
        assert s["inUse"] == held
    assert max(s["inUse"] for s in slots) == 2
    assert slots[-1]["inUse"] == 0
    started = {e["inferenceId"] for e in recorder.of("inference:start")}
    assert {s["inferenceId"] for s in slots} == started
    assert {s["attempt"] for s in slots} == {1}


async def test_a_slot_given_back_at_shutdown_is_traced(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [STALL]
    kernel = load("[rate_limit.providers.fake]\nmax_in_flight = 3")
    await kernel.start()
    stalled = asyncio.create_task(kernel.complete(req("stalled")))
    await provider.stalled.wait()
    assert [(s["change"], s["inUse"]) for s in recorder.of(SLOTS_TRACE)] == [("taken", 1)]
    await kernel.stop()
    await asyncio.gather(stalled, return_exceptions=True)
    assert [(s["change"], s["inUse"]) for s in recorder.of(SLOTS_TRACE)] == [
        ("taken", 1),
        ("released", 0),
    ]


async def test_a_provider_limited_per_minute_only_takes_no_slot(
    load: Load, provider: Any, recorder: Any
) -> None:
    async with load("[rate_limit.providers.fake]\nrequests_per_minute = 10") as kernel:
        await kernel.complete(req(1))
    assert recorder.of(SLOTS_TRACE) == []


@pytest.mark.parametrize("backend", ["redis"])
async def test_max_in_flight_is_one_limit_for_every_replica(load: Load, provider: Any) -> None:
    provider.latency_s = 0.1
    async with AsyncExitStack() as stack:
        replicas = [
            await stack.enter_async_context(load("[rate_limit.providers.fake]\nmax_in_flight = 3"))
            for _ in range(3)
        ]
        results = await asyncio.gather(*(replicas[i % 3].complete(req(i)) for i in range(12)))
    assert len(results) == 12
    assert most_at_once(provider) <= 3


async def test_a_provider_without_limits_is_not_held(load: Load, provider: Any) -> None:
    provider.latency_s = 0.05
    limits = "[rate_limit.providers.other]\nmax_in_flight = 1"
    async with load(limits, extra='[providers.other]\nkind = "scripted"') as kernel:
        await asyncio.gather(*(kernel.complete(req(i)) for i in range(4)))
    assert most_at_once(provider) == 4


async def test_over_requests_per_minute_a_call_fails_at_once_naming_the_limit(
    load: Load, provider: Any, recorder: Any
) -> None:
    limits = "max_wait_s = 5\n[rate_limit.providers.fake]\nrequests_per_minute = 2"
    async with load(limits) as kernel:
        await kernel.complete(req(1))
        await kernel.complete(req(2))
        error = await fail(kernel, req(3))
    assert (error.kind, error.code, error.retryable) == ("rate_limit", LIMIT_WAIT_TOO_LONG, False)
    assert "'fake' is at its limit of 2 requests per minute" in str(error)
    assert "[rate_limit.providers.fake] requests_per_minute" in str(error)
    assert "(5 s, [rate_limit] max_wait_s)" in str(error)
    assert error.retry_after_s is not None and 55 < error.retry_after_s <= 60
    assert len(provider.calls) == 2
    assert recorder.waits == []  # it knew the wait was too long, and did not begin it


async def test_a_call_waits_for_the_window_announced(
    load: Load, provider: Any, recorder: Any
) -> None:
    # One request a minute, and a window of 60 s: the second call's wait is announced as a
    # limit wait with its end, and shutdown ends it.
    async with load("[rate_limit.providers.fake]\nrequests_per_minute = 1") as kernel:
        await kernel.complete(req(1))
        second = asyncio.create_task(kernel.complete(req(2)))
        while not recorder.waits:
            await asyncio.sleep(0.01)
        [(event, wait)] = recorder.waits
        assert (event, wait.reason) == ("start", "limit")
        remaining = wait.remaining_s()
        assert remaining is not None and 55 < remaining <= 60
    [error] = await asyncio.gather(second, return_exceptions=True)
    assert isinstance(error, InferenceError) and error.code == SHUTTING_DOWN


async def test_a_call_waiting_for_the_window_holds_no_slot(
    load: Load, provider: Any, recorder: Any
) -> None:
    limits = "[rate_limit.providers.fake]\nmax_in_flight = 1\nrequests_per_minute = 1"
    async with load(limits) as kernel:
        await kernel.complete(req(1))
        second = asyncio.create_task(kernel.complete(req(2)))
        while not recorder.waits:
            await asyncio.sleep(0.01)
        # The only slot is free while the second call waits for the window: the store
        # takes both or neither.
        taken = await kernel.fleet.take(
            "fake", "another replica", slots=1, lease_s=30, per_window=None, window_s=60
        )
        assert taken is None
        assert await kernel.fleet.release_slot("fake", "another replica")
    [error] = await asyncio.gather(second, return_exceptions=True)
    assert isinstance(error, InferenceError) and error.code == SHUTTING_DOWN
    assert len(provider.calls) == 1


async def test_waiting_longer_than_max_wait_for_a_slot_fails_naming_the_limit(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [STALL]
    limits = "max_wait_s = 0.3\n[rate_limit.providers.fake]\nmax_in_flight = 1"
    async with load(limits) as kernel:
        stalled = asyncio.create_task(kernel.complete(req("stalled")))
        await provider.stalled.wait()
        error = await fail(kernel, req("second"))
        stalled.cancel()
    assert (error.kind, error.code) == ("rate_limit", LIMIT_WAIT_TOO_LONG)
    assert "'fake' is at its limit of 1 calls in flight across the fleet" in str(error)
    assert "[rate_limit.providers.fake] max_in_flight" in str(error)
    assert [c.request.metadata["tag"] for c in provider.calls] == ["stalled"]
    assert [(e, w.reason) for e, w in recorder.waits] == [("start", "limit"), ("end", "limit")]


@pytest.mark.parametrize("ending", ["completed", "failed", "cancelled"])
async def test_a_slot_is_given_back_however_the_attempt_ends(
    load: Load, provider: Any, recorder: Any, ending: str
) -> None:
    first: Any = {
        "completed": Stall(0.05),
        "failed": InferenceError("server", "boom", status=500),
        "cancelled": STALL,
    }[ending]
    provider.script = [first]
    limits = "max_wait_s = 2\n[rate_limit.providers.fake]\nmax_in_flight = 1"
    async with load(limits) as kernel:
        task = asyncio.create_task(kernel.complete(req("first")))
        await provider.stalled.wait() if ending != "failed" else await asyncio.sleep(0.05)
        if ending == "cancelled":
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # No waiting: the slot is free the moment the first call has ended. Asserted on the
        # waits traced, not a 1 s bound a loaded machine's round trips could pass; a slot
        # not given back fails too (a traced wait, then max_wait_s).
        assert (await asyncio.wait_for(kernel.complete(req("next")), 10)).text == "hello"
    assert recorder.waits == []


@pytest.mark.parametrize("backend", ["redis"])
async def test_shutdown_gives_every_slot_back_to_the_fleet(load: Load, provider: Any) -> None:
    provider.script = [STALL]
    limits = "max_wait_s = 5\n[rate_limit.providers.fake]\nmax_in_flight = 1"
    leaving = load(limits)
    await leaving.start()
    stalled = asyncio.create_task(leaving.complete(req("stalled")))
    await provider.stalled.wait()
    async with load(limits) as staying:
        waiting = asyncio.create_task(staying.complete(req("waiting")))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await leaving.stop()  # ends the stalled call and releases its slot
        assert (await asyncio.wait_for(waiting, 3)).text == "hello"
    assert (await asyncio.gather(stalled, return_exceptions=True))[0].code == SHUTTING_DOWN


async def test_shutdown_wakes_a_waiting_call_with_an_error(load: Load, provider: Any) -> None:
    provider.script = [STALL]
    limits = "[rate_limit.providers.fake]\nmax_in_flight = 1"
    kernel = load(limits)
    await kernel.start()
    stalled = asyncio.create_task(kernel.complete(req("stalled")))
    await provider.stalled.wait()
    waiting = asyncio.create_task(kernel.complete(req("waiting")))
    await asyncio.sleep(0.05)
    await kernel.stop()
    for task in (stalled, waiting):
        error = (await asyncio.gather(task, return_exceptions=True))[0]
        assert isinstance(error, InferenceError) and error.code == SHUTTING_DOWN


async def test_a_call_another_claim_refuses_takes_no_slot(
    load: Load, provider: Any, recorder: Any
) -> None:
    """The slot and a third-party claim (a ``quota``, agentcore.testing.claims) are decided
    at once: the quota refuses the second call, which takes no slot, so the third (its
    quota raised) is admitted at once with max_in_flight = 1."""
    limits = "max_wait_s = 2\n[rate_limit.providers.fake]\nmax_in_flight = 1"
    quota = QuotaPlugin({"fake": (1.0, 1.0, 1.0)})  # one call's worth, settled in full
    async with load(limits, plugins={"quota": quota}) as kernel:
        assert (await kernel.complete(req("first"))).text == "hello"
        # Its release runs in a task of its own (a Redis round trip there): wait for its
        # trace, not a fixed 0.05 s a loaded machine can outrun.
        async with asyncio.timeout(10):
            while len(recorder.of(SLOTS_TRACE)) < 2:
                await asyncio.sleep(0.01)
        assert "the quota claim" in str(await fail(kernel, req("refused")))
        quota.limits["fake"] = (2.0, 1.0, 1.0)
        # Admitted at once: no wait traced (a refused call holding the slot would show one).
        assert (await asyncio.wait_for(kernel.complete(req("next")), 10)).text == "hello"
    assert recorder.waits == []
    changes = [(s["change"], s["inUse"]) for s in recorder.of(SLOTS_TRACE)]
    assert changes == [("taken", 1), ("released", 0), ("taken", 1), ("released", 0)]
    assert [c.request.metadata["tag"] for c in provider.calls] == ["first", "next"]
