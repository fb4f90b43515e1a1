"""agentcore's `mcpl-events` plugin: MCPL push events (SPEC §9) into the host's own turns,
coalesced as RFC-006 says.

With ``[mcpl.events] enabled = true``, an accepted `push/event` waits in the inbox
(`agentcore_mcpl_context.events`) until the next host turn (`Request.turn`) assembles its
context; that turn consumes it (RFC-006 §3.3) and carries it before the user's message,
one block saying where it came from, then its content as an injection's is kept. A plugin
that answers `on_push_event` first (the hook stops at the first answer) takes the event
instead; this one answers last.

RFC-006: plain replacement (§4) and retraction (§6) of feature-set-scoped subjects; the
`coalesce` member is checked by the host before this plugin sees it. What it advertises
(RFC-006 §10): `pushEvents`, and `eventCoalescing` with exactly the leaves implemented
here (no `deferred`, no channels). Off, it advertises neither and answers nothing: the
host then refuses push events with a reason, as it always did.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agentcore.api import (
    Inference,
    Injection,
    PluginContext,
    PushAnswer,
    PushEvent,
    Section,
    SettingsSection,
    hookimpl,
)
from agentcore_mcpl_context.events import Inbox
from agentcore_mcpl_context.wire import event_blocks

RETRY_WINDOW_MS = 3_600_000  # RFC-006 §3.1's floor, which the host's dedup keeps
INBOX_FULL = "the host's queue of push events waiting for its next turn is full"


class EventsSettings(Section):
    """``[mcpl.events]``."""

    enabled: bool = False
    """Accept `push/event`s into the host's next own turn, coalesced per RFC-006, and
    advertise `pushEvents` and `eventCoalescing`."""
    max_pending_events: int = Field(default=1000, ge=1)
    """Accepted events waiting for the next host turn, at most; past it an event is
    refused (``accepted: false`` with a reason) until a turn takes them."""
    max_subjects: int = Field(default=10_000, ge=1)
    """RFC-006 subjects tracked at most; past it the least recently used one without a
    pending occurrence is forgotten (its history becomes `unknown`, RFC-006 §3.3)."""


class McplEvents:
    """The `mcpl-events` plugin."""

    def __init__(self) -> None:
        self._context: PluginContext[EventsSettings] | None = None
        self._inbox = Inbox()

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("mcpl.events", EventsSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[EventsSettings]) -> None:
        self._context = context
        self._inbox = Inbox(context.settings.max_pending_events, context.settings.max_subjects)

    @property
    def _enabled(self) -> bool:
        return self._context is not None and self._context.settings.enabled

    @hookimpl
    def agentcore_mcpl_capabilities(self) -> dict[str, Any] | None:
        """What the host advertises because this plugin runs (§5.2), only when enabled."""
        if not self._enabled:
            return None
        return {
            "pushEvents": True,
            # RFC-006 §10: a top-level member, with only the leaves implemented here.
            "eventCoalescing": {
                "pushEvents": True,
                "channelsIncoming": False,
                "deferred": False,
                "channelScopedPush": False,
                "retryWindowMs": RETRY_WINDOW_MS,
            },
        }

    @hookimpl(trylast=True)
    def on_push_event(self, event: PushEvent) -> PushAnswer | None:
        """Accept the event for the next host turn, after any plugin that answers first."""
        if not self._enabled:
            return None
        if self._inbox.full:
            return PushAnswer(accepted=False, reason=INBOX_FULL)
        return PushAnswer(accepted=True, coalesce=self._inbox.admit(event))

    @hookimpl
    def on_host_turn_context(self, inference: Inference) -> list[Injection]:
        """What the inbox holds, consumed by this turn's assembly (RFC-006 §3.3)."""
        if not self._enabled or inference.request.turn is None:
            return []
        assert self._context is not None
        media_types = self._context.media_types(inference.request.model)
        return [
            Injection("beforeUser", event_blocks(p, media_types), p.server)
            for p in self._inbox.consume()
        ]


__all__ = ["EventsSettings", "McplEvents"]
