"""Claims: what a plugin contributes to the kernel's admission step (issue 25).

Before an attempt reaches its provider, every plugin that gates calls answers
`on_admission_claims` with the claims the attempt must be granted ("no hold on
(provider, model)", "a slot of `max_in_flight` N", "a place in the per-minute
window", "USD 0.40 of the day's budget of server X"). The kernel asks the ``[fleet]``
store to decide *all* of them in one operation (`FleetStore.admit`: one locked step
in memory, one Lua script on Redis): every claim is granted, or none is and the
store names the claim that refused and, when known, until when. A call that waits
holds nothing. What was granted is given back by one operation (`FleetStore.release`)
when the attempt ends, on every path (cancelled in the gap between the store's grant
and the caller, refused later at admission, outliving the kernel's stop grace).

A claim *kind* says what a claim means to the store. Three are built in (`HOLD`,
`SLOTS`, `WINDOW`); a plugin adds its own through `agentcore_claim_kinds` with a
`ClaimKind`: a Python implementation for the memory store and a Lua table for the
Redis script, the same four steps in each (check, take, release, renew). See
docs/plugins.md ("Admission claims") and /work/notes/admission-api.md.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from agentcore.inference import InferenceError, Response
    from agentcore.inference.calls import Attempt, WaitReason

Scalar: TypeAlias = str | int | float
"""What a claim's arguments, a take's result and a settlement are made of (Redis ARGV)."""

HOLD = "hold"
"""Built in: no hold on `Claim.key`, or the hold ended and this call becomes its one probe.
Args: (probe lease ms, remembered remaining ms, remembered reason, linger ms); the store
fills the last three (a hold this replica remembers is written back, longest wins). Take
result: 1 when this call is the probe, else 0. Refusal detail: ``held`` (`retry_s` = the
hold's remaining time, `info` = its reason) or ``probe`` (behind the probe, no known end)."""
SLOTS = "slots"
"""Built in: one of N slots of `Claim.key`, a lease renewed while held. Args: (N, lease ms).
Refusal detail: ``slots`` (no known end: a release anywhere wakes the waiter)."""
WINDOW = "window"
"""Built in: one of N takes in any sliding window. Args: (N, window ms). Nothing to release.
Refusal detail: ``window`` (`retry_s` = until the oldest take leaves the window)."""
BUILT_IN_KINDS = frozenset({HOLD, SLOTS, WINDOW})


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How a granted attempt ended, for a claim that settles (`Claim.settle`)."""

    attempt: Attempt
    response: Response | None
    """The attempt's response when it completed (its `usage` is what it cost)."""
    error: InferenceError | None
    """Why it failed (kind ``cancelled`` when cancelled, or when it outlived the stop
    grace); None when it completed."""


@dataclass(frozen=True, slots=True)
class ClaimRefusal:
    """The claim that refused a call, and what the store knows of when it may pass."""

    index: int
    """Its place in the call's claim set."""
    claim: Claim
    detail: str
    """The kind's word for why: ``held``, ``probe``, ``slots``, ``window``, or a plugin
    kind's own."""
    retry_s: float | None = None
    """Seconds until it may pass, when known; None when a change elsewhere frees it (the
    waiter is woken by `FleetStore.changed` of the claim's key, and polls)."""
    info: str | None = None
    """More from the store (a hold's reason: ``rate_limit``, ``overloaded``...)."""


Refused: TypeAlias = "Callable[[ClaimRefusal, float], InferenceError | None]"
"""`Claim.refused`: (the refusal, seconds the call has waited so far) -> the error to fail
the call with now, or None to wait (announced) and ask again."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One thing an attempt must be granted before it reaches its provider."""

    kind: str
    """A built-in kind (`HOLD`, `SLOTS`, `WINDOW`) or one a plugin registered."""
    key: str
    """What it is about, in the kind's terms (``openai:gpt-4o``, ``openai``,
    ``budget:server:x:day:2026-12-06``). Waiters are woken by changes of this key."""
    args: tuple[Scalar, ...] = ()
    """The kind's arguments (its limit, lease, amount...)."""
    wait_reason: WaitReason = "limit"
    """How a wait for this claim is announced (``inference:waiting`` reason)."""
    max_wait_s: float = 600.0
    """The longest a call waits for this claim, in all, before it fails (the unreachable
    store included, with ``[fleet] on_store_error = "closed"``)."""
    max_wait_setting: str = "[rate_limit] max_wait_s"
    """The settings key of `max_wait_s`, for the error message."""
    refused: Refused | None = field(default=None, compare=False)
    """Decide what a refusal means (see `Refused`); unset: wait up to `max_wait_s`."""
    admitted: Callable[[Scalar], None] | None = field(default=None, compare=False)
    """Called with the kind's take result once the whole set was granted."""
    released: Callable[[], None] | None = field(default=None, compare=False)
    """Called once when the kernel gives the grant back (any path)."""
    settle: Callable[[AttemptEnd], tuple[Scalar, ...]] | None = field(default=None, compare=False)
    """The arguments the release gets (`ClaimCall.settle`): a budget's real cost."""
    plugin: str = ""
    """The plugin that contributed it. The kernel fills it in with a copy of the claim when
    it is not the plugin's name already: a plugin that sets it (`PluginContext.name`) saves
    that copy on every call."""


@dataclass(slots=True)
class ClaimCall:
    """One step of a plugin kind on the memory store: the claim, the call's holder id, the
    store's clock, and this (kind, key)'s state, a dict the kind owns."""

    claim: Claim
    holder: str
    now_ms: int
    """The store's wall clock, ms since the epoch (Redis: ``TIME``)."""
    state: MutableMapping[str, Any]
    settle: tuple[Scalar, ...] = ()


class ClaimKind(Protocol):
    """A claim kind a plugin adds (`agentcore_claim_kinds`), with no kernel change.

    The four steps exist twice, with one meaning: in Python for the memory store and as
    `lua` for the Redis script. The store runs every claim's `check`, then (all passed)
    every `take`, in one atomic step; `release` when the grant is given back (with the
    `Claim.settle` arguments); `renew` every third of `lease_s` while it is held.
    """

    @property
    def name(self) -> str:
        """Unique among the kinds: not ``hold``, ``slots``, ``window``, nor another plugin's."""
        ...

    @property
    def redis_keys(self) -> tuple[str, ...]:
        """The key families it uses on Redis; ``c.keys[i]`` is ``{PREFIX}:FAMILY:CLAIM_KEY``."""
        ...

    @property
    def lua(self) -> str:
        """A Lua table expression ``{check = function(c) ... end, take = ..., release = ...,
        renew = ...}`` (missing steps do nothing). ``c`` has ``keys``, ``args`` (strings),
        ``holder``, ``now`` (ms), ``settle`` (strings) and ``wake()`` (frees waiters on the
        claim's key). ``check`` returns nil to pass, or ``{retry_ms or -1, detail, info?}``;
        ``take`` returns a number or string (the `Claim.admitted` value)."""
        ...

    @property
    def lease_s(self) -> float | None:
        """Renewed every third of this while held; None: never renewed."""
        ...

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        """None to pass, or (seconds until it may pass or None, detail, info)."""
        ...

    def take(self, call: ClaimCall) -> Scalar:
        """Apply the claim (every check passed); the result goes to `Claim.admitted`."""
        ...

    def release(self, call: ClaimCall) -> bool:
        """Give it back (settling with `call.settle`); True to wake waiters on its key."""
        ...

    def renew(self, call: ClaimCall) -> None:
        """Extend what it holds (a lease)."""
        ...


__all__ = [
    "BUILT_IN_KINDS",
    "HOLD",
    "SLOTS",
    "WINDOW",
    "AttemptEnd",
    "Claim",
    "ClaimCall",
    "ClaimKind",
    "ClaimRefusal",
    "Refused",
    "Scalar",
]
