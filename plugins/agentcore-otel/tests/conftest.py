"""A kernel with the default policies and the otel plugin exporting into memory."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agentcore_otel import OtelExport
from agentcore_provider_hold import ProviderHold
from agentcore_retry import RetryPolicy
from agentcore_waiting_trace import WaitingTrace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentcore.testing import Kernel

sys.path.insert(0, str(Path(__file__).parent))
from otel_support import Exported

from agentcore.testing import LoopbackServer

FAST = {
    "retry": {"max_attempts": 3, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0},
    "provider_hold": {"default_hold_s": 0.05, "max_wait_s": 5.0},
    "waiting_trace": {"interval_s": 0.05},
}


@pytest.fixture
def exported() -> Exported:
    spans = InMemorySpanExporter()
    metrics = InMemoryMetricReader()
    return Exported(spans, metrics, OtelExport(span_exporter=spans, metric_reader=metrics))


@pytest.fixture
def otel_kernel(exported: Exported, loopback_settings: Callable[..., Path]) -> Callable[..., Any]:
    """``async with otel_kernel(otel={...}, plugins={...}, **settings) as kernel``: the
    default policies (and `plugins`) and the otel plugin (exporting into `exported`),
    providers on the loopback server."""

    def load(
        otel: dict[str, Any] | None = None,
        sections: dict[str, Any] | None = None,
        plugins: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Kernel:
        path = loopback_settings(
            {"a": "anthropic", "o": "openai"},
            sections={**FAST, "otel": otel or {}, **(sections or {})},
            **settings,
        )
        return Kernel.load(
            path,
            discover_plugins=False,
            plugins={
                "retry": RetryPolicy,
                "provider-hold": ProviderHold,
                "waiting-trace": WaitingTrace,
                "otel": exported.plugin,
                **(plugins or {}),
            },
        )

    return load


@pytest.fixture
async def provider(loopback_provider: LoopbackServer) -> AsyncIterator[LoopbackServer]:
    yield loopback_provider
    await loopback_provider.wait_idle()
