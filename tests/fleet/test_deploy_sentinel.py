"""A primary + replica + three sentinels (Debian's redis-server), reached by `agentcore
serve` replicas through ``backend = "redis-sentinel"``, with a failover forced mid-load."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from deploy_rig import (
    RETRY,
    answers,
    limits,
    prefix,
)
from e2e_support import Hub
from fleet_rig import start_replicas

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.redis_deployments import SERVICE, SentinelDeployment


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelDeployment]:
    with SentinelDeployment() as deployment:
        yield deployment


# -- sentinel --------------------------------------------------------------------------


async def test_sentinel_replicas_follow_a_failover_forced_mid_load_during_a_hold(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    sentinel: SentinelDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_after=3), provider="a")
    loopback_provider.default = Scenario.text("ok", delay_s=0.1)
    fleet = {
        "backend": "redis-sentinel",
        "sentinels": sentinel.sentinels,
        "sentinel_service": SERVICE,
        "key_prefix": prefix(),
    }
    sections = {
        "fleet": fleet,
        "retry": RETRY,
        "provider_hold": {"max_wait_s": 20.0},
        "rate_limit": limits(),
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await replicas[0].ask("limited")
        hold = await replicas[0].wait_trace("provider:hold")
        for replica in replicas:  # load during the hold, on both replicas
            for i in range(3):
                await replica.ask(f"{replica.tag}-before-{i}")
        primary = redis.Redis(port=sentinel.primary_address()[1])
        primary.execute_command("WAIT", 1, 2000)  # the hold is on the replica too
        primary.close()
        await asyncio.to_thread(sentinel.failover)  # mid-load: calls are waiting on the hold
        for replica in replicas:
            for i in range(3):
                await replica.ask(f"{replica.tag}-after-{i}")
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert [m.get("result", {}).get("content") for m in answered] == ["ok"] * 13, answered
    calls = sorted(loopback_provider.calls_to("a"), key=lambda c: c.started_at)
    assert len(calls) == 1 + 13  # the 429, then each call once
    # No call reached the provider during the hold, failover or not...
    assert all(c.started_at * 1000 >= hold["untilMs"] - 5 for c in calls[1:])
    # ...and the one-probe-first release held across it: the rest came after the probe.
    probe = calls[1]
    assert probe.ended_at is not None and all(c.started_at >= probe.ended_at for c in calls[2:])
    await loopback_provider.wait_idle()
