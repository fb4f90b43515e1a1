"""What the fleet store costs and what it buys: Redis against the memory backend, one run.

1. Admission cost per call at 200 concurrent calls: 200 workers each run calls back to
   back, each call admitted by the kernel's admission step (the provider hold's claim and
   the rate limit's window and slot claims, max_in_flight and requests_per_minute set,
   never reached: one store operation), then "in flight" for 0.5-1.5 s (an LLM call's
   order of magnitude), then ended. A call's cost is its admission plus its attempt end
   (`on_attempt_end`; the grant is given back with no task of its own, riding in the
   store's next write), timed with `time.perf_counter`.
   Reported: p50 and p99 for the memory backend and for Redis on loopback, and what
   Redis adds. Target: p99 added <= 1 ms. Also shown: the same 200 calls admitted all
   at the same instant (a burst), where each waits for the ones before it. Beside the
   latencies, figures a noisy machine does not move much: Redis round trips per call
   (writes: the store pipelines its scripts on one connection), and CPU per
   call in this process and in redis-server. On a machine whose cores are shared, the
   wall-clock latencies mostly measure how soon redis-server and this process get a
   core back: compare them with the load average printed at the top. The garbage
   collector is settled as `agentcore serve` settles it once serving
   (`settle_garbage_collector`), for every row alike.
2. The floor: a bare EVALSHA loop (the admission script, the same claims) at the same
   concurrency and call pattern, through redis-py (hiredis) and through coredis, in the
   same run: what one round trip costs this machine with each client, below which no
   store design gets. Its p99 is `floor_evalsha_p99_ms` (redis-py, the client kept).
   With the budget claims added (plugin `budget`: a server's and a provider's budget,
   never reached, the model priced in the settings), the same 200 calls in flight, each
   ending with a priced reply (its claims settle a real cost): the admission step still
   makes one store operation, now with two more claims; the same target holds (issue 26).
   Its own floor is beside it: a bare EVALSHA of the admission script with the same four
   claims (window, slot, two budgets), through redis-py, in the same turns.
   Beside them, CPU per call in this process and in redis-server, which a noisy machine
   moves much less than the latencies. The steady rows (memory, Redis, both with the
   budget claims, and the two floors) take turns in `--rounds` slices of their
   `--seconds`, so each sees the same moments of a shared machine: run one after another,
   a noisy half-minute lands on one row and its p99 alone. Each slice ends with its calls
   in flight ending with no admission to ride with (their releases go alone): the round
   trips per call count that once per slice (default: 2 slices of 6 s, as the 6 s rows
   before them).
3. Calls a 3-replica fleet sends to a provider during a 2 s hold after one 429: three
   kernels (replicas), one gets the 429, then every replica sends calls through the
   hold. Target with Redis: 0; the memory backend's count (each replica holds alone)
   beside it.

Needs a ``redis-server`` binary (started on a free loopback port, stopped after).
Run: ``python bench/fleet.py`` (``--json``: one JSON object last, the figures issue 25
names).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeAlias

from agentcore_budget import BUDGET, Budget, BudgetKind
from agentcore_provider_hold import ProviderHold
from agentcore_rate_limit import RateLimit

from agentcore.fleet import admit_script
from agentcore.fleet.claims import SLOTS, WINDOW, Claim, Scalar
from agentcore.inference import (
    InferenceError,
    Message,
    Request,
    Response,
    StopInfo,
    TextBlock,
    Usage,
)
from agentcore.inference.calls import Attempt, Inference
from agentcore.kernel import Kernel
from agentcore.mcpl.host import settle_garbage_collector
from agentcore.testing import OK, ScriptedProvider, scripted_kind
from agentcore.testing.redis import RedisServer

TARGET_P99_ADDED_MS = 1.0
CONCURRENCY = 200
HOLD_S = 2.0


BUDGETS = (
    "[providers.fake.models.m1]\nprice = { input = 1.0, output = 1.0 }\n"
    "[budget.servers.bench]\nmax_usd = 1e12\n[budget.providers.fake]\nmax_usd = 1e12\n"
)
"""Two budgets every bench call falls under, never reached (the budget rows)."""
PRICED = Response(
    [TextBlock("ok")], StopInfo("end_turn"), Usage(20, 100), "m1", "m1", cost_usd=0.00012
)
"""How each call of the budget rows ends: a reply with a cost, which its claims settle."""


def settings(
    folder: Path, backend: str, redis_url: str, prefix: str, name: str, budget: bool = False
) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        '[providers.fake]\nkind = "scripted"\n'
        f'[fleet]\nbackend = "{backend}"\nredis_url = "{redis_url}"\nkey_prefix = "{prefix}"\n'
        "[provider_hold]\nmax_wait_s = 30\n"
        "[rate_limit.providers.fake]\nmax_in_flight = 100000\nrequests_per_minute = 100000000\n"
        + (BUDGETS if budget else "")
    )
    return path


def load(path: Path, provider: ScriptedProvider) -> Kernel:
    plugins = {
        "provider-hold": ProviderHold,
        "rate-limit": RateLimit,
        "budget": Budget,
        "scripted": scripted_kind(provider),
    }
    return Kernel.load(path, environ={}, discover_plugins=False, plugins=plugins)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


class Counts:
    """Round trips and scripts the Redis store sent (its batches), and CPU seconds."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.scripts = 0
        self.cpu_s = 0.0
        self.redis_cpu_s = 0.0


