"""A real OTLP receiver on loopback, for the export tests: OTLP/HTTP (an aiohttp server,
``POST /v1/traces`` and ``/v1/metrics`` with protobuf bodies) and OTLP/gRPC (a grpc.aio
server with the collector services), both decoding with the OpenTelemetry proto package.
It keeps what arrived as plain data: spans with their attributes, events and status,
metric points by name, and the headers of every export."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TIMEOUT_S = 10.0


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass
class Span:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    """0 unset, 1 ok, 2 error (the proto's enum)."""
    status_message: str
    resource: dict[str, Any]


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    points: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    """Every export as it arrived, for "never a secret" checks."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        for rs in request.resource_spans:
            resource = attributes_of(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        Span(
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                            attributes_of(s.attributes),
                            [(e.name, attributes_of(e.attributes)) for e in s.events],
                            s.status.code,
                            s.status.message,
                            resource,
                        )
                    )
        self.changed.set()

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    for p in getattr(m, kind).data_points:
                        point: dict[str, Any] = {"attributes": attributes_of(p.attributes)}
                        if kind == "histogram":
                            point.update(count=p.count, sum=p.sum)
                        else:
                            point["value"] = p.as_int if p.HasField("as_int") else p.as_double
                        self.points.setdefault(m.name, []).append(point)
        self.changed.set()

    async def wait_for(self, check: Any, timeout: float = TIMEOUT_S) -> None:
        """Until `check()` is true (exports arrive in batches, on the exporter's schedule)."""
        async with asyncio.timeout(timeout):
            while not check():
                self.changed.clear()
                await self.changed.wait()


class HttpReceiver:
    """OTLP/HTTP on 127.0.0.1; `endpoint` is the base URL for ``[otel] endpoint``."""

    def __init__(self) -> None:
        self.received = Received()
        self._runner: web.AppRunner | None = None
        self.endpoint = ""

    async def start(self) -> HttpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.endpoint = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _body(self, request: web.Request) -> bytes:
        assert request.content_type == "application/x-protobuf", request.content_type
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        self.received.headers.append(dict(request.headers))
        self.received.bodies.append(body)
        return body

    async def _traces(self, request: web.Request) -> web.Response:
        message = trace_service_pb2.ExportTraceServiceRequest.FromString(await self._body(request))
        self.received.add_traces(message)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        self.received.add_metrics(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
        answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    async def Export(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.received.headers.append({k: str(v) for k, v in context.invocation_metadata() or ()})
        self.received.bodies.append(request.SerializeToString())
        self.received.add_traces(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    async def Export(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.received.headers.append({k: str(v) for k, v in context.invocation_metadata() or ()})
        self.received.bodies.append(request.SerializeToString())
        self.received.add_metrics(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcReceiver:
    """OTLP/gRPC on 127.0.0.1 (plaintext); `endpoint` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.received = Received()
        self._server: grpc.aio.Server | None = None
        self.endpoint = ""

    async def start(self) -> GrpcReceiver:
        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self.received), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _Metrics(self.received), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        self.endpoint = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=0.5)
