"""Spend through `agentcore serve` (a real subprocess) with a real stdio MCPL server and
the loopback provider reporting known usage: every wire's cost in the traces is exactly the
configured price of its tokens, cache reads and writes each at their own rate; a model with
no price is `costUsd: null` (never 0) with one warning per model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import MODELS, PROVIDERS, ROUTING, settings_sections
from e2e_support import AGENTCORE, TIMEOUT_S, Hub, ServerSession, finish, serve

from agentcore.testing import API_KEY, LoopbackServer, Scenario
from agentcore.testing.redis import RedisServer
from agentcore.testing.serve import read_jsonl
from agentcore.testing.server import API_KEY_ENV

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
USED = {
    "input_tokens": 1000,
    "output_tokens": 50,
    "cache_read_tokens": 600,
    "cache_write_tokens": 300,
}
UNPRICED = "o:gpt-unpriced-e2e"
WRITES_REPORTED = {"a", "x"}
"""The wires with a word for cache writes (Anthropic's, native and XML)."""


def priced_providers() -> dict[str, Any]:
    """`PROVIDERS`, each with `PRICE` for the model the routing sends its feature set to."""
    out: dict[str, Any] = {}
    for name, given in PROVIDERS.items():
        table = {"kind": given} if isinstance(given, str) else dict(given)
        model = MODELS[name].split(":", 1)[1]
        out[name] = {**table, "models": {model: {"price": PRICE}}}
    return out


def expected_cost(writes: bool) -> float:
    write = USED["cache_write_tokens"] if writes else 0
    read = USED["cache_read_tokens"]
    uncached = USED["input_tokens"] - read - write
    total = (
        uncached * Decimal("3.0")
        + read * Decimal("0.3")
        + write * Decimal("3.75")
        + USED["output_tokens"] * Decimal("15.0")
    )
    return float(total / Decimal(1_000_000))


async def ask(session: ServerSession, feature: str, stream: bool) -> dict[str, Any]:
    params = {
        "featureSet": feature,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    rid = await session.request("inference/request", params)
    return (await session.answer(rid)).message


async def test_costs_in_the_traces_are_the_configured_prices_on_every_wire(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    traces = tmp_path / "traces.jsonl"
    providers = priced_providers()
    routing = {**ROUTING, "by_feature": {**ROUTING["by_feature"], "fs.plain": UNPRICED}}
    settings = loopback_settings(
        providers,
        sections={
            **settings_sections(hub, {"srv": hub.config("srv")}, routing=routing),
            "traces": {"jsonl": str(traces)},
        },
    )
    process = await serve(settings)
    try:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for name in PROVIDERS:
            for stream in (True, False):
                loopback_provider.script(Scenario.text("Fine.", **USED), provider=name)
                answer = await ask(session, f"fs.{name}", stream)
                assert "result" in answer, answer
        for _ in range(2):  # twice, one warning
            loopback_provider.script(Scenario.text("Fine.", **USED), provider="o")
            assert "result" in await ask(session, "fs.plain", False)
        process.send_signal(signal.SIGTERM)
        code, _, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    events = read_jsonl(traces)
    unpriced = [e for e in events if e.get("model") == UNPRICED]
    assert [e["costUsd"] for e in unpriced if e["type"] == "inference:complete"] == [None, None]
    warned = [e for e in events if e["type"] == "inference:unpriced"]
    assert [(e["provider"], e["model"], e["level"]) for e in warned] == [
        ("o", "gpt-unpriced-e2e", "warning")
    ]
    assert "[providers.o.models.gpt-unpriced-e2e] price" in warned[0]["message"]
    events = [e for e in events if e not in unpriced and e.get("model") != "gpt-unpriced-e2e"]
    completes = [e for e in events if e["type"] == "inference:complete"]
    answered = [e for e in events if e["type"] == "mcpl:inference_complete"]
    assert len(completes) == len(answered) == 2 * len(PROVIDERS)
    for event in completes:
        name = event["model"].split(":", 1)[0]
        writes = name in WRITES_REPORTED
        case = (event["model"], event["streamed"])
        assert event["costUsd"] == expected_cost(writes), case
        assert event["inputTokens"] == USED["input_tokens"], case
        assert event["cacheReadTokens"] == USED["cache_read_tokens"], case
        assert event["cacheWriteTokens"] == (USED["cache_write_tokens"] if writes else None), case
    assert sorted(e["costUsd"] for e in answered) == sorted(e["costUsd"] for e in completes)


SMALL = {"input_tokens": 5, "output_tokens": 50}
"""Usage a "Hi" with maxTokens 100 can really have: within the budget's worst case."""


async def test_a_server_budget_refuses_before_the_provider_and_agentcore_spend_agrees(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    """Calls pass while their worst case fits the server's budget; the one that would
    cross it is answered -32603 with the budget's data and never reaches the provider;
    `agentcore spend` then reads from Redis what the traces say was spent."""
    traces = tmp_path / "traces.jsonl"
    fleet = {"backend": "redis", "redis_url": redis_server.url, "key_prefix": uuid.uuid4().hex}
    settings = loopback_settings(
        priced_providers(),
        sections={
            **settings_sections(hub, {"srv": hub.config("srv")}),
            "traces": {"jsonl": str(traces)},
            "fleet": fleet,
            "budget": {"servers": {"srv": {"max_usd": 0.004}}},
        },
    )
    process = await serve(settings)
    answers: list[dict[str, Any]] = []
    try:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for _ in range(20):
            loopback_provider.script(Scenario.text("Fine.", **SMALL), provider="a")
            calls = len(loopback_provider.calls)
            params = {
                "featureSet": "fs.a",
                "messages": [{"role": "user", "content": "Hi"}],
                "preferences": {"maxTokens": 100},
            }
            rid = await session.request("inference/request", params)
            answers.append((await session.answer(rid)).message)
            if "error" in answers[-1]:
                assert len(loopback_provider.calls) == calls  # the provider never saw it
                break
        process.send_signal(signal.SIGTERM)
        code, _, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    *passed, refused = answers
    assert passed and all("result" in a for a in passed)
    error = refused["error"]
    assert error["code"] == -32603
    assert "Budget server:srv" in error["message"] and "resets at" in error["message"]
    data = error["data"]
    assert (data["reason"], data["scope"], data["maxUsd"]) == ("budget", "server:srv", 0.004)
    assert data["resetsAt"].endswith("T00:00:00Z")
    events = read_jsonl(traces)
    costs = [e["costUsd"] for e in events if e["type"] == "mcpl:inference_complete"]
    assert len(costs) == len(passed) and sum(costs) <= 0.004
    assert data["spentUsd"] == pytest.approx(sum(costs))
    [budget_refused] = [e for e in events if e["type"] == "budget:refused"]
    assert budget_refused["scope"] == "server:srv"

    shown = subprocess.run(
        [AGENTCORE, "spend", "--settings", str(settings), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, API_KEY_ENV: API_KEY},
    )
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["window"] == "day"
    [row] = report["budgets"]
    assert (row["scope"], row["maxUsd"], row["reservedUsd"]) == ("server:srv", 0.004, 0.0)
    assert row["spentUsd"] == pytest.approx(sum(costs))


def test_infer_exits_1_with_the_budget_refusal_on_stderr(tmp_path: Path) -> None:
    """A provider budget under `agentcore infer`: a call whose worst case fits goes; one
    whose `--max-tokens` makes it not fit exits 1 naming the budget, nothing on stdout."""
    settings = tmp_path / "agentcore.toml"
    settings.write_text(
        '[providers.echo]\nkind = "echo"\n'
        "[providers.echo.models.m]\nprice = { input = 1000.0, output = 1000.0 }\n"
        "[budget.providers.echo]\nmax_usd = 0.5\n"
    )

    def infer(max_tokens: int) -> subprocess.CompletedProcess[str]:
        model = ["--model", "echo:m", "--max-tokens", str(max_tokens)]
        return subprocess.run(
            [AGENTCORE, "infer", "--settings", str(settings), *model, "hello there"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    fits = infer(100)
    assert (fits.returncode, fits.stdout.strip()) == (0, "hello there"), fits.stderr
    refused = infer(1000)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert "Budget provider:echo" in refused.stderr and "resets at" in refused.stderr
