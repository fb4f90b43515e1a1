"""The push-event inbox's RFC-006 bounds, which the vendored vectors do not reach: a batch
keeps the 64 newest notices and counts the rest (§5.1, vector 17's rule), and coalescing
capacity degrades to appending, never refuses (§11, vector 34c's rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentcore_mcpl_context.events import MAX_NOTICES, Inbox

from agentcore.api import Coalesce, PushEvent


@dataclass(frozen=True)
class Server:
    name: str = "srv"
    grant: frozenset[str] = frozenset()


def event(event_id: str, key: str, **coalesce: Any) -> PushEvent:
    return PushEvent(
        server=Server(),  # type: ignore[arg-type]
        feature_set="doc",
        event_id=event_id,
        timestamp="2026-01-01T00:00:00Z",
        payload={"content": [{"type": "text", "text": event_id}]},
        content=({"type": "text", "text": event_id},),
        coalesce=Coalesce(key, **coalesce),
    )


def test_a_batch_keeps_the_64_newest_notices_and_counts_the_dropped() -> None:
    inbox = Inbox()
    for i in range(100):
        inbox.admit(event(f"n{i}", "K", deferred=True, data={"i": i}))
    [slot] = inbox.take()
    params = slot.render_params()
    assert len(params["notices"]) == MAX_NOTICES == 64
    assert params["dropped"] == 36
    assert params["notices"][0] == {
        "eventId": "n36",
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"i": 36},
    }
    assert params["eventId"] == "n99" and params["notices"][-1]["eventId"] == "n99"


def test_at_the_subject_limit_events_are_appended_never_refused() -> None:
    inbox = Inbox(max_subjects=1)
    inbox.admit(event("a", "A", initial=True))  # A occupies the one slot, unread
    outcomes = [
        inbox.admit(event("b", "B", initial=True)),
        inbox.admit(event("c", "C", retract=True)),
        inbox.admit(event("d", "D", deferred=True)),
    ]
    assert [o.outcome if o else None for o in outcomes] == ["appended", "noted", "appended"]
    taken = inbox.take()
    assert [p.event_id for p in taken] == ["a", "b", "c", "d"]
    assert all(p.batch is None for p in taken)  # the deferred one: its fallback, unrendered
    # Once A is read its slot can be reused: B is tracked (and `none`, from `initial`).
    assert inbox.admit(event("b2", "B", initial=True)).outcome == "first"  # type: ignore[union-attr]
