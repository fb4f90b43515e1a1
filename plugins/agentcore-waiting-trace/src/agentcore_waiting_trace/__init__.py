"""agentcore's waiting traces (entry point ``waiting-trace``): a wait is never silent.

Every wait the kernel or a plugin announces (a ``hold`` at admission, a rate
``limit``'s slot, a retry ``backoff``) becomes ``inference:waiting`` traces: one
when it starts, one every ``[waiting_trace] interval_s`` while it lasts, and one
when it ends (``ended`` true). It observes waits and owns none: its wait hooks
are plain functions that emit at once (a trace never waits for its observers),
so a wait's traces keep their place among the inference's own; one ticker task
per wait, ended at `on_wait_end` (no tick follows the end) and awaited at
`agentcore_stop`.

Fields: ``reason`` (``hold``, ``limit`` or ``backoff``), ``provider``, ``model``
(the model as sent to the provider, without ``NAME:``), ``attempt``, ``inferenceId``,
``waitId``, ``remainingMs`` (null when nobody knows), ``waitedMs``, ``ended``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from loguru import logger
from pydantic import Field

from agentcore.api import (
    WAITING_TRACE,
    PluginContext,
    Section,
    SettingsSection,
    Wait,
    WaitingPayload,
    hookimpl,
)

TRACE = WAITING_TRACE


class WaitingTraceSettings(Section):
    """``[waiting_trace]``."""

    interval_s: float = Field(default=5.0, gt=0)
    """How often a trace is emitted while a call waits (besides its start and end)."""


def waiting_fields(wait: Wait, *, ended: bool = False, now: float | None = None) -> WaitingPayload:
    """The camelCase fields of one ``inference:waiting`` trace."""
    now = time.monotonic() if now is None else now
    remaining = wait.remaining_s(now)
    return WaitingPayload(
        reason=wait.reason,
        provider=wait.provider,
        model=wait.model,
        attempt=wait.attempt.number,
        inferenceId=wait.attempt.inference.id,
        waitId=wait.id,
        remainingMs=None if remaining is None else round(remaining * 1000),
        waitedMs=round(wait.waited_s(now) * 1000),
        ended=ended,
    )


class WaitingTrace:
    """The plugin object; the kernel makes one per kernel."""

    def __init__(self) -> None:
        self.settings = WaitingTraceSettings.model_construct()
        self._context: PluginContext[WaitingTraceSettings] | None = None
        self._tickers: dict[str, _Ticker] = {}

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("waiting_trace", WaitingTraceSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[WaitingTraceSettings]) -> None:
        self._context = context
        self.settings = context.settings

    @hookimpl
    async def agentcore_stop(self) -> None:
        for ticker in list(self._tickers.values()):
            await ticker.stop()

    @hookimpl
    def on_wait_start(self, wait: Wait) -> None:
        self._emit(wait)
        ticker = self._tickers[wait.id] = _Ticker(self._tick, wait)
        ticker.task.add_done_callback(lambda _: self._tickers.pop(wait.id, None))

    @hookimpl
    def on_wait_end(self, wait: Wait) -> None:
        ticker = self._tickers.get(wait.id)
        if ticker is not None:
            ticker.end()
        self._emit(wait, ended=True)

    async def _tick(self, wait: Wait, ended: asyncio.Event) -> None:
        while True:
            try:
                await asyncio.wait_for(ended.wait(), self.settings.interval_s)
            except TimeoutError:
                if ended.is_set():  # ended while the timeout was being delivered
                    return
                self._emit(wait)
            else:
                return

    def _emit(self, wait: Wait, *, ended: bool = False) -> None:
        if self._context is not None:
            self._context.emit_now(TRACE, **waiting_fields(wait, ended=ended))


class _Ticker:
    """One wait's periodic traces, in a task of its own."""

    def __init__(
        self, tick: Callable[[Wait, asyncio.Event], Coroutine[Any, Any, None]], wait: Wait
    ) -> None:
        self._ended = asyncio.Event()
        self.task: asyncio.Task[None] = asyncio.create_task(
            tick(wait, self._ended), name=f"{TRACE} {wait.id}"
        )

    def end(self) -> None:
        """No tick follows this; the task returns at its next step."""
        self._ended.set()

    async def stop(self) -> None:
        self.end()
        try:
            await self.task
        except Exception:  # emit() contains sink failures; this is only belt and braces
            logger.exception("the {} ticker failed", TRACE)


__all__ = ["TRACE", "WaitingTrace", "WaitingTraceSettings", "waiting_fields"]
