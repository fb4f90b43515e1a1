"""The host's inbox of MCPL push events (SPEC §9) for its own turns, with RFC-006 plain
coalescing and retraction: pure state, no I/O, nothing awaited.

An accepted event waits here until the next host turn assembles its context; that
assembly *consumes* it (RFC-006 §3.3: consumption is decided at assembly, so a turn
that then fails has still consumed it). One shared context: every turn drains every
pending event (the conservative cross-context rule §3.3 allows).

A subject is (server, feature set, key) (§3.2: a push without `coalesce.channelId` is
feature-set scoped; this host advertises no `channelScopedPush`). Its consumed history
is a tri-state (§3.3): `none` only when its first tracked occurrence said `initial`,
`unknown` when it was never tracked (or was forgotten to make room), `some` once an
occurrence of it was consumed. Forgetting never lowers knowledge: an untracked subject
is `unknown` again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from agentcore.api import CoalesceResult, PushEvent

History = Literal["none", "some", "unknown"]
SubjectId = tuple[str, str, str]  # (server, feature set, key): RFC-006 §3.2


@dataclass(slots=True)
class Pending:
    """One accepted occurrence waiting for the next host turn."""

    server: str
    feature_set: str
    event_id: str
    timestamp: str
    content: list[Any]
    subject: SubjectId | None = None
    """Set while it is its subject's unconsumed occupant (replaceable, retractable)."""


@dataclass(slots=True)
class _Subject:
    history: History
    occupant: Pending | None = None


@dataclass(slots=True)
class Inbox:
    """The pending events and the tracked subjects of every server."""

    max_pending: int = 1000
    max_subjects: int = 10_000
    pending: list[Pending] = field(default_factory=list)
    _subjects: OrderedDict[SubjectId, _Subject] = field(default_factory=OrderedDict)

    @property
    def full(self) -> bool:
        """No room for one more pending event (ordinary storage limit, not coalescing's)."""
        return len(self.pending) >= self.max_pending

    def admit(self, event: PushEvent) -> CoalesceResult | None:
        """Take an accepted event in; RFC-006 §7's result when it carried `coalesce`."""
        occurrence = Pending(
            event.server.name,
            event.feature_set,
            event.event_id,
            event.timestamp,
            list(event.payload.get("content", [])),
        )
        coalesce = event.coalesce
        if coalesce is None:
            self.pending.append(occurrence)
            return None
        sid = (event.server.name, event.feature_set, coalesce.key)
        subject = self._track(sid, coalesce.initial)
        prior = None
        if subject is not None and subject.occupant is not None:
            # Unconsumed: removed from the context without a trace (§4.1, §6).
            prior, subject.occupant = subject.occupant, None
            self.pending.remove(prior)
        prior_id = prior.event_id if prior is not None else None
        history: History = subject.history if subject is not None else "unknown"
        if coalesce.retract:
            return self._retract(occurrence, history, prior_id)
        # §4: plain. Appended at the tail, where a fresh event would go (§4.1).
        self.pending.append(occurrence)
        if subject is not None:
            occurrence.subject = sid
            subject.occupant = occurrence
        if prior is not None:
            return CoalesceResult("replaced", prior_id)
        return CoalesceResult("first" if history == "none" else "appended")

    def _retract(self, notice: Pending, history: History, prior_id: str | None) -> CoalesceResult:
        """RFC-006 §6: the pending version is gone; the notice goes in iff a model may have
        seen a version (history `some` or `unknown`) and it says something."""
        if history == "none":
            return CoalesceResult("retracted", prior_id)
        if not notice.content:
            return CoalesceResult("consumed", prior_id)
        self.pending.append(notice)  # an ordinary occurrence, never an occupant
        return CoalesceResult("noted", prior_id)

    def _track(self, sid: SubjectId, initial: bool) -> _Subject | None:
        """The subject, tracked from now on if it was not (`none` only on `initial`, §3.3);
        None when no room can be made: it is then handled as an append-only host would
        (§11: coalescing capacity alone never refuses an occurrence)."""
        subject = self._subjects.get(sid)
        if subject is not None:
            self._subjects.move_to_end(sid)
            return subject
        if len(self._subjects) >= self.max_subjects and not self._evict_one():
            return None
        subject = self._subjects[sid] = _Subject("none" if initial else "unknown")
        return subject

    def _evict_one(self) -> bool:
        """Forget the least recently used subject without an occupant (its history becomes
        `unknown` by being untracked, never `none`)."""
        for sid, subject in self._subjects.items():
            if subject.occupant is None:
                del self._subjects[sid]
                return True
        return False

    def consume(self) -> list[Pending]:
        """Everything pending, oldest first, now consumed (§3.3: at assembly)."""
        taken, self.pending = self.pending, []
        for occurrence in taken:
            if occurrence.subject is not None:
                subject = self._subjects.get(occurrence.subject)
                if subject is not None:
                    subject.history = "some"
                    subject.occupant = None
                occurrence.subject = None
        return taken


__all__ = ["History", "Inbox", "Pending"]
