"""A usage cap or exhausted quota holds the whole provider, for every replica sharing the
store: two kernels on one real Redis, the loopback provider behind them. After one capped
call no call reaches the provider (every model, either replica) until the probe, and the
probe's success releases everyone."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from agentcore_provider_hold import USAGE_CAP, ProviderHold

from agentcore.api import InferenceError, Message, Request, Response
from agentcore.testing import (
    API_KEY,
    API_KEY_ENV,
    Kernel,
    LoopbackServer,
    Scenario,
    TraceRecorder,
)
from agentcore.testing.redis import RedisServer

PROBE_S = 1.0
"""The usage-cap hold. The calls asserted refused must all come inside it (three, over Redis,
on two replicas): 0.5 s left a loaded machine too little; the probe loops poll a tenth of it."""


def ask(model: str) -> Request:
    return Request(f"a:{model}", [Message.user("hi")], max_tokens=16)


async def outcome(kernel: Kernel, model: str) -> Response | InferenceError:
    try:
        return await kernel.complete(ask(model))
    except InferenceError as error:
        return error


@pytest.mark.parametrize(
    "capped",
    [
        Scenario.quota(),  # Anthropic's billing_error 429
        Scenario.http_error(
            400,
            "You have reached your specified API usage limits. You will regain access on "
            "2026-12-31 at 00:00 UTC.",
            error_type="invalid_request_error",
        ),
    ],
    ids=["quota-429", "usage-limit-400"],
)
async def test_a_usage_cap_holds_the_provider_for_every_replica(
    loopback_provider: LoopbackServer,
    redis_server: RedisServer,
    trace_recorder: TraceRecorder,
    tmp_path: Path,
    capped: Scenario,
) -> None:
    settings = loopback_provider.write_settings(
        tmp_path / "agentcore.toml",
        {"a": "anthropic"},
        sections={
            "provider_hold": {"usage_cap_probe_s": PROBE_S, "release_jitter": 0},
            "fleet": {
                "backend": "redis",
                "redis_url": redis_server.url,
                "key_prefix": f"cap-{uuid.uuid4().hex[:8]}",
            },
        },
    )
    plugins = {"provider-hold": ProviderHold, "recorder": trace_recorder}
    one, two = (
        Kernel.load(
            settings, environ={API_KEY_ENV: API_KEY}, discover_plugins=False, plugins=plugins
        )
        for _ in range(2)
    )
    loopback_provider.script(capped)
    async with one, two:
        first = await outcome(one, "model-1")
        assert isinstance(first, InferenceError) and first.kind == "quota"
        # Held: every model of the provider, on either replica, fails at once, unsent.
        for kernel, model in ((two, "model-2"), (one, "model-1"), (two, "model-1")):
            refused = await outcome(kernel, model)
            assert isinstance(refused, InferenceError), refused
            assert (refused.kind, refused.code, refused.retryable) == ("quota", USAGE_CAP, False)
            assert "usage cap or quota is exhausted" in refused.message
            assert "[provider_hold] usage_cap_probe_s" in refused.message
        assert len(loopback_provider.calls) == 1
        (hold,) = trace_recorder.of("provider:hold")
        assert (hold["reason"], hold["key"], hold["provider"]) == (USAGE_CAP, "provider", "a")
        # Once the hold ends, one call goes through: the probe. Its success lifts the hold.
        loopback_provider.script(Scenario.text("The cap was lifted."))
        probe: Response | InferenceError = InferenceError("quota", "not yet")
        for _ in range(100):
            probe = await outcome(two, "model-2")
            if not (isinstance(probe, InferenceError) and probe.code == USAGE_CAP):
                break
            await asyncio.sleep(PROBE_S / 10)
        assert isinstance(probe, Response), probe
        assert len(loopback_provider.calls) == 2
        (release,) = trace_recorder.of("provider:release")
        assert (release["provider"], release["key"]) == ("a", "provider")
        # Released for everyone: the other replica's calls go through again.
        loopback_provider.script(Scenario.text("again"), Scenario.text("and again"))
        for kernel, model in ((one, "model-1"), (one, "model-3")):
            assert isinstance(await outcome(kernel, model), Response)
    assert len(loopback_provider.calls) == 4


async def test_a_capped_probe_holds_again(
    loopback_provider: LoopbackServer, trace_recorder: TraceRecorder, tmp_path: Path
) -> None:
    settings = loopback_provider.write_settings(
        tmp_path / "agentcore.toml",
        {"a": "anthropic"},
        sections={"provider_hold": {"usage_cap_probe_s": PROBE_S, "release_jitter": 0}},
    )
    kernel = Kernel.load(
        settings,
        environ={API_KEY_ENV: API_KEY},
        discover_plugins=False,
        plugins={"provider-hold": ProviderHold, "recorder": trace_recorder},
    )
    loopback_provider.script(Scenario.quota(), Scenario.quota())
    async with kernel:
        await outcome(kernel, "m")
        sent = 1
        for _ in range(100):
            result = await outcome(kernel, "m")
            assert isinstance(result, InferenceError) and result.kind == "quota"
            sent = len(loopback_provider.calls)
            if sent == 2:
                break
            await asyncio.sleep(PROBE_S / 10)
        assert sent == 2  # the probe went, and was capped again
        refused = await outcome(kernel, "m")
        assert isinstance(refused, InferenceError) and refused.code == USAGE_CAP
    assert len(loopback_provider.calls) == 2
    assert [h["reason"] for h in trace_recorder.of("provider:hold")] == [USAGE_CAP, USAGE_CAP]
