"""The budget in kernels with no other policy, on the memory store and a real Redis
(several kernels on one Redis prefix are replicas of one fleet): a call is refused before
any provider traffic when its worst case does not fit; spend settles to the real cost;
a new window admits again; unpriced models per `on_unpriced`; many replicas never spend
past a budget together."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest
import redis.asyncio as aioredis
from agentcore_budget import BUDGET, BUDGET_EXCEEDED, REFUSED_TRACE, BudgetKind, input_bound
from agentcore_budget.kind import KEEP_AFTER_WINDOW_MS, nano_usd, spent

from agentcore.api import (
    Claim,
    ClaimRefusal,
    InferenceError,
    MediaBlock,
    Message,
    Request,
    Response,
    StopInfo,
    TextBlock,
    ThinkingBlock,
    Token,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageUpdate,
)
from agentcore.testing import Kernel, ScriptedProvider, TraceRecorder
from agentcore.testing.redis import RedisServer
from agentcore.testing.scripted import Stall

Load = Callable[..., Kernel]
USAGE = Usage(10, 100)
COST = (10 * 10.0 + 100 * 10.0) / 1_000_000
"""What each call costs: 10 in and 100 out at $10 per million."""


def req(server: str | None = "s1", model: str = "m1", max_tokens: int = 100) -> Request:
    metadata = {"serverId": server} if server else {}
    reference = model if ":" in model else f"fake:{model}"
    return Request(reference, [Message.user("hi")], max_tokens=max_tokens, metadata=metadata)


WORST = (input_bound(req()) * 10.0 + 100 * 10.0) / 1_000_000
"""The worst case each call reserves: every input byte a token, max_tokens out."""


@pytest.fixture(autouse=True)
def priced_reply(scripted_provider: ScriptedProvider) -> None:
    scripted_provider.default = Response(
        [TextBlock("hello")], StopInfo("end_turn", "end_turn"), USAGE, "m1", "m1"
    )


async def settled(kernel: Kernel) -> None:
    """Wait for the grants given back to reach the store (each release is a task of its
    own, riding with the store's next operation)."""
    while kernel.admission._releases:
        await asyncio.wait(set(kernel.admission._releases))


async def complete(kernel: Kernel, request: Request) -> Response:
    response = await kernel.complete(request)
    await settled(kernel)
    return response


async def refused(kernel: Kernel, request: Request) -> InferenceError:
    with pytest.raises(InferenceError) as caught:
        await kernel.complete(request)
    assert caught.value.code == BUDGET_EXCEEDED
    return caught.value


async def test_the_call_that_would_cross_the_budget_is_refused_before_the_provider(
    load: Load, scripted_provider: ScriptedProvider, trace_recorder: TraceRecorder
) -> None:
    """Room for 3 worst cases: 3 calls pass (each settling to its real cost, less than
    reserved), and then only as many more as the settled spend leaves room for."""
    max_usd = 3 * WORST + WORST / 2
    async with load(f"[budget.servers.s1]\nmax_usd = {max_usd!r}") as kernel:
        costs = []
        while True:
            try:
                costs.append((await complete(kernel, req())).cost_usd)
            except InferenceError as error:
                assert error.code == BUDGET_EXCEEDED
                last = error
                break
        calls = len(scripted_provider.calls)
        again = await refused(kernel, req())
        assert len(scripted_provider.calls) == calls  # the provider never saw them
        other = await complete(kernel, req("s2"))  # another server has no budget
    assert costs == [COST] * len(costs) and len(costs) >= 3
    assert sum(costs) + WORST > max_usd >= sum(costs)
    assert other.cost_usd == COST
    assert last.data is not None and again.data is not None
    assert last.data["reason"] == "budget" and last.data["scope"] == "server:s1"
    assert last.data["maxUsd"] == max_usd
    assert last.data["spentUsd"] == pytest.approx(sum(costs))
    assert last.data["resetsAt"] == "2026-12-07T00:00:00Z"
    assert "Budget server:s1" in str(last) and "2026-12-07T00:00:00Z" in str(last)
    traces = trace_recorder.of(REFUSED_TRACE)
    assert [(t["scope"], t["reason"]) for t in traces] == [("server:s1", "budget")] * 2


async def test_a_new_window_admits_again(load: Load, clock: Any) -> None:
    async with load(f'window = "hour"\n[budget.providers.fake]\nmax_usd = {WORST * 1.5!r}') as k:
        await complete(k, req(None))
        error = await refused(k, req(None))
        assert error.data is not None and error.data["resetsAt"] == "2026-12-06T13:00:00Z"
        assert error.data["scope"] == "provider:fake"
        clock.now += 3600  # the next hour
        assert (await complete(k, req(None))).cost_usd == COST


@pytest.mark.parametrize("backend", ["memory"])
@pytest.mark.parametrize("on_unpriced", ["refuse", "allow"])
async def test_an_unpriced_model_under_a_budget(
    load: Load, scripted_provider: ScriptedProvider, on_unpriced: str
) -> None:
    settings = f'on_unpriced = "{on_unpriced}"\n[budget.servers.s1]\nmax_usd = 1.0'
    extra = '[providers.paid]\nkind = "scripted-paid"\n'  # not free, and no price known
    async with load(settings, extra) as kernel:
        if on_unpriced == "refuse":
            error = await refused(kernel, req(model="paid:no-such-model-x"))
            assert error.data is not None and error.data["unpriced"] == "paid:no-such-model-x"
            assert "on_unpriced" in str(error)
            assert scripted_provider.calls == []
        else:
            response = await kernel.complete(req(model="paid:no-such-model-x"))
            assert (response.text, response.cost_usd) == ("hello", None)


@pytest.mark.parametrize("backend", ["redis"])
async def test_three_replicas_and_200_concurrent_calls_never_spend_past_a_budget(
    load: Load, scripted_provider: ScriptedProvider
) -> None:
    """Three kernels on one Redis, 200 calls at once from three servers: every budget's
    real spend stays within its limit, and the calls past it are refused."""
    scripted_provider.latency_s = 0.01
    limits = {"s0": 10 * WORST, "s1": 25 * WORST, "s2": 1000 * WORST}
    provider_limit = 60 * WORST
    budget = "".join(f"[budget.servers.{s}]\nmax_usd = {v!r}\n" for s, v in limits.items())
    budget += f"[budget.providers.fake]\nmax_usd = {provider_limit!r}\n"
    replicas = [load(budget) for _ in range(3)]
    for kernel in replicas:
        await kernel.start()
    rng = random.Random(26)
    servers = [f"s{rng.randrange(3)}" for _ in range(200)]

    async def one(n: int, server: str) -> tuple[str, float | None]:
        try:
            response = await replicas[n % 3].complete(req(server))
        except InferenceError as error:
            assert error.code == BUDGET_EXCEEDED
            return server, None
        return server, response.cost_usd

    try:
        results = await asyncio.gather(*(one(n, s) for n, s in enumerate(servers)))
    finally:
        for kernel in replicas:
            await kernel.stop()
    spent = {s: sum(c or 0.0 for name, c in results if name == s) for s in limits}
    for server, limit in limits.items():
        assert spent[server] <= limit, (server, spent[server], limit)
    assert sum(spent.values()) <= provider_limit
    refusals = [s for s, c in results if c is None]
    assert len(refusals) > 0 and len(refusals) < 200
    assert len(scripted_provider.calls) == 200 - len(refusals)


INPUT_WORST = input_bound(req()) * 10.0 / 1_000_000
"""The input's part of `WORST`: every input byte a token."""
REPORTED = Usage(1000, 7)
REPORTED_COST = (1000 + 7) * 10.0 / 1_000_000
CUT = InferenceError("network", "The connection to the provider broke mid-reply")


@pytest.mark.parametrize(
    ("ending", "steps", "cost"),
    [
        # The provider reported its usage, then the server cancelled, or the stream broke.
        ("cancel", [UsageUpdate(REPORTED), Token("hel", "text"), Stall()], REPORTED_COST),
        ("end", [UsageUpdate(REPORTED), Token("hel", "text"), CUT], REPORTED_COST),
        # A wire that reports usage only at its end (chat completions): the input was read.
        ("cancel", [Token("hel", "text"), Stall()], INPUT_WORST),
        ("wait", [Stall()], INPUT_WORST),  # cancelled before its first token
        ("whole", [Stall()], WORST),  # a whole reply may be written to its end all the same
        ("end", [InferenceError("overloaded", "529")], 0.0),  # an error answer: not billed
    ],
    ids=["cancelled", "cut", "cancelled-unreported", "cancelled-early", "whole", "refused"],
)
async def test_a_call_that_ends_without_a_reply_spends_what_the_provider_billed(
    load: Load, scripted_provider: ScriptedProvider, ending: str, steps: list[Any], cost: float
) -> None:
    """A provider bills the prompt it read however the call ends: a call its server cancels
    (after the first chunk, or before) or whose stream breaks settles at the usage the
    provider reported, else at its worst case (the input's; a whole call's output too),
    never at $0, so a server that cancels every call still runs into its budget."""
    scripted_provider.script.append(steps)
    async with load("[budget.servers.s1]\nmax_usd = 1.0") as kernel:

        async def call() -> None:
            if ending == "whole":
                await kernel.complete(req())
                return
            async with aclosing(kernel.stream(req())) as events:
                async for event in events:
                    if isinstance(event, Token) and ending == "cancel":
                        return  # the server cancels: the stream is closed mid-reply

        task = asyncio.create_task(call())
        if ending in ("wait", "whole"):
            await scripted_provider.stalled.wait()
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await settled(kernel)
        report = (await kernel.hooks.spend_report())[0][1]
    [row] = report["budgets"]
    assert (row["scope"], row["reservedUsd"]) == ("server:s1", 0.0)
    assert row["spentUsd"] == pytest.approx(cost)


async def test_a_reservation_goes_back_once_and_only_from_its_holder(
    load: Load, redis_server: RedisServer
) -> None:
    """The kind's own steps on each store: two holders reserve; a holder never granted
    and a second give-back take nothing back; each give-back settles its real cost. On
    Redis the books and the reservations of a window expire a day after it, the
    reservations again when a take makes them anew."""
    end_ms = 1_796_601_600_000  # 2026-12-07T00:00:00Z
    claim = Claim(BUDGET, "server:s1:day:2026-12-06", (0.6, 250_000_000, end_ms, 60_000))
    async with load("[budget.servers.s1]\nmax_usd = 1.0") as kernel:
        store = kernel.fleet
        store.register_kinds([BudgetKind()])
        expiries = _expiries(kernel, redis_server, claim.key)
        assert await store.admit([claim], "a") == [0]
        assert await store.admit([claim], "b") == [0]
        assert await spent(store, claim.key, end_ms) == (0.0, 0.5)
        assert await expiries() in ([], [end_ms + KEEP_AFTER_WINDOW_MS] * 2)
        refusal = await store.admit([claim], "c")
        assert isinstance(refusal, ClaimRefusal) and refusal.detail == BUDGET
        assert float(refusal.info or "nan") == 0.5
        await store.release([claim], "c", [(0.1,)])  # refused: holds nothing
        await store.release([claim], "a", [(0.1,)])
        await store.release([claim], "a", [(0.1,)])  # given back twice: once
        assert await spent(store, claim.key, end_ms) == (pytest.approx(0.1), 0.25)
        await store.release([claim], "b", [(0.05,)])
        assert await spent(store, claim.key, end_ms) == (pytest.approx(0.15), 0.0)
        assert await store.admit([claim], "d") == [0]  # no holder left: the set is new
        assert await expiries() in ([], [end_ms + KEEP_AFTER_WINDOW_MS] * 2)


async def test_no_replica_keeps_a_wake_up_event_for_a_budget(
    load: Load, trace_recorder: TraceRecorder
) -> None:
    """No call waits on a budget (a refusal fails at once), so admission watches no budget
    key: a store keeps no "changed" event for one, which would outlive its window (one a
    day per server and provider, never woken, since a release wakes nobody)."""
    async with load("[budget.servers.s1]\nmax_usd = 1.0") as kernel:
        await complete(kernel, req())
        await refused(kernel, req(max_tokens=200_000))
        events = kernel.fleet._changed  # type: ignore[attr-defined]
        assert not [key for key in events if key.startswith("server:")], events


def _expiries(kernel: Kernel, redis_server: RedisServer, key: str) -> Callable[[], Any]:
    """When each Redis key of a budget `key` expires (ms); none on the memory store."""
    fleet = kernel.settings.fleet

    async def read() -> list[int]:
        if fleet.backend != "redis":
            return []
        client = aioredis.Redis.from_url(redis_server.url)
        try:
            families = BudgetKind.redis_keys[:2]  # the books and the reservations
            names = [f"{{{fleet.key_prefix}}}:{f}:{key}" for f in families]
            return [await client.pexpiretime(name) for name in names]
        finally:
            await client.aclose()

    return read


def test_the_input_bound_counts_every_byte_of_every_block() -> None:
    """Every string counts its UTF-8 bytes (not its characters), a tool call's input and a
    tool's schema their JSON, in every kind of block: none is under-counted, and the
    framing added stays small."""
    text = "naïve café, 東京 " * 40
    utf8 = len(text.encode())
    assert utf8 > len(text)
    data = "iVBORw0KGgo" * 20
    blocks = [
        TextBlock(text),
        ThinkingBlock(text, "sig"),
        ToolUseBlock("t1", "lookup", {"q": text}),
        ToolResultBlock("t1", text),
        MediaBlock("image/png", data),
    ]
    tool = Tool("lookup", text, {"type": "object", "description": text})
    request = Request("fake:m1", [Message("user", blocks)], system=text, tools=[tool])
    at_least = 7 * utf8 + len("sig") + len(data)  # system, 4 blocks, the tool twice
    assert at_least <= input_bound(request) <= at_least + 400


def test_a_reservation_is_whole_nano_usd_never_below_the_worst_case() -> None:
    assert [nano_usd(x) for x in (0.0, 1e-12, 0.25, 1e-9 * 3.5)] == [0, 1, 250_000_000, 4]
    assert all(nano_usd(x) / 1e9 >= x for x in (0.1, 0.3, 1 / 3, 123.456789123, 7e-7))
