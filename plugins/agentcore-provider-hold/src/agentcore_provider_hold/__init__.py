"""agentcore's provider hold (entry point ``provider-hold``): after a rate limit or overload,
calls to that provider and model wait at admission instead of hitting it again.

- A ``rate_limit`` or ``overloaded`` attempt (seen in `on_attempt_end`) holds its
  key, (provider, model) or, with ``key = "provider"``, the whole provider, until
  the provider's stated wait ends, or for ``default_hold_s`` when it stated none,
  made up to ``release_jitter`` (a fraction) longer at random.
  The longest hold wins: a shorter stated wait never shortens one.
- While a key is held, `on_admission` waits, announced as a ``hold`` wait: no
  provider call is made. A call that would wait longer than ``max_wait_s`` (unset:
  ``[inference] max_stated_wait_s``) in all fails at once, naming the provider,
  model and remaining wait.
- When the hold ends one call goes first (the probe). Only its success releases
  the others; a rate_limit or overloaded failure starts a new hold; any other
  ending lets the next waiter be the probe. A call waiting behind the probe is
  bounded by ``max_wait_s`` too: past it, it fails saying it waited for the probe.
- Shutdown (the kernel's ``stopping``, or `agentcore_stop`) wakes every waiter,
  which fails with "The host is shutting down".

Traces: ``provider:hold`` (provider, model, key, untilMs, durationMs, reason, error,
stated, inferenceId) when a hold starts or is lengthened, ``provider:release``
(provider, model, key, heldMs, inferenceId) when the probe succeeded, and
``fleet:unavailable`` (a warning) when the store could not be read for a call.

Holds live in the kernel's ``[fleet]`` store (`agentcore.fleet`): this process by
default; with ``backend = "redis"`` one hold for every replica, each step one atomic
script (the longest hold wins, exactly one probe), waiters woken by the store's
wake-ups with a jittered poll behind them, and a hold that nobody ends expires by
itself. When the store is unreachable, ``[fleet] on_store_error`` decides: ``closed``
waits (announced as a ``hold`` wait) and fails after ``max_wait_s``; ``open`` admits.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from loguru import logger
from pydantic import Field

from agentcore.api import (
    HOLD_TRACE,
    RELEASE_TRACE,
    UNAVAILABLE_TRACE,
    Attempt,
    FleetStore,
    FleetUnavailable,
    Hold,
    HoldPayload,
    InferenceError,
    PluginContext,
    ReleasePayload,
    Section,
    SettingsSection,
    TraceEvent,
    Wait,
    hookimpl,
    poll_s,
    shutting_down,
    unavailable_error,
    unavailable_fields,
    wait_for_change,
)

HOLD_KINDS: frozenset[str] = frozenset({"rate_limit", "overloaded"})
HOLD_TOO_LONG = "hold_too_long"
"""`InferenceError.code` of the error a call fails with when the hold outlasts max_wait_s."""
MAX_WAIT_SETTING = "[provider_hold] max_wait_s"
PROBE_LEASE_S = 10.0
"""A probe's claim lasts this long, renewed every third of it while the probe runs: a
probe lost with its replica hands over to the next call within this."""


class HoldSettings(Section):
    """``[provider_hold]``."""

    max_wait_s: float | None = Field(default=None, ge=0)
    """A call that would wait longer than this, in all, fails at once, saying why. Unset:
    ``[inference] max_stated_wait_s``, the limit the retry policy uses for a stated wait."""
    default_hold_s: float = Field(default=5.0, ge=0)
    """The hold after a rate limit or overload that stated no wait."""
    key: Literal["provider_model", "provider"] = "provider_model"
    """What one hold covers: one model of a provider, or the whole provider."""
    release_jitter: float = Field(default=0.1, ge=0, le=1)
    """A hold lasts up to this fraction longer than its wait, at random (5 s: up to 5.5 s):
    the calls it releases do not land on the provider at one instant, nor exactly when
    a server drops the connection that sat idle through the hold (uvicorn does after
    5 s, the default hold)."""


@dataclass(frozen=True, slots=True)
class HoldKey:
    """What one hold covers: a provider's model, or (`model` None) the whole provider."""

    provider: str
    model: str | None = None

    def __str__(self) -> str:
        return self.provider if self.model is None else f"{self.provider}:{self.model}"