def count_round_trips(store: object, counts: Counts) -> Callable[[], None]:
    """Count the Redis store's batches (one pipeline, or one script, each a round trip)
    until the returned function is called."""
    writer = getattr(store, "_writer", None)  # redis_writer.ScriptWriter: its counters
    if writer is None:
        return lambda: None  # the memory store: no round trips
    sends, scripts = writer.sends, writer.scripts

    def stop() -> None:
        counts.round_trips += writer.sends - sends
        counts.scripts += writer.scripts - scripts

    return stop


async def redis_cpu_s(url: str) -> float:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        info = await client.info("cpu")
    finally:
        await client.aclose()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def admission_costs(
    kernel: Kernel, seconds: float, burst: bool, reply: Response | None = None
) -> list[float]:
    """Seconds per call (admission and attempt end), `CONCURRENCY` calls in flight: calls
    lasting 0.5-1.5 s back to back, or (`burst`) rounds of calls all admitted at once.
    Each attempt ends with `reply` (None: with no reply)."""
    request = Request("fake:m1", [Message.user("hi")], metadata={"serverId": "bench"})
    costs: list[float] = []
    ids = iter(range(10**9))
    deadline = time.monotonic() + seconds

    async def one(in_flight_s: float) -> None:
        attempt = Attempt(Inference(f"b{next(ids)}", request, "fake", "m1", False), 1)
        started = time.perf_counter()
        await kernel.hooks.admission(attempt)
        await kernel.admission.admit(attempt)
        admitted = time.perf_counter()
        await asyncio.sleep(in_flight_s)
        ending = time.perf_counter()
        await kernel.hooks.attempt_end(attempt, None)
        kernel.admission.release(attempt, reply, None)
        costs.append(admitted - started + time.perf_counter() - ending)

    await calls(one, deadline, burst)
    return costs


