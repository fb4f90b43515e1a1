"""agentcore's OpenTelemetry export (entry point ``otel``): spans and metrics over OTLP.

Built over `on_trace` alone: every trace event becomes in-memory span and metric
work (`agentcore_otel.recorder`); the SDK's batch span processor and periodic
metric reader export on threads of their own, so an inference never waits for a
collector. Nothing is exported unless an endpoint is set: ``[otel] endpoint``, or
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its ``_TRACES_`` / ``_METRICS_``
forms) when the file is silent. The other ``OTEL_*`` variables (headers, protocol,
service name, resource attributes, timeouts) apply where ``[otel]`` says nothing.

Message content goes into spans only with ``capture_content = true``, redacted like
every other string that leaves the process; header values are registered as
secrets, so no log line or trace shows them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger
from pydantic import Field

from agentcore.api import (
    HTTP_SCHEMES,
    HttpUrl,
    PluginContext,
    Section,
    SettingsSection,
    TraceEvent,
    __version__,
    hookimpl,
    redact_log,
    register_secret,
    url_problem,
)

# The SDK, and the OpenTelemetry API the recorder uses, are imported where they are used,
# once an export is on: importing them costs every `agentcore` start a noticeable time and
# several MB, and without an endpoint nothing needs them.
if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from agentcore_otel.recorder import VENDORS, Recorder

Protocol = Literal["http/protobuf", "grpc"]

ENDPOINT_ENVS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
HEADER_ENVS = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)
STOP_TIMEOUT_S = 3.0
"""How long `agentcore_stop` gives the last export: `serve` must exit within 10 s."""


class OtelSettings(Section):
    """``[otel]``."""

    endpoint: HttpUrl | None = None
    """The collector's OTLP base URL (``http://127.0.0.1:4318``; gRPC ``http://HOST:4317``).
    None: the ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variables; none of those either: no export."""
    protocol: Protocol | None = None
    """None: ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``."""
    headers: dict[str, str] | None = None
    """Sent with every export (an API key, say). None: ``OTEL_EXPORTER_OTLP_HEADERS``."""
    service_name: str | None = None
    """The resource's ``service.name``. None: ``OTEL_SERVICE_NAME``, else ``agentcore``."""
    capture_content: bool = False
    """Put message content (``gen_ai.input.messages``, ``gen_ai.output.messages``) in spans."""
    timeout_s: float = Field(default=5.0, gt=0)
    """One export's time limit."""
    metrics_interval_s: float = Field(default=10.0, gt=0)
    """How often metrics are exported."""


def export_enabled(settings: OtelSettings) -> bool:
    return bool(settings.endpoint) or any(os.environ.get(name) for name in ENDPOINT_ENVS)


def endpoint_variable_problem(settings: OtelSettings) -> str | None:
    """What is wrong with an ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variable that stands in for an
    unset ``[otel] endpoint``, or None: said at start, not as a traceback at the first
    export. (The gRPC exporter also takes a bare ``HOST:PORT``.)"""
    if settings.endpoint is not None:
        return None
    grpc = (settings.protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")) == "grpc"
    for name in ENDPOINT_ENVS:
        value = os.environ.get(name, "").strip()
        if not value or (grpc and "://" not in value):
            continue
        problem = url_problem(value, HTTP_SCHEMES)
        if problem is not None:
            return f"{name} (in the environment; [otel] endpoint is unset) {problem}"
    return None


def exporter_headers(settings: OtelSettings) -> list[str]:
    """The values of every header an export may send: ``[otel] headers``, else the
    ``OTEL_EXPORTER_OTLP_*HEADERS`` variables the exporters read themselves."""
    if settings.headers is not None:
        return list(settings.headers.values())
    values: list[str] = []
    for name in HEADER_ENVS:
        if raw := os.environ.get(name):  # none set: the OpenTelemetry API stays unimported
            from opentelemetry.util.re import parse_env_headers

            values += parse_env_headers(raw, liberal=True).values()
    return values


def _protocol(settings: OtelSettings) -> Protocol:
    if settings.protocol is not None:
        return settings.protocol
    named = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
    if named not in ("http/protobuf", "grpc"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={named!r} is not supported; "
            "use http/protobuf or grpc ([otel] protocol)"
        )
    return "grpc" if named == "grpc" else "http/protobuf"


def otlp_exporters(settings: OtelSettings) -> tuple[SpanExporter, MetricExporter]:
    """The OTLP span and metric exporters the settings (and the OTEL_* variables) ask for."""
    headers = settings.headers
    timeout = settings.timeout_s
    if _protocol(settings) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetrics,
        )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpans,
        )

        endpoint = settings.endpoint
        return (
            GrpcSpans(endpoint=endpoint, headers=headers, timeout=timeout),
            GrpcMetrics(endpoint=endpoint, headers=headers, timeout=timeout),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetrics,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpans,
    )

    # A base URL gets the signal's path, as OTEL_EXPORTER_OTLP_ENDPOINT does.
    base = settings.endpoint.rstrip("/") if settings.endpoint else None
    return (
        HttpSpans(endpoint=base and f"{base}/v1/traces", headers=headers, timeout=timeout),
        HttpMetrics(endpoint=base and f"{base}/v1/metrics", headers=headers, timeout=timeout),
    )


