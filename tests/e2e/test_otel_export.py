"""The otel plugin end to end: `agentcore infer` and `agentcore serve` (real subprocesses,
every plugin discovered from its entry point) export to a real OTLP receiver on loopback,
over HTTP/protobuf and over gRPC. What arrives is decoded with the OpenTelemetry proto
package: the GenAI spans and attributes, where the time went, the MCPL request as the
parent of its inference, the metrics, an error status for a failed inference, and no
secret anywhere (the exporter's own header reaches the collector, and nothing else does).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import AGENTCORE, REPO, TIMEOUT_S, Hub, finish, serving
from otlp_receiver import GrpcReceiver, HttpReceiver, Received

from agentcore.testing import API_KEY, LoopbackServer, Scenario

COLLECTOR_TOKEN = "collector-token-7788-otel"
"""The exporter's header: it must reach the collector, and nothing else."""
SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3
STATUS_ERROR = 2
FAST_RETRY = {"max_attempts": 3, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0}


@pytest.fixture(params=["http/protobuf", "grpc"])
async def receiver(request: pytest.FixtureRequest) -> AsyncIterator[HttpReceiver | GrpcReceiver]:
    server = HttpReceiver() if request.param == "http/protobuf" else GrpcReceiver()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def protocol_of(receiver: HttpReceiver | GrpcReceiver) -> str:
    return "grpc" if isinstance(receiver, GrpcReceiver) else "http/protobuf"


