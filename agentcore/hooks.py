"""The one layer through which the kernel calls hooks: sync or async, in order, contained.

pluggy registers plugins and validates their implementations against the
specs; this module calls them. Plain pluggy cannot keep "first non-None
result" for `async def` implementations (a coroutine object is not None), so
each implementation is called here, its result awaited when it is a coroutine,
and the rules of `agentcore.hookspecs` applied: observers are contained and
logged with the plugin's name, decision hooks fail the inference with a
`PluginError` that names the plugin. No caller touches `pm.hook` directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pluggy
from loguru import logger

from agentcore import hookspecs
from agentcore.inference import InferenceError, PluginError, StreamEvent
from agentcore.inference.calls import Attempt, Decision, Wait
from agentcore.mcpl.protocol import McplError, McplRequest
from agentcore.traces import TraceEvent


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


def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


class Hooks:
    """Typed calls of every hook, over the implementations registered when it was built."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm
        self._impls: dict[str, tuple[_Impl, ...]] = {}
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
        stream = self._impls.get("on_stream_event", ())
        self.has_stream_observers = bool(stream)
        self.stream_sync = not any(i.is_async for i in stream)
        """No `on_stream_event` implementation is async: `stream_event_sync` may be used."""
        self._stream_calls = tuple((i.plugin, i.call) for i in stream)

    def implementers(self, hook: str) -> list[str]:
        return [i.plugin for i in self._impls.get(hook, ())]

    # -- the three ways a hook is called ---------------------------------------

    async def _observe(self, hook: str, *args: Any) -> None:
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
        await self._observe("agentcore_stop")

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
        await self._observe("on_attempt_end", attempt, error)

    async def wait_start(self, wait: Wait) -> None:
        await self._observe("on_wait_start", wait)

    async def wait_end(self, wait: Wait) -> None:
        await self._observe("on_wait_end", wait)

    async def trace(self, event: TraceEvent) -> None:
        await self._observe("on_trace", event)

    async def mcpl_request(self, request: McplRequest) -> Any:
        return await self._first_result("on_mcpl_request", request)


def _plugin_error(impl: _Impl, hook: str, exc: Exception) -> PluginError:
    return PluginError(impl.plugin, f"{hook} raised {type(exc).__name__}: {exc}")
