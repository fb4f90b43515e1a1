"""The kernel's admission step: every attempt's claims, decided by the ``[fleet]`` store at once.

Before an attempt reaches its provider, `Admission.admit` asks every plugin for its
claims (`on_admission_claims`, after `on_admission`) and asks the store to decide all of
them in one operation (`FleetStore.admit`): all granted, or none, naming the claim that
refused. A refused call holds nothing: it waits, announced with the claim's
`wait_reason` (``inference:waiting``), woken by a change of any of its claims' keys or
by a jittered poll, or fails with the claim's `refused` error. The grant is given back
once (`release`) on every path: the attempt's end, a cancellation in the gap between the
store's grant and the caller, and `Kernel.stop()` for an attempt that outlived the stop
grace. Leases (slots, a hold's probe, a plugin kind's) are renewed while held.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

from loguru import logger

from agentcore.fleet import (
    UNAVAILABLE_TRACE,
    FleetStore,
    FleetUnavailable,
    poll_s,
    unavailable_error,
    unavailable_fields,
    wait_for_change,
)
from agentcore.fleet.claims import (
    BUILT_IN_KINDS,
    HOLD,
    SLOTS,
    AttemptEnd,
    Claim,
    ClaimKind,
    ClaimRefusal,
    Scalar,
)
from agentcore.hooks import Hooks
from agentcore.inference import InferenceError, PluginError, Response
from agentcore.inference.calls import Attempt, Wait, WaitReason
from agentcore.inference.errors import shutting_down

ADMISSION_WAIT_TOO_LONG = "admission_wait_too_long"
"""`InferenceError.code` of a call a claim refused past its `max_wait_s` (a claim without
its own `refused` error)."""
RELEASE_TIMEOUT_S = 2.0
"""How long `stop()` waits for the store to take back what is still granted."""

Waiting = Callable[[WaitReason, Attempt, "float | None"], AbstractAsyncContextManager[Wait]]


@dataclass(slots=True)
class _Grant:
    attempt: Attempt
    holder: str
    claims: tuple[Claim, ...]
    renewed: tuple[Claim, ...]
    """The claims with a lease to renew while held."""
    lease_s: float = 0.0
    """The shortest lease of `renewed`."""
    due: float = 0.0
    """When (monotonic) its leases are next renewed: a sixth of `lease_s` after the grant
    (a call shorter than that is never renewed), then a quarter after each renewal."""


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def wait_too_long(attempt: Attempt, refusal: ClaimRefusal, waited_s: float) -> InferenceError:
    """A refusal past its claim's `max_wait_s`, for a claim that names no error of its own."""
    claim = refusal.claim
    return InferenceError(
        "rate_limit",
        f"Provider {attempt.provider!r} model {attempt.model!r}: the {claim.kind} claim on "
        f"{claim.key!r} ({claim.plugin or 'a plugin'}) refused the call ({refusal.detail}) "
        f"for {_seconds(waited_s)} s, as long as a call may wait "
        f"({_seconds(claim.max_wait_s)} s, {claim.max_wait_setting})",
        retryable=False,
        code=ADMISSION_WAIT_TOO_LONG,
        retry_after_s=refusal.retry_s,
        provider=attempt.provider,
        model=attempt.model,
    )


