"""The in-memory hold store and the small decisions, with no kernel."""

from __future__ import annotations

import time
from typing import Any

from agentcore_provider_hold import (
    HOLD_TOO_LONG,
    HoldKey,
    HoldStore,
    InMemoryHoldStore,
    hold_duration_s,
)

from agentcore.inference import InferenceError

KEY = HoldKey("anthropic", "claude")


def err(kind: Any, **kw: Any) -> InferenceError:
    return InferenceError(kind, f"scripted {kind}", **kw)


def test_the_in_memory_store_is_a_hold_store() -> None:
    store: HoldStore = InMemoryHoldStore()
    assert store is not None


async def test_the_longest_hold_wins() -> None:
    store = InMemoryHoldStore()
    now = time.time()
    first, started = await store.hold(KEY, now + 30, "rate_limit")
    assert started and first.until == now + 30
    kept, lengthened = await store.hold(KEY, now + 5, "overloaded")
    assert not lengthened and kept == first
    longer, lengthened = await store.hold(KEY, now + 60, "overloaded")
    assert lengthened and longer.until == now + 60
    assert longer.since == first.since  # held since the first error
    assert await store.get(KEY) == longer
    assert await store.get(HoldKey("anthropic", "other")) is None


async def test_one_probe_at_a_time_and_only_after_the_hold_ended() -> None:
    store = InMemoryHoldStore()
    await store.hold(KEY, time.time() + 30, "rate_limit")
    assert not await store.claim_probe(KEY, "a", 600)  # still held
    other = HoldKey("anthropic", "ended")
    await store.hold(other, time.time() - 1, "rate_limit")  # a hold that has ended
    assert await store.claim_probe(other, "a", 600)
    assert await store.claim_probe(other, "a", 600)  # the probe asking again
    assert not await store.claim_probe(other, "b", 600)
    assert not await store.drop_probe(other, "b")
    assert await store.drop_probe(other, "a")
    assert await store.claim_probe(other, "b", 600)
    assert not await store.claim_probe(HoldKey("nobody"), "a", 600)  # not held at all


async def test_a_stale_probe_is_replaced() -> None:
    store = InMemoryHoldStore()
    await store.hold(KEY, time.time() - 1, "rate_limit")
    assert await store.claim_probe(KEY, "lost", 0.0)
    assert await store.claim_probe(KEY, "next", 0.0)
    assert (await store.get(KEY)).probe == "next"  # type: ignore[union-attr]


async def test_a_new_hold_forgets_the_probe_and_release_forgets_the_hold() -> None:
    store = InMemoryHoldStore()
    await store.hold(KEY, time.time() - 1, "rate_limit")
    assert await store.claim_probe(KEY, "a", 600)
    hold, lengthened = await store.hold(KEY, time.time() + 30, "rate_limit")
    assert lengthened and hold.probe is None
    released = await store.release(KEY)
    assert released == hold
    assert await store.get(KEY) is None
    assert await store.release(KEY) is None


def test_which_errors_hold_and_for_how_long() -> None:
    assert hold_duration_s(err("rate_limit", retry_after_s=12.5), 5.0) == 12.5
    assert hold_duration_s(err("overloaded"), 5.0) == 5.0
    assert hold_duration_s(err("rate_limit", retry_after_s=-1), 5.0) == 0.0
    for kind in ["server", "network", "timeout", "auth", "quota", "cancelled", "invalid_request"]:
        assert hold_duration_s(err(kind, retry_after_s=3), 5.0) is None
    # the hold's own "held too long" error never starts another hold
    assert hold_duration_s(err("rate_limit", code=HOLD_TOO_LONG, retry_after_s=100), 5.0) is None
