"""The provider hold in a kernel with no other policy (no retry, no waiting traces)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from typing import Any

import agentcore_provider_hold
import pytest
from agentcore_provider_hold import HOLD_TOO_LONG

from agentcore.api import (
    HOLD,
    SHUTTING_DOWN,
    Attempt,
    Claim,
    ClaimRefusal,
    Complete,
    Failed,
    InferenceError,
    MemoryFleetStore,
    Message,
    Request,
    Retry,
    Scalar,
    hookimpl,
)
from agentcore.testing import Kernel, Stall

Load = Callable[..., Kernel]


def req(model: str = "m1", tag: object = None) -> Request:
    return Request(f"fake:{model}", [Message.user("hi")], metadata={"tag": tag})


def limited(retry_after_s: float | None = None, kind: Any = "rate_limit") -> InferenceError:
    status = 429 if kind == "rate_limit" else 529
    return InferenceError(kind, f"scripted {kind}", status=status, retry_after_s=retry_after_s)


async def fail(kernel: Kernel, request: Request) -> InferenceError:
    with pytest.raises(InferenceError) as caught:
        await kernel.complete(request)
    return caught.value


def alone_first(log: list[Any]) -> bool:
    """The first call in `log` ended before any other started."""
    return log[0].event == "start" and log[1].event == "end" and log[1].tag == log[0].tag


async def test_a_rate_limit_holds_and_says_so(load: Load, provider: Any, recorder: Any) -> None:
    provider.script = [limited(retry_after_s=30)]
    async with load("max_wait_s = 1") as kernel:
        before = time.time()
        await fail(kernel, req(tag="a"))
    [hold] = recorder.of("provider:hold")
    assert hold["provider"] == "fake"
    assert hold["model"] == "m1"
    assert hold["key"] == "provider_model"
    assert hold["reason"] == "rate_limit"
    assert hold["stated"] is True
    assert hold["error"] == "rate_limit 429: scripted rate_limit"
    assert 29_000 < hold["durationMs"] <= 30_000
    assert (
        before * 1000 + 29_000 < hold["untilMs"] <= time.time() * 1000 + 30_001
    )  # rounded to the ms
    assert hold["inferenceId"] == recorder.of("inference:start")[0]["inferenceId"]


async def test_a_hold_is_made_longer_by_release_jitter(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(retry_after_s=30)]
    async with load("max_wait_s = 1\nrelease_jitter = 0.1") as kernel:
        await fail(kernel, req())
    [hold] = recorder.of("provider:hold")
    assert 29_000 < hold["durationMs"] <= 33_000  # 30 s, up to a tenth longer


async def test_no_stated_wait_holds_for_the_default(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(kind="overloaded")]
    async with load("default_hold_s = 42\nmax_wait_s = 1") as kernel:
        await fail(kernel, req())
    [hold] = recorder.of("provider:hold")
    assert (hold["reason"], hold["stated"]) == ("overloaded", False)
    assert 41_000 < hold["durationMs"] <= 42_000


async def test_held_calls_make_no_request_and_the_first_goes_alone(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(retry_after_s=0.1)]
    async with load() as kernel:
        await fail(kernel, req(tag="a"))
        [hold] = recorder.of("provider:hold")
        results = await asyncio.gather(
            kernel.complete(req(tag="b")),
            kernel.complete(req(tag="c")),
            collect(kernel.stream(req(tag="d"))),
        )
    assert [r.text for r in results[:2]] == ["hello", "hello"]
    assert isinstance(results[2][-1], Complete)
    later = provider.log[2:]  # after a's call
    assert len(later) == 6
    assert all(c.at * 1000 >= hold["untilMs"] - 1 for c in later)  # none during the hold
    assert alone_first(later)  # the probe went alone; the others only after it succeeded
    [release] = recorder.of("provider:release")
    assert release["provider"] == "fake" and release["model"] == "m1"
    assert release["key"] == "provider_model"
    assert release["heldMs"] >= 100
    # every held call announced its wait, once, as a hold wait, and ended it
    starts = [w for event, w in recorder.waits if event == "start"]
    ends = [w for event, w in recorder.waits if event == "end"]
    assert sorted(w.attempt.inference.request.metadata["tag"] for w in starts) == ["b", "c", "d"]
    assert {w.reason for w in starts} == {"hold"}
    assert sorted(w.id for w in ends) == sorted(w.id for w in starts)


async def test_another_model_of_the_provider_is_not_held(load: Load, provider: Any) -> None:
    provider.script = [limited(retry_after_s=30)]
    async with load("max_wait_s = 1") as kernel:
        await fail(kernel, req("m1"))
        assert (await kernel.complete(req("m2"))).text == "hello"
        held = await fail(kernel, req("m1"))
    assert held.code == HOLD_TOO_LONG
    assert [c.model for c in provider.starts()] == ["m1", "m2"]


async def test_keyed_by_provider_every_model_is_held(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(retry_after_s=30)]
    async with load('max_wait_s = 1\nkey = "provider"') as kernel:
        await fail(kernel, req("m1"))
        held = await fail(kernel, req("m2"))
    assert held.code == HOLD_TOO_LONG and "'m2'" in str(held)
    assert [c.model for c in provider.starts()] == ["m1"]
    assert recorder.of("provider:hold")[0]["key"] == "provider"


async def test_a_wait_over_max_wait_fails_at_once_naming_provider_model_and_wait(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(retry_after_s=300)]
    async with load("max_wait_s = 120") as kernel:
        await fail(kernel, req())
        held = await fail(kernel, req())
        async with aclosing(kernel.stream(req())) as events:
            streamed = [e async for e in events]
    message = str(held)
    assert "'fake'" in message and "'m1'" in message
    assert "held for another 300 s" in message or "held for another 299 s" in message
    assert "120 s, [provider_hold] max_wait_s" in message
    assert (held.kind, held.retryable, held.code) == ("rate_limit", False, HOLD_TOO_LONG)
    assert held.retry_after_s is not None and 299 < held.retry_after_s <= 300
    assert isinstance(streamed[-1], Failed) and streamed[-1].error.code == HOLD_TOO_LONG
    assert len(provider.starts()) == 1  # no call made while held
    assert recorder.waits == []  # failed at once: nothing waited
    assert len(recorder.of("provider:hold")) == 1  # its own error started no new hold


async def test_unset_max_wait_is_the_kernels_limit_on_a_stated_wait(
    load: Load, provider: Any
) -> None:
    """One limit for every policy that waits: [inference] max_stated_wait_s, unless the
    deployment gives the hold its own."""
    provider.script = [limited(retry_after_s=300)]
    async with load(extra="[inference]\nmax_stated_wait_s = 120\n") as kernel:
        await fail(kernel, req())
        held = await fail(kernel, req())
    assert "120 s, [inference] max_stated_wait_s" in str(held)
    assert held.code == HOLD_TOO_LONG
    assert len(provider.starts()) == 1


async def test_the_longest_hold_wins(load: Load, provider: Any, recorder: Any) -> None:
    # Two calls in flight when the provider limits each time (same latency: they end in order).
    provider.script = [limited(30), limited(10), limited(10), limited(60)]
    async with load("max_wait_s = 1") as kernel:
        # a shorter stated wait does not shorten the hold...
        await asyncio.gather(fail(kernel, req("m1", 1)), fail(kernel, req("m1", 2)))
        # ...and a longer one lengthens it
        await asyncio.gather(fail(kernel, req("m2", 3)), fail(kernel, req("m2", 4)))
    holds = [(h["model"], round(h["durationMs"] / 1000)) for h in recorder.of("provider:hold")]
    assert holds == [("m1", 30), ("m2", 10), ("m2", 60)]


async def collect(events: Any) -> list[Any]:
    async with aclosing(events) as stream:
        return [e async for e in stream]


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds (bounded: a broken test fails, not hangs)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


async def test_a_probe_that_is_limited_again_starts_a_new_hold(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(0.05), limited(0.05)]
    async with load() as kernel:
        await fail(kernel, req(tag="a"))
        results = await asyncio.gather(
            *(kernel.complete(req(tag=t)) for t in "bcd"), return_exceptions=True
        )
    failures = [r for r in results if isinstance(r, InferenceError)]
    assert [f.kind for f in failures] == ["rate_limit"]  # the probe; no retry plugin here
    holds = recorder.of("provider:hold")
    assert len(holds) == 2
    later = provider.log[2:]
    assert len(later) == 6
    assert alone_first(later)  # the first probe, limited again
    assert alone_first(later[2:])  # after the new hold, again one goes first
    assert all(c.at * 1000 >= holds[1]["untilMs"] - 1 for c in later[2:])
    [release] = recorder.of("provider:release")
    assert release["inferenceId"] != holds[1]["inferenceId"]


async def test_a_probe_that_fails_otherwise_hands_over_to_the_next(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(0.05), InferenceError("server", "scripted 500", status=500)]
    async with load() as kernel:
        await fail(kernel, req(tag="a"))
        results = await asyncio.gather(
            *(kernel.complete(req(tag=t)) for t in "bcd"), return_exceptions=True
        )
    assert sorted(type(r).__name__ for r in results) == ["InferenceError", "Response", "Response"]
    assert len(recorder.of("provider:hold")) == 1  # a server error starts no hold
    later = provider.log[2:]
    assert alone_first(later) and alone_first(later[2:])
    assert len(recorder.of("provider:release")) == 1


async def test_a_cancelled_probe_hands_over_to_the_next(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(0.05), provider.STALL]
    async with load() as kernel:
        await fail(kernel, req(tag="a"))
        tasks = {t: asyncio.create_task(kernel.complete(req(tag=t))) for t in "bcd"}
        await until(lambda: len(provider.starts()) == 2)
        probe = provider.starts()[1].tag
        tasks[probe].cancel()
        done = await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert sum(isinstance(r, asyncio.CancelledError) for r in done) == 1
    assert sum(not isinstance(r, BaseException) for r in done) == 2
    later = provider.log[2:]
    assert later[0].tag == later[1].tag == probe  # the stalled probe, closed by the cancel
    assert alone_first(later[2:])  # then the next probe, alone
    assert len(recorder.of("provider:release")) == 1


async def test_a_wait_behind_a_running_probe_is_bounded_by_max_wait(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(0.05), provider.STALL]  # the probe never ends by itself
    async with load("max_wait_s = 0.3") as kernel:
        await fail(kernel, req(tag="a"))
        probe = asyncio.create_task(kernel.complete(req(tag="probe")))
        await until(lambda: len(provider.starts()) == 2)
        # A guard against hanging, not a timing: without the bound this waits for the probe.
        behind = await asyncio.wait_for(fail(kernel, req(tag="behind")), 30)
        assert not probe.done()  # it failed while the probe still ran
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
    message = str(behind)
    assert (behind.kind, behind.retryable, behind.code) == ("rate_limit", False, HOLD_TOO_LONG)
    assert "'fake'" in message and "'m1'" in message
    assert "goes first after the hold has not ended" in message
    assert "0.3 s, [provider_hold] max_wait_s" in message
    assert len(provider.starts()) == 2  # it made no call
    waits = [
        (event, w.reason)
        for event, w in recorder.waits
        if w.attempt.inference.request.metadata["tag"] == "behind"
    ]
    assert waits == [("start", "hold"), ("end", "hold")]  # announced, and ended
    assert len(recorder.of("provider:hold")) == 1  # its error started no new hold


async def test_a_call_from_before_the_hold_does_not_release_it(
    load: Load, provider: Any, recorder: Any
) -> None:
    provider.script = [limited(30)]  # the second call, in flight already, succeeds
    async with load("max_wait_s = 1") as kernel:
        first, second = await asyncio.gather(
            kernel.complete(req(tag=1)), kernel.complete(req(tag=2)), return_exceptions=True
        )
        assert isinstance(first, InferenceError) and not isinstance(second, BaseException)
        assert recorder.of("provider:release") == []
        assert (await fail(kernel, req(tag=3))).code == HOLD_TOO_LONG  # still held


class StuckSink:
    """An async trace sink that takes one event and never returns."""

    @hookimpl
    async def on_trace(self) -> None:
        await asyncio.Event().wait()


class RetryAtOnce:
    """A stand-in decider (the retry plugin is not loaded here): retry the first failure now."""

    @hookimpl
    def on_inference_error(self, attempt: Attempt) -> Retry | None:
        return Retry(0.0) if attempt.number == 1 else None


async def test_a_retry_at_once_waits_for_the_hold_while_a_sink_is_stuck(
    load: Load, provider: Any, recorder: Any
) -> None:
    # The hold is set in an async on_attempt_end, which the kernel awaits: the retry's
    # admission sees it. The stuck sink, an observer, holds nothing up.
    provider.script = [limited(retry_after_s=0.05)]
    plugins = {"stuck": StuckSink(), "retry": RetryAtOnce()}
    async with load(plugins=plugins) as kernel:
        response = await kernel.complete(req())
    assert response.text == "hello"
    [hold] = recorder.of("provider:hold")
    waits = [(event, w.reason, w.attempt.number) for event, w in recorder.waits]
    assert waits == [
        ("start", "backoff", 1),
        ("end", "backoff", 1),
        ("start", "hold", 2),
        ("end", "hold", 2),
    ]
    _, second = provider.starts()
    assert second.at * 1000 >= hold["untilMs"] - 1


@pytest.mark.parametrize("how", ["stop", "stopping"])
async def test_shutdown_wakes_every_waiter_with_an_error(
    load: Load, provider: Any, recorder: Any, how: str
) -> None:
    provider.script = [limited(30)]
    async with load() as kernel:
        await fail(kernel, req(tag="a"))
        whole = asyncio.create_task(kernel.complete(req(tag="b")))
        streamed = asyncio.create_task(collect(kernel.stream(req(tag="c"))))
        await until(lambda: len(recorder.waits) == 2)
        if how == "stop":
            await kernel.stop()
        else:
            kernel.stopping.set()
        woken = await asyncio.gather(whole, streamed, return_exceptions=True)
    error = woken[0]
    assert isinstance(error, InferenceError)
    assert (error.kind, error.code, str(error)) == (
        "cancelled",
        SHUTTING_DOWN,
        "The host is shutting down",
    )
    terminal = woken[1][-1]
    assert isinstance(terminal, Failed) and terminal.error.code == SHUTTING_DOWN
    assert len(provider.starts()) == 1
    assert [event for event, _ in recorder.waits] == ["start", "start", "end", "end"]


class KeysSeen(MemoryFleetStore):
    """The memory store (given to the kernel), noting the keys probes were claimed on."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[str] = set()

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        answer = await super().admit(claims, holder)
        if isinstance(answer, list):
            probes = zip(claims, answer, strict=True)
            self.keys.update(c.key for c, r in probes if c.kind == HOLD and r == 1)
        return answer


