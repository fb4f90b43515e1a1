"""The host's inbox of MCPL push events (SPEC §9) for its own turns, coalesced as RFC-006
says: pure state, no I/O, nothing awaited (the plugin does the `push/render` calls).

An accepted event waits here until the next host turn assembles its context; that
assembly *consumes* it (RFC-006 §3.3: decided at assembly, so a turn that then fails
has still consumed it). One shared context: every turn takes everything pending (the
conservative cross-context rule §3.3 allows).

A subject is (server, feature set, key) (§3.2: a push without `coalesce.channelId` is
feature-set scoped; this host advertises no `channelScopedPush`). Its consumed history
is a tri-state (§3.3): `none` only when its first tracked occurrence said `initial`,
`unknown` when it was never tracked (or was forgotten to make room), `some` once an
occurrence of it was consumed. Forgetting never lowers knowledge: an untracked subject
is `unknown` again. A subject has at most one unconsumed occupant, a plain event or a
pending deferred batch (§3.2), and at most one batch being rendered (§5.4).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from agentcore.api import CoalesceResult, PushEvent

History = Literal["none", "some", "unknown"]
SubjectId = tuple[str, str, str]  # (server, feature set, key): RFC-006 §3.2
MAX_NOTICES = 64  # RFC-006 §5.1: at least the 64 most recent notices of a batch are kept


@dataclass(slots=True)
class Batch:
    """A deferred subject's notices (RFC-006 §5): rendered by `push/render` when a turn
    assembles it. `state` is §5.4's: pending, rendering (frozen), or cancelled."""

    key: str
    notices: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_NOTICES))
    dropped: int = 0
    state: Literal["pending", "rendering", "cancelled"] = "pending"

    def add(self, event: PushEvent) -> None:
        notice: dict[str, Any] = {"eventId": event.event_id, "timestamp": event.timestamp}
        if event.coalesce is not None and event.coalesce.data is not None:
            notice["data"] = event.coalesce.data
        if len(self.notices) == MAX_NOTICES:
            self.dropped += 1  # the oldest goes; the count is reported (§5.1)
        self.notices.append(notice)


@dataclass(slots=True)
class Pending:
    """One accepted occurrence, or one deferred batch, waiting for the next host turn."""

    server: str
    feature_set: str
    event_id: str
    """A batch's: its latest notice's."""
    timestamp: str
    content: list[Any]
    """A batch's: its fallback (§5.1), what the model sees if rendering fails."""
    subject: SubjectId | None = None
    """Set while it is its subject's unconsumed occupant (replaceable, retractable)."""
    batch: Batch | None = None

    def render_params(self) -> dict[str, Any]:
        """RFC-006 §5.2's `push/render` params for this (frozen) batch."""
        assert self.batch is not None
        return {
            "featureSet": self.feature_set,
            "key": self.batch.key,
            "eventId": self.event_id,
            "notices": list(self.batch.notices),
            "dropped": self.batch.dropped,
        }


@dataclass(slots=True)
class _Subject:
    history: History
    occupant: Pending | None = None
    rendering: Pending | None = None


