"""Where holds live: a small async interface, and the in-memory store every host starts with.

Times are epoch seconds (`time.time()`), not the monotonic clock, so that a
shared store (Redis, a database) means the same instant on every machine.
Every method is async for the same reason, though the in-memory store never
waits. A store only records; waking waiters is the plugin's job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Protocol


@dataclass(frozen=True, slots=True)
class HoldKey:
    """What one hold covers: a provider's model, or (`model` None) the whole provider."""

    provider: str
    model: str | None = None

    def __str__(self) -> str:
        return self.provider if self.model is None else f"{self.provider}:{self.model}"


@dataclass(frozen=True, slots=True)
class Hold:
    key: HoldKey
    until: float
    """Epoch seconds when the hold ends; after that, one call (the probe) may go."""
    reason: str
    """The error kind that started it: ``rate_limit`` or ``overloaded``."""
    since: float
    """Epoch seconds when the key was first held (kept when a hold is lengthened)."""
    probe: str | None = None
    """The owner of the one call let through after the hold ended, if any."""
    probe_since: float | None = None

    def remaining_s(self, now: float | None = None) -> float:
        return max(0.0, self.until - (time.time() if now is None else now))


class HoldStore(Protocol):
    """The holds of every key. Implement it over a shared store for hosts on many machines;
    each method must be atomic for its key."""

    async def get(self, key: HoldKey) -> Hold | None:
        """The hold on `key`, ended or not, until it is released; None when not held."""
        ...

    async def hold(self, key: HoldKey, until: float, reason: str) -> tuple[Hold, bool]:
        """Hold `key` until `until`, unless it is held longer already: the longest hold wins.
        Returns the hold in force, and True when this call started or lengthened it (which
        also forgets any probe: the probe failed, or a new hold overtook it)."""
        ...

    async def claim_probe(self, key: HoldKey, owner: str, stale_after_s: float) -> bool:
        """After the hold ended: become the one call that goes first. True for exactly one
        owner at a time; a probe claimed more than `stale_after_s` ago counts as gone."""
        ...

    async def drop_probe(self, key: HoldKey, owner: str) -> bool:
        """The probe ended without a verdict (another failure, or cancelled): let the next
        call be the probe. True when `owner` was the probe."""
        ...

    async def release(self, key: HoldKey) -> Hold | None:
        """The provider answered again: forget the hold. Returns the hold released, if any."""
        ...


class InMemoryHoldStore:
    """One process's holds, in a dict. Single-threaded asyncio makes each method atomic."""

    def __init__(self) -> None:
        self._holds: dict[HoldKey, Hold] = {}

    async def get(self, key: HoldKey) -> Hold | None:
        return self._holds.get(key)

    async def hold(self, key: HoldKey, until: float, reason: str) -> tuple[Hold, bool]:
        current = self._holds.get(key)
        if current is not None and current.until >= until:
            return current, False
        since = current.since if current is not None else time.time()
        hold = Hold(key, until, reason, since)
        self._holds[key] = hold
        return hold, True

    async def claim_probe(self, key: HoldKey, owner: str, stale_after_s: float) -> bool:
        current = self._holds.get(key)
        now = time.time()
        if current is None or current.until > now:
            return False
        if current.probe is not None and now - (current.probe_since or 0.0) < stale_after_s:
            return current.probe == owner
        self._holds[key] = replace(current, probe=owner, probe_since=now)
        return True

    async def drop_probe(self, key: HoldKey, owner: str) -> bool:
        current = self._holds.get(key)
        if current is None or current.probe != owner:
            return False
        self._holds[key] = replace(current, probe=None, probe_since=None)
        return True

    async def release(self, key: HoldKey) -> Hold | None:
        return self._holds.pop(key, None)
