"""Spend through `agentcore serve` (a real subprocess) with a real stdio MCPL server and
the loopback provider reporting known usage: every wire's cost in the traces is exactly the
configured price of its tokens, cache reads and writes each at their own rate; a model with
no price is `costUsd: null` (never 0) with one warning per model."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from e2e_rig import MODELS, PROVIDERS, ROUTING, settings_sections
from e2e_support import TIMEOUT_S, Hub, ServerSession, finish, serve

from agentcore.testing import LoopbackServer, Scenario

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
    events = [json.loads(line) for line in traces.read_text().splitlines()]
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