class LateRenewals(KeysSeen):
    """A store that the kernel's lease renewal reaches late, as a Redis command still on
    its way does: held until `let_through` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.renewal_waiting = asyncio.Event()
        self.let_through = asyncio.Event()
        self.renewed = asyncio.Event()

    async def renew(self, claims: Sequence[Claim], holder: str) -> None:
        self.renewal_waiting.set()
        await self.let_through.wait()
        try:
            await super().renew(claims, holder)
        finally:
            self.renewed.set()


async def test_a_renewal_arriving_after_its_probe_ended_leaves_no_claim_behind(
    load: Load, provider: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by bench/soak.py: the probe's lease renewal was on its way to the store when
    the probe failed and gave its claim back; arriving after, it must not claim the probe
    again for an attempt that is over (every call to the model would wait for that lease
    to lapse with nothing sent)."""
    monkeypatch.setattr(agentcore_provider_hold, "PROBE_LEASE_S", 0.3)  # renewals 0.1 s apart
    store = LateRenewals()
    provider.script = [limited(0.01), [Stall(0.5), InferenceError("server", "scripted 500")]]
    kernel = load()
    kernel.fleet = store
    async with kernel:
        await fail(kernel, req(tag="a"))  # the hold
        probe = asyncio.create_task(kernel.complete(req(tag="b")))  # the probe, stalling
        await store.renewal_waiting.wait()  # its renewal, on its way
        with pytest.raises(InferenceError):
            await probe  # the probe fails: its claim is given back
        await asyncio.sleep(0.01)  # the release, in a task of its own
        store.let_through.set()  # the renewal arrives
        await store.renewed.wait()
        [key] = store.keys
        hold = await store.get_hold(key)
        assert hold is not None and hold.probe is None  # the next call may go first


