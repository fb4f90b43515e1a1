"""agentcore's provider hold (entry point ``provider-hold``): after a rate limit or overload,
calls to that provider and model wait at admission instead of hitting it again.

- A ``rate_limit`` or ``overloaded`` attempt (seen in `on_attempt_end`) holds its
  key, (provider, model) or, with ``key = "provider"``, the whole provider, until
  the provider's stated wait ends, or for ``default_hold_s`` when it stated none,
  made up to ``release_jitter`` (a fraction) longer at random.
  The longest hold wins: a shorter stated wait never shortens one.
- While a key is held, a call waits at the kernel's admission step (this plugin's
  ``hold`` claim, `on_admission_claims`, decided by the store with every other claim
  of the call at once), announced as a ``hold`` wait: no provider call is made. A call
  that would wait longer than ``max_wait_s`` (unset: ``[inference] max_stated_wait_s``)
  in all fails at once, naming the provider, model and remaining wait.
- When the hold ends one call goes first (the probe). Only its success releases
  the others; a rate_limit or overloaded failure starts a new hold; any other
  ending lets the next waiter be the probe. A call waiting behind the probe is
  bounded by ``max_wait_s`` too: past it, it fails saying it waited for the probe.
- Shutdown (the kernel's ``stopping``) wakes every waiter, which fails with "The host
  is shutting down".
- A usage cap or exhausted quota (an attempt that failed ``quota``: Anthropic's usage-limit
  400, OpenAI's ``insufficient_quota`` 429, Bedrock's ``ServiceQuotaExceededException`` or
  daily-token throttling, a 402) holds the whole provider, reason ``usage_cap``, for
  ``usage_cap_probe_s`` (default 900, jittered like any hold). While it holds, calls to
  any of its models fail at once with an error naming the cap (code ``usage_cap``), no
  provider call made; then one call goes through (the probe): its success lifts the hold
  for every replica sharing the store, a capped answer holds again.

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

import random
import time
from dataclasses import dataclass
from typing import Literal

from loguru import logger
from pydantic import Field

from agentcore.api import (
    HOLD,
    HOLD_TRACE,
    RELEASE_TRACE,
    Attempt,
    Claim,
    ClaimRefusal,
    FleetStore,
    FleetUnavailable,
    Hold,
    HoldPayload,
    InferenceError,
    PluginContext,
    ReleasePayload,
    Scalar,
    Section,
    SettingsSection,
    hookimpl,
)

HOLD_KINDS: frozenset[str] = frozenset({"rate_limit", "overloaded"})
USAGE_CAP = "usage_cap"
"""The reason of a hold after a usage cap or exhausted quota, and the code of the error a
call held by it fails with."""
HOLD_TOO_LONG = "hold_too_long"
"""`InferenceError.code` of the error a call fails with when the hold outlasts max_wait_s."""
MAX_WAIT_SETTING = "[provider_hold] max_wait_s"
PROBE_LEASE_S = 10.0
"""A probe's claim lasts this long, renewed by the kernel every third of it while the probe
runs: a probe lost with its replica hands over to the next call within this."""


class HoldSettings(Section):
    """``[provider_hold]``."""

    max_wait_s: float | None = Field(default=None, ge=0)
    """A call that would wait longer than this, in all, fails at once, saying why. Unset:
    ``[inference] max_stated_wait_s``, the limit the retry policy uses for a stated wait."""
    default_hold_s: float = Field(default=5.0, ge=0)
    """The hold after a rate limit or overload that stated no wait."""
    key: Literal["provider_model", "provider"] = "provider_model"
    """What one hold covers: one model of a provider, or the whole provider."""
    usage_cap_probe_s: float = Field(default=900.0, gt=0)
    """After a usage cap or exhausted quota, the whole provider is held this long (then one
    probe call goes through, and again this long after each capped probe)."""
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


def usage_capped(attempt: Attempt, remaining: float | None, every: float) -> InferenceError:
    """The error of a call refused by a usage-cap hold: at once, and never sent."""
    when = "now" if not remaining else f"in {_seconds(remaining)} s"
    return InferenceError(
        "quota",
        f"Provider {attempt.provider!r} is held: its usage cap or quota is exhausted, so "
        f"calls fail at once without reaching it; one probe call goes through every "
        f"{_seconds(every)} s ([provider_hold] usage_cap_probe_s), the next {when}",
        retryable=False,
        code=USAGE_CAP,
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


class _ClaimCallbacks:
    """One claim's callbacks, as bound methods of one slotted object: a call holds its two
    claims for as long as it runs, and a partial and two closures cost twice the memory
    (about 0.9 KB a call at a thousand streams). The probe's id is made when asked for,
    not kept: most claims are never a probe."""

    __slots__ = ("attempt", "key", "plugin")

    def __init__(self, plugin: ProviderHold, attempt: Attempt, key: str) -> None:
        self.plugin = plugin
        self.attempt = attempt
        self.key = key

    @property
    def probe(self) -> tuple[str, int, str]:
        """(inference id, attempt number, held key): `ProviderHold._probes`' entry."""
        attempt = self.attempt
        return (attempt.inference.id, attempt.number, self.key)

    def refused(self, refusal: ClaimRefusal, waited: float) -> InferenceError | None:
        return self.plugin._refused(self.attempt, refusal, waited)

    def admitted(self, result: Scalar) -> None:
        self.plugin._admitted(self.probe, result)

    def released(self) -> None:
        self.plugin._probes.discard(self.probe)


