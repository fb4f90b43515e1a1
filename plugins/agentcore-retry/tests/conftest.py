"""A scripted stand-in provider and a kernel factory: the retry plugin alone, other policies off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_retry import RetryPolicy

from agentcore import hookimpl, providers
from agentcore.inference import (
    Complete,
    Failed,
    InferenceError,
    Request,
    Response,
    StopInfo,
    StreamEvent,
    TextBlock,
    Token,
    Usage,
)
from agentcore.kernel import Kernel
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.traces import TraceEvent

OK = "ok"
STALL = "stall"
"""Send nothing, forever (a stream the progress timeout cuts)."""
NO_TERMINAL = "no-terminal"
"""A stream that ends with no terminal event."""


class Partial:
    """A streamed attempt that shows visible text, then fails with `error`."""

    def __init__(self, error: InferenceError) -> None:
        self.error = error


class ScriptedProvider:
    """Plays one scripted outcome per call (then succeeds); logs every call's model."""

    kind = "echo"
    OK = OK
    STALL = STALL
    NO_TERMINAL = NO_TERMINAL
    Partial = Partial

    def __init__(self, name: str) -> None:
        self.name = name
        self.script: list[object] = []
        self.calls: list[str] = []

    def _next(self, model: str) -> object:
        self.calls.append(model)
        return self.script.pop(0) if self.script else OK

    @staticmethod
    def _response(model: str) -> Response:
        return Response(
            [TextBlock("hello")], StopInfo("end_turn", "end_turn"), Usage(1, 1), model, model
        )

    async def complete(self, request: Request, model: str) -> Response:
        step = self._next(model)
        await asyncio.sleep(0)
        if isinstance(step, InferenceError):
            raise step
        if step == STALL:
            await asyncio.Event().wait()
        return self._response(model)

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        step = self._next(model)
        await asyncio.sleep(0)
        if isinstance(step, InferenceError):
            yield Failed(step)
            return
        if isinstance(step, Partial):
            yield Token("hel", "text")
            yield Failed(step.error)
            return
        if step == STALL:
            await asyncio.Event().wait()
        yield Token("hello", "text")
        if step == NO_TERMINAL:
            return
        yield Complete(self._response(model))

    async def aclose(self) -> None:
        return None


class TraceLog:
    """Collects every trace, in order."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.events.append(event)

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e.fields for e in self.events if e.type == type]


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> ScriptedProvider:
    """``[providers.fake]`` answers with this scripted provider."""
    fake = ScriptedProvider("fake")
    echo = providers._FACTORIES["echo"]

    def factory(name: str, config: ProviderSettings, inference: InferenceSettings) -> Any:
        return fake if name == "fake" else echo(name, config, inference)

    monkeypatch.setitem(providers._FACTORIES, "echo", factory)
    return fake


FAST = """
[providers.fake]
kind = "echo"

[retry]
initial_delay_s = 0.001
max_delay_s = 0.01
jitter_s = 0

[retry.overloaded]
max_attempts = 6
initial_delay_s = 0.002
max_delay_s = 0.02
jitter_s = 0
"""


@pytest.fixture
def traces() -> TraceLog:
    return TraceLog()


@pytest.fixture
def load(tmp_path: Path, traces: TraceLog) -> Callable[..., Kernel]:
    """Build a kernel with only the retry plugin (and the trace log), from FAST plus `extra`."""

    def _load(extra: str = "", plugins: dict[str, object] | None = None, **environ: str) -> Kernel:
        path = tmp_path / "agentcore.toml"
        path.write_text(FAST + extra)
        return Kernel.load(
            path,
            environ=environ,
            discover_plugins=False,
            plugins={"retry": RetryPolicy, "trace-log": traces, **(plugins or {})},
        )

    return _load
