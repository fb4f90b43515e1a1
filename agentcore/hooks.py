"""The one layer through which the kernel calls hooks, driven by the rules the specs declare.

pluggy registers plugins and validates their implementations against the specs;
this module calls them, as `agentcore.hookspecs.RULES` says. One loop,
`Hooks._run`, calls every hook: each implementation in pluggy's order, its result
awaited when it is async (plain pluggy cannot keep "first non-None result" for
`async def` implementations: a coroutine object is not None), the hook's failure
rule applied (`_failed`) and the results combined as its rule says. Load-time hooks
go through the same loop without an event loop (`_run_now`). Two paths are
specialised for speed under the same rules: observers (`_observe`: never awaited
by an inference; a plugin with an async observer gets its events through a
bounded backlog of its own, see `_Observer`) and `stream_event_sync` (the
`on_stream_event` chain for every token while no implementation is async). No
caller touches `pm.hook` directly.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pluggy
from loguru import logger

from agentcore import hookspecs
from agentcore.hookspecs import RULES
from agentcore.inference import InferenceError, PluginError, StreamEvent
from agentcore.inference.calls import Attempt, Decision, Inference, Wait
from agentcore.inference.turns import Injection, TurnEnding
from agentcore.markers import Failure, HookRule, Kind, Result
from agentcore.mcpl.protocol import McplError, McplRequest, PushEvent
from agentcore.tracing import TraceEvent

OBSERVER_HOOKS = tuple(hook for hook, rule in RULES.items() if rule.kind is Kind.OBSERVER)
"""The hooks no inference waits for (`Kind.OBSERVER` in `agentcore.hookspecs`)."""
OBSERVER_BACKLOG = 1000
"""Events one async observer plugin may have waiting for it; beyond that they are dropped."""
OBSERVER_DRAIN_S = 1.0
"""How long `Hooks.stop()` lets async observers catch up before cancelling what is stuck."""
DROP_LOG_INTERVAL_S = 10.0
"""At most one log line per plugin this often while its events are being dropped."""
_STREAM_FAST = HookRule(Kind.IN_PATH, Result.CHAIN, Failure.LOGGED)
"""The rule `stream_event_sync` implements: it is used only while `on_stream_event` has it."""
_FIRST, _CHAIN, _COLLECT, _OBSERVER = Result.FIRST, Result.CHAIN, Result.COLLECT, Kind.OBSERVER
"""Module names for `_run`'s loop: an Enum member read through its class is slow (3.11)."""


@dataclass(frozen=True, slots=True)
class _Impl:
    plugin: str
    call: Callable[..., Any]
    """Takes the spec's arguments positionally, in the spec's order."""
    is_async: bool


def _bind(hook: str, impl: pluggy.HookImpl, spec_args: tuple[str, ...]) -> _Impl:
    if impl.hookwrapper or impl.wrapper:
        raise PluginError(impl.plugin_name, "hook wrappers are not supported by agentcore")
    fn = impl.function
    is_async = inspect.iscoroutinefunction(fn)
    if is_async and RULES[hook].kind is Kind.LOAD:
        # Called where nothing may be awaited: it fails, by its hook's failure rule, uncalled.
        refusal = PluginError(
            impl.plugin_name, f"{hook} must be a plain function: it is called before any loop runs"
        )

        def refuse(*args: Any) -> Any:
            raise refusal

        return _Impl(impl.plugin_name, refuse, False)
    names = tuple(impl.argnames)
    if names == spec_args:
        call = fn
    else:  # an implementation may take any subset of the spec's arguments
        positions = tuple(spec_args.index(n) for n in names)

        def call(*args: Any, _fn: Callable[..., Any] = fn) -> Any:
            return _fn(*[args[i] for i in positions])

    return _Impl(impl.plugin_name, call, is_async)


def _failed(rule: HookRule, hook: str, plugin: str, exc: Exception) -> None:
    """Apply the hook's failure rule to what `plugin` raised: log it and return, or raise."""
    if rule.failure is Failure.LOGGED:
        logger.opt(exception=exc).error("plugin {!r} failed in {}; carrying on", plugin, hook)
        return
    if rule.failure is Failure.DECIDES and isinstance(exc, InferenceError | McplError):
        raise exc  # raised on purpose: the answer
    if isinstance(exc, PluginError) and exc.plugin == plugin:
        raise exc  # `_bind`'s refusal: it names the plugin and what it did wrong
    raise PluginError(plugin, f"{hook} raised {type(exc).__name__}: {exc}") from exc


