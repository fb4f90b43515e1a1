"""agentcore's provider hold (entry point ``provider-hold``): after a rate limit or overload,
calls to that provider and model wait at admission instead of hitting it again.

- A ``rate_limit`` or ``overloaded`` attempt (seen in `on_attempt_end`) holds its
  key, (provider, model) or, with ``key = "provider"``, the whole provider, until
  the provider's stated wait ends, or for ``default_hold_s`` when it stated none.
  The longest hold wins: a shorter stated wait never shortens one.
- While a key is held, `on_admission` waits, announced as a ``hold`` wait: no
  provider call is made. A call that would wait longer than ``max_wait_s`` (unset:
  ``[inference] max_stated_wait_s``) in all fails at once, naming the provider,
  model and remaining wait.
- When the hold ends one call goes first (the probe). Only its success releases
  the others; a rate_limit or overloaded failure starts a new hold; any other
  ending lets the next waiter be the probe.
- Shutdown (the kernel's ``stopping``, or `agentcore_stop`) wakes every waiter,
  which fails with "The host is shutting down".

Traces: ``provider:hold`` (provider, model, key, untilMs, durationMs, reason, error,
stated, inferenceId) when a hold starts or is lengthened, ``provider:release``
(provider, model, key, heldMs, inferenceId) when the probe succeeded.

Holds live in a `HoldStore`; the entry point uses `InMemoryHoldStore`. For many
machines, replace the plugin with ``ProviderHold(store=YourSharedStore())``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

from pydantic import Field

from agentcore import hookimpl
from agentcore.inference import InferenceError
from agentcore.inference.calls import Attempt, Wait
from agentcore.inference.errors import shutting_down
from agentcore.plugins import PluginContext, SettingsSection
from agentcore.settings import Section
from agentcore_provider_hold.store import Hold, HoldKey, HoldStore, InMemoryHoldStore

HOLD_KINDS: frozenset[str] = frozenset({"rate_limit", "overloaded"})
HOLD_TOO_LONG = "hold_too_long"
"""`InferenceError.code` of the error a call fails with when the hold outlasts max_wait_s."""
POLL_S = 1.0
"""How often a waiter re-reads the store when nobody can tell it when to (a shared store)."""


class HoldSettings(Section):
    """``[provider_hold]``."""

    max_wait_s: float | None = Field(default=None, ge=0)
    """A call that would wait longer than this, in all, fails at once, saying why. Unset:
    ``[inference] max_stated_wait_s``, the limit the retry policy uses for a stated wait."""
    default_hold_s: float = Field(default=5.0, ge=0)
    """The hold after a rate limit or overload that stated no wait."""
    key: Literal["provider_model", "provider"] = "provider_model"
    """What one hold covers: one model of a provider, or the whole provider."""


def hold_key(attempt: Attempt, key: str) -> HoldKey:
    return HoldKey(attempt.provider, None if key == "provider" else attempt.model)


def hold_duration_s(error: InferenceError, default_hold_s: float) -> float | None:
    """How long an attempt's error holds its key; None for errors that start no hold."""
    if error.kind not in HOLD_KINDS or error.code == HOLD_TOO_LONG:
        return None
    if error.retry_after_s is None:
        return default_hold_s
    return max(0.0, error.retry_after_s)


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def hold_too_long(
    attempt: Attempt,
    hold: Hold,
    remaining: float,
    limit: float,
    key: str = "[provider_hold] max_wait_s",
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


class ProviderHold:
    """The plugin object; the kernel makes one per kernel (with the in-memory store)."""

    def __init__(self, store: HoldStore | None = None) -> None:
        self.store: HoldStore = store if store is not None else InMemoryHoldStore()
        self.settings = HoldSettings()
        self._context: PluginContext | None = None
        self._changed: dict[HoldKey, asyncio.Event] = {}
        self._stopped = asyncio.Event()
        self._owner_prefix = uuid.uuid4().hex[:8]
        self._stale_after_s = 600.0
        self._limit: tuple[float, str] = (600.0, "[inference] max_stated_wait_s")
        """The longest a call waits here in all, and the settings key that says so."""
        self._ids = itertools.count(1)

    # -- lifecycle ---------------------------------------------------------------

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("provider_hold", HoldSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext) -> None:
        self._context = context
        if isinstance(context.settings, HoldSettings):
            self.settings = context.settings
        # An attempt cannot legitimately run longer: a probe older than that is lost.
        self._stale_after_s = context.inference.request_timeout_s
        if self.settings.max_wait_s is not None:
            self._limit = (self.settings.max_wait_s, "[provider_hold] max_wait_s")
        else:
            self._limit = (context.inference.max_stated_wait_s, "[inference] max_stated_wait_s")

    @hookimpl
    def agentcore_stop(self) -> None:
        self._stopped.set()
        for event in self._changed.values():
            event.set()

    # -- admission ---------------------------------------------------------------

    @hookimpl
    async def on_admission(self, attempt: Attempt) -> None:
        key = hold_key(attempt, self.settings.key)
        if await self.store.get(key) is None:
            return  # the common case: one read, no allocation
        owner = f"{self._owner_prefix}:{attempt.inference.id}:{attempt.number}"
        started = time.monotonic()
        async with AsyncExitStack() as stack:
            wait: Wait | None = None
            while True:
                changed = self._event(key)  # before reading, so no change is missed
                if self._stopping():
                    raise shutting_down()
                hold = await self.store.get(key)
                if hold is None:
                    return
                remaining = hold.remaining_s()
                if remaining > 0:
                    limit, setting = self._limit
                    if time.monotonic() - started + remaining > limit:
                        raise hold_too_long(attempt, hold, remaining, limit, setting)
                    until: float | None = time.monotonic() + remaining
                elif await self.store.claim_probe(key, owner, self._stale_after_s):
                    return  # the probe: it goes alone, and its outcome decides for the rest
                else:
                    until = None  # behind the probe: nobody knows for how long
                if wait is None:
                    wait = await stack.enter_async_context(self._waiting(attempt, until))
                else:
                    wait.until = until  # a lengthened hold, or now behind a probe
                await self._sleep(changed, remaining if remaining > 0 else POLL_S)

    @asynccontextmanager
    async def _waiting(self, attempt: Attempt, until: float | None) -> AsyncIterator[Wait]:
        assert self._context is not None, "agentcore_start was not called"
        async with self._context.waiting("hold", attempt, until) as wait:
            yield wait

    def _stopping(self) -> bool:
        context = self._context
        return self._stopped.is_set() or (context is not None and context.stopping.is_set())

    def _event(self, key: HoldKey) -> asyncio.Event:
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = asyncio.Event()
        return event

    def _notify(self, key: HoldKey) -> None:
        """Wake every waiter on `key`; each re-reads the store."""
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()

    async def _sleep(self, changed: asyncio.Event, timeout: float) -> None:
        """Until the key changes, the kernel stops, or `timeout` passes."""
        waits = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._stopped.wait())]
        if self._context is not None:
            waits.append(asyncio.ensure_future(self._context.stopping.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    # -- outcomes ----------------------------------------------------------------

    @hookimpl
    async def on_attempt_end(self, attempt: Attempt, error: InferenceError | None) -> None:
        key = hold_key(attempt, self.settings.key)
        if error is None:
            await self._succeeded(attempt, key)
            return
        duration = hold_duration_s(error, self.settings.default_hold_s)
        if duration is not None:
            await self._hold(attempt, key, error, duration)
            return
        owner = f"{self._owner_prefix}:{attempt.inference.id}:{attempt.number}"
        if await self.store.drop_probe(key, owner):
            self._notify(key)  # the next waiter becomes the probe

    async def _succeeded(self, attempt: Attempt, key: HoldKey) -> None:
        hold = await self.store.get(key)
        if hold is None or hold.remaining_s() > 0:
            return  # not held, or a call from before the hold: the hold still stands
        released = await self.store.release(key)
        if released is None:
            return
        self._notify(key)
        await self._emit(
            "provider:release",
            provider=attempt.provider,
            model=attempt.model,
            key=self.settings.key,
            heldMs=round((time.time() - released.since) * 1000),
            inferenceId=attempt.inference.id,
        )

    async def _hold(
        self, attempt: Attempt, key: HoldKey, error: InferenceError, duration: float
    ) -> None:
        now = time.time()
        hold, lengthened = await self.store.hold(key, now + duration, error.kind)
        if not lengthened:
            return
        self._notify(key)  # waiters re-read the new end (and may now exceed max_wait_s)
        await self._emit(
            "provider:hold",
            provider=attempt.provider,
            model=attempt.model,
            key=self.settings.key,
            untilMs=round(hold.until * 1000),
            durationMs=round((hold.until - now) * 1000),
            reason=error.kind,
            stated=error.retry_after_s is not None,
            error=error.describe(),
            inferenceId=attempt.inference.id,
        )

    async def _emit(self, type: str, **fields: object) -> None:
        if self._context is not None:
            await self._context.emit(type, **fields)


__all__ = [
    "HOLD_KINDS",
    "HOLD_TOO_LONG",
    "Hold",
    "HoldKey",
    "HoldSettings",
    "HoldStore",
    "InMemoryHoldStore",
    "ProviderHold",
    "hold_duration_s",
    "hold_key",
    "hold_too_long",
]