def hold_key(attempt: Attempt, key: str) -> HoldKey:
    return HoldKey(attempt.provider, None if key == "provider" else attempt.model)


def hold_duration_s(
    error: InferenceError, default_hold_s: float, jitter: float = 0.0
) -> float | None:
    """How long an attempt's error holds its key: the stated wait, else `default_hold_s`,
    made up to `jitter` (a fraction) longer at random; None for errors that start no hold."""
    if error.kind not in HOLD_KINDS or error.code == HOLD_TOO_LONG:
        return None
    wait = default_hold_s if error.retry_after_s is None else max(0.0, error.retry_after_s)
    return wait * (1.0 + random.uniform(0.0, jitter))


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def hold_too_long(
    attempt: Attempt,
    hold: Hold,
    remaining: float,
    limit: float,
    key: str = MAX_WAIT_SETTING,
) -> InferenceError:
    return InferenceError(
        "rate_limit" if hold.reason == "rate_limit" else "overloaded",
        f"Provider {attempt.provider!r} model {attempt.model!r} is held for another "
        f"{_seconds(remaining)} s after a {hold.reason.replace('_', ' ')} error, longer than "
        f"a call may wait ({_seconds(limit)} s, {key})",
        retryable=False,
        code=HOLD_TOO_LONG,
        retry_after_s=remaining,
        provider=attempt.provider,
        model=attempt.model,
    )


def probe_too_long(
    attempt: Attempt, hold: Hold, waited: float, limit: float, key: str = MAX_WAIT_SETTING
) -> InferenceError:
    """The error of a call that waited `limit` behind the probe (the one call that goes first
    after a hold), which has not ended yet: how long that takes is not known in advance."""
    return InferenceError(
        "rate_limit" if hold.reason == "rate_limit" else "overloaded",
        f"Provider {attempt.provider!r} model {attempt.model!r} is still held after a "
        f"{hold.reason.replace('_', ' ')} error: the call that goes first after the hold has "
        f"not ended, and this call waited {_seconds(waited)} s for it, as long as a call may "
        f"wait ({_seconds(limit)} s, {key})",
        retryable=False,
        code=HOLD_TOO_LONG,
        provider=attempt.provider,
        model=attempt.model,
    )