async def calls(one: Callable[[float], Awaitable[None]], deadline: float, burst: bool) -> None:
    """`CONCURRENCY` workers running `one(in_flight_s)` back to back until `deadline`."""

    async def worker() -> None:
        await asyncio.sleep(random.uniform(0, 1.0))  # calls start spread out, as they do
        while time.monotonic() < deadline:
            await one(random.uniform(0.5, 1.5))

    if burst:
        while time.monotonic() < deadline:
            await asyncio.gather(*(one(0.0) for _ in range(CONCURRENCY)))
    else:
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def floor_claims(prefix: str, n: int, budget: bool) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of the admission script for the bench's claims (window and slot; with
    `budget`, the budget rows' two budget claims too, reserving what their calls do)."""
    claims = [
        Claim(WINDOW, "fake", (100_000_000, 60_000)),
        Claim(SLOTS, "fake", (100_000, 30_000)),
    ]
    sent: list[tuple[Claim, tuple[str, ...], tuple[Scalar, ...]]] = [
        (c, (f"{{{prefix}}}:{c.kind}:fake",), c.args) for c in claims
    ]
    if budget:
        end_ms = int(time.time() // 86_400 + 1) * 86_400_000
        for scope in ("server:bench", "provider:fake"):
            key = f"{scope}:day:floor"
            claim = Claim(BUDGET, key, (1e12, 240_000, end_ms, 60_000))
            families = tuple(f"{{{prefix}}}:{family}:{key}" for family in BudgetKind.redis_keys)
            sent.append((claim, families, claim.args))
    return admit_script.encode(sent, f"{prefix}:wake:", "admit", f"floor:{n}")


Row: TypeAlias = Callable[[float], Awaitable[list[float]]]
"""One steady row of the bench: run it for so many seconds, get each call's seconds."""


def floor_row(
    evalsha: Callable[[list[str], list[object]], Awaitable[object]], budget: bool = False
) -> Row:
    """The floor's row: one bare `evalsha(keys, argv)` of the admission script per call,
    timed, in the bench's call pattern (each client's own call in `evalsha`)."""
    prefix, ids = f"floor-{uuid.uuid4().hex[:8]}", iter(range(10**9))

    async def row(seconds: float) -> list[float]:
        costs: list[float] = []

        async def one(in_flight_s: float) -> None:
            keys, argv = floor_claims(prefix, next(ids), budget)
            started = time.perf_counter()
            await evalsha(keys, argv)
            costs.append(time.perf_counter() - started)
            await asyncio.sleep(in_flight_s)

        await calls(one, time.monotonic() + seconds, burst=False)
        return costs

    return row


@contextlib.asynccontextmanager
async def floor_redis_py(url: str, budget: bool = False) -> AsyncIterator[Row]:
    """Bare EVALSHAs of the admission script through redis-py (hiredis), the store's own
    pool settings, the bench's call pattern; with `budget`, the budget rows' claim set."""
    import redis.asyncio as aioredis

    from agentcore.fleet.redis_connect import POOL_SIZE

    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=POOL_SIZE, timeout=None, decode_responses=True
    )
    client = aioredis.Redis(connection_pool=pool)
    sha = await client.script_load(admit_script.compose([BudgetKind()] if budget else ()))

    async def evalsha(keys: list[str], argv: list[object]) -> object:
        return await client.evalsha(sha, len(keys), *keys, *argv)  # type: ignore[arg-type]

    try:
        yield floor_row(evalsha, budget)
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def floor_coredis(url: str) -> AsyncIterator[Row]:
    """The same loop through coredis (its own pool, RESP3), for the client choice."""
    import coredis

    from agentcore.fleet.redis_connect import POOL_SIZE

    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    client = coredis.Redis(host, int(port), decode_responses=True, max_connections=POOL_SIZE)
    async with client:
        sha = await client.script_load(admit_script.compose(()))

        async def evalsha(keys: list[str], argv: list[object]) -> object:
            return await client.evalsha(sha, keys=keys, args=argv)  # type: ignore[arg-type]

        yield floor_row(evalsha)


async def calls_during_hold(folder: Path, backend: str, redis_url: str) -> int:
    """Provider calls the fleet made while the hold was in force."""
    provider = ScriptedProvider(latency_s=0.01)
    limited = InferenceError("rate_limit", "429", status=429, retry_after_s=HOLD_S)
    provider.script = [limited]
    provider.default = OK
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    replicas = [
        load(settings(folder, backend, redis_url, prefix, f"r{n}"), provider) for n in range(3)
    ]
    for replica in replicas:
        await replica.start()
    try:
        request = Request("fake:m1", [Message.user("hi")])
        with contextlib.suppress(InferenceError):
            await replicas[0].complete(request)
        hold_end = time.time() + HOLD_S - 0.05  # the hold's end, give or take the first call

        async def keep_calling(replica: Kernel) -> None:
            while time.time() < hold_end:
                await asyncio.gather(*(replica.complete(request) for _ in range(5)))
                await asyncio.sleep(0.1)

        await asyncio.gather(*(keep_calling(r) for r in replicas))
    finally:
        for replica in replicas:
            await replica.stop()
    first = provider.calls[0].started_at
    return sum(1 for c in provider.calls[1:] if c.started_at < first + HOLD_S - 0.05)


