"""agentcore.testing's scripted provider (20 ms a call) and kernels with only the rate limit
(and a trace recorder), on the memory store or on the session's real Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_rate_limit import RateLimit

from agentcore.testing import Kernel, ScriptedProvider, TraceRecorder, scripted_kind
from agentcore.testing.redis import RedisServer

BASE = """
[providers.fake]
kind = "scripted"
"""


@pytest.fixture
def provider(scripted_provider: ScriptedProvider) -> ScriptedProvider:
    scripted_provider.latency_s = 0.02
    return scripted_provider


@pytest.fixture
def recorder(trace_recorder: TraceRecorder) -> TraceRecorder:
    return trace_recorder


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def load(
    tmp_path: Path,
    recorder: TraceRecorder,
    provider: ScriptedProvider,
    backend: str,
    redis_server: RedisServer,
) -> Callable[..., Kernel]:
    """``load(limits, extra=..., plugins=...)``: a kernel with the rate limit; `limits` is
    the body of [rate_limit]. Every kernel of one test shares the store (one Redis prefix),
    as replicas do; the recorder sees the first kernel's traces only."""
    prefix = f"rl-{uuid.uuid4().hex[:8]}"
    loaded: list[Kernel] = []

    def _load(limits: str = "", extra: str = "", plugins: dict[str, Any] | None = None) -> Kernel:
        fleet = f'[fleet]\nbackend = "{backend}"\nredis_url = "{redis_server.url}"\n'
        fleet += f'key_prefix = "{prefix}"\n'
        path = tmp_path / f"agentcore-{len(loaded)}.toml"
        path.write_text(f"{BASE}\n{fleet}\n[rate_limit]\n{limits}\n{extra}")
        own = {
            "rate-limit": RateLimit,
            "scripted": scripted_kind(provider),
            **({} if loaded else {"recorder": recorder}),
        }
        kernel = Kernel.load(
            path, environ={}, discover_plugins=False, plugins={**own, **(plugins or {})}
        )
        loaded.append(kernel)
        return kernel

    return _load