class ProviderHold:
    """The plugin object; the kernel makes one per kernel. `store` replaces the kernel's
    ``[fleet]`` store (tests, embedding hosts)."""

    def __init__(self, store: FleetStore | None = None) -> None:
        self._store = store
        self.settings = HoldSettings()
        self._context: PluginContext[HoldSettings] | None = None
        self._stopped = asyncio.Event()
        self._owner_prefix = uuid.uuid4().hex[:12]
        self._linger_s = 600.0
        self._drops: set[asyncio.Task[None]] = set()
        self._probes: dict[str, str] = {}
        """This replica's probes in flight, owner to key: only a probe's outcome releases
        a hold or hands the probe on, so any other attempt's end costs no store call."""
        self._renewer: asyncio.Task[None] | None = None
        self._limit: tuple[float, str] = (600.0, "[inference] max_stated_wait_s")
        """The longest a call waits here in all, and the settings key that says so."""

    @property
    def store(self) -> FleetStore:
        if self._store is None:
            assert self._context is not None, "agentcore_start was not called"
            self._store = self._context.fleet
        return self._store

    # -- lifecycle ---------------------------------------------------------------

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("provider_hold", HoldSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[HoldSettings]) -> None:
        self._context = context
        self.settings = context.settings
        # How long an ended hold waits for its probe before it goes by itself.
        self._linger_s = context.inference.request_timeout_s
        if self.settings.max_wait_s is not None:
            self._limit = (self.settings.max_wait_s, MAX_WAIT_SETTING)
        else:
            self._limit = (context.inference.max_stated_wait_s, "[inference] max_stated_wait_s")

    @hookimpl
    def agentcore_stop(self) -> None:
        self._stopped.set()
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    # -- admission ---------------------------------------------------------------

    @hookimpl
    async def on_admission(self, attempt: Attempt) -> None:
        store = self.store
        key = str(hold_key(attempt, self.settings.key))
        outage_traced = False
        try:
            if await store.get_hold(key) is None:
                return  # the common case: one read
        except FleetUnavailable as exc:
            if self._unreachable(attempt, exc):
                return
            outage_traced = True
        owner = f"{self._owner_prefix}:{attempt.inference.id}:{attempt.number}"
        started = time.monotonic()
        max_wait, setting = self._limit
        async with AsyncExitStack() as stack:
            wait: Wait | None = None
            while True:
                changed = store.changed(key)  # before reading, so no change is missed
                if self._stopping():
                    raise shutting_down()
                try:
                    hold = await store.get_hold(key)
                    if hold is None:
                        return
                    remaining = hold.remaining_s
                    if remaining > 0:
                        if time.monotonic() - started + remaining > max_wait:
                            raise hold_too_long(attempt, hold, remaining, max_wait, setting)
                        until: float | None = time.monotonic() + remaining
                        sleep_s = remaining
                    elif await self._claim(key, owner):
                        self._probe(owner, key)
                        return  # the probe: it goes alone, and its outcome decides for the rest
                    else:
                        # Behind the probe, for as long as it runs: bounded like any wait.
                        waited = time.monotonic() - started
                        if waited >= max_wait:
                            raise probe_too_long(attempt, hold, waited, max_wait, setting)
                        until, sleep_s = None, poll_s(at_most=max_wait - waited)
                except FleetUnavailable as exc:
                    if not outage_traced and self._unreachable(attempt, exc):
                        return
                    outage_traced = True
                    waited = time.monotonic() - started
                    if waited >= max_wait:
                        raise unavailable_error(store, exc, waited, max_wait, setting) from exc
                    until, sleep_s = None, poll_s(at_most=max_wait - waited)
                if wait is None:
                    wait = await stack.enter_async_context(self._waiting(attempt, until))
                else:
                    wait.until = until  # a lengthened hold, or now behind a probe
                await self._sleep(changed, sleep_s)

    def _unreachable(self, attempt: Attempt, exc: FleetUnavailable) -> bool:
        """Trace that the store could not be read; True when the call is admitted anyway."""
        store = self.store
        admitted = store.on_store_error == "open"
        if self._context is not None:
            self._context.emit_now(
                UNAVAILABLE_TRACE,
                **unavailable_fields(store, "provider-hold", attempt, exc, admitted),
            )
        return admitted

    async def _claim(self, key: str, owner: str) -> bool:
        """Claim the probe. A call cancelled while the claim is on its way (its session
        closed) may have been granted it: the claim is dropped, or every call to the model
        would wait behind a probe that never runs until its lease lapsed."""
        try:
            return await self.store.claim_probe(key, owner, PROBE_LEASE_S)
        except BaseException:
            self._drop_soon(key, owner)  # dropping a probe another owns does nothing
            raise

    def _drop_soon(self, key: str, owner: str) -> None:
        """Drop a probe claim in a task of its own: a cancelled caller cannot stop it."""
        task = asyncio.create_task(self._drop(key, owner), name="provider-hold probe drop")
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    def _probe(self, owner: str, key: str) -> None:
        self._probes[owner] = key
        if self._renewer is None and not self._stopped.is_set():
            self._renewer = asyncio.create_task(self._renew(), name="provider-hold probe leases")

    async def _renew(self) -> None:
        """Renew this replica's probes' leases (a probe claiming again), so that only a
        dead replica's probe lapses."""
        while True:
            await asyncio.sleep(PROBE_LEASE_S / 3)
            for owner, key in list(self._probes.items()):
                if owner not in self._probes:
                    continue  # ended while an earlier renewal was under way
                try:
                    renewed = await self.store.claim_probe(key, owner, PROBE_LEASE_S)
                    if renewed and owner not in self._probes:
                        # The probe ended (and dropped its claim) while this renewal was
                        # on its way, which then claimed the probe anew for an attempt
                        # that is over: nobody would go first until its lease ran out.
                        await self.store.drop_probe(key, owner)
                except FleetUnavailable as exc:
                    logger.warning(
                        "the provider hold could not renew its probe of {}: {}", key, exc
                    )

    @asynccontextmanager
    async def _waiting(self, attempt: Attempt, until: float | None) -> AsyncIterator[Wait]:
        assert self._context is not None, "agentcore_start was not called"
        async with self._context.waiting("hold", attempt, until) as wait:
            yield wait

    def _stopping(self) -> bool:
        context = self._context
        return self._stopped.is_set() or (context is not None and context.stopping.is_set())

    async def _sleep(self, changed: asyncio.Event, timeout: float) -> None:
        stops = [self._stopped] + ([self._context.stopping] if self._context else [])
        await wait_for_change(changed, timeout, *stops)

    # -- outcomes ----------------------------------------------------------------

    @hookimpl
    async def on_attempt_end(self, attempt: Attempt, error: InferenceError | None) -> None:
        key = hold_key(attempt, self.settings.key)
        owner = f"{self._owner_prefix}:{attempt.inference.id}:{attempt.number}"
        probe = self._probes.pop(owner, None) is not None
        try:
            duration = (
                None
                if error is None
                else hold_duration_s(
                    error, self.settings.default_hold_s, self.settings.release_jitter
                )
            )
            if error is not None and duration is not None:
                await self._hold(attempt, key, error, duration)
            elif not probe:
                return  # not the probe: its end decides nothing
            elif error is None:
                await self._succeeded(attempt, key)
            else:
                await self.store.drop_probe(str(key), owner)  # the next waiter becomes the probe
        except FleetUnavailable as exc:
            logger.warning("the provider hold could not record {}'s outcome: {}", key, exc)

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        """A probe that failed at admission after this plugin admitted it (a later policy
        refused it, or it was cancelled there) never ends an attempt: its claim is dropped
        here. Kept, the renewer would hold it, and every call to the model behind it, for
        good."""
        if event.type != "inference:fail" or not self._probes:
            return
        ended = f"{self._owner_prefix}:{event.fields.get('inferenceId')}:"
        for owner in [o for o in self._probes if o.startswith(ended)]:
            self._drop_soon(self._probes.pop(owner), owner)

    async def _drop(self, key: str, owner: str) -> None:
        try:
            await self.store.drop_probe(key, owner)  # the next waiter becomes the probe
        except FleetUnavailable as exc:  # its lease runs out by itself
            logger.warning("the provider hold could not drop its probe of {}: {}", key, exc)

    async def _succeeded(self, attempt: Attempt, key: HoldKey) -> None:
        # Only an ended hold is released: a new hold set meanwhile stands.
        released = await self.store.release_hold(str(key))
        if released is None:
            return
        fields = ReleasePayload(
            provider=attempt.provider,
            model=attempt.model,
            key=self.settings.key,
            heldMs=round(released.held_s * 1000),
            inferenceId=attempt.inference.id,
        )
        await self._emit(RELEASE_TRACE, **fields)

    async def _hold(
        self, attempt: Attempt, key: HoldKey, error: InferenceError, duration: float
    ) -> None:
        hold, lengthened = await self.store.set_hold(str(key), duration, error.kind, self._linger_s)
        if not lengthened:
            return
        fields = HoldPayload(
            provider=attempt.provider,
            model=attempt.model,
            key=self.settings.key,
            untilMs=round((time.time() + hold.remaining_s) * 1000),
            durationMs=round(hold.remaining_s * 1000),
            reason=error.kind,
            stated=error.retry_after_s is not None,
            error=error.describe(),
            inferenceId=attempt.inference.id,
        )
        await self._emit(HOLD_TRACE, **fields)

    async def _emit(self, type: str, **fields: object) -> None:
        if self._context is not None:
            await self._context.emit(type, **fields)


__all__ = [
    "HOLD_KINDS",
    "HOLD_TOO_LONG",
    "HoldKey",
    "HoldSettings",
    "ProviderHold",
    "hold_duration_s",
    "hold_key",
    "hold_too_long",
    "probe_too_long",
]
