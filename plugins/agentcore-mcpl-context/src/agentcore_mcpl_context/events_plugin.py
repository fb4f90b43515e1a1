"""agentcore's `mcpl-events` plugin: MCPL push events (SPEC §9) into the host's own turns,
coalesced as RFC-006 says.

With ``[mcpl.events] enabled = true``, an accepted `push/event` waits in the inbox
(`agentcore_mcpl_context.events`) until the next host turn (`Request.turn`) assembles its
context; that turn consumes it (RFC-006 §3.3) and carries it before the user's message,
one block saying where it came from, then its content as an injection's is kept. A plugin
that answers `on_push_event` first (the hook stops at the first answer) takes the event
instead; this one answers last.

RFC-006: plain replacement (§4), deferred notices rendered by `push/render` when a turn
assembles them (§5), and retraction (§6), of feature-set-scoped subjects; the `coalesce`
member is checked by the host before this plugin sees it. Renders of one assembly run
at once, each cut at ``render_timeout_s`` (§5.3); a timeout, an error or a lost server
puts the batch's fallback in instead, a result is checked as pushed content is, and an
empty one puts in nothing. Authority is checked again when the answer comes (§5.4 rule
4): a server whose grant no longer has `pushEvents` gets nothing materialized. A batch
withdrawn or replaced while it renders puts in nothing at all (§5.4 rule 6). Each render
is traced (``mcpl:push_render``). What it advertises (RFC-006 §10): `pushEvents`, and
`eventCoalescing` with exactly the leaves implemented here (no channels). Off, it
advertises neither and answers nothing: the host then refuses push events with a
reason, as it always did.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agentcore.api import (
    ConnectionClosed,
    Inference,
    Injection,
    McplError,
    PluginContext,
    PushAnswer,
    PushEvent,
    RemoteError,
    Section,
    ServerHandle,
    SettingsSection,
    hookimpl,
    is_granted,
)

if TYPE_CHECKING:
    from agentcore_mcpl_context.events import Inbox, Pending

# The inbox (`agentcore_mcpl_context.events`) and the wire load only when the plugin is
# enabled: off (the default), `serve` never needs them (issue 24, idle RSS).

RETRY_WINDOW_MS = 3_600_000  # RFC-006 §3.1's floor, which the host's dedup keeps
INBOX_FULL = "the host's queue of push events waiting for its next turn is full"
RENDER = "push/render"
RENDER_TRACE = "mcpl:push_render"


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
    render_timeout_s: float = Field(default=5.0, gt=0)
    """How long one `push/render` may take before the batch's fallback goes in instead
    (RFC-006 §5.3 recommends 5 s, as for `context/beforeInference`)."""


class McplEvents:
    """The `mcpl-events` plugin."""

    def __init__(self) -> None:
        self._context: PluginContext[EventsSettings] | None = None
        self._inbox: Inbox | None = None

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("mcpl.events", EventsSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[EventsSettings]) -> None:
        self._context = context
        self._inbox = None  # made at its first use, with these settings' bounds

    @property
    def _enabled(self) -> bool:
        return self._context is not None and self._context.settings.enabled

    @property
    def _events(self) -> Inbox:
        """The inbox, made (and its module loaded) when the enabled plugin first needs it."""
        if self._inbox is None:
            from agentcore_mcpl_context.events import Inbox

            settings = self._settings
            self._inbox = Inbox(settings.max_pending_events, settings.max_subjects)
        return self._inbox

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
                "deferred": True,
                "channelScopedPush": False,
                "retryWindowMs": RETRY_WINDOW_MS,
            },
        }

    @hookimpl(trylast=True)
    def on_push_event(self, event: PushEvent) -> PushAnswer | None:
        """Accept the event for the next host turn, after any plugin that answers first."""
        if not self._enabled:
            return None
        if self._events.full:
            return PushAnswer(accepted=False, reason=INBOX_FULL)
        return PushAnswer(accepted=True, coalesce=self._events.admit(event))

    @hookimpl
    async def on_host_turn_context(self, inference: Inference) -> list[Injection]:
        """What the inbox holds, consumed by this turn's assembly (RFC-006 §3.3), pending
        batches rendered first, all at once (§5.3)."""
        if not self._enabled or inference.request.turn is None:
            return []
        assert self._context is not None
        from agentcore_mcpl_context.wire import event_blocks

        taken = self._events.take()
        batches = [p for p in taken if p.batch is not None]
        rendered = await asyncio.gather(*(self._render(p, inference.id) for p in batches))
        contents = {id(p): content for p, content in zip(batches, rendered, strict=True)}
        media_types = self._context.media_types(inference.request.model)
        injections = []
        for p in taken:
            content = p.content if p.batch is None else contents[id(p)]
            if content is not None:
                blocks = event_blocks(p, content, media_types)
                injections.append(Injection("beforeUser", blocks, p.server))
        return injections

    async def _render(self, slot: Pending, inference_id: str) -> list[Any] | None:
        """One frozen batch's content for this turn (RFC-006 §5.2-5.4): the server's
        rendering, its fallback, or None (nothing: empty, cancelled, authority lapsed)."""
        assert self._context is not None and slot.batch is not None
        server = next((s for s in self._context.mcpl_servers() if s.name == slot.server), None)
        params = slot.render_params()
        outcome, content, error = await self._ask(server, params)
        if outcome == "fallback":
            content = slot.content  # §5.3: materialized instead; never fails the turn
        if not self._events.finish(slot):  # withdrawn or replaced meanwhile (§5.4 rule 6)
            outcome, content = "cancelled", None
        elif server is not None and server.ready and not is_granted(server.grant, "pushEvents"):
            outcome, content = "dropped", None  # §5.4 rule 4: re-checked at response
        fields: dict[str, Any] = {
            "serverId": slot.server,
            "inferenceId": inference_id,
            "featureSet": slot.feature_set,
            "key": params["key"],
            "eventId": params["eventId"],
            "notices": len(params["notices"]),
            "dropped": params["dropped"],
            "outcome": outcome,
        }
        if error is not None:
            fields["error"] = error
        self._context.emit_now(RENDER_TRACE, **fields)
        return content

    async def _ask(
        self, server: ServerHandle | None, params: dict[str, Any]
    ) -> tuple[str, list[Any] | None, str | None]:
        """`push/render` to the server: (outcome, content, error). Never raises for what the
        server does: a failure is the fallback (§5.3)."""
        fallback = "fallback"
        if server is None:
            return fallback, None, "the server is not connected"
        try:
            result = await asyncio.wait_for(
                server.request_soon(RENDER, params), self._settings.render_timeout_s
            )
        except TimeoutError:
            error = f"no answer within {self._settings.render_timeout_s} s"
        except RemoteError as exc:  # before McplError, which it is a kind of
            error = f"the server answered error {exc.code}: {exc.message}"
        except (McplError, ConnectionClosed) as exc:
            error = str(exc) or "the connection closed"
        else:
            content = result.get("content") if isinstance(result, dict) else None
            if not isinstance(content, list):
                return fallback, None, "the result's content is not an array"
            # §5.2: empty means nothing happened; nothing goes in.
            return ("rendered", content, None) if content else ("empty", None, None)
        return fallback, None, error

    @property
    def _settings(self) -> EventsSettings:
        assert self._context is not None
        return self._context.settings


__all__ = ["EventsSettings", "McplEvents"]