def _occurrence(event: PushEvent) -> Pending:
    # `content`, never `payload`: what may go before a model (§19 references as stubs).
    content = list(event.content)
    return Pending(event.server.name, event.feature_set, event.event_id, event.timestamp, content)


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
        occurrence = _occurrence(event)
        coalesce = event.coalesce
        if coalesce is None:
            self.pending.append(occurrence)
            return None
        sid = (event.server.name, event.feature_set, coalesce.key)
        subject = self._track(sid, coalesce.initial)
        if subject is None:  # no room to track it: as an append-only host would (§11)
            return self._untracked(occurrence, retract=coalesce.retract)
        if coalesce.deferred:
            return self._notice(subject, sid, event, occurrence)
        prior = self._displace(subject)
        history = subject.history
        if coalesce.retract:
            return _retracted(self.pending, occurrence, history, prior)
        # §4: plain. Appended at the tail, where a fresh event would go (§4.1).
        self.pending.append(occurrence)
        occurrence.subject, subject.occupant = sid, occurrence
        if prior is not None:
            return CoalesceResult("replaced", prior)
        return CoalesceResult("first" if history == "none" else "appended")

    def _displace(self, subject: _Subject) -> str | None:
        """Remove what of the subject no model has seen, without a trace (§4.1, §6): its
        occupant, and (§5.4 rule 6) a batch being rendered, which is cancelled. The
        `eventId` displaced, if any."""
        prior = None
        if subject.rendering is not None:
            rendering, subject.rendering = subject.rendering, None
            assert rendering.batch is not None
            rendering.batch.state = "cancelled"
            prior = rendering.event_id
        if subject.occupant is not None:
            occupant, subject.occupant = subject.occupant, None
            self.pending.remove(occupant)
            prior = occupant.event_id
        return prior

    def _notice(
        self, subject: _Subject, sid: SubjectId, event: PushEvent, fallback: Pending
    ) -> CoalesceResult:
        """§5.1: a notice joins the pending batch (``"replaced"``), displaces an unread
        plain occupant (``"replaced"``), or opens a batch (``"first"``; also while an
        older batch renders, §5.4 rule 1)."""
        occupant = subject.occupant
        if occupant is not None and occupant.batch is not None:
            joined = occupant.event_id
            occupant.batch.add(event)
            occupant.event_id, occupant.timestamp = event.event_id, event.timestamp
            occupant.content = fallback.content
            return CoalesceResult("replaced", joined)
        prior: str | None = None
        if occupant is not None:
            subject.occupant = None
            self.pending.remove(occupant)
            prior = occupant.event_id
        fallback.batch = Batch(sid[2])
        fallback.batch.add(event)
        fallback.subject, subject.occupant = sid, fallback
        self.pending.append(fallback)
        return CoalesceResult("replaced", prior) if prior else CoalesceResult("first")

    def _untracked(self, occurrence: Pending, *, retract: bool) -> CoalesceResult:
        if retract:
            return _retracted(self.pending, occurrence, "unknown", None)
        self.pending.append(occurrence)  # a deferred one: its fallback, never rendered
        return CoalesceResult("appended")

    def _track(self, sid: SubjectId, initial: bool) -> _Subject | None:
        """The subject, tracked from now on if it was not (`none` only on `initial`, §3.3);
        None when no room can be made (§11: capacity alone never refuses)."""
        subject = self._subjects.get(sid)
        if subject is not None:
            self._subjects.move_to_end(sid)
            return subject
        if len(self._subjects) >= self.max_subjects and not self._evict_one():
            return None
        subject = self._subjects[sid] = _Subject("none" if initial else "unknown")
        return subject

    def _evict_one(self) -> bool:
        """Forget the least recently used idle subject (its history becomes `unknown` by
        being untracked, never `none`)."""
        for sid, subject in self._subjects.items():
            if subject.occupant is None and subject.rendering is None:
                del self._subjects[sid]
                return True
        return False

    def take(self) -> list[Pending]:
        """Everything pending, oldest first, for one turn's assembly: plain events are
        consumed now (§3.3); batches are frozen (§5.4 rule 1) until `finish`."""
        taken, self.pending = self.pending, []
        for occurrence in taken:
            subject = self._subjects.get(occurrence.subject) if occurrence.subject else None
            if subject is None:
                continue
            if subject.occupant is occurrence:
                subject.occupant = None
            if occurrence.batch is not None:
                occurrence.batch.state = "rendering"
                subject.rendering = occurrence
            else:
                subject.history = "some"
                occurrence.subject = None
        return taken

    def finish(self, slot: Pending) -> bool:
        """A frozen batch's render is over: True if its materialization may go in (it was
        not cancelled meanwhile, §5.4 rules 6-7); it is then consumed by this turn."""
        assert slot.batch is not None
        if slot.batch.state == "cancelled":
            return False
        subject = self._subjects.get(slot.subject) if slot.subject else None
        if subject is not None:
            if subject.rendering is slot:
                subject.rendering = None
            subject.history = "some"
        slot.subject = None
        return True


def _retracted(
    pending: list[Pending], notice: Pending, history: History, prior: str | None
) -> CoalesceResult:
    """RFC-006 §6: the unread version is gone; the notice goes in iff a model may have
    seen a version (history `some` or `unknown`) and it says something."""
    if history == "none":
        return CoalesceResult("retracted", prior)
    if not notice.content:
        return CoalesceResult("consumed", prior)
    pending.append(notice)  # an ordinary occurrence, never an occupant
    return CoalesceResult("noted", prior)


__all__ = ["MAX_NOTICES", "Batch", "History", "Inbox", "Pending"]
