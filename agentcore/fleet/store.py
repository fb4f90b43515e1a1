"""The fleet store's interface: what both backends implement, and what a waiting policy
shares (the store-unreachable error and trace, the jittered poll). See `agentcore.fleet`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from agentcore.fleet.claims import Claim, ClaimKind, ClaimRefusal, Scalar
from agentcore.inference.calls import Attempt
from agentcore.inference.errors import InferenceError

StoreErrorPolicy: TypeAlias = Literal["closed", "open"]

FLEET_UNAVAILABLE = "fleet_unavailable"
"""`InferenceError.code` of a call refused because the store stayed unreachable."""
UNAVAILABLE_TRACE = "fleet:unavailable"
"""The warning trace a policy emits when the store could not be reached for a call."""
POLL_S = 1.0
"""A waiter re-reads the store at least this often (jittered), in case a wake-up was lost."""


class FleetUnavailable(Exception):
    """The store could not be reached (Redis down, refusing, or too slow)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A hold as read from the store."""

    reason: str
    """What started it (the provider hold writes the error kind)."""
    remaining_s: float
    """Seconds until it ends, when it was read; 0 once it has ended (then a probe may go)."""
    held_s: float
    """Seconds since the key was first held (a lengthened hold keeps its start)."""
    probe: str | None = None
    """The owner of the one call let through after the end, if one claimed it."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why `FleetStore.take` took nothing."""

    limit: Literal["slots", "window"]
    """Every slot is taken by a live lease, or the window is full."""
    retry_s: float | None = None
    """The window: seconds until its oldest take leaves it. Slots: None (a slot frees when
    one is released, or when a dead holder's lease runs out)."""


class FleetStore(Protocol):
    """The operations both backends implement; every one is atomic for its key."""

    description: str
    """For messages: ``memory`` or ``redis at HOST:PORT/DB`` (never a password)."""
    on_store_error: StoreErrorPolicy

    # -- holds -----------------------------------------------------------------

    async def get_hold(self, key: str) -> Hold | None:
        """The hold on `key`, ended or not, until it is released or expires; else None."""
        ...

    async def set_hold(
        self, key: str, duration_s: float, reason: str, linger_s: float
    ) -> tuple[Hold, bool]:
        """Hold `key` for `duration_s` unless it is held longer already (the longest wins).
        Returns the hold in force and True when this call started or lengthened it (which
        also forgets any probe). The hold expires `linger_s` after its end if nobody
        claims or releases it."""
        ...

    async def claim_probe(self, key: str, owner: str, lease_s: float) -> bool:
        """After the hold ended: become the one call that goes first. True for exactly one
        owner at a time; the probe claiming again renews its lease, and a probe whose lease
        (`lease_s` from its last claim) ran out counts as gone. The hold stays for the next
        probe: it expires `lease_s` + its linger after the last claim."""
        ...

    async def drop_probe(self, key: str, owner: str) -> bool:
        """The probe ended without a verdict: let the next call be the probe. True when
        `owner` was the probe."""
        ...

    async def release_hold(self, key: str) -> Hold | None:
        """The provider answered again: forget the hold, but only one that has ended (a
        hold set meanwhile by another replica stands). Returns the hold released."""
        ...

    # -- limits: semaphores and windows ------------------------------------------------

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
        """Admit `holder` under `key`'s limits, both at once or neither (one round trip):
        one of `slots` slots, leased for `lease_s` (a holder taking again renews its own),
        and one of `per_window` takes in any sliding `window_s`. None when admitted; else
        the limit that refused (the window first: its wait is known). A limit that is None
        is not checked."""
        ...

    async def renew_slots(self, key: str, holders: list[str], lease_s: float) -> None:
        """Extend the leases of `holders` (those still held) to `lease_s` from now."""
        ...

    async def release_slot(self, key: str, holder: str) -> bool:
        """Give `holder`'s slot back. True when it held one."""
        ...

    # -- admission: claim sets (agentcore.fleet.claims) ----------------------------------

    def register_kinds(self, kinds: Sequence[ClaimKind]) -> None:
        """The plugin claim kinds this store may be asked about (the kernel, at start)."""
        ...

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        """Decide every claim at once, atomically (one locked step; one script): check each,
        then, when all passed, take each for `holder`. Returns each take's result, in order,
        or the first claim that refused (nothing taken)."""
        ...

    def release(
        self, claims: Sequence[Claim], holder: str, settles: Sequence[tuple[Scalar, ...]] = ()
    ) -> Awaitable[None]:
        """Give back what `holder` was granted, in one operation (it may ride with the next
        operation on the same connection); `settles[i]` is claim i's settlement. Giving back
        what is not held does nothing. Awaiting the result waits until it is given back;
        the built-in stores start at the call (memory: done; Redis: queued for the next
        write), so the kernel needs no task per release (an `async def` works too: the
        kernel then runs it in a task of its own)."""
        ...

    async def renew(self, claims: Sequence[Claim], holder: str) -> None:
        """Extend the leases `holder` holds for `claims` (slots; a hold's probe; a plugin
        kind's `renew`), in one operation."""
        ...

    async def read_books(self, kind: str, key: str, fields: Sequence[str]) -> list[str | None]:
        """A claim kind's books for `key`, read without admitting anything (what `agentcore
        spend` reports): in memory the kind's state for `key`, on Redis the hash
        ``{PREFIX}:KIND:KEY`` (a kind keeps its books there by naming its first `redis_keys`
        family after itself). One value per field, as text; None where it is not set."""
        ...

    # -- wake-ups and lifecycle ------------------------------------------------------

    def changed(self, key: str) -> asyncio.Event:
        """An event set at the next change of `key` that may free a waiter, from any
        replica. Get it before reading the store, so no change falls in between."""
        ...

    async def aclose(self) -> None:
        """Close connections and stop listening; wakes every waiter."""
        ...


