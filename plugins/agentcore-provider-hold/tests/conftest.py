"""agentcore.testing's scripted provider, taking 20 ms a call, and a kernel factory with the
provider hold as the only policy (no retry, no waiting traces)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from agentcore_provider_hold import ProviderHold

from agentcore.testing import Kernel, ScriptedProvider, TraceRecorder, scripted_kind


@pytest.fixture
def provider(scripted_provider: ScriptedProvider) -> ScriptedProvider:
    """``[providers.fake]`` answers with this scripted provider; every call takes 20 ms."""
    scripted_provider.latency_s = 0.02
    return scripted_provider


@pytest.fixture
def recorder(trace_recorder: TraceRecorder) -> TraceRecorder:
    return trace_recorder


BASE = """
[providers.fake]
kind = "scripted"
"""


@pytest.fixture
def load(
    tmp_path: Path, recorder: TraceRecorder, provider: ScriptedProvider
) -> Callable[..., Kernel]:
    """A kernel with only the provider hold (and the recorder, the scripted kind, and any
    `plugins`); `hold` is [provider_hold], its holds exact (``release_jitter = 0``)
    unless it sets ``release_jitter``."""

    def _load(
        hold: str = "", extra: str = "", plugins: dict[str, object] | None = None, **environ: str
    ) -> Kernel:
        path = tmp_path / "agentcore.toml"
        exact = "" if "release_jitter" in hold else "release_jitter = 0\n"
        path.write_text(f"{BASE}\n[provider_hold]\n{exact}{hold}\n{extra}")
        return Kernel.load(
            path,
            environ=environ,
            discover_plugins=False,
            plugins={
                "provider-hold": ProviderHold,
                "recorder": recorder,
                "scripted": scripted_kind(provider),
                **(plugins or {}),
            },
        )

    return _load
