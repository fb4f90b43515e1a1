"""The cost of one `on_stream_event` dispatch, the kernel's hottest hook.

Four plugins implement `on_stream_event` (observers returning None, as most
do). One dispatch is `await kernel.hooks.stream_event(attempt, event)`: the
kernel's own caller layer, awaited inside a running loop, as the pipeline calls
it for every token. It is measured against, in the same run:

- a plain Python function call (the floor), and
- pluggy's own `pm.hook.on_stream_event(attempt=..., event=...)` over the same
  four plugins (what calling pluggy directly would cost; it cannot await async
  implementations, which is why the kernel has its own layer).

Also shown: `hooks.stream_event_sync`, the path the pipeline takes when no
implementation is async (no coroutine per event), the same dispatch over
four `async def` implementations, and `hooks.trace`, the inline observer path
(four plain-function `on_trace` sinks), which every trace event takes.

Each figure is the best of several rounds of many iterations, amortized per call
(time.perf_counter). Target: under 2 µs per dispatch. Run: ``python bench/hooks.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from agentcore import hookimpl
from agentcore.hooks import Hooks, plugin_manager
from agentcore.inference import Message, Request, StreamEvent, Token
from agentcore.inference.calls import Attempt, Inference
from agentcore.tracing import TraceEvent

TARGET_NS = 2000.0


def make_plugin(index: int, *, is_async: bool) -> object:
    """An observer that looks at the event and returns None, like a trace or counter plugin."""

    class Observer:
        seen = 0

        if is_async:

            @hookimpl
            async def on_stream_event(self, attempt: Attempt, event: StreamEvent) -> None:
                self.seen += 1

        else:

            @hookimpl
            def on_stream_event(  # type: ignore[misc]  # the sync twin of the one above
                self, attempt: Attempt, event: StreamEvent
            ) -> None:
                self.seen += 1

            @hookimpl
            def on_trace(self, event: TraceEvent) -> None:
                self.seen += 1

    Observer.__name__ = f"Observer{index}"
    return Observer()


def plain(attempt: Attempt, event: StreamEvent) -> None:
    """The floor: one ordinary function call with the same arguments."""
    return None


async def best_of(rounds: int, n: int, **variants: Callable[[int], Any]) -> dict[str, float]:
    """The best per-call time in ns of each variant over `rounds` rounds of `n` calls.

    The variants take turns within each round, so a burst of load on the machine
    hits all of them alike rather than one."""
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, round_ in variants.items():
            elapsed = await round_(n)
            best[name] = min(best[name], elapsed / n * 1e9)
    return best


async def main(n: int, rounds: int) -> int:
    attempt = Attempt(
        Inference("inf_bench", Request("echo:m", [Message.user("hi")]), "echo", "m", True), 1
    )
    event = Token("word ", "text", 0, True)

    def registered(*, is_async: bool) -> tuple[Hooks, Any]:
        pm = plugin_manager()
        for i in range(4):
            pm.register(make_plugin(i, is_async=is_async), name=f"observer-{i}")
        return Hooks(pm), pm

    hooks, pm = registered(is_async=False)
    async_hooks, _ = registered(is_async=True)
    dispatch = hooks.stream_event
    async_dispatch = async_hooks.stream_event
    pluggy_call = pm.hook.on_stream_event

    async def kernel_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            await dispatch(attempt, event)
        return time.perf_counter() - start

    sync_dispatch = hooks.stream_event_sync

    async def kernel_sync_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            sync_dispatch(attempt, event)
        return time.perf_counter() - start

    async def kernel_async_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            await async_dispatch(attempt, event)
        return time.perf_counter() - start

    trace = hooks.trace
    trace_event = TraceEvent("inference:start", {"inferenceId": "inf_bench"})

    async def observe_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            trace(trace_event)
        return time.perf_counter() - start

    async def plain_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            plain(attempt, event)
        return time.perf_counter() - start

    observers = [getattr(p, "on_stream_event") for p in pm.get_plugins()]  # noqa: B009
    first, second, third, fourth = observers

    async def by_hand_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            first(attempt, event)
            second(attempt, event)
            third(attempt, event)
            fourth(attempt, event)
        return time.perf_counter() - start

    async def pluggy_round(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            pluggy_call(attempt=attempt, event=event)
        return time.perf_counter() - start

    # the dispatch must really reach all four plugins, or the numbers mean nothing
    assert await dispatch(attempt, event) is event
    assert await async_dispatch(attempt, event) is event
    assert hooks.stream_sync and not async_hooks.stream_sync
    assert hooks.implementers("on_stream_event") == [f"observer-{i}" for i in (3, 2, 1, 0)]
    seen = sum(p.seen for p in pm.get_plugins())
    trace(trace_event)
    assert sum(p.seen for p in pm.get_plugins()) == seen + 4

    best = await best_of(
        rounds,
        n,
        plain=plain_round,
        by_hand=by_hand_round,
        kernel=kernel_round,
        kernel_sync=kernel_sync_round,
        kernel_async=kernel_async_round,
        pluggy=pluggy_round,
        observe=observe_round,
    )
    floor = best["plain"]
    rows = [
        ("plain function call", "plain"),
        ("the 4 observers called by hand (no dispatch)", "by_hand"),
        ("kernel.hooks.stream_event (awaited, sync impls)", "kernel"),
        ("kernel.hooks.stream_event_sync (pipeline path)", "kernel_sync"),
        ("kernel.hooks.stream_event (awaited, async impls)", "kernel_async"),
        ("pluggy pm.hook.on_stream_event (sync impls)", "pluggy"),
        ("kernel.hooks.trace (inline observers, 4 on_trace)", "observe"),
    ]
    print(f"on_stream_event dispatch, 4 plugins registered; best of {rounds} x {n:,} calls")
    print(f"python {platform.python_version()}, {platform.machine()} {platform.system()}")
    for label, key in rows:
        print(f"  {label:<50} {best[key]:8.1f} ns  {best[key] / floor:6.1f}x plain")
    ours = best["kernel"]
    print(f"  kernel.hooks.stream_event / pluggy: {ours / best['pluggy']:.2f}x")
    verdict = "met" if ours < TARGET_NS else "MISSED"
    print(f"target: under {TARGET_NS / 1000:g} µs per awaited dispatch: {verdict}")
    return 0 if ours < TARGET_NS else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.n, args.rounds)))
