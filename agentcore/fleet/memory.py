"""The embedded fleet store: this process only, in dicts. Single-threaded asyncio makes
each method atomic; leases and windows read the monotonic clock."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentcore.fleet.claims import (
    HOLD,
    SLOTS,
    WINDOW,
    Claim,
    ClaimCall,
    ClaimKind,
    ClaimRefusal,
    Scalar,
)
from agentcore.fleet.store import Hold, Refusal, StoreErrorPolicy, given_back

_Check = tuple[float | None, str, str | None] | None


@dataclass(slots=True)
class _Hold:
    until: float
    reason: str
    since: float
    expires: float
    linger: float
    probe: str | None = None
    probe_at: float = 0.0

    def view(self, now: float) -> Hold:
        return Hold(self.reason, max(0.0, self.until - now), now - self.since, self.probe)


class MemoryFleetStore:
    """`agentcore.fleet.FleetStore` for one process (``[fleet] backend = "memory"``)."""

    description = "memory"

    def __init__(
        self,
        on_store_error: StoreErrorPolicy = "closed",
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.on_store_error: StoreErrorPolicy = on_store_error
        self._clock = clock
        """Wall clock for plugin claim kinds (`ClaimCall.now_ms`); injectable for tests."""
        self._kinds: dict[str, ClaimKind] = {}
        self._kind_state: dict[tuple[str, str], dict[str, Any]] = {}
        self._holds: dict[str, _Hold] = {}
        self._slots: dict[str, dict[str, float]] = {}
        """key -> holder -> lease end."""
        self._windows: dict[str, deque[float]] = {}
        """key -> the times of the takes still in the window, oldest first."""
        self._changed: dict[str, asyncio.Event] = {}

    # -- holds -----------------------------------------------------------------

    def _hold(self, key: str, now: float) -> _Hold | None:
        hold = self._holds.get(key)
        if hold is not None and hold.expires <= now:
            del self._holds[key]
            return None
        return hold

    async def get_hold(self, key: str) -> Hold | None:
        now = time.monotonic()
        hold = self._hold(key, now)
        return None if hold is None else hold.view(now)

    async def set_hold(
        self, key: str, duration_s: float, reason: str, linger_s: float
    ) -> tuple[Hold, bool]:
        now = time.monotonic()
        until = now + duration_s
        current = self._hold(key, now)
        if current is not None and current.until >= until:
            return current.view(now), False
        since = current.since if current is not None else now
        hold = self._holds[key] = _Hold(until, reason, since, until + linger_s, linger_s)
        self._wake(key)
        return hold.view(now), True

    async def claim_probe(self, key: str, owner: str, lease_s: float) -> bool:
        now = time.monotonic()
        hold = self._hold(key, now)
        if hold is None or hold.until > now:
            return False
        if hold.probe is not None and hold.probe != owner and now - hold.probe_at < lease_s:
            return False
        # The probe's own claim renews its lease. The hold outlives the lease: a lost
        # probe hands over to the next one.
        hold.probe, hold.probe_at = owner, now
        hold.expires = now + lease_s + hold.linger
        return True

    async def drop_probe(self, key: str, owner: str) -> bool:
        hold = self._hold(key, time.monotonic())
        if hold is None or hold.probe != owner:
            return False
        hold.probe = None
        self._wake(key)
        return True

    async def release_hold(self, key: str) -> Hold | None:
        now = time.monotonic()
        hold = self._hold(key, now)
        if hold is None or hold.until > now:
            return None
        del self._holds[key]
        self._wake(key)
        return hold.view(now)

    # -- limits: semaphores and windows ------------------------------------------------

    def _slot_free(self, key: str, holder: str, limit: int, now: float) -> bool:
        """`holder` has a slot of `key`'s `limit` or may take one. A lease that ran out (its
        holder stopped renewing) is looked for only when the slots look full, so a call
        that fits costs the same with a thousand slots held as with one."""
        held = self._slots.get(key)
        if not held or holder in held or len(held) < limit:
            return True
        for lapsed in [h for h, end in held.items() if end <= now]:
            del held[lapsed]
        return len(held) < limit

    def _renew_slot(self, key: str, holder: str, until: float, now: float) -> None:
        """A lease still running runs on to `until`; one that ran out is not taken again."""
        held = self._slots.get(key)
        if held is not None and held.get(holder, now) > now:
            held[holder] = until

    async def take(
        self,
        key: str,
        holder: str,
        *,
        slots: int | None,
        lease_s: float,
        per_window: int | None,
        window_s: float,
    ) -> Refusal | None:
        now = time.monotonic()
        takes = None
        if per_window is not None:
            takes = self._windows.setdefault(key, deque())
            while takes and takes[0] <= now - window_s:
                takes.popleft()
            if len(takes) >= per_window:
                return Refusal("window", takes[0] + window_s - now)
        if slots is not None:
            if not self._slot_free(key, holder, slots, now):
                return Refusal("slots")
            self._slots.setdefault(key, {})[holder] = now + lease_s
        if takes is not None:
            takes.append(now)
        return None

    async def renew_slots(self, key: str, holders: list[str], lease_s: float) -> None:
        now = time.monotonic()
        for holder in holders:
            self._renew_slot(key, holder, now + lease_s, now)

    async def release_slot(self, key: str, holder: str) -> bool:
        slots = self._slots.get(key)
        if slots is None or slots.pop(holder, None) is None:
            return False
        if not slots:
            del self._slots[key]
        self._wake(key)
        return True

    # -- admission: claim sets ----------------------------------------------------------
    # Each method below runs to its end without an await: one locked step (asyncio).

    def register_kinds(self, kinds: Sequence[ClaimKind]) -> None:
        self._kinds = {kind.name: kind for kind in kinds}

    def _call(self, claim: Claim, holder: str, settle: tuple[Scalar, ...] = ()) -> ClaimCall:
        state = self._kind_state.setdefault((claim.kind, claim.key), {})
        return ClaimCall(claim, holder, round(self._clock() * 1000), state, settle)

    def _kind(self, claim: Claim) -> ClaimKind:
        kind = self._kinds.get(claim.kind)
        if kind is None:
            raise ValueError(f"no claim kind {claim.kind!r} is registered with the fleet store")
        return kind

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        now = time.monotonic()
        for index, claim in enumerate(claims):
            refused = self._check(claim, holder, now)
            if refused is not None:
                retry_s, detail, info = refused
                return ClaimRefusal(index, claim, detail, retry_s, info)
        return [self._take(claim, holder, now) for claim in claims]

    def _check(self, claim: Claim, holder: str, now: float) -> _Check:
        key, args = claim.key, claim.args
        if claim.kind == HOLD:
            hold = self._hold(key, now)
            if hold is None:
                return None
            if hold.until > now:
                return hold.until - now, "held", hold.reason
            lease = float(args[0]) / 1000
            if hold.probe is not None and hold.probe != holder and now - hold.probe_at < lease:
                return None, "probe", hold.reason
            return None
        if claim.kind == SLOTS:
            return (
                None if self._slot_free(key, holder, int(args[0]), now) else (None, "slots", None)
            )
        if claim.kind == WINDOW:
            window_s = float(args[1]) / 1000
            takes = self._windows.setdefault(key, deque())
            while takes and takes[0] <= now - window_s:
                takes.popleft()
            if len(takes) >= int(args[0]):
                return takes[0] + window_s - now, "window", None
            return None
        return self._kind(claim).check(self._call(claim, holder))

    def _take(self, claim: Claim, holder: str, now: float) -> Scalar:
        if claim.kind == HOLD:
            hold = self._hold(claim.key, now)
            if hold is None or hold.until > now:
                return 0
            hold.probe, hold.probe_at = holder, now
            hold.expires = now + float(claim.args[0]) / 1000 + hold.linger
            return 1
        if claim.kind == SLOTS:
            self._slots.setdefault(claim.key, {})[holder] = now + float(claim.args[1]) / 1000
            return 0
        if claim.kind == WINDOW:
            self._windows.setdefault(claim.key, deque()).append(now)
            return 0
        return self._kind(claim).take(self._call(claim, holder))

    def release(
        self, claims: Sequence[Claim], holder: str, settles: Sequence[tuple[Scalar, ...]] = ()
    ) -> asyncio.Future[None]:
        """Given back at once (one synchronous step); the future returned is done."""
        for index, claim in enumerate(claims):
            settle = settles[index] if index < len(settles) else ()
            self._release(claim, holder, settle)
        return given_back()

    def _release(self, claim: Claim, holder: str, settle: tuple[Scalar, ...]) -> None:
        if claim.kind == HOLD:
            hold = self._hold(claim.key, time.monotonic())
            if hold is not None and hold.probe == holder:
                hold.probe = None
                self._wake(claim.key)
        elif claim.kind == SLOTS:
            slots = self._slots.get(claim.key)
            if slots is not None and slots.pop(holder, None) is not None:
                self._wake(claim.key)
        elif claim.kind != WINDOW and self._kind(claim).release(self._call(claim, holder, settle)):
            self._wake(claim.key)

    async def renew(self, claims: Sequence[Claim], holder: str) -> None:
        now = time.monotonic()
        for claim in claims:
            if claim.kind == HOLD:
                hold = self._hold(claim.key, now)
                if hold is not None and hold.probe == holder:
                    self._take(claim, holder, now)
            elif claim.kind == SLOTS:
                self._renew_slot(claim.key, holder, now + float(claim.args[1]) / 1000, now)
            elif claim.kind != WINDOW:
                self._kind(claim).renew(self._call(claim, holder))

    async def read_books(self, kind: str, key: str, fields: Sequence[str]) -> list[str | None]:
        books = self._kind_state.get((kind, key), {})
        return [None if books.get(name) is None else str(books[name]) for name in fields]

    # -- wake-ups and lifecycle ------------------------------------------------------

    def changed(self, key: str) -> asyncio.Event:
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = asyncio.Event()
        return event

    def _wake(self, key: str) -> None:
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()

    async def aclose(self) -> None:
        events, self._changed = self._changed, {}
        for event in events.values():
            event.set()