class ProviderHold:
    """The plugin object; the kernel makes one per kernel. Its gate is a ``hold`` claim on
    the kernel's admission step (`on_admission_claims`); its outcomes (a hold set, a hold
    released by the probe's success) are written to the kernel's ``[fleet]`` store in
    `on_attempt_end`."""

    def __init__(self) -> None:
        self.settings = HoldSettings.model_construct()
        self._context: PluginContext[HoldSettings] | None = None
        self._name = ""
        """The name this plugin is loaded as: its claims carry it (no copy by the kernel)."""
        self._linger_s = 600.0
        self._probes: set[tuple[str, int, str]] = set()
        """This replica's probes in flight, by (inference id, attempt number, held key): only
        a probe's success releases a hold, so any other attempt's end costs no store call."""
        self._limit: tuple[float, str] = (600.0, "[inference] max_stated_wait_s")
        """The longest a call waits here in all, and the settings key that says so."""
        self._args = self._claim_args()
        """Every hold claim's arguments: one tuple, not one per claim held."""

    def _claim_args(self) -> tuple[int, int]:
        """A hold claim's arguments: the probe's lease and the linger, in ms."""
        return (round(PROBE_LEASE_S * 1000), max(1, round(self._linger_s * 1000)))

    @property
    def store(self) -> FleetStore:
        assert self._context is not None, "agentcore_start was not called"
        return self._context.fleet

    # -- lifecycle ---------------------------------------------------------------

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("provider_hold", HoldSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[HoldSettings]) -> None:
        self._context = context
        self._name = context.name
        self.settings = context.settings
        # How long an ended hold waits for its probe before it goes by itself.
        self._linger_s = context.inference.request_timeout_s
        if self.settings.max_wait_s is not None:
            self._limit = (self.settings.max_wait_s, MAX_WAIT_SETTING)
        else:
            self._limit = (context.inference.max_stated_wait_s, "[inference] max_stated_wait_s")
        self._args = self._claim_args()

    # -- admission ---------------------------------------------------------------

    @hookimpl
    def on_admission_claims(self, attempt: Attempt) -> list[Claim]:
        """No hold on the attempt's key (nor a usage-cap hold on its whole provider), or the
        hold ended and this call is its one probe: the store decides it with every other
        claim of the call, at once."""
        keys = [str(hold_key(attempt, self.settings.key))]
        if keys[0] != attempt.provider:
            keys.append(attempt.provider)  # where a usage cap holds the whole provider
        return [self._claim(attempt, key) for key in keys]

    def _claim(self, attempt: Attempt, key: str) -> Claim:
        max_wait, setting = self._limit
        callbacks = _ClaimCallbacks(self, attempt, key)
        return Claim(
            HOLD,
            key,
            self._args,
            wait_reason="hold",
            max_wait_s=max_wait,
            max_wait_setting=setting,
            refused=callbacks.refused,
            admitted=callbacks.admitted,
            released=callbacks.released,
            plugin=self._name,
        )

    def _admitted(self, probe: tuple[str, int, str], result: Scalar) -> None:
        if result == 1:  # the probe: it goes alone, and its outcome decides for the rest
            self._probes.add(probe)

    def _refused(
        self, attempt: Attempt, refusal: ClaimRefusal, waited: float
    ) -> InferenceError | None:
        """Held: wait for the end, unless that is past the limit (known now). Behind the
        probe: wait for as long as it runs, bounded like any wait."""
        max_wait, setting = self._limit
        if refusal.info == USAGE_CAP:  # no wait: the cap lasts far past any call's patience
            return usage_capped(attempt, refusal.retry_s, self.settings.usage_cap_probe_s)
        hold = Hold(refusal.info or "rate_limit", refusal.retry_s or 0.0, 0.0)
        if refusal.detail == "held" and refusal.retry_s is not None:
            if waited + refusal.retry_s > max_wait:
                return hold_too_long(attempt, hold, refusal.retry_s, max_wait, setting)
            return None
        if waited >= max_wait:
            return probe_too_long(attempt, hold, waited, max_wait, setting)
        return None

    # -- outcomes ----------------------------------------------------------------

    @hookimpl
    async def on_attempt_end(self, attempt: Attempt, error: InferenceError | None) -> None:
        """A rate limit or overload holds the key (the longest wins; the probe is
        forgotten), a usage cap the whole provider; a probe's success releases the key it
        probed. Any other end of the probe lets the next waiter be the probe: the kernel
        gives its claim back after this."""
        key = hold_key(attempt, self.settings.key)
        probed = [p[2] for p in self._probes if p[:2] == (attempt.inference.id, attempt.number)]
        try:
            if error is not None and error.kind == "quota" and error.code != USAGE_CAP:
                await self._hold(attempt, HoldKey(attempt.provider), error, self._cap_s(), True)
                return
            duration = (
                None
                if error is None
                else hold_duration_s(
                    error, self.settings.default_hold_s, self.settings.release_jitter
                )
            )
            if error is not None and duration is not None:
                await self._hold(attempt, key, error, duration)
            elif probed and error is None:
                for held in probed:
                    await self._succeeded(attempt, held)
        except FleetUnavailable as exc:
            logger.warning("the provider hold could not record {}'s outcome: {}", key, exc)

    def _cap_s(self) -> float:
        return self.settings.usage_cap_probe_s * (
            1.0 + random.uniform(0.0, self.settings.release_jitter)
        )

    async def _succeeded(self, attempt: Attempt, key: str) -> None:
        # Only an ended hold is released: a new hold set meanwhile stands.
        released = await self.store.release_hold(key)
        if released is None:
            return
        fields = ReleasePayload(
            provider=attempt.provider,
            model=attempt.model,
            key="provider" if key == attempt.provider else self.settings.key,
            heldMs=round(released.held_s * 1000),
            inferenceId=attempt.inference.id,
        )
        await self._emit(RELEASE_TRACE, **fields)

    async def _hold(
        self,
        attempt: Attempt,
        key: HoldKey,
        error: InferenceError,
        duration: float,
        capped: bool = False,
    ) -> None:
        reason = USAGE_CAP if capped else error.kind
        hold, lengthened = await self.store.set_hold(str(key), duration, reason, self._linger_s)
        if not lengthened:
            return
        fields = HoldPayload(
            provider=attempt.provider,
            model=attempt.model,
            key="provider" if capped else self.settings.key,
            untilMs=round((time.time() + hold.remaining_s) * 1000),
            durationMs=round(hold.remaining_s * 1000),
            reason=reason,
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
    "USAGE_CAP",
    "HoldKey",
    "HoldSettings",
    "ProviderHold",
    "hold_duration_s",
    "hold_key",
    "hold_too_long",
    "probe_too_long",
    "usage_capped",
]
