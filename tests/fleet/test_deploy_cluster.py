"""A three-node Redis Cluster (Debian's redis-server, `redis-cli --cluster create`), reached
by `agentcore serve` replicas through ``backend = "redis-cluster"``: one hold and one rate
limit for both, every script in one slot."""

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
    window_size,
)
from e2e_support import Hub
from fleet_rig import most_at_once, start_replicas

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.redis_deployments import ClusterDeployment


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterDeployment]:
    with ClusterDeployment() as deployment:
        yield deployment


# -- cluster ---------------------------------------------------------------------------


async def test_cluster_replicas_share_one_hold(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    cluster: ClusterDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=2), Scenario.text("first", delay_s=0.3), provider="a"
    )
    loopback_provider.default = Scenario.text("ok")
    fleet = {"backend": "redis-cluster", "cluster_nodes": cluster.nodes, "key_prefix": prefix()}
    sections = {
        "fleet": fleet,
        "retry": RETRY,
        "provider_hold": {"max_wait_s": 10.0},
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await replicas[0].ask("limited")
        hold = await replicas[0].wait_trace("provider:hold")
        for replica in replicas:
            await replica.ask()
            await replica.ask()
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert all("result" in m for m in answered), answered
    calls = sorted(loopback_provider.calls_to("a"), key=lambda c: c.started_at)
    assert len(calls) == 1 + 5
    assert all(c.started_at * 1000 >= hold["untilMs"] - 5 for c in calls[1:])
    probe = calls[1]
    assert probe.ended_at is not None and all(c.started_at >= probe.ended_at for c in calls[2:])
    for replica in replicas:  # each replica saw the one hold and waited for it
        assert "hold" in {t["reason"] for t in replica.traces("inference:waiting")}, replica.tag
    await loopback_provider.wait_idle()


async def test_cluster_replicas_share_one_rate_limit(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    cluster: ClusterDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.default = Scenario.text("ok", delay_s=0.3)
    key_prefix = prefix()
    fleet = {"backend": "redis-cluster", "cluster_nodes": cluster.nodes, "key_prefix": key_prefix}
    sections = {
        "fleet": fleet,
        "rate_limit": limits(in_flight=2),
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await asyncio.gather(*(r.ask(f"{r.tag}-{i}") for r in replicas for i in range(3)))
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert [m["result"]["content"] for m in answered] == ["ok"] * 6
    assert most_at_once(loopback_provider.calls_to("a")) <= 2
    waited = [t for r in replicas for t in r.traces("inference:waiting") if t["reason"] == "limit"]
    assert waited  # six calls, two slots, two replicas: some waited for the other's slot
    check = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port)
    assert window_size(check, key_prefix) == 6  # one window for both replicas
    check.close()
    await loopback_provider.wait_idle()
