"""The one layer through which the kernel calls hooks: sync or async, in order, contained.

pluggy registers plugins and validates their implementations against the
specs; this module calls them. Plain pluggy cannot keep "first non-None
result" for `async def` implementations (a coroutine object is not None), so
each implementation is called here, its result awaited when it is a coroutine,
and the rules of `agentcore.hookspecs` applied: observers are contained and
logged with the plugin's name and never awaited by an inference (a plugin with
an async observer gets its events through a bounded backlog of its own, see
`_Observer`), decision hooks fail the inference with a `PluginError` that names
the plugin. No caller touches `pm.hook` directly.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pluggy
from loguru import logger

from agentcore import hookspecs
from agentcore.inference import InferenceError, PluginError, StreamEvent
from agentcore.inference.calls import Attempt, Decision, Inference, Wait
from agentcore.inference.turns import Injection, TurnEnding
from agentcore.mcpl.protocol import McplError, McplRequest, PushEvent
from agentcore.traces import TraceEvent

OBSERVER_HOOKS = ("on_trace", "on_wait_start", "on_wait_end")
"""The hooks no inference waits for (see `agentcore.hookspecs`)."""
OBSERVER_BACKLOG = 1000
"""Events one async observer plugin may have waiting for it; beyond that they are dropped."""
OBSERVER_DRAIN_S = 1.0
"""How long `Hooks.stop()` lets async observers catch up before cancelling what is stuck."""
DROP_LOG_INTERVAL_S = 10.0
"""At most one log line per plugin this often while its events are being dropped."""


@dataclass(frozen=True, slots=True)
class _Impl:
    plugin: str
    call: Callable[..., Any]
    """Takes the spec's arguments positionally, in the spec's order."""
    is_async: bool


def _bind(impl: pluggy.HookImpl, spec_args: tuple[str, ...]) -> _Impl:
    if impl.hookwrapper or impl.wrapper:
        raise PluginError(impl.plugin_name, "hook wrappers are not supported by agentcore")
    fn = impl.function
    names = tuple(impl.argnames)
    if names == spec_args:
        call = fn
    else:  # an implementation may take any subset of the spec's arguments
        positions = tuple(spec_args.index(n) for n in names)

        def call(*args: Any, _fn: Callable[..., Any] = fn) -> Any:
            return _fn(*[args[i] for i in positions])

    return _Impl(impl.plugin_name, call, inspect.iscoroutinefunction(fn))


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
                except Exception:
                    logger.exception("plugin {!r} failed in {}; carrying on", self.plugin, hook)
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
    """Typed calls of every hook, over the implementations registered when it was built."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm
        self._impls: dict[str, tuple[_Impl, ...]] = {}
        self._observers: dict[str, _Observer] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the registered implementations (after registering or unregistering)."""
        self._impls = {}
        for name in dir(hookspecs):
            caller = getattr(self._pm.hook, name, None)
            if not isinstance(caller, pluggy.HookCaller) or caller.spec is None:
                continue
            spec_args = tuple(caller.spec.argnames)
            # pluggy's own call order: last registered first, tryfirst/trylast honoured.
            self._impls[name] = tuple(_bind(i, spec_args) for i in reversed(caller.get_hookimpls()))
        # A plugin with any async observer gets all its observer calls through its own
        # backlog, so its sync and async ones stay in order; the rest are called inline.
        queued = {i.plugin for h in OBSERVER_HOOKS for i in self._impls.get(h, ()) if i.is_async}
        self._inline: dict[str, tuple[_Impl, ...]] = {}
        self._queued: dict[str, tuple[tuple[_Observer, _Impl], ...]] = {}
        for hook in OBSERVER_HOOKS:
            impls = self._impls.get(hook, ())
            self._inline[hook] = tuple(i for i in impls if i.plugin not in queued)
            self._queued[hook] = tuple(
                (self._observer(i.plugin), i) for i in impls if i.plugin in queued
            )
        stream = self._impls.get("on_stream_event", ())
        self.has_stream_observers = bool(stream)
        self.stream_sync = not any(i.is_async for i in stream)
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

    # -- the four ways a hook is called ------------------------------------------

    def _observe(self, hook: str, *args: Any) -> None:
        """An observer hook: sync plugins now, async ones through their backlogs; never waits."""
        for impl in self._inline[hook]:
            try:
                impl.call(*args)
            except Exception:
                logger.exception("plugin {!r} failed in {}; carrying on", impl.plugin, hook)
        for observer, impl in self._queued[hook]:
            observer.put(hook, impl, args)

    async def _await_each(self, hook: str, *args: Any) -> None:
        """Every implementation in order, awaited; an exception is logged, not raised."""
        for impl in self._impls.get(hook, ()):
            try:
                result = impl.call(*args)
                if impl.is_async:
                    await result
            except Exception:
                logger.exception("plugin {!r} failed in {}; carrying on", impl.plugin, hook)

    async def _decide_all(self, hook: str, *args: Any) -> None:
        for impl in self._impls.get(hook, ()):
            try:
                result = impl.call(*args)
                if impl.is_async:
                    await result
            except (InferenceError, McplError):
                raise
            except Exception as exc:
                raise _plugin_error(impl, hook, exc) from exc

    async def _first_result(self, hook: str, *args: Any) -> Any:
        for impl in self._impls.get(hook, ()):
            try:
                result = impl.call(*args)
                if impl.is_async:
                    result = await result
            except (InferenceError, McplError):
                raise
            except Exception as exc:
                raise _plugin_error(impl, hook, exc) from exc
            if result is not None:
                return result
        return None

    # -- lifecycle ---------------------------------------------------------------

    async def start_plugin(self, plugin: str, context: Any) -> None:
        """Start one plugin; its exceptions propagate, so the kernel can report it by name."""
        for impl in self._impls.get("agentcore_start", ()):
            if impl.plugin == plugin:
                result = impl.call(context)
                if impl.is_async:
                    await result

    async def stop(self) -> None:
        """Let async observers catch up, cancel the stuck ones, then stop every plugin.

        Observers get at most OBSERVER_DRAIN_S, so that a normal run's sinks see every
        event and a stuck one cannot hold the shutdown up; no observer task is left
        running. A later event (of an inference the shutdown failed) still reaches
        plugins that were not stuck, through a task that ends once it is delivered.
        """
        await self._drain(OBSERVER_DRAIN_S)
        await self._await_each("agentcore_stop")

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
        await self._decide_all("on_admission", attempt)

    async def stream_event(self, attempt: Attempt, event: StreamEvent) -> StreamEvent:
        """Every implementation in order; each may replace the event for the ones after it."""
        if self.stream_sync:
            return self.stream_event_sync(attempt, event)
        for impl in self._impls["on_stream_event"]:
            try:
                result = impl.call(attempt, event)
                if impl.is_async:
                    result = await result
            except Exception:
                logger.exception("plugin {!r} failed in on_stream_event; carrying on", impl.plugin)
                continue
            if result is not None:
                event = result
        return event

    def stream_event_sync(self, attempt: Attempt, event: StreamEvent) -> StreamEvent:
        """`stream_event` without a coroutine per event; only while `stream_sync` holds.

        The hot path: the kernel calls this for every token when no implementation
        is async, so it is one tight loop over precomputed (plugin, call) pairs.
        """
        for plugin, call in self._stream_calls:
            try:
                result = call(attempt, event)
            except Exception:
                logger.exception("plugin {!r} failed in on_stream_event; carrying on", plugin)
                continue
            if result is not None:
                event = result
        return event

    async def inference_error(self, attempt: Attempt, error: InferenceError) -> Decision | None:
        return cast(
            "Decision | None", await self._first_result("on_inference_error", attempt, error)
        )

    async def attempt_end(self, attempt: Attempt, error: InferenceError | None) -> None:
        """Awaited: a policy records state here that the next `on_admission` must see."""
        await self._await_each("on_attempt_end", attempt, error)

    async def host_turn_context(self, inference: Inference) -> list[Injection]:
        """Every implementation's injections, in order; one that raises adds nothing."""
        injections: list[Injection] = []
        for impl in self._impls.get("on_host_turn_context", ()):
            try:
                result = impl.call(inference)
                if impl.is_async:
                    result = await result
            except Exception:
                logger.exception(
                    "plugin {!r} failed in on_host_turn_context; the turn goes on without it",
                    impl.plugin,
                )
                continue
            if result:
                injections.extend(result)
        return injections

    async def host_turn_start(self, inference: Inference) -> None:
        await self._await_each("on_host_turn_start", inference)

    async def host_turn_end(self, inference: Inference, ending: TurnEnding) -> None:
        await self._await_each("on_host_turn_end", inference, ending)

    def wait_start(self, wait: Wait) -> None:
        self._observe("on_wait_start", wait)

    def wait_end(self, wait: Wait) -> None:
        self._observe("on_wait_end", wait)

    def trace(self, event: TraceEvent) -> None:
        self._observe("on_trace", event)

    def mcpl_capabilities(self) -> list[Mapping[str, Any]]:
        """Every plugin's MCPL host capabilities, in order; one that raises gives none."""
        contributed: list[Mapping[str, Any]] = []
        for impl in self._impls.get("agentcore_mcpl_capabilities", ()):
            try:
                result = impl.call()
            except Exception:
                logger.exception(
                    "plugin {!r} failed in agentcore_mcpl_capabilities; it advertises nothing",
                    impl.plugin,
                )
                continue
            if isinstance(result, Mapping):
                contributed.append(result)
            elif result is not None:
                logger.error(
                    "plugin {!r}: agentcore_mcpl_capabilities returned {}, not a mapping",
                    impl.plugin,
                    type(result).__name__,
                )
        return contributed

    async def mcpl_request(self, request: McplRequest) -> Any:
        return await self._first_result("on_mcpl_request", request)

    async def push_event(self, event: PushEvent) -> Any:
        """The first plugin's answer (a `PushAnswer`, unchecked here), or None."""
        return await self._first_result("on_push_event", event)


def _plugin_error(impl: _Impl, hook: str, exc: Exception) -> PluginError:
    return PluginError(impl.plugin, f"{hook} raised {type(exc).__name__}: {exc}")