def resource(settings: OtelSettings) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

    attributes: dict[str, str] = {SERVICE_VERSION: __version__}
    if settings.service_name:
        attributes[SERVICE_NAME] = settings.service_name
    elif not os.environ.get("OTEL_SERVICE_NAME"):
        attributes[SERVICE_NAME] = "agentcore"
    return Resource.create(attributes)  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME merge in


class _ToLoguru(logging.Handler):
    """The OpenTelemetry SDK logs with `logging`; its lines go through agentcore's redacted
    log instead (a failed export may quote a collector's answer)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = redact_log(record.getMessage())
        except Exception:
            text = record.msg if isinstance(record.msg, str) else "(unprintable)"
        logger.opt(depth=0).log(record.levelname if record.levelno >= 30 else "DEBUG", text)


def route_sdk_logs() -> None:
    sdk = logging.getLogger("opentelemetry")
    if not any(isinstance(h, _ToLoguru) for h in sdk.handlers):
        sdk.addHandler(_ToLoguru())
        sdk.propagate = False


class OtelExport:
    """The plugin object; the kernel makes one per kernel.

    `span_exporter` / `metric_reader` replace OTLP (tests, or a host that exports its
    own way): spans then go out synchronously through a simple processor, and export
    is on whatever the endpoint settings say.
    """

    def __init__(
        self,
        *,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
    ) -> None:
        self.settings = OtelSettings.model_construct()
        self._span_exporter = span_exporter
        self._metric_reader = metric_reader
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        self.recorder: Recorder | None = None

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("otel", OtelSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[OtelSettings]) -> None:
        self.settings = context.settings
        settings = self.settings
        for value in exporter_headers(settings):
            register_secret(value)  # an exporter header is a credential, whatever its name
        injected = self._span_exporter is not None or self._metric_reader is not None
        if not injected and not export_enabled(settings):
            logger.debug("otel: no endpoint ([otel] endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
            return
        problem = None if injected else endpoint_variable_problem(settings)
        if problem is not None:
            raise ValueError(problem)
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        from agentcore_otel.recorder import Recorder

        route_sdk_logs()
        processor: SpanProcessor | None = None
        reader: MetricReader | None = self._metric_reader
        if injected:
            if self._span_exporter is not None:
                processor = SimpleSpanProcessor(self._span_exporter)
        else:
            spans, metrics = otlp_exporters(settings)
            processor = BatchSpanProcessor(spans, export_timeout_millis=settings.timeout_s * 1000)
            reader = PeriodicExportingMetricReader(
                metrics,
                export_interval_millis=settings.metrics_interval_s * 1000,
                export_timeout_millis=settings.timeout_s * 1000,
            )
        res = resource(settings)
        self._tracer_provider = TracerProvider(resource=res)
        if processor is not None:
            self._tracer_provider.add_span_processor(processor)
        self._meter_provider = MeterProvider(
            resource=res, metric_readers=[reader] if reader else []
        )
        self.recorder = Recorder(
            self._tracer_provider.get_tracer("agentcore", __version__),
            self._meter_provider.get_meter("agentcore", __version__),
            capture_content=settings.capture_content,
        )
        if not injected:
            where = settings.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
            logger.info("otel: exporting spans and metrics to {} ({})", where, _protocol(settings))

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        recorder = self.recorder
        if recorder is not None:
            recorder.record(event)

    @hookimpl
    async def agentcore_stop(self) -> None:
        """End what is open and export what is left, on a thread, for at most a few seconds."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return
        recorder.end_all(int(time.time() * 1000))
        tracer, meter = self._tracer_provider, self._meter_provider
        await _on_thread(lambda: _shutdown(tracer, meter), STOP_TIMEOUT_S)


def _shutdown(tracer: TracerProvider | None, meter: MeterProvider | None) -> None:
    timeout_ms = int(STOP_TIMEOUT_S * 1000)
    if tracer is not None:
        tracer.force_flush(timeout_ms)
        tracer.shutdown()
    if meter is not None:
        meter.shutdown(timeout_millis=timeout_ms)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def _on_thread(work: Callable[[], None], timeout_s: float) -> None:
    """Run blocking work on a daemon thread and wait at most `timeout_s` for it: a collector
    that does not answer must not hold the host's shutdown (nor, as the default executor
    would, the interpreter's exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            work()
        except Exception:
            logger.exception("otel: the last export failed")
        finally:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, done)

    threading.Thread(target=run, name="agentcore-otel-stop", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except TimeoutError:
        logger.warning("otel: the last export did not finish within {} s", timeout_s)


def __getattr__(name: str) -> Any:
    """`VENDORS` and `Recorder`, still importable from here, loaded on first use."""
    if name in ("VENDORS", "Recorder"):
        from agentcore_otel import recorder

        return getattr(recorder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "VENDORS",
    "OtelExport",
    "OtelSettings",
    "Recorder",
    "export_enabled",
    "exporter_headers",
    "otlp_exporters",
]
