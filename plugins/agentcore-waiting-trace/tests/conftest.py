"""A trace recorder and a kernel factory with the waiting traces as the only plugin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_waiting_trace import WaitingTrace

from agentcore import hookimpl
from agentcore.kernel import Kernel
from agentcore.traces import TraceEvent


class Recorder:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.events.append(event)

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e.fields for e in self.events if e.type == type]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def load(tmp_path: Path, recorder: Recorder) -> Callable[..., Kernel]:
    """A kernel with only the waiting traces (and the recorder, and `plugins`)."""

    def _load(
        settings: str = "[waiting_trace]\ninterval_s = 0.01\n",
        plugins: dict[str, object] | None = None,
        path: Path | None = None,
    ) -> Kernel:
        if path is None:
            path = tmp_path / "agentcore.toml"
            path.write_text(settings)
        return Kernel.load(
            path,
            environ={},
            discover_plugins=False,
            plugins={"waiting-trace": WaitingTrace, "recorder": recorder, **(plugins or {})},
        )

    return _load