def poll_s(at_most: float | None = None) -> float:
    """A waiter's next re-read: `POLL_S` jittered by half either way, so a fleet's
    waiters do not poll in step; never later than `at_most`."""
    delay = POLL_S * random.uniform(0.5, 1.5)
    return delay if at_most is None else max(0.0, min(delay, at_most))


async def wait_for_change(changed: asyncio.Event, timeout: float, *stops: asyncio.Event) -> None:
    """Sleep until `changed` (a `FleetStore.changed` event) or any of `stops` (the
    kernel stopping) is set, or `timeout` passes: how a waiting policy sleeps."""
    waits = [asyncio.ensure_future(event.wait()) for event in (changed, *stops)]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def unavailable_error(
    store: FleetStore, cause: FleetUnavailable, waited_s: float, limit_s: float, limit: str
) -> InferenceError:
    """What a call fails with when the store stayed unreachable past its wait (``closed``).
    `limit` names the setting that bounded the wait (``[provider_hold] max_wait_s``)."""
    return InferenceError(
        "network",
        f"The fleet store ({store.description}) has been unreachable for {_seconds(waited_s)} s, "
        f"as long as a call may wait ({_seconds(limit_s)} s, {limit}); "
        f'with [fleet] on_store_error = "closed" no call goes ahead while it is down: {cause}',
        retryable=False,
        code=FLEET_UNAVAILABLE,
    )


def unavailable_fields(
    store: FleetStore, plugin: str, attempt: Attempt, cause: FleetUnavailable, admitted: bool
) -> dict[str, Any]:
    """The fields of a `UNAVAILABLE_TRACE` (a warning): which policy could not read the
    store for which call, and whether the call was admitted anyway (``open``)."""
    return {
        "level": "warning",
        "plugin": plugin,
        "store": store.description,
        "onStoreError": store.on_store_error,
        "admitted": admitted,
        "provider": attempt.provider,
        "model": attempt.model,
        "inferenceId": attempt.inference.id,
        "error": str(cause),
    }


def given_back() -> asyncio.Future[None]:
    """A `FleetStore.release` already done (nothing to send, or given back in one step)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


__all__ = [
    "FLEET_UNAVAILABLE",
    "POLL_S",
    "UNAVAILABLE_TRACE",
    "FleetStore",
    "FleetUnavailable",
    "Hold",
    "Refusal",
    "StoreErrorPolicy",
    "given_back",
    "poll_s",
    "unavailable_error",
    "unavailable_fields",
    "wait_for_change",
]
