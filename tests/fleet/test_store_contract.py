"""One contract for both fleet stores: the memory backend and a real Redis (the session's
``redis_server``). Every promise of `agentcore.fleet.FleetStore` is checked on each."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from agentcore.fleet import FleetStore, Refusal, open_store
from agentcore.settings import FleetSettings
from agentcore.testing.redis import RedisServer

LINGER_S = 60.0
LEASE_S = 60.0


@pytest.fixture(params=["memory", "redis"])
async def stores(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[Callable[[], FleetStore]]:
    """Make stores of one backend that share state as replicas would (Redis: one prefix;
    memory: one store, since it is one process's)."""
    prefix = f"contract-{uuid.uuid4().hex[:8]}"
    settings = FleetSettings(backend=request.param, redis_url=redis_server.url, key_prefix=prefix)
    made: list[FleetStore] = []
    shared = open_store(settings)

    def make() -> FleetStore:
        if request.param == "memory":
            return shared
        store = open_store(settings)
        made.append(store)
        return store

    yield make
    for store in [shared, *made]:
        await store.aclose()


@pytest.fixture
def store(stores: Callable[[], FleetStore]) -> FleetStore:
    return stores()


async def slot(
    store: FleetStore, key: str, holder: str, limit: int, lease_s: float = LEASE_S
) -> bool:
    """Take a slot only (no window): True when taken."""
    refusal = await store.take(
        key, holder, slots=limit, lease_s=lease_s, per_window=None, window_s=60.0
    )
    assert refusal is None or (refusal.limit, refusal.retry_s) == ("slots", None)
    return refusal is None


async def window(store: FleetStore, key: str, member: str, limit: int, window_s: float) -> float:
    """Take a place in the window only (no slot): 0.0 when taken, else the wait."""
    refusal = await store.take(
        key, member, slots=None, lease_s=LEASE_S, per_window=limit, window_s=window_s
    )
    if refusal is None:
        return 0.0
    assert refusal.limit == "window" and refusal.retry_s is not None
    return refusal.retry_s


# -- holds ---------------------------------------------------------------------------


async def test_an_unheld_key_has_no_hold(store: FleetStore) -> None:
    assert await store.get_hold("p:m") is None
    assert await store.release_hold("p:m") is None
    assert not await store.claim_probe("p:m", "a", LEASE_S)
    assert not await store.drop_probe("p:m", "a")


async def test_a_hold_is_seen_with_its_reason_and_remaining_time(
    stores: Callable[[], FleetStore],
) -> None:
    one, two = stores(), stores()
    hold, started = await one.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    assert started and hold.reason == "rate_limit" and 29 < hold.remaining_s <= 30
    seen = await two.get_hold("p:m")
    assert seen is not None and seen.reason == "rate_limit" and 29 < seen.remaining_s <= 30
    assert seen.probe is None


async def test_the_longest_hold_wins(store: FleetStore) -> None:
    await store.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    hold, lengthened = await store.set_hold("p:m", 5.0, "overloaded", LINGER_S)
    assert not lengthened and hold.reason == "rate_limit" and hold.remaining_s > 29
    hold, lengthened = await store.set_hold("p:m", 60.0, "overloaded", LINGER_S)
    assert lengthened and hold.reason == "overloaded" and hold.remaining_s > 59


async def test_concurrent_holds_leave_the_longest(stores: Callable[[], FleetStore]) -> None:
    replicas = [stores() for _ in range(4)]
    durations = [3.0, 40.0, 7.0, 20.0, 1.0, 39.0, 12.0, 5.0]
    await asyncio.gather(
        *(
            replicas[i % 4].set_hold("p:m", d, f"r{int(d)}", LINGER_S)
            for i, d in enumerate(durations)
        )
    )
    hold = await replicas[0].get_hold("p:m")
    assert hold is not None and hold.reason == "r40" and hold.remaining_s > 39


async def test_a_running_hold_is_neither_probed_nor_released(store: FleetStore) -> None:
    await store.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    assert not await store.claim_probe("p:m", "a", LEASE_S)
    assert await store.release_hold("p:m") is None
    assert await store.get_hold("p:m") is not None


async def test_after_the_end_exactly_one_probe_goes(stores: Callable[[], FleetStore]) -> None:
    replicas = [stores() for _ in range(3)]
    await replicas[0].set_hold("p:m", 0.05, "rate_limit", LINGER_S)
    await asyncio.sleep(0.1)
    claims = await asyncio.gather(
        *(replicas[i % 3].claim_probe("p:m", f"o{i}", LEASE_S) for i in range(9))
    )
    assert claims.count(True) == 1
    winner = f"o{claims.index(True)}"
    assert await replicas[2].claim_probe("p:m", winner, LEASE_S)  # the probe again: still it
    hold = await replicas[1].get_hold("p:m")
    assert hold is not None and hold.remaining_s == 0 and hold.probe == winner


async def test_a_dropped_probe_lets_the_next_one_go(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await store.claim_probe("p:m", "a", LEASE_S)
    assert not await store.drop_probe("p:m", "b")
    assert not await store.claim_probe("p:m", "b", LEASE_S)
    assert await store.drop_probe("p:m", "a")
    assert await store.claim_probe("p:m", "b", LEASE_S)


async def test_a_stale_probe_counts_as_gone(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await store.claim_probe("p:m", "a", 0.05)
    await asyncio.sleep(0.1)
    assert await store.claim_probe("p:m", "b", 0.05)


async def test_the_probe_claiming_again_renews_its_lease(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await store.claim_probe("p:m", "alive", 0.15)
    for _ in range(3):
        await asyncio.sleep(0.08)
        assert await store.claim_probe("p:m", "alive", 0.15)
    assert not await store.claim_probe("p:m", "other", 0.15)


async def test_a_new_hold_forgets_the_probe(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await store.claim_probe("p:m", "a", LEASE_S)
    hold, lengthened = await store.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    assert lengthened and hold.probe is None


async def test_release_forgets_an_ended_hold(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.05, "overloaded", LINGER_S)
    await asyncio.sleep(0.1)
    released = await store.release_hold("p:m")
    assert released is not None and released.reason == "overloaded" and released.held_s >= 0.05
    assert await store.get_hold("p:m") is None
    assert await store.release_hold("p:m") is None


async def test_a_hold_expires_by_itself_after_its_linger(store: FleetStore) -> None:
    await store.set_hold("p:m", 0.05, "rate_limit", 0.05)
    await asyncio.sleep(0.2)
    assert await store.get_hold("p:m") is None


async def test_a_lengthened_hold_keeps_its_start(store: FleetStore) -> None:
    await store.set_hold("p:m", 1.0, "rate_limit", LINGER_S)
    await asyncio.sleep(0.1)
    hold, _ = await store.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    assert hold.held_s >= 0.1


async def test_keys_are_separate(store: FleetStore) -> None:
    await store.set_hold("p:m", 30.0, "rate_limit", LINGER_S)
    assert await store.get_hold("p:other") is None
    assert await slot(store, "p:m", "a", 1, LEASE_S)  # slots are not holds
    assert await window(store, "p:m", "a", 1, 60.0) == 0.0


# -- semaphores -----------------------------------------------------------------------


async def test_at_most_limit_slots_across_replicas(stores: Callable[[], FleetStore]) -> None:
    replicas = [stores() for _ in range(3)]
    taken = await asyncio.gather(
        *(slot(replicas[i % 3], "p", f"h{i}", 3, LEASE_S) for i in range(12))
    )
    assert taken.count(True) == 3


async def test_a_released_slot_can_be_taken_again(store: FleetStore) -> None:
    assert await slot(store, "p", "a", 1, LEASE_S)
    assert not await slot(store, "p", "b", 1, LEASE_S)
    assert await slot(store, "p", "a", 1, LEASE_S)  # its own slot, renewed
    assert not await store.release_slot("p", "b")
    assert await store.release_slot("p", "a")
    assert not await store.release_slot("p", "a")
    assert await slot(store, "p", "b", 1, LEASE_S)


async def test_a_slot_whose_lease_ran_out_comes_back(store: FleetStore) -> None:
    assert await slot(store, "p", "dead", 1, 0.1)
    assert not await slot(store, "p", "b", 1, LEASE_S)
    await asyncio.sleep(0.15)
    assert await slot(store, "p", "b", 1, LEASE_S)


async def test_a_renewed_slot_stays(store: FleetStore) -> None:
    assert await slot(store, "p", "alive", 1, 0.15)
    for _ in range(3):
        await asyncio.sleep(0.08)
        await store.renew_slots("p", ["alive", "never-held"], 0.15)
    assert not await slot(store, "p", "b", 1, LEASE_S)
    assert not await store.release_slot("p", "never-held")  # renewing took no slot


# -- windows -----------------------------------------------------------------------------


async def test_a_window_admits_limit_takes_then_says_how_long(
    stores: Callable[[], FleetStore],
) -> None:
    one, two = stores(), stores()
    assert [await window((one, two)[i % 2], "p", f"t{i}", 3, 60.0) for i in range(3)] == [0.0] * 3
    wait = await window(two, "p", "t3", 3, 60.0)
    assert 59 < wait <= 60


async def test_a_window_slides(store: FleetStore) -> None:
    assert await window(store, "p", "a", 2, 0.2) == 0.0
    await asyncio.sleep(0.1)
    assert await window(store, "p", "b", 2, 0.2) == 0.0
    wait = await window(store, "p", "c", 2, 0.2)
    assert 0 < wait <= 0.11  # the first take leaves first
    await asyncio.sleep(wait + 0.02)
    assert await window(store, "p", "c", 2, 0.2) == 0.0
    assert await window(store, "p", "d", 2, 0.2) > 0  # the second is still inside


# -- both limits at once ----------------------------------------------------------------


async def take_both(store: FleetStore, holder: str, slots: int, per_window: int) -> Refusal | None:
    return await store.take(
        "p", holder, slots=slots, lease_s=LEASE_S, per_window=per_window, window_s=60.0
    )


async def test_a_full_window_takes_no_slot(store: FleetStore) -> None:
    assert await take_both(store, "a", 2, 1) is None
    refusal = await take_both(store, "b", 2, 1)
    assert refusal is not None and refusal.limit == "window"
    assert refusal.retry_s is not None and 59 < refusal.retry_s <= 60
    assert await slot(store, "p", "c", 2)  # b took no slot: the second is still free
    assert not await slot(store, "p", "d", 2)


async def test_no_slot_takes_no_place_in_the_window(store: FleetStore) -> None:
    assert await take_both(store, "a", 1, 2) is None
    refusal = await take_both(store, "b", 1, 2)
    assert refusal is not None and (refusal.limit, refusal.retry_s) == ("slots", None)
    assert await store.release_slot("p", "a")
    assert await take_both(store, "b", 1, 2) is None  # b's refusal was not counted
    refusal = await take_both(store, "c", 2, 2)
    assert refusal is not None and refusal.limit == "window"


async def test_every_take_counts_in_the_window_even_a_holders_second(store: FleetStore) -> None:
    assert await take_both(store, "a", 1, 2) is None
    assert await take_both(store, "a", 1, 2) is None  # its own slot, renewed; a second take
    refusal = await take_both(store, "b", 2, 2)
    assert refusal is not None and refusal.limit == "window"


async def test_concurrent_takes_across_replicas_keep_both_limits(
    stores: Callable[[], FleetStore],
) -> None:
    replicas = [stores() for _ in range(3)]
    refusals = await asyncio.gather(*(take_both(replicas[i % 3], f"h{i}", 4, 3) for i in range(12)))
    assert refusals.count(None) == 3
    assert {r.limit for r in refusals if r is not None} == {"window"}


async def test_a_cancelled_caller_leaves_the_others_answered(store: FleetStore) -> None:
    """Calls started together (Redis: sent together, one round trip): one caller given up
    on does not cost the others their answers."""
    calls = [asyncio.ensure_future(slot(store, "p", f"h{i}", 100)) for i in range(20)]
    calls[7].cancel()
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(done[7], asyncio.CancelledError)
    assert [d for i, d in enumerate(done) if i != 7] == [True] * 19


async def test_redis_forgetting_its_scripts_is_no_error(redis_server: RedisServer) -> None:
    """Redis restarted (its script cache empty): calls started together still get answers."""
    settings = FleetSettings(
        backend="redis", redis_url=redis_server.url, key_prefix=f"c-{uuid.uuid4().hex[:8]}"
    )
    store = open_store(settings)
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        assert await slot(store, "p", "first", 5)
        await admin.script_flush()
        taken = await asyncio.gather(*(slot(store, "p", f"h{i}", 5) for i in range(8)))
        assert taken.count(True) == 4
        await admin.script_flush()
        assert await store.get_hold("p:m") is None  # alone: not pipelined
    finally:
        await store.aclose()
        await admin.aclose()


# -- wake-ups ---------------------------------------------------------------------------


async def subscribed(store: FleetStore) -> None:
    """Redis: the store's subscription is made at the first `changed()`; let it be in place."""
    store.changed("-")
    await asyncio.sleep(0.2)


async def wakes(store: FleetStore, key: str, change: Callable[[], object]) -> bool:
    event = store.changed(key)
    result = change()
    if asyncio.iscoroutine(result):
        await result
    try:
        await asyncio.wait_for(event.wait(), 2.0)
    except TimeoutError:
        return False
    return True


async def test_changes_that_free_waiters_wake_every_replica(
    stores: Callable[[], FleetStore],
) -> None:
    actor, watcher = stores(), stores()
    await subscribed(watcher)
    assert await wakes(watcher, "p:m", lambda: actor.set_hold("p:m", 0.0, "rate_limit", 60.0))
    await actor.claim_probe("p:m", "a", LEASE_S)
    assert await wakes(watcher, "p:m", lambda: actor.drop_probe("p:m", "a"))
    assert await wakes(watcher, "p:m", lambda: actor.release_hold("p:m"))
    await slot(actor, "slots", "a", 1, LEASE_S)
    assert await wakes(watcher, "slots", lambda: actor.release_slot("slots", "a"))


async def test_a_change_of_another_key_wakes_nobody(stores: Callable[[], FleetStore]) -> None:
    actor, watcher = stores(), stores()
    await subscribed(watcher)
    event = watcher.changed("p:m")
    await actor.set_hold("p:other", 1.0, "rate_limit", 60.0)
    await asyncio.sleep(0.1)
    assert not event.is_set()


async def test_closing_wakes_waiters(store: FleetStore) -> None:
    event = store.changed("p:m")
    await store.aclose()
    assert event.is_set()
