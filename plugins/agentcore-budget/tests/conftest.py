"""Kernels with only the budget (and a trace recorder) over agentcore.testing's scripted
provider, priced in the settings, on the memory store or on the session's real Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_budget import Budget

from agentcore.testing import Kernel, ScriptedProvider, TraceRecorder, scripted_kind
from agentcore.testing.redis import RedisServer

BASE = """
[providers.fake]
kind = "scripted"
[providers.fake.models.m1]
price = { input = 10.0, output = 10.0 }
"""


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Clock:
    """An injectable clock (seconds since the epoch) a test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(1_796_558_400.0)  # 2026-12-06T12:00:00Z


@pytest.fixture
def load(
    tmp_path: Path,
    trace_recorder: TraceRecorder,
    scripted_provider: ScriptedProvider,
    backend: str,
    redis_server: RedisServer,
    clock: Clock,
) -> Callable[..., Kernel]:
    """``load(budget)``: a kernel with the budget; `budget` is the TOML after [budget].
    Every kernel of one test shares the store (one Redis prefix), as replicas do; the
    recorder sees the first kernel's traces only."""
    prefix = f"bu-{uuid.uuid4().hex[:8]}"
    loaded: list[Kernel] = []

    def _load(budget: str = "", extra: str = "") -> Kernel:
        fleet = f'[fleet]\nbackend = "{backend}"\nredis_url = "{redis_server.url}"\n'
        fleet += f'key_prefix = "{prefix}"\n'
        path = tmp_path / f"agentcore-{len(loaded)}.toml"
        path.write_text(f"{BASE}\n{extra}\n{fleet}\n[budget]\n{budget}\n")
        own: dict[str, Any] = {
            "budget": Budget(clock),
            "scripted": scripted_kind(scripted_provider),
            # The same provider under a kind that is not free: its models have no price.
            "scripted-paid": scripted_kind(scripted_provider, "scripted-paid"),
            **({} if loaded else {"recorder": trace_recorder}),
        }
        kernel = Kernel.load(path, environ={}, discover_plugins=False, plugins=own)
        loaded.append(kernel)
        return kernel

    return _load
