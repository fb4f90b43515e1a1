"""agentcore.testing's scripted provider and a kernel factory: the retry plugin alone, other
policies off."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agentcore_retry import RetryPolicy

from agentcore.testing import Kernel, ScriptedProvider, TraceRecorder, scripted_kind


@pytest.fixture
def provider(scripted_provider: ScriptedProvider) -> ScriptedProvider:
    """``[providers.fake]`` answers with this scripted provider."""
    return scripted_provider


FAST = """
[providers.fake]
kind = "scripted"

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
def traces(trace_recorder: TraceRecorder) -> TraceRecorder:
    return trace_recorder


@pytest.fixture
def load(
    tmp_path: Path, traces: TraceRecorder, provider: ScriptedProvider
) -> Callable[..., Kernel]:
    """Build a kernel with only the retry plugin (and the trace log), from FAST plus `extra`."""

    def _load(extra: str = "", plugins: dict[str, object] | None = None, **environ: str) -> Kernel:
        path = tmp_path / "agentcore.toml"
        path.write_text(FAST + extra)
        return Kernel.load(
            path,
            environ=environ,
            discover_plugins=False,
            plugins={
                "retry": RetryPolicy,
                "trace-log": traces,
                "scripted": scripted_kind(provider),
                **(plugins or {}),
            },
        )

    return _load
