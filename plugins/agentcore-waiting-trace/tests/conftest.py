"""A trace recorder and a kernel factory with the waiting traces as the only plugin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agentcore_waiting_trace import WaitingTrace

from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, TraceRecorder

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides


@pytest.fixture
def recorder(trace_recorder: TraceRecorder) -> TraceRecorder:
    return trace_recorder


@pytest.fixture
def load(tmp_path: Path, recorder: TraceRecorder) -> Callable[..., Kernel]:
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
            environ=LOOPBACK_ENV,
            discover_plugins=False,
            plugins={"waiting-trace": WaitingTrace, "recorder": recorder, **(plugins or {})},
        )

    return _load
