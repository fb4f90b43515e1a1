"""`agentcore.pricing`: the settings' prices exactly (cache reads and writes at their own
rates), genai-prices' table otherwise, unpriced as None with one warning per model, the
worst case a budget reserves, and genai-prices left unimported when the settings price all."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from decimal import Decimal
from typing import Any

import genai_prices

import agentcore.pricing
from agentcore.inference import Response, StopInfo, Usage
from agentcore.pricing import Pricer
from agentcore.settings import ProviderSettings

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


def providers(**models: Any) -> dict[str, ProviderSettings]:
    return {
        "a": ProviderSettings(kind="anthropic", models=models),
        "e": ProviderSettings(kind="echo"),
    }


def reply(usage: Usage, model: str = "m", served: str | None = None) -> Response:
    return Response([], StopInfo("end_turn"), usage, model, served or model)


async def test_the_settings_price_each_kind_of_token_at_its_rate() -> None:
    pricer = Pricer(providers(m={"price": PRICE}))
    cost = await pricer.cost("a", reply(Usage(1000, 50, 600, 300)))
    expected = (100 * Decimal("3") + 600 * Decimal("0.3") + 300 * Decimal("3.75") + 50 * 15) / 10**6
    assert cost == float(expected)


async def test_a_cache_rate_left_out_is_the_input_rate_never_zero() -> None:
    pricer = Pricer(providers(m={"price": {"input": 2.0, "output": 4.0}}))
    assert await pricer.cost("a", reply(Usage(1000, 0, 600, 300))) == 1000 * 2.0 / 10**6


async def test_a_model_the_table_knows() -> None:
    pricer = Pricer(providers())
    usage = Usage(1000, 50, 600, 300)
    cost = await pricer.cost("a", reply(usage, "claude-sonnet-4-5", "claude-sonnet-4-5-20250929"))
    table = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=1000, output_tokens=50, cache_read_tokens=600, cache_write_tokens=300
        ),
        "claude-sonnet-4-5",
        provider_id="anthropic",
    )
    assert cost == float(table.total_price) and cost > 0


async def test_calls_ending_together_share_one_import_of_the_table(monkeypatch: Any) -> None:
    """Many streams ending while genai-prices loads: one import in one thread, the others
    wait for it (each used to queue a thread job of its own, held until it ran)."""
    started, release = threading.Event(), threading.Event()
    imports: list[int] = []

    def slow_import() -> Any:
        imports.append(1)
        started.set()
        release.wait(30)
        return genai_prices

    monkeypatch.setattr(agentcore.pricing, "_import_genai_prices", slow_import)
    pricer = Pricer(providers())
    usage = Usage(1000, 50)
    calls = [asyncio.ensure_future(pricer.cost("a", reply(usage, "gpt-4o"))) for _ in range(20)]
    await asyncio.to_thread(started.wait, 30)
    calls[0].cancel()  # a caller that leaves does not cancel the others' import
    await asyncio.sleep(0)
    release.set()
    costs = await asyncio.gather(*calls[1:])
    assert imports == [1]
    assert pricer.needs_table("a", "gpt-4o") is False
    assert len(set(costs)) == 1


async def test_unpriced_is_none_with_one_warning_per_model() -> None:
    warned: list[tuple[str, dict[str, Any]]] = []
    pricer = Pricer(providers(), lambda type, **fields: warned.append((type, fields)))
    for model in ("no-such-model-1", "no-such-model-1", "no-such-model-2"):
        assert await pricer.cost("a", reply(Usage(10, 10), model)) is None
    assert [(t, f["model"], f["level"]) for t, f in warned] == [
        ("inference:unpriced", "no-such-model-1", "warning"),
        ("inference:unpriced", "no-such-model-2", "warning"),
    ]
    assert await pricer.cost("e", reply(Usage(10, 10), "anything")) == 0.0  # echo: free


async def test_a_model_the_table_lacks_is_searched_for_once(monkeypatch: Any) -> None:
    """A miss walks the whole table: an unpriced model's later calls skip it."""
    searched: list[str] = []
    real = genai_prices.calc_price

    def calc_price(usage: Any, model: str, **where: Any) -> Any:
        searched.append(model)
        return real(usage, model, **where)

    monkeypatch.setattr(genai_prices, "calc_price", calc_price)
    pricer = Pricer(providers())
    for _ in range(3):
        assert await pricer.cost("a", reply(Usage(10, 10), "no-such-model")) is None
        assert await pricer.cost("a", reply(Usage(10, 10), "claude-sonnet-4-5")) is not None
    assert searched.count("no-such-model") == 1
    assert searched.count("claude-sonnet-4-5") == 3  # a price may change with the time


def test_the_worst_case_is_every_input_token_at_its_dearest_rate() -> None:
    pricer = Pricer(providers(m={"price": PRICE}))
    worst = pricer.worst_case("a", "m", 1000, 50)
    assert worst == float((1000 * Decimal("3.75") + 50 * 15) / 10**6)
    assert pricer.worst_case("a", "unknown-model-x", 1000, 50) is None


def test_genai_prices_is_not_imported_when_the_settings_price_every_model() -> None:
    code = (
        "import asyncio, sys\n"
        "from agentcore.inference import Response, StopInfo, Usage\n"
        "from agentcore.pricing import Pricer\n"
        "from agentcore.settings import ProviderSettings\n"
        "p = Pricer({'a': ProviderSettings(kind='anthropic', models={'m': {'price': "
        "{'input': 1.0, 'output': 1.0}}})})\n"
        "r = Response([], StopInfo('end_turn'), Usage(5, 5), 'm', 'm')\n"
        "assert asyncio.run(p.cost('a', r)) == 10 / 10**6\n"
        "print('genai_prices' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