class Admission:
    """One per kernel: the claim kinds plugins added, the grants held, their renewal."""

    def __init__(
        self,
        hooks: Hooks,
        fleet: Callable[[], FleetStore],
        stopping: asyncio.Event,
        waiting: Waiting,
        emit: Callable[..., None],
    ) -> None:
        self._hooks = hooks
        self._fleet = fleet
        self._stopping = stopping
        self._waiting = waiting
        self._emit = emit
        self._prefix = uuid.uuid4().hex[:12]
        self._kinds: dict[str, tuple[str, ClaimKind]] = {}
        self._registered: FleetStore | None = None
        self._grants: dict[str, _Grant] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Future[Any]] = set()

    # -- claim kinds -----------------------------------------------------------------

    def add_kind(self, plugin: str, kind: ClaimKind) -> None:
        """A plugin's own claim kind (`PluginContext.add_claim_kind`)."""
        if kind.name in BUILT_IN_KINDS:
            raise ValueError(f"claim kind {kind.name!r} is built in: choose another name")
        known = self._kinds.get(kind.name)
        if known is not None and known[0] != plugin:
            raise ValueError(f"claim kind {kind.name!r} is already added by plugin {known[0]!r}")
        self._kinds[kind.name] = (plugin, kind)
        self._registered = None

    def store(self) -> FleetStore:
        """The ``[fleet]`` store, told of every plugin claim kind (what a plugin's
        `PluginContext.fleet` is: a kind's `renew` or books work outside an admission)."""
        store = self._fleet()
        if self._registered is not store:
            store.register_kinds([kind for _, kind in self._kinds.values()])
            self._registered = store
        return store

    # -- admitting ---------------------------------------------------------------------

    async def claims(self, attempt: Attempt) -> list[Claim]:
        claims: list[Claim] = []
        for plugin, answer in await self._hooks.admission_claims(attempt):
            for claim in answer:
                if not isinstance(claim, Claim):
                    raise PluginError(
                        plugin, f"on_admission_claims returned {claim!r}, not a Claim"
                    )
                if claim.kind not in BUILT_IN_KINDS and claim.kind not in self._kinds:
                    raise PluginError(plugin, f"claim kind {claim.kind!r} was never added")
                if claim.plugin != plugin:  # in-tree plugins name themselves: no copy
                    claim = dataclasses.replace(claim, plugin=plugin)
                claims.append(claim)
        return claims

    def holder(self, attempt: Attempt) -> str:
        return f"{self._prefix}:{attempt.inference.id}:{attempt.number}"

    async def admit(self, attempt: Attempt) -> None:
        """Admit `attempt` under every plugin's claims; raise `InferenceError` to refuse."""
        claims = await self.claims(attempt)
        if not claims:
            return
        store = self.store()
        holder = self.holder(attempt)
        started = time.monotonic()
        outage_traced = False
        # Only a claim that may wait is watched: one that fails at once when refused (a
        # budget's) leaves no event behind in the store for a key nobody waits on.
        watched = {claim.key for claim in claims if claim.max_wait_s > 0}
        async with AsyncExitStack() as stack:
            wait: Wait | None = None
            while True:
                changed = [store.changed(key) for key in watched] or [self._stopping]
                if self._stopping.is_set():
                    raise shutting_down()
                waited = time.monotonic() - started
                try:
                    answer = await self._ask(store, claims, holder)
                except FleetUnavailable as exc:
                    if not outage_traced and self._unreachable(store, claims, attempt, exc):
                        return
                    outage_traced = True
                    bound = min(claims, key=lambda claim: claim.max_wait_s)
                    if waited >= bound.max_wait_s:
                        raise unavailable_error(
                            store, exc, waited, bound.max_wait_s, bound.max_wait_setting
                        ) from exc
                    reason, until = claims[0].wait_reason, None
                    sleep_s = poll_s(at_most=bound.max_wait_s - waited)
                else:
                    if not isinstance(answer, ClaimRefusal):
                        self._granted(attempt, holder, claims, answer)
                        return
                    reason, until, sleep_s = self._refused(attempt, answer, waited)
                if wait is not None and wait.reason != reason:
                    await stack.aclose()
                    wait = None
                if wait is None:
                    wait = await stack.enter_async_context(self._waiting(reason, attempt, until))
                else:
                    wait.until = until
                await wait_for_change(changed[0], sleep_s, *changed[1:], self._stopping)

    async def _ask(
        self, store: FleetStore, claims: list[Claim], holder: str
    ) -> ClaimRefusal | list[Scalar]:
        try:
            return await store.admit(claims, holder)
        except FleetUnavailable:
            raise
        except BaseException:
            # Cancelled in the gap between the store's grant and this caller: what may have
            # been granted goes back (giving back what is not held does nothing).
            self._release_soon(store, claims, holder, ())
            raise

    def _refused(
        self, attempt: Attempt, refusal: ClaimRefusal, waited: float
    ) -> tuple[WaitReason, float | None, float]:
        """A refusal: the wait's reason, its end when known, how long to sleep; or the
        claim's error, raised."""
        claim = refusal.claim
        if claim.refused is not None:
            error = claim.refused(refusal, waited)
        elif (refusal.retry_s is not None and waited + refusal.retry_s > claim.max_wait_s) or (
            waited >= claim.max_wait_s
        ):
            error = wait_too_long(attempt, refusal, waited)
        else:
            error = None
        if error is not None:
            raise error
        if refusal.retry_s is not None:
            return claim.wait_reason, time.monotonic() + refusal.retry_s, refusal.retry_s
        left = max(0.0, claim.max_wait_s - waited)
        return claim.wait_reason, None, poll_s(at_most=left)

    def _unreachable(
        self, store: FleetStore, claims: list[Claim], attempt: Attempt, exc: FleetUnavailable
    ) -> bool:
        """Trace, once for each plugin with a claim, that the store could not be read; True
        when the call is admitted anyway (``[fleet] on_store_error = "open"``)."""
        admitted = store.on_store_error == "open"
        for plugin in dict.fromkeys(claim.plugin for claim in claims):
            self._emit(
                UNAVAILABLE_TRACE, **unavailable_fields(store, plugin, attempt, exc, admitted)
            )
        return admitted

    # -- what is granted -------------------------------------------------------------

    def _granted(
        self, attempt: Attempt, holder: str, claims: list[Claim], results: list[Scalar]
    ) -> None:
        renewed = tuple(
            claim
            for claim, result in zip(claims, results, strict=True)
            if claim.kind == SLOTS
            or (claim.kind == HOLD and result == 1)
            or (claim.kind in self._kinds and self._kinds[claim.kind][1].lease_s is not None)
        )
        grant = self._grants[holder] = _Grant(attempt, holder, tuple(claims), renewed)
        if renewed:
            grant.lease_s = min(self._lease_s(claim) for claim in renewed)
            grant.due = time.monotonic() + grant.lease_s / 6
        for claim, result in zip(claims, results, strict=True):
            if claim.admitted is not None:
                _call(claim, "admitted", claim.admitted, result)
        if renewed and self._renewer is None and not self._stopping.is_set():
            self._renewer = asyncio.create_task(self._renew(), name="admission leases")

    def _lease_s(self, claim: Claim) -> float:
        if claim.kind == SLOTS:
            return float(claim.args[1]) / 1000
        if claim.kind == HOLD:
            return float(claim.args[0]) / 1000
        lease = self._kinds[claim.kind][1].lease_s
        return 30.0 if lease is None else lease

    async def _renew(self) -> None:
        """Renew the leases of what this replica holds, so only a dead replica's lapse: a
        round every sixth of the shortest lease held renews the grants due (`_Grant.due`),
        so a grant of the shortest lease is renewed every third of it (a longer one before
        half of its own is gone), and a short call (most) never is: its grant and release
        stay the store's only operations."""
        while True:
            leases = [g.lease_s for g in self._grants.values() if g.renewed]
            await asyncio.sleep(min(leases, default=30.0) / 6)
            now = time.monotonic()
            grants = [g for g in self._grants.values() if g.renewed and g.due <= now]
            for grant in grants:
                grant.due = now + grant.lease_s / 4
            # Started together: on Redis one pipeline for the round, not a round trip each.
            await asyncio.gather(*(self._renew_one(grant) for grant in grants))

    async def _renew_one(self, grant: _Grant) -> None:
        try:
            await self.store().renew(grant.renewed, grant.holder)
        except FleetUnavailable as exc:
            logger.warning("admission could not renew {}'s leases: {}", grant.holder, exc)
        except Exception:  # a plugin kind's renew failing must not stop the renewals
            logger.exception("admission could not renew {}'s leases", grant.holder)

    def release(
        self, attempt: Attempt, response: Response | None, error: InferenceError | None
    ) -> None:
        """The attempt ended: give its grant back (settled), started now, riding with the
        store's next operation; a cancelled caller cannot stop it."""
        grant = self._grants.pop(self.holder(attempt), None)
        if grant is None:
            return
        end = AttemptEnd(attempt, response, error)
        settles: list[tuple[Scalar, ...]] = []
        for claim in grant.claims:
            settle: tuple[Scalar, ...] = ()
            if claim.settle is not None:
                settle = _call(claim, "settle", claim.settle, end) or ()
            settles.append(settle)
            if claim.released is not None:
                _call(claim, "released", claim.released)
        self._release_soon(self.store(), grant.claims, grant.holder, settles)

    def _release_soon(
        self,
        store: FleetStore,
        claims: Sequence[Claim],
        holder: str,
        settles: Sequence[tuple[Scalar, ...]],
    ) -> None:
        """The built-in stores start the release at the call and return a future (no task
        per release); a store's `async def release` runs in a task of its own."""
        try:
            released = asyncio.ensure_future(store.release(claims, holder, settles))
        except Exception:
            logger.exception("admission could not give back {}'s claims", holder)
            return
        self._releases.add(released)
        released.add_done_callback(functools.partial(self._given_back, holder))

    def _given_back(self, holder: str, released: asyncio.Future[Any]) -> None:
        self._releases.discard(released)
        if released.cancelled():
            return
        exc = released.exception()
        if isinstance(exc, FleetUnavailable):  # leases run out by themselves
            logger.warning("admission could not give back {}'s claims: {}", holder, exc)
        elif exc is not None:
            logger.opt(exception=exc).error("admission could not give back {}'s claims", holder)

    async def stop(self) -> None:
        """After the stop grace: give back what attempts still running hold (they ignored
        the cancellation), and wait (briefly) for every release under way."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        for grant in list(self._grants.values()):
            self.release(grant.attempt, None, shutting_down())
        if self._releases:
            await asyncio.wait(set(self._releases), timeout=RELEASE_TIMEOUT_S)


def _call(claim: Claim, what: str, function: Callable[..., Any], *args: Any) -> Any:
    """A claim's callback; an exception is logged with its plugin's name."""
    try:
        return function(*args)
    except Exception:
        logger.exception("plugin {!r} failed in its claim's {} callback", claim.plugin, what)
        return None


__all__ = ["ADMISSION_WAIT_TOO_LONG", "Admission", "wait_too_long"]