async def steady_rows(
    rows: dict[str, tuple[Row, Kernel | None]], redis_url: str, seconds: float, rounds: int
) -> tuple[dict[str, list[float]], dict[str, Counts]]:
    """Each row for `seconds` in all, taking turns in `rounds` slices: every row sees the
    same moments of a shared machine, so their p99s compare (one row after another, a
    noisy minute lands on one of them)."""
    costs: dict[str, list[float]] = {name: [] for name in rows}
    counts: dict[str, Counts] = {name: Counts() for name in rows}
    for _ in range(rounds):
        for name, (row, kernel) in rows.items():
            counted = counts[name]
            stop_counting = count_round_trips(kernel.fleet if kernel else None, counted)
            cpu, redis_cpu = time.process_time(), await redis_cpu_s(redis_url)
            costs[name] += await row(seconds / rounds)
            counted.cpu_s += time.process_time() - cpu
            counted.redis_cpu_s += await redis_cpu_s(redis_url) - redis_cpu
            stop_counting()
    return costs, counts


def kernel_row(kernel: Kernel, reply: Response | None) -> Row:
    return lambda seconds: admission_costs(kernel, seconds, False, reply)


async def main(seconds: float, rounds: int, as_json: bool) -> int:
    with RedisServer() as redis, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # What `agentcore serve` does once serving (the collector's pauses kept out of the
        # calls' way), for every row alike: memory, Redis and the floors.
        settle_garbage_collector()
        async with contextlib.AsyncExitStack() as stack:
            rows: dict[str, tuple[Row, Kernel | None]] = {}
            bursts: dict[str, list[float]] = {}
            burst_counts: dict[str, Counts] = {}
            for budget in (False, True):
                for backend in ("memory", "redis"):
                    name = f"budget-{backend}" if budget else backend
                    path = settings(folder, backend, redis.url, uuid.uuid4().hex, name, budget)
                    kernel = await stack.enter_async_context(load(path, ScriptedProvider()))
                    reply = PRICED if budget else None
                    await admission_costs(kernel, 0.5, True, reply)  # connections, scripts
                    rows[name] = (kernel_row(kernel, reply), kernel)
                    if not budget:  # the burst rows: one after the other
                        counted = burst_counts[backend] = Counts()
                        stop_counting = count_round_trips(kernel.fleet, counted)
                        cpu, redis_cpu = time.process_time(), await redis_cpu_s(redis.url)
                        bursts[backend] = await admission_costs(kernel, seconds, True)
                        counted.cpu_s = time.process_time() - cpu
                        stop_counting()
                        counted.redis_cpu_s = await redis_cpu_s(redis.url) - redis_cpu
            rows["floor redis-py"] = (
                await stack.enter_async_context(floor_redis_py(redis.url)),
                None,
            )
            rows["floor coredis"] = (
                await stack.enter_async_context(floor_coredis(redis.url)),
                None,
            )
            rows["floor budget"] = (
                await stack.enter_async_context(floor_redis_py(redis.url, budget=True)),
                None,
            )
            steady, steady_counts = await steady_rows(rows, redis.url, seconds, rounds)
        held = {b: await calls_during_hold(folder, b, redis.url) for b in ("memory", "redis")}
    costs = {(b, False): steady[b] for b in ("memory", "redis")}
    costs |= {(b, True): bursts[b] for b in ("memory", "redis")}
    counts = {(b, False): steady_counts[b] for b in ("memory", "redis")}
    counts |= {(b, True): burst_counts[b] for b in ("memory", "redis")}
    budgeted = {b: steady[f"budget-{b}"] for b in ("memory", "redis")}
    budget_counts = {b: steady_counts[f"budget-{b}"] for b in ("memory", "redis")}
    floors = {c: steady[f"floor {c}"] for c in ("redis-py", "coredis")}
    budget_floor = {q: percentile(steady["floor budget"], q) * 1000 for q in (50, 99)}

    load_average = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load_average}; {CONCURRENCY} concurrent"
    )
    print("admission + attempt end per call (provider hold and rate limit claims):")
    p: dict[tuple[str, bool], dict[int, float]] = {}
    for burst in (False, True):
        print("  all at once (a burst):" if burst else "  calls in flight 0.5-1.5 s each:")
        for backend in ("memory", "redis"):
            values = costs[backend, burst]
            counted = counts[backend, burst]
            p[backend, burst] = {q: percentile(values, q) * 1000 for q in (50, 99)}
            n = len(values)
            trips = f"{counted.round_trips / n:5.2f}" if backend == "redis" else "    0"
            print(
                f"    {backend:7} p50 {p[backend, burst][50]:8.3f} ms   p99 "
                f"{p[backend, burst][99]:8.3f} ms   round trips/call {trips}   CPU/call "
                f"{counted.cpu_s / n * 1000:.3f} ms (redis-server "
                f"{counted.redis_cpu_s / n * 1000:.3f} ms)   ({n} calls)"
            )
        added = {q: p["redis", burst][q] - p["memory", burst][q] for q in (50, 99)}
        verdict = "ok" if added[99] <= TARGET_P99_ADDED_MS else "over"
        target = "" if burst else f" (target p99 <= {TARGET_P99_ADDED_MS} ms: {verdict})"
        print(f"    redis adds p50 {added[50]:.3f} ms, p99 {added[99]:.3f} ms{target}")
    print("  with the budget claims added (a server's and a provider's budget):")
    b = {k: {q: percentile(v, q) * 1000 for q in (50, 99)} for k, v in budgeted.items()}
    for backend in ("memory", "redis"):
        n, counted = len(budgeted[backend]), budget_counts[backend]
        print(
            f"    {backend:7} p50 {b[backend][50]:8.3f} ms   p99 {b[backend][99]:8.3f} ms"
            f"   CPU/call {counted.cpu_s / n * 1000:.3f} ms (redis-server "
            f"{counted.redis_cpu_s / n * 1000:.3f} ms)   ({n} calls)"
        )
    budget_added = b["redis"][99] - b["memory"][99]
    verdict = "ok" if budget_added <= TARGET_P99_ADDED_MS else "over"
    print(
        f"    redis adds p50 {b['redis'][50] - b['memory'][50]:.3f} ms, p99 {budget_added:.3f}"
        f" ms (target p99 <= {TARGET_P99_ADDED_MS} ms: {verdict})"
    )
    print(
        f"    its floor, one bare EVALSHA with the same four claims (redis-py): p50 "
        f"{budget_floor[50]:.3f} ms, p99 {budget_floor[99]:.3f} ms "
        f"({len(steady['floor budget'])} calls)"
    )
    floor = {c: {q: percentile(v, q) * 1000 for q in (50, 99)} for c, v in floors.items()}
    print("the floor: one bare EVALSHA of the admission script, same concurrency and pattern:")
    for client, values in floors.items():
        print(
            f"  {client:8} p50 {floor[client][50]:8.3f} ms   p99 {floor[client][99]:8.3f} ms"
            f"   ({len(values)} calls)"
        )
    print(f"calls a 3-replica fleet sent during a {HOLD_S:.0f} s hold after one 429:")
    print(f"  redis {held['redis']} (target 0)   memory {held['memory']}")
    if as_json:
        redis_calls = len(costs["redis", False])
        figures = {
            "redis_p50_added_ms": round(p["redis", False][50] - p["memory", False][50], 4),
            "redis_p99_added_ms": round(p["redis", False][99] - p["memory", False][99], 4),
            "redis_p99_ms": round(p["redis", False][99], 4),
            "memory_p99_added_ms": round(p["memory", False][99], 4),
            "round_trips_per_call": round(counts["redis", False].round_trips / redis_calls, 4),
            "scripts_per_call": round(counts["redis", False].scripts / redis_calls, 4),
            "calls_during_hold_redis": held["redis"],
            "calls_during_hold_memory": held["memory"],
            "floor_evalsha_p50_ms": round(floor["redis-py"][50], 4),
            "floor_evalsha_p99_ms": round(floor["redis-py"][99], 4),
            "floor_coredis_evalsha_p50_ms": round(floor["coredis"][50], 4),
            "floor_coredis_evalsha_p99_ms": round(floor["coredis"][99], 4),
            "budget_redis_p99_added_ms": round(budget_added, 4),
            "floor_budget_evalsha_p99_ms": round(budget_floor[99], 4),
            "budget_redis_p99_ms": round(b["redis"][99], 4),
            "budget_memory_p99_ms": round(b["memory"][99], 4),
            "budget_cpu_per_call_ms": {
                k: round(c.cpu_s / len(budgeted[k]) * 1000, 4) for k, c in budget_counts.items()
            },
            "budget_redis_server_cpu_per_call_ms": round(
                budget_counts["redis"].redis_cpu_s / len(budgeted["redis"]) * 1000, 4
            ),
            "concurrency": CONCURRENCY,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="per row, in all")
    parser.add_argument(
        "--rounds", type=int, default=2, help="slices the steady rows take turns in"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.seconds, args.rounds, args.json)))
