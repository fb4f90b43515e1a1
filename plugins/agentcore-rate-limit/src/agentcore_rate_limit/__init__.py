"""agentcore's fleet-wide rate limit (entry point ``rate-limit``): per provider, at most
``max_in_flight`` calls at once and ``requests_per_minute`` calls in any 60 s, counted
across every replica that shares the kernel's ``[fleet]`` store.

- Enforced at admission (`on_admission`, ``trylast``: after the provider hold, so a
  held call takes no slot), before every attempt, retries included.
- ``max_in_flight`` is a semaphore in the store: each admitted attempt leases a slot
  for ``slot_lease_s``, renewed while it runs; a replica that dies leaves slots that
  come back when their leases run out. The slot is given back when the attempt ends
  (`on_attempt_end`: completion, failure, cancellation), when its inference fails
  before reaching the provider (the ``inference:fail`` trace), and at shutdown.
- Each slot taken and given back is a ``rate_limit:slots`` trace (`SLOTS_TRACE`): the
  provider, ``inUse`` and ``maxInFlight``. ``inUse`` counts the slots this replica
  holds (``scope``: ``replica``), read from its own books at no store cost; the limit
  is fleet-wide, so on a shared Redis store other replicas may hold the rest.
- ``requests_per_minute`` is a sliding window in the store: a call is counted when it
  is admitted. A call takes its slot and its place in the window in one atomic store
  operation (one round trip), both or neither: a call waiting for one holds no other.
- A call over a limit waits, announced as a ``limit`` wait (`inference:waiting` with
  reason ``limit``). It is woken when a slot is released anywhere, or by a jittered
  poll. A call that would wait longer than ``[rate_limit] max_wait_s`` in all fails
  with an error (kind ``rate_limit``, code ``limit_wait_too_long``, not retryable)
  naming the provider and the limit: at once for the per-minute window, whose wait
  is known, after ``max_wait_s`` for a slot.
- The store unreachable: ``[fleet] on_store_error`` decides, as for the hold:
  ``closed`` waits (announced) and fails after ``max_wait_s``; ``open`` admits, with a
  ``fleet:unavailable`` warning trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from loguru import logger
from pydantic import Field

from agentcore.api import (
    SLOTS_TRACE,
    UNAVAILABLE_TRACE,
    Attempt,
    FleetStore,
    FleetUnavailable,
    InferenceError,
    PluginContext,
    ProviderName,
    Section,
    SettingsSection,
    SlotsPayload,
    TraceEvent,
    Wait,
    hookimpl,
    poll_s,
    shutting_down,
    unavailable_error,
    unavailable_fields,
    wait_for_change,
)

LIMIT_WAIT_TOO_LONG = "limit_wait_too_long"
"""`InferenceError.code` of a call that would wait longer than ``max_wait_s`` for a limit."""
"""The trace of a slot taken or given back: how many this replica holds, and the limit."""
MAX_WAIT_SETTING = "[rate_limit] max_wait_s"
WINDOW_S = 60.0
RELEASE_TIMEOUT_S = 2.0
"""How long shutdown waits for the store to take back this replica's slots."""

Limit = Literal["max_in_flight", "requests_per_minute"]


class ProviderLimit(Section):
    """``[rate_limit.providers.NAME]``: unset means no limit of that kind."""

    max_in_flight: int | None = Field(default=None, ge=1)
    """Calls to this provider in flight at once, across every replica."""
    requests_per_minute: int | None = Field(default=None, ge=1)
    """Calls admitted to this provider in any 60 s, across every replica."""


class RateLimitSettings(Section):
    """``[rate_limit]``."""

    max_wait_s: float = Field(default=600.0, ge=0)
    """A call that would wait longer than this for a limit fails, saying which limit."""
    slot_lease_s: float = Field(default=30.0, gt=0)
    """A slot not renewed this long (its replica died) comes back; renewed every third."""
    providers: dict[ProviderName, ProviderLimit] = Field(default_factory=dict)


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def limit_too_long(
    attempt: Attempt, limit: Limit, value: int, waited_s: float, next_s: float | None, max_s: float
) -> InferenceError:
    """The error of a call that would wait past ``max_wait_s`` for `limit`."""
    if limit == "max_in_flight":
        what = f"its limit of {value} calls in flight"
        when = f"a call waited {_seconds(waited_s)} s for a slot, as long as"
    else:
        what = f"its limit of {value} requests per minute"
        when = f"the next request may go in {_seconds(next_s or 0.0)} s, longer than"
    return InferenceError(
        "rate_limit",
        f"Provider {attempt.provider!r} is at {what} across the fleet "
        f"([rate_limit.providers.{attempt.provider}] {limit}); {when} a call may wait "
        f"({_seconds(max_s)} s, {MAX_WAIT_SETTING})",
        retryable=False,
        code=LIMIT_WAIT_TOO_LONG,
        retry_after_s=next_s,
        provider=attempt.provider,
        model=attempt.model,
    )