class _Observer:
    """One plugin's async observer calls, made in order by one task, never by an inference.

    An inference only appends to the backlog. A task starts when the first call
    arrives and ends once the backlog is empty, so an idle plugin has no task.
    What does not fit in the backlog (the plugin is stuck or too slow) is dropped
    and counted, with a log line naming the plugin at most every DROP_LOG_INTERVAL_S.
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self.backlog: deque[tuple[str, _Impl, tuple[Any, ...]]] = deque()
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.stuck = False
        """Cancelled at stop while still busy: what comes later would only queue up again."""
        self._log_after = 0.0

    def put(self, hook: str, impl: _Impl, args: tuple[Any, ...]) -> None:
        if self.stuck or len(self.backlog) >= OBSERVER_BACKLOG:
            self.drop()
            return
        self.backlog.append((hook, impl, args))
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._deliver(), name=f"agentcore observer {self.plugin}"
            )

    async def _deliver(self) -> None:
        try:
            while self.backlog:
                hook, impl, args = self.backlog.popleft()
                try:
                    result = impl.call(*args)
                    if impl.is_async:
                        await result
                except Exception as exc:
                    _failed(RULES[hook], hook, self.plugin, exc)
        finally:
            self.task = None

    def drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now >= self._log_after:
            self._log_after = now + DROP_LOG_INTERVAL_S
            logger.warning(
                "plugin {!r} is not keeping up with its observer hooks: {} events dropped "
                "so far (it may have {} waiting; this is logged at most every {:.0f} s)",
                self.plugin,
                self.dropped,
                OBSERVER_BACKLOG,
                DROP_LOG_INTERVAL_S,
            )


def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


class Hooks:
    """Typed calls of every hook, over the implementations registered when it was built.

    Each typed method is one line over `_run` (or, for observers, `_observe`): the
    hook's rule in `agentcore.hookspecs` decides how it is called.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm
        self._impls: dict[str, tuple[_Impl, ...]] = {}
        self._observers: dict[str, _Observer] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the registered implementations (after registering or unregistering)."""
        self._impls = {}
        for hook in RULES:
            caller: pluggy.HookCaller = getattr(self._pm.hook, hook)
            assert caller.spec is not None  # plugin_manager() added every spec
            spec_args = tuple(caller.spec.argnames)
            # pluggy's own call order: last registered first, tryfirst/trylast honoured.
            self._impls[hook] = tuple(
                _bind(hook, i, spec_args) for i in reversed(caller.get_hookimpls())
            )
        # A plugin with any async observer gets all its observer calls through its own
        # backlog, so its sync and async ones stay in order; the rest are called inline.
        queued = {i.plugin for h in OBSERVER_HOOKS for i in self._impls[h] if i.is_async}
        self._inline: dict[str, tuple[_Impl, ...]] = {}
        self._queued: dict[str, tuple[tuple[_Observer, _Impl], ...]] = {}
        for hook in OBSERVER_HOOKS:
            impls = self._impls[hook]
            self._inline[hook] = tuple(i for i in impls if i.plugin not in queued)
            self._queued[hook] = tuple(
                (self._observer(i.plugin), i) for i in impls if i.plugin in queued
            )
        stream = self._impls["on_stream_event"]
        self.has_stream_observers = bool(stream)
        self.stream_sync = RULES["on_stream_event"] == _STREAM_FAST and not any(
            i.is_async for i in stream
        )
        """No `on_stream_event` implementation is async: `stream_event_sync` may be used."""
        self._stream_calls = tuple((i.plugin, i.call) for i in stream)

    def _observer(self, plugin: str) -> _Observer:
        observer = self._observers.get(plugin)
        if observer is None:
            observer = self._observers[plugin] = _Observer(plugin)
        return observer

    def implementers(self, hook: str) -> list[str]:
        return [i.plugin for i in self._impls.get(hook, ())]

    def dropped(self, plugin: str) -> int:
        """How many observer events `plugin` could not take (too slow, or stuck at stop)."""
        observer = self._observers.get(plugin)
        return 0 if observer is None else observer.dropped

    # -- the one call loop, and the observers' path ----------------------------------

    async def _run(self, hook: str, args: tuple[Any, ...] = (), only: str | None = None) -> Any:
        """Call `hook`'s implementations (`only` one plugin's, if given) as its rule says.

        Each in order, awaited when async; an exception goes through the failure rule;
        the results combine by the rule's `Result`: None, the first non-None, the last
        argument as the chain left it, or every ``(plugin, result)`` that is not None.
        An observer is never awaited here: it goes the observers' way (`_observe`).
        """
        rule, impls = RULES[hook], self._impls[hook]
        if rule.kind is _OBSERVER:
            self._observe(hook, *args)
            return None
        if only is not None:
            impls = tuple(i for i in impls if i.plugin == only)
        combine = rule.result
        collected: list[tuple[str, Any]] | None = None  # made for a collecting hook only
        for impl in impls:
            try:
                result = impl.call(*args)
                if impl.is_async:
                    result = await result
            except Exception as exc:
                _failed(rule, hook, impl.plugin, exc)
                continue
            if result is None:
                continue
            if combine is _FIRST:
                return result
            if combine is _CHAIN:
                args = (*args[:-1], result)
            elif combine is _COLLECT:
                collected = collected or []
                collected.append((impl.plugin, result))
        if combine is _CHAIN:
            return args[-1]
        if combine is _COLLECT:
            return collected or []
        return None

    def _run_now(self, hook: str, args: tuple[Any, ...] = (), only: str | None = None) -> Any:
        """`_run` for a load-time hook, where no event loop runs: its implementations are
        plain functions (`_bind` refuses an async one), so the loop ends at its first step."""
        step = self._run(hook, args, only)
        try:
            step.send(None)
        except StopIteration as done:
            return done.value
        step.close()
        raise RuntimeError(f"{hook} awaited something: it is called where nothing may be")

    def _observe(self, hook: str, *args: Any) -> None:
        """An observer hook: sync plugins now, async ones through their backlogs; never waits."""
        for impl in self._inline[hook]:
            try:
                impl.call(*args)
            except Exception as exc:
                _failed(RULES[hook], hook, impl.plugin, exc)
        for observer, impl in self._queued[hook]:
            observer.put(hook, impl, args)

    # -- load and lifecycle ------------------------------------------------------------

    def settings_section(self, plugin: str) -> Any:
        """`plugin`'s `agentcore_settings` answer, or None; a failure raises `PluginError`."""
        return next((r for _, r in self._run_now("agentcore_settings", (), plugin)), None)

    def provider_kinds(self, plugin: str) -> Any:
        """`plugin`'s `agentcore_provider_kinds` answer, or None; a failure raises `PluginError`."""
        return next((r for _, r in self._run_now("agentcore_provider_kinds", (), plugin)), None)

    async def start_plugin(self, plugin: str, context: Any) -> None:
        """Start one plugin; a failure raises `PluginError`, so the kernel can report it."""
        await self._run("agentcore_start", (context,), plugin)

    async def stop(self) -> None:
        """Let async observers catch up, cancel the stuck ones, then stop every plugin.

        Observers get at most OBSERVER_DRAIN_S, so that a normal run's sinks see every
        event and a stuck one cannot hold the shutdown up; no observer task is left
        running. A later event (of an inference the shutdown failed) still reaches
        plugins that were not stuck, through a task that ends once it is delivered.
        """
        await self._drain(OBSERVER_DRAIN_S)
        await self._run("agentcore_stop")

    async def _drain(self, within_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        # Calls made while draining (a waiter woken by the shutdown) are drained too.
        while busy := [o.task for o in self._observers.values() if o.task is not None]:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(busy, timeout=left)
        cancelled: list[asyncio.Task[None]] = []
        for observer in self._observers.values():
            if observer.task is not None:
                observer.stuck = True
                observer.dropped += len(observer.backlog)  # said once, below
                observer.backlog.clear()
                observer.task.cancel()
                cancelled.append(observer.task)
        if cancelled:
            _, ignored = await asyncio.wait(cancelled, timeout=within_s)
            for task in ignored:
                logger.error("{} ignored its cancellation at shutdown", task.get_name())
        for observer in self._observers.values():
            if observer.dropped:
                logger.warning(
                    "plugin {!r} could not take {} observer events{}",
                    observer.plugin,
                    observer.dropped,
                    " (it was still busy at shutdown and was cancelled)" if observer.stuck else "",
                )

    # -- inference ------------------------------------------------------------

    async def admission(self, attempt: Attempt) -> None:
        await self._run("on_admission", (attempt,))

    async def spend_report(self) -> list[tuple[str, Any]]:
        """(plugin, its answer) for every implementation of `on_spend_report`, in order."""
        return cast("list[tuple[str, Any]]", await self._run("on_spend_report", ()))

    async def admission_claims(self, attempt: Attempt) -> list[tuple[str, Any]]:
        """(plugin, its answer) for every implementation of `on_admission_claims`, in order."""
        return cast("list[tuple[str, Any]]", await self._run("on_admission_claims", (attempt,)))

    async def stream_event(self, attempt: Attempt, event: StreamEvent) -> StreamEvent:
        """Every implementation in order; each may replace the event for the ones after it."""
        if self.stream_sync:
            return self.stream_event_sync(attempt, event)
        return cast("StreamEvent", await self._run("on_stream_event", (attempt, event)))

    def stream_event_sync(self, attempt: Attempt, event: StreamEvent) -> StreamEvent:
        """`stream_event` without a coroutine per event; only while `stream_sync` holds.

        The hot path: the kernel calls this for every token when no implementation
        is async, so it is one tight loop over precomputed (plugin, call) pairs,
        `_run`'s chain written out.
        """
        for plugin, call in self._stream_calls:
            try:
                result = call(attempt, event)
            except Exception as exc:
                _failed(RULES["on_stream_event"], "on_stream_event", plugin, exc)
                continue
            if result is not None:
                event = result
        return event

    async def inference_error(self, attempt: Attempt, error: InferenceError) -> Decision | None:
        return cast("Decision | None", await self._run("on_inference_error", (attempt, error)))

    async def attempt_end(self, attempt: Attempt, error: InferenceError | None) -> None:
        """Awaited: a policy records state here that the next `on_admission` must see."""
        await self._run("on_attempt_end", (attempt, error))

    async def host_turn_context(self, inference: Inference) -> list[Injection]:
        """Every implementation's injections, in order; one that raises adds nothing."""
        collected = await self._run("on_host_turn_context", (inference,))
        return [injection for _, injections in collected for injection in injections]

    async def host_turn_start(self, inference: Inference) -> None:
        await self._run("on_host_turn_start", (inference,))

    async def host_turn_end(self, inference: Inference, ending: TurnEnding) -> None:
        await self._run("on_host_turn_end", (inference, ending))

    def wait_start(self, wait: Wait) -> None:
        self._observe("on_wait_start", wait)

    def wait_end(self, wait: Wait) -> None:
        self._observe("on_wait_end", wait)

    def trace(self, event: TraceEvent) -> None:
        self._observe("on_trace", event)

    # -- MCPL ------------------------------------------------------------------------

    def mcpl_capabilities(self) -> list[Mapping[str, Any]]:
        """Every plugin's MCPL host capabilities, in order; one that raises gives none."""
        contributed: list[Mapping[str, Any]] = []
        for plugin, result in self._run_now("agentcore_mcpl_capabilities"):
            if isinstance(result, Mapping):
                contributed.append(result)
            else:
                logger.error(
                    "plugin {!r}: agentcore_mcpl_capabilities returned {}, not a mapping",
                    plugin,
                    type(result).__name__,
                )
        return contributed

    def mcpl_request(self, request: McplRequest) -> Coroutine[Any, Any, Any]:
        # `_run`'s coroutine itself, not one awaiting it: a frame less held by every
        # request in flight (a stream holds it for its whole life).
        return self._run("on_mcpl_request", (request,))

    async def push_event(self, event: PushEvent) -> Any:
        """The first plugin's answer (a `PushAnswer`, unchecked here), or None."""
        return await self._run("on_push_event", (event,))