def clean_env() -> dict[str, str]:
    """This environment without OTEL_* or AGENTCORE_* settings: only the file counts."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTCORE_"))}


def otel_section(receiver: HttpReceiver | GrpcReceiver, **extra: Any) -> dict[str, Any]:
    return {
        "endpoint": receiver.endpoint,
        "protocol": protocol_of(receiver),
        "headers": {"x-collector-token": COLLECTOR_TOKEN},
        "service_name": "agentcore-e2e",
        **extra,
    }


async def infer(
    settings: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        AGENTCORE,
        "infer",
        "--settings",
        str(settings),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env={**clean_env(), **(env or {})},
    )
    return await finish(process)


def no_secrets(received: Received, *outputs: str) -> None:
    for body in received.bodies:
        assert API_KEY.encode() not in body
        assert COLLECTOR_TOKEN.encode() not in body
    for text in outputs:
        assert API_KEY not in text and COLLECTOR_TOKEN not in text


async def test_infer_exports_the_inference_span_and_metrics(
    receiver: HttpReceiver | GrpcReceiver,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after_ms=100),
        Scenario.text("Hello", model="claude-e2e-0613", input_tokens=12, output_tokens=5),
        provider="a",
    )
    settings = loopback_settings(
        PROVIDERS,
        sections={
            "retry": FAST_RETRY,
            "provider_hold": {"default_hold_s": 0.05},
            "waiting_trace": {"interval_s": 0.05},
            "otel": otel_section(receiver),
        },
    )
    code, stdout, stderr = await infer(
        settings, "--model", "a:claude-e2e", "--max-tokens", "64", "--json", "Hi"
    )
    assert code == 0, stderr
    received = receiver.received
    # infer exports at exit, before it returns: everything is there already.
    [span] = received.named("chat claude-e2e")
    assert span.kind == SPAN_KIND_CLIENT
    assert span.resource["service.name"] == "agentcore-e2e"
    assert span.attributes["gen_ai.operation.name"] == "chat"
    assert span.attributes["gen_ai.provider.name"] == "anthropic"
    assert span.attributes["gen_ai.request.model"] == "claude-e2e"
    assert span.attributes["gen_ai.request.max_tokens"] == 64
    assert span.attributes["gen_ai.response.model"] == "claude-e2e-0613"
    assert span.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert span.attributes["gen_ai.usage.input_tokens"] == 12
    assert span.attributes["gen_ai.usage.output_tokens"] == 5
    assert span.status_code != STATUS_ERROR
    assert "gen_ai.input.messages" not in span.attributes
    assert [name for name, _ in span.events].count("retry") == 1
    children = [s for s in received.spans if s.parent_span_id == span.span_id]
    assert sorted(s.name for s in children if s.name == "attempt") == ["attempt", "attempt"]
    assert any(s.name.startswith("wait ") for s in children)
    assert all(s.trace_id == span.trace_id for s in children)

    usage = received.points["gen_ai.client.token.usage"]
    by_type = {p["attributes"]["gen_ai.token.type"]: p for p in usage}
    assert (by_type["input"]["sum"], by_type["output"]["sum"]) == (12, 5)
    [duration] = received.points["gen_ai.client.operation.duration"]
    assert duration["count"] == 1 and duration["attributes"]["gen_ai.provider.name"] == "anthropic"
    assert received.points["agentcore.provider.holds"][0]["value"] == 1
    assert received.points["agentcore.wait.duration"]

    # The collector got its header; nothing else got anything secret.
    assert all(h.get("x-collector-token") == COLLECTOR_TOKEN for h in received.headers)
    no_secrets(received, stdout, stderr)


async def test_a_failed_inference_arrives_with_the_error_status(
    receiver: HttpReceiver | GrpcReceiver,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
) -> None:
    loopback_provider.script(Scenario.echoes_credentials(), provider="o")
    settings = loopback_settings(PROVIDERS, sections={"otel": otel_section(receiver)})
    code, stdout, stderr = await infer(settings, "--model", "o:gpt-e2e", "--no-stream", "Hi")
    assert code == 1
    [span] = receiver.received.named("chat gpt-e2e")
    assert span.status_code == STATUS_ERROR
    assert span.attributes["error.type"] == "auth"
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert "Incorrect API key provided" in span.status_message
    [duration] = receiver.received.points["gen_ai.client.operation.duration"]
    assert duration["attributes"]["error.type"] == "auth"
    no_secrets(receiver.received, stdout, stderr)


async def test_with_the_file_silent_the_otel_environment_variables_apply(
    receiver: HttpReceiver | GrpcReceiver,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
) -> None:
    loopback_provider.script(Scenario.text("Hello"), provider="a")
    settings = loopback_settings(PROVIDERS)  # no [otel] section at all
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol_of(receiver),
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-collector-token={COLLECTOR_TOKEN}",
        "OTEL_SERVICE_NAME": "agentcore-from-env",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=e2e",
    }
    code, stdout, stderr = await infer(settings, "--model", "a:claude-e2e", "Hi", env=env)
    assert code == 0, stderr
    [span] = receiver.received.named("chat claude-e2e")
    assert span.resource["service.name"] == "agentcore-from-env"
    assert span.resource["deployment.environment"] == "e2e"
    assert span.attributes["gen_ai.request.model"] == "claude-e2e"
    assert receiver.received.points["gen_ai.client.token.usage"]
    assert all(h.get("x-collector-token") == COLLECTOR_TOKEN for h in receiver.received.headers)
    no_secrets(receiver.received, stdout, stderr)


@pytest.fixture
def transport() -> str:
    return "stdio"


async def test_serve_makes_the_mcpl_request_the_parent_of_its_inference(
    receiver: HttpReceiver | GrpcReceiver,
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
) -> None:
    loopback_provider.script(Scenario.text("Hi back", output_tokens=3), provider="a")
    loopback_provider.script(Scenario.server_error(), provider="o")
    servers = {"srv": hub.config("srv")}
    sections = settings_sections(
        hub,
        servers,
        retry={"max_attempts": 1, "overloaded": {"max_attempts": 1}},
        extra={"otel": otel_section(receiver, metrics_interval_s=0.2)},
    )
    settings = loopback_settings(PROVIDERS, sections=sections)
    async with serving(settings, env=clean_env()) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        messages = [{"role": "user", "content": "Hi"}]
        ok = await session.infer({"featureSet": "fs.a", "stream": True, "messages": messages})
        assert ok.result["content"] == "Hi back"
        failed = await session.infer({"featureSet": "fs.o", "messages": messages})
        assert failed.error["code"] == -32603
        # Batched export: the spans come on the processor's schedule, while serve runs.
        received = receiver.received
        await received.wait_for(lambda: len(received.named("mcpl inference/request")) == 2)
        code, stdout, stderr = await served.stop()
    assert code == 0, stderr
    parents = {
        s.attributes["mcpl.feature_set"]: s for s in received.named("mcpl inference/request")
    }
    for feature, model in (("fs.a", "chat claude-e2e"), ("fs.o", "chat gpt-e2e")):
        parent = parents[feature]
        assert parent.kind == SPAN_KIND_SERVER
        assert parent.attributes["mcpl.server.id"] == "srv"
        [child] = received.named(model)
        assert child.parent_span_id == parent.span_id
        assert child.trace_id == parent.trace_id
        assert child.attributes["mcpl.server.id"] == "srv"
    assert parents["fs.a"].status_code != STATUS_ERROR
    assert parents["fs.a"].attributes["gen_ai.request.stream"] is True
    assert parents["fs.o"].status_code == STATUS_ERROR
    assert parents["fs.o"].attributes["error.type"] == "server"
    assert received.points["gen_ai.client.token.usage"]
    no_secrets(received, stdout, stderr)
