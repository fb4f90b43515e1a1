"""A budget's reservations are leased, on the memory store and on a real Redis: one not
renewed lapses and its room goes to others; a renewed one stays; a release after a lapse
adds the real cost once and takes nothing back; `agentcore spend` does not count a
lapsed reservation; concurrent takes never reserve past the limit while reservations
lapse; and in kernels, a replica that stops renewing (it died) frees its call's room.

No timing is asserted: leases are short and each test waits for a condition, under a
hang guard. On memory the store's clock is the test's `Clock`, moved by hand; on Redis
time runs (Redis's ``TIME``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
from agentcore_budget import BUDGET, BUDGET_EXCEEDED, BudgetKind, input_bound
from agentcore_budget.kind import LAPSES_PER_STEP, NANO, spent

from agentcore.api import (
    Claim,
    ClaimRefusal,
    FleetStore,
    InferenceError,
    MemoryFleetStore,
    Message,
    Request,
    Response,
    StopInfo,
    TextBlock,
    Usage,
)
from agentcore.testing import STALL, Kernel, ScriptedProvider
from agentcore.testing.redis import RedisServer

KEY = "server:s1:day:2026-12-06"
END_MS = 1_796_601_600_000  # 2026-12-07T00:00:00Z: the window's end
TENTH = NANO // 10
HANG_S = 30.0
"""The hang guard of every wait for a condition (never reached when all is well)."""


def req() -> Request:
    return Request("fake:m1", [Message.user("hi")], max_tokens=100, metadata={"serverId": "s1"})


def claim(max_usd: float, amount_nano: int, lease_ms: int) -> Claim:
    return Claim(BUDGET, KEY, (max_usd, amount_nano, END_MS, lease_ms))


@dataclass
class Fleet:
    """Replicas' stores on one backend (memory: one store, the process's) and its clock."""

    stores: list[FleetStore]
    clock: Callable[[], float] | None
    moved: list[float]
    redis_url: str

    async def later(self) -> None:
        """Let some time pass: the memory store's clock moves 50 ms; Redis's runs on."""
        if self.clock is not None:
            self.moved[0] += 0.05
        else:
            await asyncio.sleep(0.05)

    async def now_ms(self) -> int:
        """The store's clock, ms since the epoch."""
        if self.clock is not None:
            return round(self.clock() * 1000)
        client = aioredis.Redis.from_url(self.redis_url)
        try:
            seconds, micros = await client.time()
        finally:
            await client.aclose()
        return int(seconds) * 1000 + int(micros) // 1000

    async def books(self) -> tuple[float, int]:
        """(spent USD, reserved nano-USD) as the books hold them, nothing dropped."""
        spent_usd, reserved = await self.stores[0].read_books(
            BUDGET, KEY, ("spent", "reserved_nano")
        )
        return float(spent_usd or 0.0), int(reserved or 0)


@pytest.fixture
async def fleet(
    backend: str, load: Callable[..., Kernel], redis_server: RedisServer
) -> AsyncIterator[Fleet]:
    """Three replicas' stores of `backend` sharing one budget's books, the kind known."""
    if backend == "memory":
        moved = [1_796_558_400.0]
        memory = MemoryFleetStore(clock=lambda: moved[0])
        memory.register_kinds([BudgetKind()])
        yield Fleet([memory] * 3, lambda: moved[0], moved, redis_server.url)
        await memory.aclose()
        return
    kernels = [load("[budget.servers.s1]\nmax_usd = 1.0") for _ in range(3)]
    for kernel in kernels:
        kernel.fleet.register_kinds([BudgetKind()])
    yield Fleet([k.fleet for k in kernels], None, [0.0], redis_server.url)
    for kernel in kernels:
        await kernel.fleet.aclose()


async def until(fleet: Fleet, condition: Callable[[], Awaitable[bool]]) -> None:
    """Wait for `condition`, letting time pass between tries (hang guard: `HANG_S`)."""
    async with asyncio.timeout(HANG_S):
        while not await condition():
            await fleet.later()


async def granted(store: FleetStore, claims: list[Claim], holder: str) -> bool:
    answer = await store.admit(claims, holder)
    assert isinstance(answer, list | ClaimRefusal)
    return not isinstance(answer, ClaimRefusal)