class RefuseTagged:
    """A policy after the hold that refuses the call tagged `tag` at admission."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    @hookimpl(trylast=True)
    async def on_admission(self, attempt: Attempt) -> None:
        if attempt.inference.request.metadata.get("tag") == self.tag:
            raise InferenceError("invalid_request", "refused by a later policy")


async def test_a_probe_refused_by_a_later_policy_hands_over_to_the_next(
    load: Load, provider: Any, recorder: Any
) -> None:
    """Admitted as the probe by the hold, then refused at admission by a policy after it:
    the attempt never ends, and its claim (renewed by the hold for as long as it is
    listed) kept every later call to the model waiting behind it for good."""
    provider.script = [limited(0.01)]
    async with load("max_wait_s = 5", plugins={"refuse": RefuseTagged("b")}) as kernel:
        await fail(kernel, req(tag="a"))  # the hold
        refused = await fail(kernel, req(tag="b"))  # the probe, refused after the hold
        assert refused.message == "refused by a later policy"
        # The next call becomes the probe and goes; before, it waited out max_wait_s.
        assert (await kernel.complete(req(tag="c"))).text == "hello"
    assert [c.tag for c in provider.calls] == ["a", "c"]
    assert len(recorder.of("provider:release")) == 1


class ClaimGrantedReplyLate(KeysSeen):
    """A store that grants the first probe claim, whose reply then has not reached the
    caller yet (a Redis reply on its way) when the caller is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.granted = asyncio.Event()

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        answer = await super().admit(claims, holder)
        if self.keys and not self.granted.is_set():
            self.granted.set()
            await asyncio.Event().wait()  # the reply, still on its way
        return answer


async def test_a_call_cancelled_while_its_probe_claim_is_granted_leaves_no_claim_behind(
    load: Load, provider: Any
) -> None:
    """Found with bench/soak.py: an MCPL request whose session closed while its claim was on
    its way was granted the probe and never ran; every call to the model waited behind it
    for the probe's lease to lapse."""
    store = ClaimGrantedReplyLate()
    provider.script = [limited(0.01)]
    kernel = load()
    kernel.fleet = store
    async with kernel:
        await fail(kernel, req(tag="a"))  # the hold
        probe = asyncio.create_task(kernel.complete(req(tag="b")))
        await store.granted.wait()
        probe.cancel()  # its session closed
        with pytest.raises(asyncio.CancelledError):
            await probe
        [key] = store.keys
        async with asyncio.timeout(5):
            while (hold := await store.get_hold(key)) is not None and hold.probe is not None:
                await asyncio.sleep(0.001)
        # The next call goes first, as the probe, without waiting for a lease to lapse.
        assert (await kernel.complete(req(tag="c"))).text == "hello"
