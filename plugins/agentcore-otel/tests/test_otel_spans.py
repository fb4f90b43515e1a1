"""Spans and metrics from real inferences through the kernel (loopback provider), exported
into memory: names and attributes after the GenAI semantic conventions, where the time
went (attempts, waits, retries, holds), errors, content only when asked, never a secret."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from agentcore_otel import OtelExport, OtelSettings, export_enabled, otlp_exporters
from agentcore_rate_limit import RateLimit
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Exported

from agentcore.api import (
    Complete,
    HostTurn,
    InferenceError,
    Message,
    Request,
    SettingsError,
    redact,
)
from agentcore.testing import API_KEY, Kernel, LoopbackServer, Scenario


def request(model: str = "a:claude-otel", text: str = "Hi", **kwargs: Any) -> Request:
    return Request(model, [Message.user(text)], **kwargs)


async def test_a_completed_inference_is_one_chat_span_with_the_genai_attributes(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(
        Scenario.text("Hello", model="claude-otel-0613", input_tokens=11, output_tokens=7),
        provider="a",
    )
    async with otel_kernel() as kernel:
        await kernel.complete(
            request(max_tokens=99, temperature=0.25, metadata={"conversationId": "conv-7"})
        )
    [span] = exported.named("chat claude-otel")
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-otel"
    assert attributes["gen_ai.request.max_tokens"] == 99
    assert attributes["gen_ai.request.temperature"] == 0.25
    assert attributes["gen_ai.response.model"] == "claude-otel-0613"
    assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert attributes["gen_ai.usage.input_tokens"] == 11
    assert attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.conversation.id"] == "conv-7"
    assert attributes["agentcore.provider"] == "a"
    assert "error.type" not in attributes
    assert "gen_ai.input.messages" not in attributes  # no content unless capture_content
    assert "gen_ai.output.messages" not in attributes
    [attempt] = exported.named("attempt")
    assert attempt.parent is not None and attempt.parent.span_id == span.context.span_id
    assert exported.plugin.recorder is None  # stopped: nothing left open


async def test_a_host_turn_carries_its_conversation_id(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    """A host turn's conversation comes from the turn itself (`Request.turn`), not from
    metadata: its span says which conversation it belongs to."""
    provider.script(Scenario.text("Hello"), provider="a")
    async with otel_kernel() as kernel:
        await kernel.complete(request(turn=HostTurn("conv-turns", 3, "Hi")))
    [span] = exported.named("chat claude-otel")
    assert dict(span.attributes or {})["gen_ai.conversation.id"] == "conv-turns"


async def test_the_openai_wire_is_named_openai_and_a_stream_says_so(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.text("Hi there"), provider="o")
    async with otel_kernel() as kernel, aclosing(kernel.stream(request("o:gpt-otel"))) as events:
        ending = [e async for e in events][-1]
    assert isinstance(ending, Complete)
    [span] = exported.named("chat gpt-otel")
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert span.attributes["gen_ai.request.stream"] is True


async def test_a_failed_inference_has_the_error_status_and_type(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.bad_request(), provider="a")
    async with otel_kernel() as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(request())
    [span] = exported.named("chat claude-otel")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description and "invalid_request" in span.status.description
    assert span.attributes is not None
    assert span.attributes["error.type"] == "invalid_request"
    [duration] = exported.points("gen_ai.client.operation.duration")
    assert dict(duration.attributes)["error.type"] == "invalid_request"
    assert exported.points("gen_ai.client.token.usage") == []


async def test_retries_holds_and_waits_show_where_the_time_went(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.rate_limit(retry_after_ms=120), Scenario.text("ok"), provider="a")
    async with otel_kernel() as kernel:
        await kernel.complete(request())
    [span] = exported.named("chat claude-otel")
    assert span.attributes is not None
    assert span.attributes["agentcore.attempts"] == 2
    events = {e.name: dict(e.attributes or {}) for e in span.events}
    assert events["retry"]["agentcore.attempt"] == 1
    assert events["retry"]["agentcore.delay_ms"] >= 120
    assert events["provider.hold"]["agentcore.hold.reason"] == "rate_limit"
    attempts = sorted(exported.named("attempt"), key=lambda s: s.start_time or 0)
    assert [dict(a.attributes or {}).get("error.type") for a in attempts] == ["rate_limit", None]
    waits = [s for s in exported.finished() if s.name.startswith("wait ")]
    assert waits, "a retry after a 429 waits (backoff, and the hold)"
    for wait in waits:
        assert wait.parent is not None and wait.parent.span_id == span.context.span_id
    # The backoff waits 120 ms; the hold, set for as long, may have under a millisecond
    # left when the backoff ends (a span's times are whole milliseconds here), so only the
    # backoff's length is certain.
    lengths_ms = [((w.end_time or 0) - (w.start_time or 0)) / 1e6 for w in waits]
    assert min(lengths_ms) >= 0 and max(lengths_ms) >= 100, lengths_ms
    # The second attempt starts after the last wait ended: the time is accounted for.
    assert (attempts[1].start_time or 0) >= max(w.end_time or 0 for w in waits)
    [holds] = exported.points("agentcore.provider.holds")
    assert holds.value == 1 and dict(holds.attributes)["agentcore.hold.reason"] == "rate_limit"
    waited = exported.points("agentcore.wait.duration")
    assert {dict(p.attributes)["agentcore.wait.reason"] for p in waited} <= {"hold", "backoff"}
    assert sum(p.count for p in waited) == len(waits)


async def test_token_and_duration_metrics(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(
        Scenario.text("one", input_tokens=5, output_tokens=3),
        Scenario.text("two", input_tokens=20, output_tokens=4),
        provider="a",
    )
    async with otel_kernel() as kernel:
        await kernel.complete(request())
        await kernel.complete(request())
    usage = {
        dict(p.attributes)["gen_ai.token.type"]: p
        for p in exported.points("gen_ai.client.token.usage")
    }
    assert (usage["input"].sum, usage["input"].count) == (25, 2)
    assert (usage["output"].sum, usage["output"].count) == (7, 2)
    attributes = dict(usage["input"].attributes)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-otel"
    [duration] = exported.points("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert "error.type" not in dict(duration.attributes)


async def test_cache_tokens_on_the_span_and_cost_counted(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    """A model genai-prices knows: its cost (cache reads and writes at their own rates) on
    the span and summed by the cost counter; an unpriced model adds nothing to it."""
    import genai_prices

    provider.script(
        Scenario.text(
            "one",
            input_tokens=1000,
            output_tokens=50,
            cache_read_tokens=600,
            cache_write_tokens=300,
        ),
        Scenario.text("two", input_tokens=10, output_tokens=2),
        provider="a",
    )
    async with otel_kernel() as kernel:
        priced = await kernel.complete(request("a:claude-sonnet-4-5"))
        unpriced = await kernel.complete(request())
    usage = genai_prices.Usage(
        input_tokens=1000, output_tokens=50, cache_read_tokens=600, cache_write_tokens=300
    )
    expected = float(
        genai_prices.calc_price(usage, "claude-sonnet-4-5", provider_id="anthropic").total_price
    )
    assert (priced.cost_usd, unpriced.cost_usd) == (expected, None)
    [span] = exported.named("chat claude-sonnet-4-5")
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] == 1000
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 600
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 300
    assert attributes["agentcore.cost.usd"] == expected
    assert "agentcore.cost.usd" not in dict(exported.named("chat claude-otel")[0].attributes or {})
    [cost] = exported.points("agentcore.inference.cost")
    assert cost.value == expected


async def test_a_call_refused_before_any_provider_call_is_counted(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.rate_limit(retry_after=60), provider="a")
    hold = {"provider_hold": {"max_wait_s": 1.0}, "retry": {"max_attempts": 1}}
    async with otel_kernel(sections=hold) as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(request())  # sets a 60 s hold
        with pytest.raises(InferenceError):
            await kernel.complete(request())  # would wait 60 s > max_wait_s: refused
    [refused] = exported.points("agentcore.requests.refused")
    assert refused.value == 1
    assert len(provider.calls) == 1
    chats = exported.named("chat claude-otel")
    tried = {a.parent.span_id for a in exported.named("attempt") if a.parent is not None}
    second = [s for s in chats if s.context.span_id not in tried]
    assert (len(chats), len(second)) == (2, 1)  # the refused inference has no attempt span
    assert second[0].status.status_code is StatusCode.ERROR


async def test_rate_limit_slots_in_use_are_a_gauge_by_provider(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    # 1 s each: the gauge reads 2 only while two calls are in flight, and the poll below must
    # see it then; 0.3 s left a loaded machine too short a window (the gauge fell back first).
    provider.script(*[Scenario.text("slow", delay_s=1.0)] * 3, provider="a")
    limits = {"rate_limit": {"providers": {"a": {"max_in_flight": 2}}}}
    async with otel_kernel(sections=limits, plugins={"rate-limit": RateLimit}) as kernel:
        calls = asyncio.gather(*(kernel.complete(request()) for _ in range(3)))
        async with asyncio.timeout(10):
            while [p.value for p in exported.points("agentcore.rate_limit.slots.in_use")] != [2]:
                await asyncio.sleep(0.01)
        await calls
    [in_use] = exported.points("agentcore.rate_limit.slots.in_use")
    assert (in_use.value, dict(in_use.attributes)) == (0, {"agentcore.provider": "a"})


async def test_content_only_with_capture_content_and_redacted(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.text(f"the key is {API_KEY}"), provider="a")
    async with otel_kernel(otel={"capture_content": True}) as kernel:
        await kernel.complete(request(text=f"Hi, my key is {API_KEY}", system="Be brief."))
    [span] = exported.named("chat claude-otel")
    assert span.attributes is not None
    inputs = json.loads(str(span.attributes["gen_ai.input.messages"]))
    assert inputs == [
        {"role": "user", "parts": [{"type": "text", "content": "Hi, my key is [REDACTED]"}]}
    ]
    system = json.loads(str(span.attributes["gen_ai.system_instructions"]))
    assert system == [{"type": "text", "content": "Be brief."}]
    outputs = json.loads(str(span.attributes["gen_ai.output.messages"]))
    assert outputs == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "the key is [REDACTED]"}],
            "finish_reason": "end_turn",
        }
    ]
    assert API_KEY not in exported.dump()


async def test_no_secret_in_any_span_even_when_the_provider_echoes_it(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    provider.script(Scenario.echoes_credentials(), provider="a")
    token = "org-token-0451-otel"
    async with otel_kernel(headers={"x-org-token": token}) as kernel:
        with pytest.raises(InferenceError) as info:
            await kernel.complete(request())
    assert "Incorrect API key provided" in info.value.message
    dump = exported.dump()
    assert "Incorrect API key provided" in dump  # the error is there...
    assert API_KEY not in dump and token not in dump  # ...its credentials are not


def test_nothing_is_exported_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", raising=False)
    assert not export_enabled(OtelSettings())
    assert export_enabled(OtelSettings(endpoint="http://127.0.0.1:4318"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert export_enabled(OtelSettings())


async def test_enabled_without_an_endpoint_the_plugin_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
    loopback_settings: Callable[..., Path],
    provider: LoopbackServer,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    provider.script(Scenario.text("hi"), provider="a")
    plugin = OtelExport()
    path = loopback_settings({"a": "anthropic"})
    async with Kernel.load(path, discover_plugins=False, plugins={"otel": plugin}) as kernel:
        assert plugin.recorder is None
        await kernel.complete(request())


async def test_headers_from_the_environment_are_secrets_too(
    monkeypatch: pytest.MonkeyPatch, otel_kernel: Callable[..., Kernel], provider: LoopbackServer
) -> None:
    # With [otel] headers unset, the exporters send OTEL_EXPORTER_OTLP_HEADERS: a
    # credential as much as the file's headers, so nothing may print it either.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=env-team-token-5150,x-plain=ok")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Basic%20c2VjcmV0OTk=")
    assert "env-team-token-5150" in redact("header env-team-token-5150")
    async with otel_kernel():
        assert "env-team-token-5150" not in redact("header env-team-token-5150")
        assert "Basic c2VjcmV0OTk=" not in redact("sent Basic c2VjcmV0OTk=")


def test_the_endpoint_is_a_base_url_and_the_protocol_picks_the_exporter() -> None:
    spans, metrics = otlp_exporters(OtelSettings(endpoint="http://127.0.0.1:4318/"))
    assert type(spans).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    assert spans._endpoint == "http://127.0.0.1:4318/v1/traces"  # type: ignore[attr-defined]
    assert metrics._endpoint == "http://127.0.0.1:4318/v1/metrics"  # type: ignore[attr-defined]
    spans, _ = otlp_exporters(OtelSettings(endpoint="http://127.0.0.1:4317", protocol="grpc"))
    assert type(spans).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")


def test_a_wrong_setting_is_named(loopback_settings: Callable[..., Path]) -> None:
    path = loopback_settings({"a": "anthropic"}, sections={"otel": {"protocol": "udp"}})
    with pytest.raises(SettingsError) as info:
        Kernel.load(path, discover_plugins=False, plugins={"otel": OtelExport})
    assert "otel.protocol" in str(info.value)


def over_otlp_http(spans: list[ReadableSpan]) -> dict[str, dict[str, Any]]:
    """Each span's attributes by span name, as an OTLP/HTTP receiver reads them from the
    protobuf body the exporter POSTs (the encoder drops an attribute it cannot encode)."""
    body = encode_spans(spans).SerializeToString()
    received = ExportTraceServiceRequest.FromString(body)
    return {
        s.name: {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in s.attributes}
        for rs in received.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }


async def test_an_mcpl_request_id_with_a_lone_surrogate_still_exports(
    otel_kernel: Callable[..., Kernel], exported: Exported
) -> None:
    """A JSON request id may be ``"\\ud800"``, which has no UTF-8 form: its span carries
    the escape instead, so the OTLP export (protobuf strings are UTF-8) goes through."""
    async with otel_kernel() as kernel:
        ids = {"serverId": "srv-\ud800", "requestId": "\udc00-7"}
        await kernel.emit("mcpl:inference_start", streamed=False, featureSet="f\ud800", **ids)
        await kernel.emit("mcpl:inference_fail", error="refused \ud800", **ids)
    [span] = exported.named("mcpl inference/request")
    attributes = over_otlp_http([span])["mcpl inference/request"]
    assert attributes["mcpl.server.id"] == "srv-\\ud800"
    assert attributes["mcpl.request.id"] == "\\udc00-7"
    assert attributes["mcpl.feature_set"] == "f\\ud800"
    assert span.status.description == "refused \\ud800"


async def test_a_conversation_id_and_content_with_a_lone_surrogate_still_export(
    otel_kernel: Callable[..., Kernel], exported: Exported, provider: LoopbackServer
) -> None:
    """The exporter drops (and logs) an attribute it cannot encode: the conversation id and
    captured content arrive, the content as JSON whose escape reads back as what was sent."""
    provider.script(Scenario.text("fine \U0001f600"), provider="a")
    text = "Hi \ud800 w\u00f6rld"
    async with otel_kernel(otel={"capture_content": True}) as kernel:
        await kernel.complete(request(text=text, metadata={"conversationId": "conv-\udfff"}))
    attributes = over_otlp_http(exported.finished())["chat claude-otel"]
    assert attributes["gen_ai.conversation.id"] == "conv-\\udfff"
    inputs = json.loads(str(attributes["gen_ai.input.messages"]))
    assert inputs[0]["parts"][0]["content"] == text  # the escape reads back as sent
    outputs = json.loads(str(attributes["gen_ai.output.messages"]))
    assert outputs[0]["parts"][0]["content"] == "fine \U0001f600"  # valid text untouched
