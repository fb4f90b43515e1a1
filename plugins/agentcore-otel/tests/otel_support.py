"""What the otel plugin's tests share (a module with a name no other suite uses)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentcore_otel import OtelExport
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Exported:
    """What the plugin exported: finished spans and collected metric points."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    plugin: OtelExport

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found: list[Any] = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def dump(self) -> str:
        """Every span, attribute and event as one JSON text: for "never a secret" checks."""
        return json.dumps([json.loads(s.to_json()) for s in self.finished()])
