"""agentcore's MCPL context hooks and inference lifecycle for the host's own turns.

The policy of MCPL SPEC §10 for an inference that is one of the host's own turns
(`Request.turn`; `agentcore infer --conversation`); the message shapes and the
checks every host owes are in `agentcore_mcpl_context.wire`.

- Before the turn, `context/beforeInference` goes to every ready server granted any
  `contextHooks.beforeInference.*` leaf, all at once, each cut at ``[mcpl.context]
  hook_timeout_s`` (§10.6); a late, failing or refused server is skipped (fail-open,
  §13.3). `userMessage` is null unless that server is granted `…observe` (§10.1);
  `model` is the turn's model as `model/info` would describe it (§12.2).
- Each injection is authorized by its position when the response arrives (§5.4,
  §10.8); the accepted ones go in grouped by position, servers in settings order.
  One ``mcpl:context_hook`` trace per server per turn says how it went, emitted as its
  answer arrives (or at its timeout), while slower servers are still working.
- `inference/lifecycle` (§10.5) to every ready server granted `inferenceLifecycle`
  when the turn is admitted: ``started``, then exactly one terminal, to the same
  servers in the same sessions only (a server that joins, or reconnects, mid-turn
  gets nothing for it). `model` only with `modelInfo` granted; `usage` only with
  ``completed``; never content. Sent without making the turn wait.
- RFC-010 deprecates injections; they are still applied, and the first time a connection
  has authorized injections applied the operator is told once: a log warning and one
  ``mcpl:deprecated`` trace naming the server. `observe` is not deprecated.
- A §19 bulk content reference in an injection reaches the model as its stub. With
  ``[mcpl.bulk] fetch = true``, one whose disposition is not ``never`` is fetched under
  the host's rules (`agentcore.api.BulkFetcher`) and, verified, put in instead where the
  turn carries it. One ``mcpl:bulk_reference`` trace per reference says what was decided.

The package's second plugin, ``mcpl-events`` (`agentcore_mcpl_context.events_plugin`),
puts push events into the same turns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from loguru import logger
from pydantic import Field

from agentcore.api import (
    ConnectionClosed,
    Inference,
    Injection,
    McplError,
    PluginContext,
    Section,
    ServerHandle,
    SettingsSection,
    TurnEnding,
    hookimpl,
    is_granted,
)
from agentcore_mcpl_context.names import INFERENCE_LIFECYCLE, LIFECYCLE, MODEL_INFO

if TYPE_CHECKING:
    from agentcore.api import BulkFetcher, BulkReference, Fetched
    from agentcore_mcpl_context.wire import ContextInjection, HookAnswer

# `agentcore_mcpl_context.wire` (and the events it imports) loads at the first host turn
# (`Request.turn`): `serve` answering its servers' requests never needs it.

DEFAULT_HOOK_TIMEOUT_S = 5.0  # SPEC §10.6's recommendation
BULK_TRACE = "mcpl:bulk_reference"


class ContextSettings(Section):
    """``[mcpl.context]``."""

    hook_timeout_s: float = Field(default=DEFAULT_HOOK_TIMEOUT_S, gt=0)
    """How long one server's `context/beforeInference` may take before the turn goes
    on without it."""


class McplContext:
    """The `mcpl-context` plugin."""

    def __init__(self) -> None:
        self._context: PluginContext[ContextSettings] | None = None
        self._started: dict[str, list[tuple[ServerHandle, int]]] = {}
        """inferenceId -> the servers (and their session) that were sent ``started``."""
        self._warned: set[tuple[str, int]] = set()
        """(server, session) told of RFC-010's deprecation: once per connection."""
        self._fetcher: BulkFetcher | None = None

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("mcpl.context", ContextSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[ContextSettings]) -> None:
        self._context = context
        if context.bulk.fetch:  # off by default: the fetcher's module loads only when on
            from agentcore.api import BulkFetcher

            self._fetcher = BulkFetcher(context.bulk)
        else:
            self._fetcher = None

    @hookimpl
    def agentcore_mcpl_capabilities(self) -> dict[str, Any]:
        """What the host advertises because this plugin runs (§5.2)."""
        return {"contextHooks": {"beforeInference": True}, INFERENCE_LIFECYCLE: True}

    @property
    def _ctx(self) -> PluginContext[ContextSettings]:
        assert self._context is not None, "the mcpl-context plugin was not started"
        return self._context

    @property
    def _timeout_s(self) -> float:
        return self._ctx.settings.hook_timeout_s

    def _model(self, inference: Inference) -> dict[str, Any]:
        return self._ctx.model_info(inference.request.model).to_wire()

    # -- context/beforeInference (§10.1-10.4, 10.6-10.8) ------------------------------

    @hookimpl
    async def on_host_turn_context(self, inference: Inference) -> list[Injection]:
        turn = inference.request.turn
        if turn is None:
            return []
        from agentcore_mcpl_context.wire import (
            before_inference,
            before_inference_params,
            may_observe,
            takes_hooks,
        )

        servers = [s for s in self._ctx.mcpl_servers() if s.ready and takes_hooks(s.grant)]
        if not servers:
            return []
        model = self._model(inference)
        ids = (inference.id, turn.conversation_id, turn.turn_index)
        # §10.1: the user's text only to a server granted observe; null to the rest.
        observing = before_inference_params(*ids, turn.user_message, model)
        blind = before_inference_params(*ids, None, model)
        asks = [(s, observing if may_observe(s.grant) else blind) for s in servers]

        def trace(i: int, answer: HookAnswer) -> None:
            self._trace(servers[i], inference, answer)  # as it arrives: off the critical path

        answers = await before_inference(
            asks, self._timeout_s, self._ctx.media_types(inference.request.model), trace
        )
        media_types = self._ctx.media_types(inference.request.model)
        budget = {s.name: self._ctx.bulk.max_fetches_per_turn for s in servers}
        kept = [
            (s, i) for s, answer in zip(servers, answers, strict=True) for i in answer.injections
        ]
        # Every injection's references at once: the turn waits for one fetch's time at most.
        decided = await asyncio.gather(
            *(self._with_references(s, inference, i, media_types, budget) for s, i in kept)
        )
        # settings order (§10.8)
        return [
            Injection(i.position, i.content, server.name)
            for (server, _), i in zip(kept, decided, strict=True)
        ]

    # -- §19 bulk content references ----------------------------------------------------

    async def _with_references(
        self,
        server: ServerHandle,
        inference: Inference,
        injection: ContextInjection,
        media_types: frozenset[str],
        budget: dict[str, int],
    ) -> ContextInjection:
        """The injection with each bulk reference decided: its stub stays, or (fetching on,
        not ``never``, within the server's `budget` of fetches this turn, verified,
        carried) the payload replaces it. Traced one by one."""
        if not injection.references:
            return injection
        from agentcore_mcpl_context.wire import fetched_block

        fetches = [self._fetch(r, server.name, budget) for _, r in injection.references]
        results = await asyncio.gather(*fetches)
        content = list(injection.content)
        for (index, reference), fetched in zip(injection.references, results, strict=True):
            block = None
            if not isinstance(fetched, str) and fetched.ok:
                block = fetched_block(fetched, injection.position, media_types)
                if block is not None:
                    content[index] = block
            self._trace_reference(server, inference, reference, fetched, inlined=block is not None)
        return dataclasses.replace(injection, content=tuple(content))

    async def _fetch(
        self, reference: BulkReference, server: str, budget: dict[str, int]
    ) -> Fetched | str:
        """The fetch, or why there is none: ``off``; ``never`` (§19: neither the payload
        nor the URI may reach the model, so there is nothing to fetch it for);
        ``over_budget`` (``max_fetches_per_turn`` already fetched for this server)."""
        if self._fetcher is None:
            return "off"
        if reference.disposition == "never":
            return "never"
        if budget[server] <= 0:
            return "over_budget"
        budget[server] -= 1
        return await self._fetcher.fetch(reference)

    def _trace_reference(
        self,
        server: ServerHandle,
        inference: Inference,
        reference: BulkReference,
        fetched: Fetched | str,
        *,
        inlined: bool,
    ) -> None:
        fields: dict[str, Any] = {
            "serverId": server.name,
            "inferenceId": inference.id,
            "referenceId": reference.id,
            "kind": reference.kind,
            "disposition": reference.disposition,
            "shown": "payload" if inlined else "stub",
            "rejectedFields": list(reference.rejected),
        }
        if isinstance(fetched, str):
            fields["fetch"] = fetched
        else:
            fields["fetch"] = "ok" if fetched.ok else "refused"
            fields["origin"] = fetched.origin
            if fetched.ok:
                fields["sizeBytes"] = len(fetched.data)
                fields["mimeType"] = fetched.mime_type
                fields["digestVerified"] = fetched.digest_verified
                if not inlined:
                    fields["reason"] = "not_carried"
            else:
                fields["reason"] = fetched.refusal
                fields["error"] = fetched.detail
        self._ctx.emit_now(BULK_TRACE, **fields)

    def _trace(self, server: ServerHandle, inference: Inference, answer: HookAnswer) -> None:
        fields: dict[str, Any] = {
            "serverId": server.name,
            "inferenceId": inference.id,
            "outcome": answer.outcome,
            "injections": len(answer.injections),
            "dropped": len(answer.dropped),
        }
        if answer.dropped:
            fields["droppedReasons"] = answer.dropped
        if answer.dropped_content:
            fields["droppedContent"] = answer.dropped_content
        if answer.error is not None:
            fields["error"] = answer.error
        self._ctx.emit_now("mcpl:context_hook", **fields)
        if answer.injections:
            self._deprecated(server)

    def _deprecated(self, server: ServerHandle) -> None:
        """RFC-010 §4.1: authorized injections are still applied; the operator hears once
        per connection that the server uses a deprecated mechanism."""
        connection = (server.name, server.sessions)
        if connection in self._warned:
            return
        self._warned.add(connection)
        logger.warning(
            "mcpl server {}: returned context injections, which MCPL deprecates (RFC-010) "
            "and removes in 0.6; applied for now. Push events (RFC-006), channels or tools "
            "replace them.",
            server.name,
        )
        self._ctx.emit_now(
            "mcpl:deprecated", serverId=server.name, mechanism="contextInjections", rfc="RFC-010"
        )

    # -- inference/lifecycle (§10.5) ---------------------------------------------------

    @hookimpl
    def on_host_turn_start(self, inference: Inference) -> None:
        turn = inference.request.turn
        if turn is None:
            return
        servers = [
            s
            for s in self._ctx.mcpl_servers()
            if s.ready and is_granted(s.grant, INFERENCE_LIFECYCLE)
        ]
        if not servers:
            return
        from agentcore_mcpl_context.wire import lifecycle_params

        model = self._model(inference)
        sent: list[tuple[ServerHandle, int]] = []
        for server in servers:
            params = lifecycle_params(
                inference.id,
                turn.conversation_id,
                turn.turn_index,
                "started",
                model=model if is_granted(server.grant, MODEL_INFO) else None,
            )
            if _send(server, params):
                sent.append((server, server.sessions))
        if sent:
            self._started[inference.id] = sent

    @hookimpl
    def on_host_turn_end(self, inference: Inference, ending: TurnEnding) -> None:
        sent = self._started.pop(inference.id, None)
        turn = inference.request.turn
        if not sent or turn is None:
            return
        from agentcore_mcpl_context.wire import lifecycle_params

        model = self._model(inference)
        usage = None
        if ending.phase == "completed" and ending.usage is not None:
            usage = {
                "inputTokens": ending.usage.input_tokens,
                "outputTokens": ending.usage.output_tokens,
            }
        for server, session in sent:
            if server.sessions != session:
                continue  # a new session: it never heard this turn start
            params = lifecycle_params(
                inference.id,
                turn.conversation_id,
                turn.turn_index,
                ending.phase,
                model=model if is_granted(server.grant, MODEL_INFO) else None,
                usage=usage,
            )
            _send(server, params)


def _send(server: ServerHandle, params: dict[str, Any]) -> bool:
    """Queue one lifecycle notification; False when the connection would not take it (gone,
    or its grant no longer allows it: §5.4, a denied capability's message is not sent)."""
    try:
        server.notify_soon(LIFECYCLE, params)
    except (McplError, ConnectionClosed) as exc:
        logger.debug("mcpl server {}: inference/lifecycle not sent: {}", server.name, exc)
        return False
    return True


__all__ = ["ContextSettings", "McplContext"]
