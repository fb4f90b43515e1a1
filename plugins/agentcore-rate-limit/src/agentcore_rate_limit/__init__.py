"""agentcore's fleet-wide rate limit (entry point ``rate-limit``): per provider, at most
``max_in_flight`` calls at once and ``requests_per_minute`` calls in any 60 s, counted
across every replica that shares the kernel's ``[fleet]`` store.

- Enforced by the kernel's admission step: the plugin's claims (`on_admission_claims`,
  ``trylast``: after the provider hold's, so a held call takes no slot) are decided by
  the store with every other plugin's claims in one operation, before every attempt,
  retries included.
- ``max_in_flight`` is a semaphore in the store (a ``slots`` claim): each admitted
  attempt leases a slot for ``slot_lease_s``, renewed by the kernel while it runs; a
  replica that dies leaves slots that come back when their leases run out. The kernel
  gives the slot back when the attempt ends (completion, failure, cancellation, even in
  the gap between the store's grant and the caller) and, at shutdown, for an attempt
  that outlived the stop grace.
- Each slot taken and given back is a ``rate_limit:slots`` trace (`SLOTS_TRACE`): the
  provider, ``inUse`` and ``maxInFlight``. ``inUse`` counts the slots this replica
  holds (``scope``: ``replica``), read from its own books at no store cost; the limit
  is fleet-wide, so on a shared Redis store other replicas may hold the rest.
- ``requests_per_minute`` is a sliding window in the store (a ``window`` claim): a call
  is counted when it is admitted. A call takes its slot and its place in the window in
  one atomic store operation, both or neither: a call waiting for one holds no other.
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

import functools
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from agentcore.api import (
    SLOTS,
    SLOTS_TRACE,
    WINDOW,
    Attempt,
    Claim,
    ClaimRefusal,
    InferenceError,
    PluginContext,
    ProviderName,
    Scalar,
    Section,
    SettingsSection,
    SlotsPayload,
    hookimpl,
)

LIMIT_WAIT_TOO_LONG = "limit_wait_too_long"
"""`InferenceError.code` of a call that would wait longer than ``max_wait_s`` for a limit."""
MAX_WAIT_SETTING = "[rate_limit] max_wait_s"
WINDOW_S = 60.0

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


class RateLimit:
    """The plugin object; the kernel makes one per kernel. Its limits are claims on the
    kernel's admission step (`on_admission_claims`): the kernel asks the ``[fleet]``
    store for them, with every other plugin's claims, in one operation, renews the slot's
    lease while the attempt runs and gives it back when the attempt ends (any path)."""

    def __init__(self) -> None:
        self.settings = RateLimitSettings.model_construct()
        self._context: PluginContext[RateLimitSettings] | None = None
        self._slots: dict[tuple[str, int], str] = {}
        """The slots this replica holds, by (inference id, attempt number): the provider."""
        self._in_use: dict[str, int] = {}
        """Slots held per provider (`_slots` counted as it changes: each trace would
        otherwise count every call in flight)."""

    # -- lifecycle ---------------------------------------------------------------

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("rate_limit", RateLimitSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[RateLimitSettings]) -> None:
        self._context = context
        self.settings = context.settings

    # -- admission ---------------------------------------------------------------

    @hookimpl(trylast=True)
    def on_admission_claims(self, attempt: Attempt) -> list[Claim] | None:
        """The per-minute window first (its wait is known), then a slot: both granted at
        once or neither, after the provider hold's claim (``trylast``)."""
        limit = self.settings.providers.get(attempt.provider)
        if limit is None or (limit.max_in_flight is None and limit.requests_per_minute is None):
            return None
        refused = functools.partial(self._refused, attempt, limit)
        claims: list[Claim] = []
        if limit.requests_per_minute is not None:
            window = (limit.requests_per_minute, round(WINDOW_S * 1000))
            claims.append(self._claim(WINDOW, attempt.provider, window, refused))
        if limit.max_in_flight is not None:
            held = (attempt.inference.id, attempt.number)
            lease = (limit.max_in_flight, max(1, round(self.settings.slot_lease_s * 1000)))
            slot = self._claim(
                SLOTS,
                attempt.provider,
                lease,
                refused,
                admitted=lambda _: self._taken(held, attempt.provider),
                released=lambda: self._given_back(held),
            )
            claims.append(slot)
        return claims

    def _claim(
        self,
        kind: str,
        provider: str,
        args: tuple[int, int],
        refused: Callable[[ClaimRefusal, float], InferenceError | None],
        admitted: Callable[[Scalar], None] | None = None,
        released: Callable[[], None] | None = None,
    ) -> Claim:
        return Claim(
            kind,
            provider,
            args,
            wait_reason="limit",
            max_wait_s=self.settings.max_wait_s,
            max_wait_setting=MAX_WAIT_SETTING,
            refused=refused,
            admitted=admitted,
            released=released,
            plugin="" if self._context is None else self._context.name,
        )

    def _refused(
        self, attempt: Attempt, limit: ProviderLimit, refusal: ClaimRefusal, waited: float
    ) -> InferenceError | None:
        """A call over a limit waits, unless that is past ``max_wait_s``: known at once for
        the window, after ``max_wait_s`` for a slot."""
        max_wait = self.settings.max_wait_s
        if refusal.detail == "window":
            assert limit.requests_per_minute is not None
            next_s = refusal.retry_s or 0.0
            if waited + next_s > max_wait:
                return limit_too_long(
                    attempt,
                    "requests_per_minute",
                    limit.requests_per_minute,
                    waited,
                    next_s,
                    max_wait,
                )
            return None
        assert limit.max_in_flight is not None
        if waited >= max_wait:
            return limit_too_long(
                attempt, "max_in_flight", limit.max_in_flight, waited, None, max_wait
            )
        return None

    # -- slots held (this replica's books, for the traces) -----------------------------

    def _taken(self, held: tuple[str, int], provider: str) -> None:
        if held not in self._slots:
            self._slots[held] = provider
            self._in_use[provider] = self._in_use.get(provider, 0) + 1
        self._trace_slots("taken", provider, *held)

    def _given_back(self, held: tuple[str, int]) -> None:
        provider = self._slots.pop(held, None)
        if provider is not None:
            self._in_use[provider] -= 1
            self._trace_slots("released", provider, *held)

    def _trace_slots(
        self, change: Literal["taken", "released"], provider: str, inference_id: str, attempt: int
    ) -> None:
        if self._context is None:
            return
        limit = self.settings.providers.get(provider)
        fields = SlotsPayload(
            change=change,
            provider=provider,
            inUse=self._in_use.get(provider, 0),
            maxInFlight=None if limit is None else limit.max_in_flight,
            scope="replica",
            inferenceId=inference_id,
            attempt=attempt,
        )
        self._context.emit_now(SLOTS_TRACE, **fields)


__all__ = [
    "LIMIT_WAIT_TOO_LONG",
    "SLOTS_TRACE",
    "ProviderLimit",
    "RateLimit",
    "RateLimitSettings",
    "limit_too_long",
]
