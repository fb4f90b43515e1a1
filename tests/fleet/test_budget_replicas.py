"""Budgets across three `agentcore serve` processes sharing one real Redis: 200 concurrent
`inference/request`s from three servers (one per replica) never spend past any budget
(each server's, and the provider's), and the calls past a budget are refused with its
data before any provider traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fleet_rig
import pytest
from e2e_support import Hub, make_hub
from fleet_rig import fleet_section, start_replicas

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.redis import RedisServer

PRICE = {"input": 3.0, "output": 15.0}
SERVER_USD = {"r0": 0.15, "r1": 0.25, "r2": 10.0}
PROVIDER_USD = 0.5
CALLS = 200


@pytest.fixture
async def hub() -> Iterator[Hub]:  # type: ignore[misc]
    hub = await make_hub("stdio").start()
    try:
        yield hub
    finally:
        await hub.stop()


async def test_three_replicas_and_200_concurrent_requests_never_spend_past_a_budget(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = fleet_rig.MODEL.split(":", 1)[1]
    priced = {"a": {"kind": "anthropic", "models": {model: {"price": PRICE}}}}
    monkeypatch.setattr(fleet_rig, "PROVIDERS", priced)
    config = hub.config  # 67 requests at once from each server: above the default bound
    monkeypatch.setattr(hub, "config", lambda tag: {**config(tag), "max_requests_in_flight": 100})
    loopback_provider.default = Scenario.text("ok", input_tokens=5, output_tokens=50, delay_s=0.05)
    sections = {
        "fleet": fleet_section(redis_server.url),
        "budget": {
            "servers": {name: {"max_usd": usd} for name, usd in SERVER_USD.items()},
            "providers": {"a": {"max_usd": PROVIDER_USD}},
        },
    }
    replicas = await start_replicas(3, hub, loopback_settings, tmp_path, sections)
    try:
        await asyncio.gather(*(replicas[n % 3].ask(f"call {n}") for n in range(CALLS)))
        answered: dict[str, list[dict[str, Any]]] = {}
        for replica in replicas:
            got = [await replica.session.answer(rid, timeout=60.0) for rid in replica.requests]
            answered[replica.tag] = [a.message for a in got]
            assert replica.session.unanswered_or_twice() == {}, replica.tag
    finally:
        for replica in replicas:
            await replica.stop()
    spent: dict[str, float] = {}
    refused = 0
    for replica in replicas:
        costs = [t["costUsd"] for t in replica.traces("mcpl:inference_complete")]
        spent[replica.tag] = sum(costs)
        results = [m for m in answered[replica.tag] if "result" in m]
        errors = [m["error"] for m in answered[replica.tag] if "error" in m]
        assert len(costs) == len(results) and None not in costs
        for error in errors:
            assert error["code"] == -32603 and error["data"]["reason"] == "budget", error
            assert error["data"]["scope"] in (f"server:{replica.tag}", "provider:a")
        refused += len(errors)
    for tag, usd in SERVER_USD.items():
        assert spent[tag] <= usd, (tag, spent[tag], usd)
    assert sum(spent.values()) <= PROVIDER_USD
    assert 0 < refused < CALLS
    assert len(loopback_provider.calls_to("a")) == CALLS - refused  # the refused never went
