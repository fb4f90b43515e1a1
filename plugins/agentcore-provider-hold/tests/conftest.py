"""A scripted stand-in provider that logs when each call starts and ends, and a kernel factory
with the provider hold as the only policy (no retry, no waiting traces)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agentcore_provider_hold import ProviderHold

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
from agentcore.inference.calls import Wait
from agentcore.kernel import Kernel
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.traces import TraceEvent


@dataclass(frozen=True)
class Call:
    event: str
    """``start`` or ``end``."""
    tag: object
    """The request's ``metadata["tag"]``."""
    model: str
    at: float
    """`time.time()`: comparable with a hold's ``untilMs``."""


class ScriptedProvider:
    """Plays the scripted outcome of each call in turn (then succeeds), taking `latency_s`
    per call, and logs every start and end. ``STALL`` never answers."""

    kind = "echo"
    STALL = "stall"

    def __init__(self, name: str) -> None:
        self.name = name
        self.script: list[object] = []
        self.log: list[Call] = []
        self.latency_s = 0.02

    def starts(self) -> list[Call]:
        return [c for c in self.log if c.event == "start"]

    async def _play(self, request: Request, model: str) -> Response:
        tag = request.metadata.get("tag")
        self.log.append(Call("start", tag, model, time.time()))
        step = self.script.pop(0) if self.script else "ok"
        try:
            if step == self.STALL:
                await asyncio.Event().wait()
            await asyncio.sleep(self.latency_s)
        finally:
            self.log.append(Call("end", tag, model, time.time()))
        if isinstance(step, InferenceError):
            raise step
        return Response(
            [TextBlock("hello")], StopInfo("end_turn", "end_turn"), Usage(1, 1), model, model
        )

    async def complete(self, request: Request, model: str) -> Response:
        return await self._play(request, model)

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        try:
            response = await self._play(request, model)
        except InferenceError as error:
            yield Failed(error)
            return
        yield Token("hello", "text")
        yield Complete(response)

    async def aclose(self) -> None:
        return None


class Recorder:
    """Every trace, and every announced wait."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.waits: list[tuple[str, Wait]] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.events.append(event)

    @hookimpl
    def on_wait_start(self, wait: Wait) -> None:
        self.waits.append(("start", wait))

    @hookimpl
    def on_wait_end(self, wait: Wait) -> None:
        self.waits.append(("end", wait))

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


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


BASE = """
[providers.fake]
kind = "echo"
"""


@pytest.fixture
def load(tmp_path: Path, recorder: Recorder) -> Callable[..., Kernel]:
    """A kernel with only the provider hold (and the recorder); `hold` is [provider_hold]."""

    def _load(hold: str = "", extra: str = "", **environ: str) -> Kernel:
        path = tmp_path / "agentcore.toml"
        path.write_text(f"{BASE}\n[provider_hold]\n{hold}\n{extra}")
        return Kernel.load(
            path,
            environ=environ,
            discover_plugins=False,
            plugins={"provider-hold": ProviderHold, "recorder": recorder},
        )

    return _load
