"""Three `agentcore serve` processes sharing one real Redis and one loopback provider: one
provider hold and one rate limit for all of them. (They need the rate-limit plugin's entry
point installed: run them from a venv made by `make install`.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import TIMEOUT_S, Hub, make_hub
from fleet_rig import MODEL, fleet_section, most_at_once, start_replicas

from agentcore.inference import Message, Request
from agentcore.kernel import Kernel
from agentcore.testing import LoopbackServer, Scenario, TraceRecorder
from agentcore.testing.redis import RedisServer

RETRY = {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0}
HOLD = {"max_wait_s": 10.0}


@pytest.fixture
async def hub() -> Iterator[Hub]:  # type: ignore[misc]
    hub = await make_hub("stdio").start()
    try:
        yield hub
    finally:
        await hub.stop()


async def answers(replicas: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """Every request's answer, by replica; each request answered exactly once."""
    out: dict[str, list[dict[str, Any]]] = {}
    for replica in replicas:
        got = [await replica.session.answer(rid, timeout=20.0) for rid in replica.requests]
        out[replica.tag] = [a.message for a in got]
    for replica in replicas:
        assert replica.session.unanswered_or_twice() == {}, replica.tag
    return out


async def test_a_hold_set_by_one_replica_holds_all_three_then_one_goes_first(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=2),
        Scenario.text("first", delay_s=0.4),  # slow, so that anyone not waiting for it shows
        provider="a",
    )
    loopback_provider.default = Scenario.text("ok")
    sections = {
        "fleet": fleet_section(redis_server.url),
        "retry": RETRY,
        "provider_hold": HOLD,
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(3, hub, loopback_settings, tmp_path, sections)
    try:
        await replicas[0].ask("limited")
        hold = await replicas[0].wait_trace("provider:hold")
        for replica in replicas:  # two more calls on each replica, during the hold
            await replica.ask()
            await replica.ask()
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    for tag, messages in answered.items():
        assert all("result" in m for m in messages), (tag, messages)
    assert (hold["reason"], hold["durationMs"] > 1500) == ("rate_limit", True)
    calls = sorted(loopback_provider.calls_to("a"), key=lambda c: c.started_at)
    assert len(calls) == 1 + 7  # the 429, then each of the seven calls once
    limited, probe, rest = calls[0], calls[1], calls[2:]
    assert limited.scenario is not None and limited.scenario.status == 429
    # Nobody reached the provider until the hold ended...
    assert all(c.started_at * 1000 >= hold["untilMs"] - 5 for c in calls[1:])
    # ...then exactly one call went first, and the rest only once it had succeeded.
    assert probe.ended_at is not None
    assert all(c.started_at >= probe.ended_at for c in rest)
    # Each replica saw the hold at once: its calls waited, announced, for the hold.
    for replica in replicas:
        reasons = {t["reason"] for t in replica.traces("inference:waiting")}
        assert "hold" in reasons, replica.tag
    await loopback_provider.wait_idle()


async def test_max_in_flight_holds_across_three_replicas(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    loopback_provider.default = Scenario.text("ok", delay_s=0.3)
    sections = {
        "fleet": fleet_section(redis_server.url),
        "rate_limit": {"max_wait_s": 20.0, "providers": {"a": {"max_in_flight": 3}}},
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(3, hub, loopback_settings, tmp_path, sections)
    try:
        await asyncio.gather(
            *(replica.ask(f"{replica.tag}-{i}") for replica in replicas for i in range(4))
        )
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    results = [m for messages in answered.values() for m in messages]
    assert len(results) == 12 and all(m["result"]["content"] == "ok" for m in results)
    calls = loopback_provider.calls_to("a")
    assert len(calls) == 12
    assert most_at_once(calls) <= 3
    limit_waits = [
        t for r in replicas for t in r.traces("inference:waiting") if t["reason"] == "limit"
    ]
    assert limit_waits  # twelve calls, three slots: some waited, and said so
    await loopback_provider.wait_idle()


async def test_a_slot_of_a_killed_replica_comes_back_by_expiry(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    redis_server: RedisServer,
    tmp_path: Path,
    trace_recorder: TraceRecorder,
) -> None:
    from agentcore_rate_limit import RateLimit

    loopback_provider.script(Scenario.stall(), provider="a")
    loopback_provider.default = Scenario.text("after")
    fleet = fleet_section(redis_server.url, prefix=f"killed-{uuid.uuid4().hex[:8]}")
    # A 3 s lease: renewed every second while the doomed replica lived, so at least 2 s of it
    # are left when the survivor asks, time enough for the survivor to load on a busy machine
    # and still find the dead slot taken.
    limits = {"max_wait_s": 10.0, "slot_lease_s": 3.0, "providers": {"a": {"max_in_flight": 1}}}
    sections = {"fleet": fleet, "rate_limit": limits}
    [doomed] = await start_replicas(1, hub, loopback_settings, tmp_path, sections)
    await doomed.ask("stalls, holding the only slot")
    while loopback_provider.in_flight == 0:
        await asyncio.sleep(0.01)
    doomed.process.kill()  # no shutdown: its slot is left in Redis
    await doomed.process.wait()

    settings = loopback_settings(
        {"a": "anthropic"}, name="survivor.toml", sections={"fleet": fleet, "rate_limit": limits}
    )
    plugins = {"rate-limit": RateLimit, "recorder": trace_recorder}
    async with Kernel.load(settings, discover_plugins=False, plugins=plugins) as survivor:
        response = await asyncio.wait_for(
            survivor.complete(Request(MODEL, [Message.user("hi")])), TIMEOUT_S
        )
    assert response.text == "after"
    [(started, wait), (ended, _)] = trace_recorder.waits
    assert (started, ended, wait.reason) == ("start", "end", "limit")  # the dead slot, expiring
    assert len(loopback_provider.calls_to("a")) == 2
    await loopback_provider.wait_idle()
