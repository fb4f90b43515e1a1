"""One contract for both fleet stores: the memory backend and a real Redis (the session's
``redis_server``). Every promise of `agentcore.fleet.FleetStore` is checked on each."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from agentcore.fleet import FleetStore, Refusal, open_store
from agentcore.fleet.claims import HOLD, SLOTS, WINDOW, Claim, ClaimRefusal
from agentcore.settings import FleetSettings
from agentcore.testing.claims import QUOTA, Quota, used
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
    # A 1 s lease claimed again at 0.6 s, and "other" refused at 1.2 s: past the first
    # lease, so only the renewal keeps it (without one, "other" would take it). Each step
    # has 0.4 s to spare on a loaded machine (a 0.15 s lease renewed every 0.08 s had 0.07).
    await store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await store.claim_probe("p:m", "alive", 1.0)
    await asyncio.sleep(0.6)
    assert await store.claim_probe("p:m", "alive", 1.0)
    await asyncio.sleep(0.6)
    assert not await store.claim_probe("p:m", "other", 1.0)


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
    # 0.5 s: "b" must be refused inside the lease, one round trip after it was taken (with
    # 0.1 s a loaded machine could let the lease lapse first).
    assert await slot(store, "p", "dead", 1, 0.5)
    assert not await slot(store, "p", "b", 1, LEASE_S)
    await asyncio.sleep(0.55)
    assert await slot(store, "p", "b", 1, LEASE_S)


async def test_renewing_a_slot_whose_lease_ran_out_does_not_take_it_again(
    store: FleetStore,
) -> None:
    # A holder that stopped renewing (a stalled replica) has lost its slot: a late renewal
    # would hold the slot without a check, so it must not bring the slot back.
    assert await slot(store, "p", "late", 1, 0.5)
    await asyncio.sleep(0.55)
    await store.renew_slots("p", ["late"], LEASE_S)
    assert await slot(store, "p", "b", 1, LEASE_S)


async def test_a_renewed_slot_stays(store: FleetStore) -> None:
    # A 1 s lease renewed at 0.6 s, "b" refused at 1.2 s: past the first lease, so only the
    # renewal keeps the slot. 0.4 s to spare at each step (0.15 s renewed every 0.08 s had
    # 0.07 s, which a loaded machine can take).
    assert await slot(store, "p", "alive", 1, 1.0)
    await asyncio.sleep(0.6)
    await store.renew_slots("p", ["alive", "never-held"], 1.0)
    await asyncio.sleep(0.6)
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
    # A 1 s window: on a loaded machine a step can stall 0.1 s (with 0.2 s, the first take
    # had once left the window before the third was asked, and that one was admitted).
    assert await window(store, "p", "a", 2, 1.0) == 0.0
    await asyncio.sleep(0.5)
    assert await window(store, "p", "b", 2, 1.0) == 0.0
    wait = await window(store, "p", "c", 2, 1.0)
    assert 0 < wait <= 0.51  # the first take leaves first
    await asyncio.sleep(wait + 0.02)
    assert await window(store, "p", "c", 2, 1.0) == 0.0
    assert await window(store, "p", "d", 2, 1.0) > 0  # the second is still inside


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
    """Redis: the store's subscription is made at the first `changed()`; wait until Redis
    confirmed it (`holds.live`), not a fixed 0.2 s a loaded machine can outrun, which
    let a change be published before anyone listened."""
    store.changed("-")
    holds = getattr(store, "holds", None)  # the memory store has no subscription to wait for
    async with asyncio.timeout(10):
        while holds is not None and not holds.live:
            await asyncio.sleep(0.01)


async def wakes(store: FleetStore, key: str, change: Callable[[], object]) -> bool:
    event = store.changed(key)
    result = change()
    if asyncio.iscoroutine(result):
        await result
    try:
        await asyncio.wait_for(event.wait(), 10.0)  # every use expects the wake: a bound only
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


# -- claim sets: the admission step's one operation ---------------------------------------


def hold_claim(key: str = "p:m", lease_ms: int = 60_000) -> Claim:
    return Claim(HOLD, key, (lease_ms, 60_000), wait_reason="hold")


def slots_claim(limit: int, key: str = "p", lease_ms: int = 60_000) -> Claim:
    return Claim(SLOTS, key, (limit, lease_ms))


def window_claim(limit: int, key: str = "p", window_ms: int = 60_000) -> Claim:
    return Claim(WINDOW, key, (limit, window_ms))


def quota_claim(limit: float, amount: float, key: str = "server:s") -> Claim:
    return Claim(QUOTA, key, (limit, amount))


@pytest.fixture
def claim_stores(stores: Callable[[], FleetStore]) -> Callable[[], FleetStore]:
    """`stores` that know the third-party ``quota`` kind (agentcore.testing.claims)."""

    def make() -> FleetStore:
        store = stores()
        store.register_kinds([Quota()])
        return store

    return make


@pytest.fixture
def claim_store(claim_stores: Callable[[], FleetStore]) -> FleetStore:
    return claim_stores()


async def test_a_claim_set_is_granted_whole_with_each_takes_result(
    claim_store: FleetStore,
) -> None:
    claims = [hold_claim(), window_claim(5), slots_claim(2), quota_claim(3.0, 1.0)]
    assert await claim_store.admit(claims, "a") == [0, 0, 0, 0]
    assert await used(claim_store, "server:s") == 1.0
    assert not await slot(claim_store, "p", "other", 1)  # the set's slot is held


async def test_a_refused_set_takes_nothing_and_names_its_claim(
    claim_store: FleetStore,
) -> None:
    assert await claim_store.admit([slots_claim(1)], "first") == [0]
    claims = [window_claim(5), quota_claim(3.0, 1.0), slots_claim(1)]
    refusal = await claim_store.admit(claims, "second")
    assert isinstance(refusal, ClaimRefusal)
    assert (refusal.index, refusal.claim, refusal.detail, refusal.retry_s) == (
        2,
        claims[2],
        "slots",
        None,
    )
    assert await used(claim_store, "server:s") == 0.0  # checked, then nothing taken
    assert await window(claim_store, "p", "probe", 1, 60.0) == 0.0  # nor the window place


async def test_two_window_claims_on_one_key_take_two_places(claim_store: FleetStore) -> None:
    # One call, the same window twice (two plugins limiting one provider): each take is a
    # place of its own, though both are the same holder's in the same millisecond.
    assert await claim_store.admit([window_claim(3), window_claim(3)], "a") == [0, 0]
    assert await claim_store.admit([window_claim(3)], "b") == [0]
    refusal = await claim_store.admit([window_claim(3)], "c")
    assert isinstance(refusal, ClaimRefusal) and refusal.detail == "window"


async def test_a_plugin_kind_refuses_with_its_own_detail(claim_store: FleetStore) -> None:
    assert await claim_store.admit([quota_claim(1.5, 1.0)], "a") == [0]
    refusal = await claim_store.admit([slots_claim(5), quota_claim(1.5, 1.0)], "b")
    assert isinstance(refusal, ClaimRefusal)
    assert (refusal.index, refusal.detail, refusal.info) == (1, "quota", "1")
    assert await claim_store.admit([slots_claim(5)], "c") == [0]  # b took no slot: 5 left


async def test_release_settles_a_plugin_claim_and_gives_slots_back(
    claim_stores: Callable[[], FleetStore],
) -> None:
    actor, other = claim_stores(), claim_stores()
    claims = [slots_claim(1), quota_claim(2.0, 1.5)]
    assert await actor.admit(claims, "a") == [0, 0]
    assert isinstance(await other.admit(claims, "b"), ClaimRefusal)
    await actor.release(claims, "a", [(), (0.25,)])  # its real cost: 0.25 of 1.5 reserved
    assert await used(actor, "server:s") == 0.25
    assert await other.admit(claims, "b") == [0, 0]
    await actor.release(claims, "a")  # given back twice: nothing more happens
    assert await used(other, "server:s") == 1.75


async def test_a_hold_refuses_with_its_remaining_time_then_one_probe_goes(
    claim_stores: Callable[[], FleetStore],
) -> None:
    first, second = claim_stores(), claim_stores()
    # 0.6 s: the refusal must come inside the hold, one round trip after it was set (0.3 s
    # with a 0.1 s floor on the remaining time left a loaded machine 0.2 s).
    await first.set_hold("p:m", 0.6, "overloaded", LINGER_S)
    refusal = await second.admit([hold_claim(), slots_claim(5)], "a")
    assert isinstance(refusal, ClaimRefusal)
    assert (refusal.index, refusal.detail, refusal.info) == (0, "held", "overloaded")
    assert refusal.retry_s is not None and 0 < refusal.retry_s <= 0.6
    await asyncio.sleep(0.65)
    grants = await asyncio.gather(
        *(
            store.admit([hold_claim(), slots_claim(5)], f"h{i}")
            for i, store in enumerate([first, second, first, second])
        )
    )
    probes = [g for g in grants if isinstance(g, list) and g[0] == 1]
    behind = [g for g in grants if isinstance(g, ClaimRefusal)]
    assert len(probes) == 1 and len(behind) == 3
    assert {(r.detail, r.retry_s) for r in behind} == {("probe", None)}


async def test_releasing_the_probe_lets_the_next_call_be_the_probe(
    claim_store: FleetStore,
) -> None:
    await claim_store.set_hold("p:m", 0.0, "rate_limit", LINGER_S)
    assert await claim_store.admit([hold_claim()], "probe") == [1]
    assert isinstance(await claim_store.admit([hold_claim()], "next"), ClaimRefusal)
    await claim_store.release([hold_claim()], "probe")
    assert await claim_store.admit([hold_claim()], "next") == [1]


async def test_renewing_keeps_a_claimed_slot_past_its_lease(claim_store: FleetStore) -> None:
    # A 1 s lease renewed at 0.6 s, "b" refused at 1.2 s: past the first lease, so only the
    # renewal keeps it; 0.4 s to spare at each step (a 0.3 s lease renewed every 0.15 s
    # had 0.15 s, too little on a loaded machine).
    claims = [slots_claim(1, lease_ms=1000)]
    assert await claim_store.admit(claims, "a") == [0]
    await asyncio.sleep(0.6)
    await claim_store.renew(claims, "a")
    await asyncio.sleep(0.6)
    assert isinstance(await claim_store.admit(claims, "b"), ClaimRefusal)
    await asyncio.sleep(1.05)  # no longer renewed: its lease runs out
    assert await claim_store.admit(claims, "b") == [0]


async def test_a_release_wakes_waiters_on_the_claims_key(
    claim_stores: Callable[[], FleetStore],
) -> None:
    actor, watcher = claim_stores(), claim_stores()
    await subscribed(watcher)
    assert await actor.admit([slots_claim(1), quota_claim(5.0, 1.0)], "a") == [0, 0]
    assert await wakes(watcher, "p", lambda: actor.release([slots_claim(1)], "a"))
    quota = [quota_claim(5.0, 1.0)]
    assert await wakes(watcher, "server:s", lambda: actor.release(quota, "a", [(1.0,)]))


async def test_only_a_release_from_a_full_slot_set_publishes(redis_server: RedisServer) -> None:
    """Redis: a wake-up costs every replica a message, so a slot given back below the limit
    (nobody can be waiting for it) publishes nothing; one given back from a full set wakes."""
    from agentcore.fleet.redis_store import RedisFleetStore

    prefix = f"quiet-{uuid.uuid4().hex[:8]}"
    actor, watcher = (RedisFleetStore(redis_server.url, key_prefix=prefix) for _ in range(2))
    try:
        await subscribed(watcher)
        assert await actor.admit([slots_claim(2)], "a") == [0]
        event = watcher.changed("p")
        await actor.release([slots_claim(2)], "a")
        await actor.admit([slots_claim(2)], "b")  # a later op: the release's reply came first
        await asyncio.sleep(0.1)
        assert not event.is_set()
        assert await actor.admit([slots_claim(2)], "c") == [0]  # b and c: the set is full
        assert await wakes(watcher, "p", lambda: actor.release([slots_claim(2)], "c"))
    finally:
        await actor.aclose()
        await watcher.aclose()


async def test_every_key_of_a_claim_set_is_in_one_cluster_slot(redis_server: RedisServer) -> None:
    """A budget's claims span a server and a provider scope: with the ``{key_prefix}`` hash
    tag every key the script touches hashes to one Redis Cluster slot."""
    from redis.crc import key_slot

    from agentcore.fleet import admit_script
    from agentcore.fleet.redis_store import RedisFleetStore

    store = RedisFleetStore(redis_server.url, key_prefix="fleet-a")
    try:
        store.register_kinds([Quota()])
        claims = [
            hold_claim("openai:gpt-4o"),
            window_claim(5, "openai"),
            slots_claim(2, "openai"),
            quota_claim(3.0, 1.0, "server:notes"),
            quota_claim(3.0, 1.0, "provider:anthropic"),
        ]
        sent = [claim for _, claim in store._prepared(claims, "h", "admit")]
        keys, _ = admit_script.encode(sent, "fleet-a:wake:", "admit", "h")
        assert len(keys) == 5
        assert len({key_slot(key.encode()) for key in keys}) == 1
    finally:
        await store.aclose()