async def test_a_holder_that_stops_renewing_lapses_and_its_room_goes_to_others(
    fleet: Fleet,
) -> None:
    a_store, b_store, c_store = fleet.stores
    assert await granted(a_store, [claim(1.0, 6 * TENTH, 300)], "a")
    b = [claim(1.0, 6 * TENTH, 600_000)]
    assert not await granted(b_store, b, "b")  # a's 0.6 leaves no room for b's
    await until(fleet, lambda: granted(b_store, b, "b"))  # a never renewed: it lapsed
    assert await fleet.books() == (0.0, 6 * TENTH)  # a's taken back exactly, b's reserved
    # a ends after all (its replica was only cut off): what it spent counts, once, and
    # nothing more is taken back; a holder never granted changes nothing.
    await a_store.release([claim(1.0, 6 * TENTH, 300)], "a", [(0.25,)])
    assert await fleet.books() == (0.25, 6 * TENTH)
    await a_store.release([claim(1.0, 6 * TENTH, 300)], "a", [(0.25,)])
    await c_store.release([claim(1.0, 6 * TENTH, 300)], "c", [(0.25,)])
    assert await fleet.books() == (0.25, 6 * TENTH)
    await b_store.release(b, "b", [(0.5,)])
    assert await fleet.books() == (0.75, 0)


async def test_a_renewed_reservation_does_not_lapse(fleet: Fleet) -> None:
    """Renewed well within its 1.5 s lease, a's reservation outlives two leases (b is
    refused all along: without the renewals it is admitted after one); left alone, it
    lapses."""
    a_store, b_store, _ = fleet.stores
    a, b = [claim(1.0, 6 * TENTH, 1500)], [claim(1.0, 6 * TENTH, 60_000)]
    started = await fleet.now_ms()
    assert await granted(a_store, a, "a")
    async with asyncio.timeout(HANG_S):
        while await fleet.now_ms() < started + 3000:
            await a_store.renew(a, "a")
            assert not await granted(b_store, b, "b")
            await fleet.later()
    await until(fleet, lambda: granted(b_store, b, "b"))
    assert await fleet.books() == (0.0, 6 * TENTH)


async def test_spend_does_not_report_a_lapsed_reservation(fleet: Fleet) -> None:
    """`agentcore spend`'s read drops what lapsed (with no call admitted meanwhile), and
    reports what is still leased."""
    store = fleet.stores[0]
    assert await granted(store, [claim(1.0, 2 * TENTH, 200)], "short")
    assert await granted(store, [claim(1.0, 3 * TENTH, 600_000)], "long")
    assert await spent(store, KEY, END_MS) in ((0.0, 0.5), (0.0, 0.3))

    async def dropped() -> bool:
        return await spent(store, KEY, END_MS) == (0.0, 0.3)

    await until(fleet, dropped)
    assert await fleet.books() == (0.0, 3 * TENTH)


async def test_a_refused_check_drops_only_a_few_lapsed_reservations(fleet: Fleet) -> None:
    """Many lapsed at once (a replica with many calls in flight died). A call that fits
    drops none (a lapsed reservation only makes the budget stricter: the common path does
    no more than it did unleased); one that does not fit drops at most `LAPSES_PER_STEP`
    first, so no admission does work for every call in flight; `spent` drops the rest."""
    store = fleet.stores[0]
    many = 3 * LAPSES_PER_STEP
    limit = many * TENTH / NANO + 0.15  # room for one more tenth, not two
    for n in range(many):
        assert await granted(store, [claim(limit, TENTH, 200)], f"dead-{n}")
    taken = await fleet.now_ms()

    async def ended() -> bool:  # no check runs meanwhile
        return await fleet.now_ms() > taken + 200

    await until(fleet, ended)
    live = [claim(limit, TENTH, 600_000)]
    assert await granted(store, live, "fits")
    assert await fleet.books() == (0.0, (many + 1) * TENTH)  # it fit: nothing dropped
    assert await granted(store, live, "did-not-fit")  # dropped 8 first, then fit
    assert await fleet.books() == (0.0, (many + 2 - LAPSES_PER_STEP) * TENTH)
    assert await spent(store, KEY, END_MS) == (0.0, pytest.approx(0.2))
    assert await fleet.books() == (0.0, 2 * TENTH)