@dataclass(frozen=True, slots=True)
class _Slot:
    key: str
    holder: str


class RateLimit:
    """The plugin object; the kernel makes one per kernel. `store` replaces the kernel's
    ``[fleet]`` store (tests, embedding hosts)."""

    def __init__(self, store: FleetStore | None = None) -> None:
        self._store = store
        self.settings = RateLimitSettings()
        self._context: PluginContext[RateLimitSettings] | None = None
        self._stopped = asyncio.Event()
        self._prefix = uuid.uuid4().hex[:12]
        self._slots: dict[tuple[str, int], _Slot] = {}
        """The slots this replica holds, by (inference id, attempt number)."""
        self._renewer: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Task[None]] = set()

    @property
    def store(self) -> FleetStore:
        if self._store is None:
            assert self._context is not None, "agentcore_start was not called"
            self._store = self._context.fleet
        return self._store

    # -- lifecycle ---------------------------------------------------------------

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("rate_limit", RateLimitSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[RateLimitSettings]) -> None:
        self._context = context
        self.settings = context.settings

    @hookimpl
    async def agentcore_stop(self) -> None:
        """Wake waiters (they fail: shutting down) and give back every slot still held."""
        self._stopped.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        for held in list(self._slots):
            self._release_soon(self._give_back(held))
        if self._releases:
            await asyncio.wait(set(self._releases), timeout=RELEASE_TIMEOUT_S)

    # -- admission ---------------------------------------------------------------

    @hookimpl(trylast=True)
    async def on_admission(self, attempt: Attempt) -> None:
        limit = self.settings.providers.get(attempt.provider)
        if limit is None or (limit.max_in_flight is None and limit.requests_per_minute is None):
            return
        slot = _Slot(attempt.provider, f"{self._prefix}:{attempt.inference.id}:{attempt.number}")
        try:
            await self._admit(attempt, limit, slot)
        except BaseException:
            if limit.max_in_flight is not None:
                # Whether or not the slot was taken (a cancel may land while the store
                # takes it), it is given back: releasing a slot nobody holds does nothing.
                self._give_back((attempt.inference.id, attempt.number))
                self._release_soon(slot)
            raise

    async def _admit(self, attempt: Attempt, limit: ProviderLimit, slot: _Slot) -> None:
        store = self.store
        max_wait = self.settings.max_wait_s
        started = time.monotonic()
        outage_traced = False
        async with AsyncExitStack() as stack:
            wait: Wait | None = None
            while True:
                changed = store.changed(slot.key)  # before reading, so no release is missed
                if self._stopping():
                    raise shutting_down()
                waited = time.monotonic() - started
                try:
                    # Both limits in one atomic step: a call waiting for the window holds no slot.
                    refusal = await store.take(
                        slot.key,
                        slot.holder,
                        slots=limit.max_in_flight,
                        lease_s=self.settings.slot_lease_s,
                        per_window=limit.requests_per_minute,
                        window_s=WINDOW_S,
                    )
                    if refusal is None:
                        if limit.max_in_flight is not None:
                            self._hold(attempt, slot)
                        return
                    if refusal.limit == "window":
                        next_s = refusal.retry_s or 0.0
                        until, sleep_s = self._window_wait(attempt, limit, waited, next_s)
                    else:
                        until, sleep_s = self._slot_wait(attempt, limit, waited)
                except FleetUnavailable as exc:
                    if not outage_traced and self._unreachable(attempt, exc):
                        return
                    outage_traced = True
                    if waited >= max_wait:
                        raise unavailable_error(
                            store, exc, waited, max_wait, MAX_WAIT_SETTING
                        ) from exc
                    until, sleep_s = None, poll_s(at_most=max_wait - waited)
                if wait is None:
                    wait = await stack.enter_async_context(self._waiting(attempt, until))
                else:
                    wait.until = until
                await self._sleep(changed, sleep_s)

    def _window_wait(
        self, attempt: Attempt, limit: ProviderLimit, waited: float, next_s: float
    ) -> tuple[float | None, float]:
        """A call the per-minute window refused: when its wait ends and how long to sleep,
        or the error when that is past ``max_wait_s`` (known now, so it fails at once)."""
        assert limit.requests_per_minute is not None
        max_wait = self.settings.max_wait_s
        if waited + next_s > max_wait:
            raise limit_too_long(
                attempt, "requests_per_minute", limit.requests_per_minute, waited, next_s, max_wait
            )
        return time.monotonic() + next_s, next_s

    def _slot_wait(
        self, attempt: Attempt, limit: ProviderLimit, waited: float
    ) -> tuple[float | None, float]:
        """A call refused a slot: no known end, a jittered poll until a release wakes it;
        the error once it has waited ``max_wait_s``."""
        assert limit.max_in_flight is not None
        max_wait = self.settings.max_wait_s
        if waited >= max_wait:
            raise limit_too_long(
                attempt, "max_in_flight", limit.max_in_flight, waited, None, max_wait
            )
        return None, poll_s(at_most=max_wait - waited)

    def _unreachable(self, attempt: Attempt, exc: FleetUnavailable) -> bool:
        """Trace that the store could not be read; True when the call is admitted anyway."""
        store = self.store
        admitted = store.on_store_error == "open"
        if self._context is not None:
            fields = unavailable_fields(store, "rate-limit", attempt, exc, admitted)
            self._context.emit_now(UNAVAILABLE_TRACE, **fields)
        return admitted

    @asynccontextmanager
    async def _waiting(self, attempt: Attempt, until: float | None) -> AsyncIterator[Wait]:
        assert self._context is not None, "agentcore_start was not called"
        async with self._context.waiting("limit", attempt, until) as wait:
            yield wait

    def _stopping(self) -> bool:
        context = self._context
        return self._stopped.is_set() or (context is not None and context.stopping.is_set())

    async def _sleep(self, changed: asyncio.Event, timeout: float) -> None:
        stops = [self._stopped] + ([self._context.stopping] if self._context else [])
        await wait_for_change(changed, timeout, *stops)

    # -- slots held ----------------------------------------------------------------

    def _hold(self, attempt: Attempt, slot: _Slot) -> None:
        self._slots[(attempt.inference.id, attempt.number)] = slot
        self._trace_slots("taken", slot.key, attempt.inference.id, attempt.number)
        if self._renewer is None and not self._stopped.is_set():
            self._renewer = asyncio.create_task(self._renew(), name="rate-limit slot leases")

    async def _renew(self) -> None:
        """Renew this replica's leases every third of a lease, so only a dead one's lapse."""
        lease = self.settings.slot_lease_s
        while True:
            await asyncio.sleep(lease / 3)
            by_key: dict[str, list[str]] = {}
            for slot in list(self._slots.values()):
                by_key.setdefault(slot.key, []).append(slot.holder)
            for key, holders in by_key.items():
                try:
                    await self.store.renew_slots(key, holders, lease)
                except FleetUnavailable as exc:
                    logger.warning("rate-limit could not renew its slots of {!r}: {}", key, exc)

    def _give_back(self, held: tuple[str, int]) -> _Slot | None:
        """Strike a slot off this replica's books (traced); the store is told by the caller."""
        slot = self._slots.pop(held, None)
        if slot is not None:
            self._trace_slots("released", slot.key, *held)
        return slot

    def _trace_slots(
        self, change: Literal["taken", "released"], provider: str, inference_id: str, attempt: int
    ) -> None:
        if self._context is None:
            return
        limit = self.settings.providers.get(provider)
        fields = SlotsPayload(
            change=change,
            provider=provider,
            inUse=sum(1 for slot in self._slots.values() if slot.key == provider),
            maxInFlight=None if limit is None else limit.max_in_flight,
            scope="replica",
            inferenceId=inference_id,
            attempt=attempt,
        )
        self._context.emit_now(SLOTS_TRACE, **fields)

    def _release_soon(self, slot: _Slot | None) -> None:
        """Give a slot back in a task of its own: a cancelled caller cannot stop it."""
        if slot is None:
            return
        task = asyncio.create_task(self._release(slot), name="rate-limit slot release")
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, slot: _Slot) -> None:
        try:
            await self.store.release_slot(slot.key, slot.holder)
        except FleetUnavailable as exc:
            # Its lease runs out by itself, slot_lease_s from its last renewal.
            logger.warning("rate-limit could not give back a slot of {!r}: {}", slot.key, exc)

    @hookimpl
    async def on_attempt_end(self, attempt: Attempt) -> None:
        slot = self._give_back((attempt.inference.id, attempt.number))
        if slot is not None:
            await self._release(slot)

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        """An inference that failed at admission after this plugin admitted it (a later
        policy refused it) never ends an attempt: its slot is given back here."""
        if event.type != "inference:fail" or not self._slots:
            return
        inference_id = event.fields.get("inferenceId")
        for held in [k for k in self._slots if k[0] == inference_id]:
            self._release_soon(self._give_back(held))


__all__ = [
    "LIMIT_WAIT_TOO_LONG",
    "SLOTS_TRACE",
    "ProviderLimit",
    "RateLimit",
    "RateLimitSettings",
    "limit_too_long",
]
