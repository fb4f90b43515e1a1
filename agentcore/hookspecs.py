"""The hooks agentcore's kernel calls, grouped by when they are called, each with its rule.

Every implementation may be a plain function or an `async def` (load-time hooks:
plain functions only); an implementation may take any subset of its spec's
arguments. Hook wrappers are not supported. Each spec states its rule in code,
``@spec(kind, result)`` (`agentcore.markers`), and `RULES` at the end is that table:
`agentcore.hooks` calls every hook as it says, and the table in
docs/architecture.md is checked against it. The kinds:

- *load*: plain functions, called once per plugin as the kernel (or an `McplHost`)
  is made; an exception fails the plugin, by name (from `agentcore_mcpl_capabilities`
  it is logged, and that plugin advertises nothing).
- *lifecycle*: awaited in load order; an exception in `agentcore_start` fails the
  plugin, by name, one in `agentcore_stop` is logged.
- *observer* (`on_trace`, `on_wait_start`, `on_wait_end`): never make an inference
  wait. Plain-function observers are called inline (keep them cheap); a plugin with
  any `async def` observer gets all its observer calls, in order, through a backlog
  of its own, bounded by `agentcore.hooks.OBSERVER_BACKLOG` (what a slow or stuck
  plugin cannot take is dropped, counted and logged by name). At `Kernel.stop()`
  backlogs get up to `OBSERVER_DRAIN_S` to empty, then `agentcore_stop` is called.
- *in-path*: awaited in order on the inference's path, so the inference waits for
  them; an exception is logged with the plugin's name and the inference goes on.
  `on_attempt_end` is in-path on purpose: what a plugin records there, the next
  `on_admission` sees, so a retry never races past a provider hold.
- *decision*: awaited in order; "first non-None result" holds for async
  implementations. An `InferenceError` (or `McplError`) raised on purpose is the
  answer; any other exception fails that inference with a `PluginError` naming the
  plugin.

Defaults shipped by agentcore are ordinary plugins; mark a default implementation
`trylast=True` so any other plugin wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentcore.markers import (
    PROJECT,
    Failure,
    HookRule,
    Kind,
    Result,
    hookimpl,
    hookspec,
    rules_of,
    spec,
)

if TYPE_CHECKING:
    from agentcore.fleet.claims import Claim
    from agentcore.inference import InferenceError, StreamEvent
    from agentcore.inference.calls import Attempt, Decision, Inference, Wait
    from agentcore.inference.turns import Injection, TurnEnding
    from agentcore.mcpl.protocol import McplRequest, PushAnswer, PushEvent
    from agentcore.plugins import PluginContext, SettingsSection
    from agentcore.providers import ProviderFactory
    from agentcore.tracing import TraceEvent

# -- load and lifecycle ------------------------------------------------------


@spec(Kind.LOAD, Result.COLLECT)
def agentcore_settings() -> SettingsSection | None:
    """Declare this plugin's settings: the section it reads and the model that validates it.

    Called once per plugin, when it is loaded, before any setting is read.
    Return ``SettingsSection("retry", RetrySettings)``; a dotted section
    (``"mcpl.routing"``) nests. The kernel validates the deployment's section with
    the model and reports unknown keys with file and key path.
    """


@spec(Kind.LOAD, Result.COLLECT)
def agentcore_provider_kinds() -> Mapping[str, ProviderFactory] | None:
    """Contribute provider kinds: kind name -> factory, ``factory(name, config, inference)``.

    Called once per kernel, when it is loaded (a plain function: no loop runs yet),
    on every active plugin. A deployment then names the kind in
    ``[providers.NAME] kind``, and the factory makes that provider, with NAME, its
    `ProviderSettings` and the kernel's ``[inference]`` section, when it is first used.
    agentcore's own kinds come through this hook too, from its built-in plugin
    ``providers``. Two plugins contributing one kind is an error naming both (the
    later one fails to load), unless one replaces the other by name.
    """


@spec(Kind.LIFECYCLE)
def agentcore_start(context: PluginContext) -> None:
    """The kernel is starting: keep `context` (settings, traces, waits, inferences).

    Called once per plugin, in load order. An exception here is reported by the
    plugin's name and, unless ``[plugins] strict = false``, stops the host.
    """


@spec(Kind.LIFECYCLE, failure=Failure.LOGGED)
def agentcore_stop() -> None:
    """The kernel is stopping: release waiters and resources. Exceptions are logged."""


# -- each attempt ------------------------------------------------------------


@spec(Kind.DECISION)
def on_admission(attempt: Attempt) -> None:
    """Called before every attempt's provider call; every implementation runs, in order.

    An implementation may wait (announcing the wait with `PluginContext.waiting`
    so a wait is never silent) and return None to admit the attempt, or raise
    `InferenceError` to refuse it: the inference then fails with that error
    without calling the provider. The provider hold answers here.
    """


@spec(Kind.DECISION, Result.COLLECT)
def on_admission_claims(attempt: Attempt) -> Sequence[Claim] | None:
    """The claims `attempt` must be granted before it reaches its provider (the admission
    step): every implementation is called, in order, after `on_admission`.

    Return `Claim`s (or None); a claim of a plugin's own kind needs the kind added at
    start (`PluginContext.add_claim_kind`). The kernel asks the ``[fleet]`` store to decide all of
    them at once, in one operation: all granted, or none and the store names the claim
    that refused; the call then waits holding nothing (announced as the claim's
    `wait_reason`) or fails with the claim's `refused` error. A granted set is given
    back once, when the attempt ends, on every path. Raise `InferenceError` to refuse
    the attempt outright; any other exception fails the inference with a `PluginError`.
    """


@spec(Kind.IN_PATH, Result.CHAIN)
def on_stream_event(attempt: Attempt, event: StreamEvent) -> StreamEvent | None:
    """Called for every event of a streamed attempt, before the consumer sees it.

    Return None to observe, or an event to replace this one for the consumer and
    for later implementations. Runs on the hot path: keep it cheap.
    """


@spec(Kind.DECISION, Result.FIRST)
def on_inference_error(attempt: Attempt, error: InferenceError) -> Decision | None:
    """An attempt failed before anything visible reached the consumer: retry or give up?

    Stops at the first non-None result: `Retry(delay_s)` makes the kernel wait
    (announced as a ``backoff`` wait) and try again; `GiveUp(error)` fails the
    inference. None from every plugin means give up. Not called once a visible
    token of a streamed attempt has reached the consumer.
    """


@spec(Kind.IN_PATH)
def on_attempt_end(attempt: Attempt, error: InferenceError | None) -> None:
    """Every attempt's outcome, success (`error` None) or failure: record policy state here.

    Called after the attempt's terminal, before `on_inference_error`, and awaited
    in order: what an implementation records (the provider hold's hold) is in
    place before the next attempt's `on_admission`. The inference waits for it,
    so do only that, quickly; to watch outcomes, use `on_trace`, which never
    makes it wait. An exception is logged with the plugin's name. A cancelled
    attempt ends with an error of kind ``cancelled``.
    """


# -- the host's own turns ------------------------------------------------------


@spec(Kind.IN_PATH, Result.COLLECT)
def on_host_turn_context(inference: Inference) -> Sequence[Injection] | None:
    """Before one of the host's own turns (`inference.request.turn` is set) runs: the
    context to add to it, as `Injection`s. Every implementation is awaited, in order,
    and the injections are added in that order, grouped by position. Called once per
    turn, before its first attempt; the turn waits for it, so bound the wait (the
    `mcpl-context` plugin cuts each MCPL server at ``[mcpl.context] hook_timeout_s``).
    An exception is logged with the plugin's name and the turn goes on without it.
    """


@spec(Kind.IN_PATH)
def on_host_turn_start(inference: Inference) -> None:
    """A host turn was admitted: its first attempt passed `on_admission`. Once per turn.

    Awaited in order; keep it quick (queue what you send). Every turn that got this
    gets exactly one `on_host_turn_end`; a retried attempt is not an end.
    """


@spec(Kind.IN_PATH)
def on_host_turn_end(inference: Inference, ending: TurnEnding) -> None:
    """A started host turn ended: ``completed`` (with usage), ``failed`` (a stream that
    failed after visible text included) or ``aborted`` (cancelled, or the host shut down).

    Called before the consumer sees the terminal (or, cancelled, before the cancellation
    goes on), awaited in order; keep it quick. Exceptions are logged.
    """


# -- waits ---------------------------------------------------------------------


@spec(Kind.OBSERVER)
def on_wait_start(wait: Wait) -> None:
    """A call began to wait, for a hold or a retry backoff. An observer: never waited for."""


@spec(Kind.OBSERVER)
def on_wait_end(wait: Wait) -> None:
    """A wait ended (elapsed, released, or cut short by shutdown). An observer: never waited for.

    A plugin's `on_wait_end` follows its `on_wait_start` for the same wait, as
    every observer call of one plugin follows the ones before it.
    """


# -- traces ------------------------------------------------------------------


@spec(Kind.OBSERVER)
def on_trace(event: TraceEvent) -> None:
    """Every trace event, in the order emitted. Sinks observe; a sink never breaks inference.

    An observer: emitting never waits for it (see the module's docstring for
    how an `async def` sink is fed, and what happens when it falls behind).
    """


# -- MCPL --------------------------------------------------------------------


@spec(Kind.LOAD, Result.COLLECT, failure=Failure.LOGGED)
def agentcore_mcpl_capabilities() -> Mapping[str, Any] | None:
    """The MCPL host capabilities this plugin's policy provides, in SPEC §5.2's shape
    (``{"inferenceLifecycle": True}``, ``{"contextHooks": {"beforeInference": True}}``).

    Called when an `McplHost` is made and again when it starts (after `agentcore_start`,
    so an answer may depend on the plugin's settings), on every active plugin. At each server's
    `initialize` the host advertises what the connection layer itself supports
    (``version``, ``featureSets``) merged with every plugin's answer: a capability whose
    policy no plugin provides (its plugin disabled) is not advertised. An exception is
    logged with the plugin's name, and that plugin advertises nothing.
    """


@spec(Kind.DECISION, Result.FIRST)
def on_mcpl_request(request: McplRequest) -> Any:
    """An inbound MCPL request that passed the grant and feature-set checks.

    Stops at the first non-None result, which is sent as the JSON-RPC result.
    Raise `McplError` for an error answer; any other exception is answered
    -32603. If no plugin answers, the connection answers -32601.
    """


@spec(Kind.DECISION, Result.FIRST)
def on_push_event(event: PushEvent) -> PushAnswer | None:
    """An MCPL `push/event` (SPEC §9) that passed the grant and feature-set checks.

    A host decides what an event triggers (an inference, a queued turn, nothing).
    Stops at the first non-None result, a `PushAnswer`, sent as the result
    ``{accepted, inferenceId?, reason?}``. With no plugin answering, the host answers
    ``accepted: false`` with a reason. Called once per `eventId`: a duplicate within
    the host's window is answered as the first was without calling this again (§9.4).
    Raise `McplError` for an error answer; any other exception is answered -32603.
    What may go before a model is `event.content`: §19 bulk references already stubs.
    """


@spec(Kind.DECISION, Result.COLLECT)
def on_spend_report() -> Mapping[str, Any] | None:
    """What this plugin accounts of spend, read from the ``[fleet]`` store (so the whole
    fleet's): `agentcore spend` prints every answer. The budget plugin answers with the
    current window's spend and limit per budget (docs/cli.md); None: nothing to report.
    """


RULES: Mapping[str, HookRule] = rules_of(globals())
"""Every hook's rule, by name: the table `agentcore.hooks` follows."""

__all__ = ["PROJECT", "RULES", "hookimpl", "hookspec", "spec"]