async def test_concurrent_takes_never_reserve_past_the_limit_as_reservations_lapse(
    fleet: Fleet,
) -> None:
    """40 calls at once from three replicas for a tenth each of 1.02: exactly 10 are
    granted. Three end (0.05 each); the other seven are never renewed and lapse while 40
    more try again and again: spent + reserved stays within the limit at every step, and
    exactly 8 of them get in (0.15 + 0.8 fits, 0.15 + 0.9 does not)."""
    stores = fleet.stores
    short = [claim(1.02, TENTH, 1000)]  # outlives the 40 admissions on a slow machine
    first = await asyncio.gather(*(granted(stores[n % 3], short, f"first-{n}") for n in range(40)))
    assert first.count(True) == 10
    assert await fleet.books() == (0.0, 10 * TENTH)
    ended = [f"first-{n}" for n, ok in enumerate(first) if ok][:3]
    for n, holder in enumerate(ended):
        await stores[n % 3].release(short, holder, [(0.05,)])
    long = [claim(1.02, TENTH, 600_000)]
    waiting = {f"second-{n}" for n in range(40)}

    async def eight_in() -> bool:
        tries = sorted(waiting)
        answers = await asyncio.gather(
            *(granted(stores[n % 3], long, holder) for n, holder in enumerate(tries))
        )
        waiting.difference_update(h for h, ok in zip(tries, answers, strict=True) if ok)
        spent_usd, reserved = await fleet.books()
        assert spent_usd + reserved / NANO <= 1.02
        assert 40 - len(waiting) <= 8
        return len(waiting) == 32

    await until(fleet, eight_in)
    assert await fleet.books() == (pytest.approx(0.15), 8 * TENTH)


async def test_a_call_that_reserved_nothing_is_given_back(fleet: Fleet) -> None:
    """An unpriced model let through (``on_unpriced = "allow"``) reserves 0: its release
    works on Redis too (a negated "0" is no integer to Redis)."""
    store = fleet.stores[0]
    zero = [claim(1.0, 0, 60_000)]
    assert await granted(store, zero, "free")
    await store.release(zero, "free", [(0.0,)])
    assert await granted(store, [claim(1.0, 10 * TENTH, 60_000)], "all")  # nothing left held
    assert await fleet.books() == (0.0, 10 * TENTH)


@pytest.mark.parametrize("backend", ["redis"])
async def test_a_replica_that_stops_renewing_frees_its_calls_room(
    load: Callable[..., Kernel], scripted_provider: ScriptedProvider, redis_server: RedisServer
) -> None:
    """Two kernels on one Redis, a 2.5 s lease: the first's call stalls holding the
    budget's room, and the kernel renews it (every 0.83 s at most: 1.6 s to spare on a
    loaded machine), so the second's calls are refused past two leases. Then the first
    "dies" (its renewals stop): its reservation lapses and the second's next call goes
    through."""
    worst = (input_bound(req()) * 10.0 + 100 * 10.0) / 1_000_000
    budget = f"reservation_lease_s = 2.5\n[budget.servers.s1]\nmax_usd = {worst * 1.5!r}"
    scripted_provider.default = Response(
        [TextBlock("hello")], StopInfo("end_turn", "end_turn"), Usage(10, 100), "m1", "m1"
    )
    scripted_provider.script = [STALL]
    doomed, survivor = load(budget), load(budget)
    fleet = Fleet([], None, [0.0], redis_server.url)
    async with doomed, survivor:
        stalled = asyncio.create_task(doomed.complete(req()))
        await scripted_provider.stalled.wait()
        started = await fleet.now_ms()
        async with asyncio.timeout(HANG_S):
            while await fleet.now_ms() < started + 5000:
                with pytest.raises(InferenceError) as caught:
                    await survivor.complete(req())
                assert caught.value.code == BUDGET_EXCEEDED
                await asyncio.sleep(0.1)
        renewer = doomed.admission._renewer
        assert renewer is not None
        renewer.cancel()  # the replica "dies": its lease is never renewed again

        async def admitted() -> bool:
            try:
                response = await survivor.complete(req())
            except InferenceError as error:
                assert error.code == BUDGET_EXCEEDED
                return False
            assert response.text == "hello" and response.cost_usd is not None
            return True

        await until(fleet, admitted)
        stalled.cancel()


@pytest.mark.parametrize("backend", ["memory"])
async def test_the_lease_must_be_positive(load: Callable[..., Kernel]) -> None:
    with pytest.raises(Exception, match="reservation_lease_s") as caught:
        load("reservation_lease_s = 0\n[budget.servers.s1]\nmax_usd = 1.0")
    assert "greater than 0" in str(caught.value)
