"""The soak: every fault at once, for a long time, through a real ``agentcore serve``.

What runs, as in a deployment:

- ``agentcore serve`` as a subprocess, with every default plugin (retry, provider hold,
  rate limit, waiting traces, the MCPL router, the console for its `/status`) and
  ``[fleet] backend = "redis"`` on a real ``redis-server`` (`agentcore.testing.redis`);
- the loopback provider (`agentcore.testing`) on a thread of this process, speaking every
  wire (anthropic, openai, openai-responses, gemini, and anthropic in XML tool mode). It
  picks each call's scenario from the request's marker (``soak-N``) and the attempt number,
  so concurrent calls and their retries each play what their request's plan says;
- several MCPL servers: stdio ones (the end-to-end suite's relay, a real subprocess the host
  spawns and respawns) and WebSocket ones (a real socket the host connects to), all played
  by `agentcore.testing.mcpl_server.ServerSession` here, each driven by a `Driver` that
  keeps a window of requests in flight.

Every request gets a plan from the seed (`plan`): its server, wire, streamed or whole, and
its fault, which says what the provider plays on each attempt and what the answer must be
(`FAULTS`, from docs/mcpl-router.md). Server-side faults ride along: a cancel mid-stream,
the server leaving and coming back (its in-flight requests are abandoned), bursts over the
rate limit, garbage frames between requests. Host-side: a SIGHUP that disables a feature
set on one server and another that enables it again, and Redis stopped and started once.
Beside them, during the first round, the hostile mix (`hostile`): servers that flood the
host with 3 MB `eventId`s, ask for 10**30 tokens or a temperature of -7, and send
requests whose answers they never read, each held to its bound with an error naming it.

The run is cut into rounds; after each, when everything is drained, the serve process's
file descriptors (``/proc/PID/fd``, sockets told apart by their peer), asyncio tasks and
RSS are sampled, first after a warm-up that starts the host's lazily started parts. The
task count comes from the console's ``/status`` (``process.asyncioTasks``): serve needs no
debug flag, signal or endpoint of its own for it, the console is already the observer
meant for scripts (loopback only unless a token is set), and the count is taken only when
asked. At the end every request is checked (`check_request`) and the figures are printed.
Exit status 0 only when everything held; a failure prints the seed and the requests that
went wrong, and the same seed plays the same plans.

    .venv/bin/python bench/soak.py [--requests 10000] [--seed 1] [--stdio 3] [--ws 3]
        [--rounds 5] [--window 12] [--no-redis] [--flood 40] [--no-hostile] [--keep]

It needs every default plugin installed (``make install``: the rate limit's section is
refused otherwise) and ``redis-server`` (unless ``--no-redis``).
``tests/e2e/test_soak.py`` runs a short one in the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # `hostile`, beside this file, run as a script

from hostile import Hostile  # noqa: E402

from agentcore.testing import API_KEY_ENV, Call, LoopbackServer, Scenario  # noqa: E402
from agentcore.testing.mcpl_server import Hub, Received, ServerSession, StdioHub, WsHub  # noqa: E402
from agentcore.testing.redis import RedisServer, free_port  # noqa: E402
from agentcore.testing.scenarios import count_words, split_words  # noqa: E402
from agentcore.testing.serve import AGENTCORE, rewrite_settings  # noqa: E402

# -- the host's settings ----------------------------------------------------------------

PROVIDERS: dict[str, Any] = {
    "a": "anthropic",
    "o": "openai",
    "r": "openai-responses",
    "g": "gemini",
    "x": {"kind": "anthropic", "tool_mode": "xml"},
}
WIRES = tuple(PROVIDERS)
SERVED = "served-soak"
MAX_ATTEMPTS = 3
RETRY: dict[str, Any] = {
    "max_attempts": MAX_ATTEMPTS,
    "initial_delay_s": 0.01,
    "max_delay_s": 0.05,
    "jitter_s": 0.0,
    "overloaded": {
        "max_attempts": MAX_ATTEMPTS,
        "initial_delay_s": 0.01,
        "max_delay_s": 0.05,
        "jitter_s": 0.0,
    },
}
PROGRESS_TIMEOUT_S = 1.0
REQUEST_TIMEOUT_S = 3.0
BURST_PROVIDER = "o"
BURST_LIMIT = 6
"""``[rate_limit.providers.o] max_in_flight``: bursts on fs.o go past it."""
SIGHUP_SERVER = "s0"
SIGHUP_FEATURE = "fs.g"
ANSWER_TIMEOUT_S = 60.0


def settings(
    loopback: LoopbackServer,
    servers: dict[str, dict[str, Any]],
    *,
    redis_url: str | None,
    traces: Path,
    console_port: int,
) -> str:
    fleet: dict[str, Any] = {"backend": "memory"}
    if redis_url is not None:
        fleet = {
            "backend": "redis",
            "redis_url": redis_url,
            "key_prefix": f"soak-{uuid.uuid4().hex[:8]}",
            "on_store_error": "closed",
            "timeout_s": 0.5,
        }
    return loopback.settings_toml(
        PROVIDERS,
        inference={
            "progress_timeout_s": PROGRESS_TIMEOUT_S,
            "request_timeout_s": REQUEST_TIMEOUT_S,
        },
        sections={
            "traces": {"jsonl": str(traces)},
            "retry": RETRY,
            "provider_hold": {"default_hold_s": 0.02, "max_wait_s": 30.0},
            "rate_limit": {
                "max_wait_s": 60.0,
                "providers": {BURST_PROVIDER: {"max_in_flight": BURST_LIMIT}},
            },
            "waiting_trace": {"interval_s": 0.5},
            "fleet": fleet,
            "console": {"listen": f"127.0.0.1:{console_port}"},
            "mcpl": {
                "servers": servers,
                "routing": {"by_feature": {f"fs.{w}": f"{w}:model-{w}" for w in WIRES}},
            },
        },
    )


# -- faults: what the provider plays, and what the answer must be -------------------------

# Error causes, as docs/mcpl-router.md words them (the adapters' exact words vary by wire).
BROKE = r"broke mid-reply"
MID_STREAM = r"error mid-stream"
ENDED = r"ended without a result"
PROGRESS = r"No visible progress within"
REFUSED = r"refused to answer"
TOOL = r"called a tool \((get_weather|search_notes)\), and inference/request offers none"
FINISH_ERROR = r"ended the inference with an error \(finish_reason 'error'\)"
CALL_BLOCK = (
    '\n<function_calls>\n<invoke name="search_notes">\n'
    '<parameter name="query">tides</parameter>\n</invoke>\n'
)


@dataclass(frozen=True)
class Expect:
    """What one request must get."""

    calls: int
    """Provider calls its plan makes (0: refused before any)."""
    content: str | None = None
    """A result with this content (finishReason end_turn); None: an error."""
    error: str | None = None
    """A regular expression the error message must match."""
    code: int = -32603
    chunks: tuple[str, ...] = ()
    """The ``inference/chunk`` deltas a streamed request gets, in order."""
    answered: bool = True
    """False: the server cancels it, and it must get no answer."""


@dataclass(frozen=True)
class Plan:
    """One request: where it goes, what the provider plays on each attempt, what it must get."""

    n: int
    server: str
    wire: str
    stream: bool
    fault: str
    scenarios: tuple[Scenario, ...]
    expect: Expect
    burst: bool = False

    @property
    def marker(self) -> str:
        return f"soak-{self.n}"

    def describe(self) -> str:
        mode = "streamed" if self.stream else "whole"
        kinds = ", ".join(s.kind for s in self.scenarios)
        return f"#{self.n} {self.server} fs.{self.wire} {mode} fault={self.fault} [{kinds}]"


Build = Callable[[str, bool, int], tuple[tuple[Scenario, ...], Expect]]


def said(wire: str, text: str, **options: Any) -> tuple[Scenario, tuple[str, ...]]:
    """A reply of `text` and the chunks it reaches the server as. In XML tool mode the
    model writes a space after the open ``Assistant:`` turn, which the host strips."""
    pieces = tuple(split_words(text))
    sent = (" " + pieces[0], *pieces[1:]) if wire == "x" else pieces
    scenario = Scenario.text("".join(sent), chunks=sent, model=SERVED, **options)
    return scenario, pieces


def reply_text(n: int) -> str:
    return f"Answer {n} comes in a few words"


def ok(wire: str, stream: bool, n: int, **options: Any) -> tuple[Scenario, Expect]:
    scenario, chunks = said(wire, reply_text(n), **options)
    return scenario, Expect(1, content=reply_text(n), chunks=chunks if stream else ())


def then_ok(*first: Scenario) -> Build:
    """`first` fail before any visible text (each retried), then a normal reply."""

    def build(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
        scenario, expect = ok(wire, stream, n)
        return (*first, scenario), Expect(
            len(first) + 1, content=expect.content, chunks=expect.chunks
        )

    return build


def fails(scenario: Scenario, error: str, chunks: tuple[str, ...] = ()) -> Build:
    """One call that ends in `error`, after `chunks` when streamed (never retried)."""

    def build(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
        return (scenario,), Expect(1, error=error, chunks=chunks if stream else ())

    return build


def exhausted(scenario: Scenario, error: str) -> Build:
    def build(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
        return (scenario,) * MAX_ATTEMPTS, Expect(MAX_ATTEMPTS, error=error)

    return build


def partial(wire: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The text a failing stream shows first, as options for its scenario, and as chunks."""
    if wire == "x":
        return {"after": " Partial ", "chunks": (" Partial ",)}, ("Partial ",)
    return {"after": "Partial "}, ("Partial ",)


def mid_stream(make: Callable[..., Scenario], error: str, **extra: Any) -> Build:
    """Streamed: text, then `make`'s failure (no retry after a chunk). Whole: the same
    scenario fails the whole call before any text, so it is retried, then a reply."""

    def build(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
        options, chunks = partial(wire)
        failing = make(**options, **extra)
        if stream:
            return (failing,), Expect(1, error=error, chunks=chunks)
        return then_ok(failing)(wire, stream, n)

    return build


def stated_429(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    wait = Scenario.rate_limit(retry_delay="0.03s" if wire == "g" else None, retry_after_ms=30)
    return then_ok(wait)(wire, stream, n)


def no_fault(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    scenario, expect = ok(wire, stream, n)
    return (scenario,), expect


def stalls(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    """Two calls, whatever max_attempts says: a stalled stream gets one fresh call (the
    retry policy's rule), then the error."""
    return (Scenario.stall(),) * 2, Expect(2, error=PROGRESS)


def trickle(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    scenario, expect = ok(wire, stream, n, chunk_delay_s=0.02)
    return (scenario,), expect


def refusal(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    scenario, chunks = said(wire, "I can't help with that.", stop="refusal")
    return (scenario,), Expect(1, error=REFUSED, chunks=chunks if stream else ())


def tool_call(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    if wire == "x":  # the model writes the call; the provider stops at </function_calls>
        sent = (" Let me look.", CALL_BLOCK[:10], CALL_BLOCK[10:])
        scenario = Scenario.text(
            "".join(sent),
            chunks=sent,
            stop="stop_sequence",
            sequence="</function_calls>",
            model=SERVED,
        )
        return (scenario,), Expect(1, error=TOOL, chunks=("Let me look.", "\n") if stream else ())
    scenario = Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Let me check. ")
    chunks = ("Let ", "me ", "check. ") if stream else ()
    return (scenario,), Expect(1, error=TOOL, chunks=chunks)


def cancelled(wire: str, stream: bool, n: int) -> tuple[tuple[Scenario, ...], Expect]:
    """A reply slow enough (2 s) that the server's cancel always comes first."""
    if stream:
        scenario = Scenario.text(" ".join(["slow"] * 40), model=SERVED, chunk_delay_s=0.05)
    else:
        scenario = Scenario.text(reply_text(n), model=SERVED, delay_s=2.0)
    return (scenario,), Expect(1, answered=False)


@dataclass(frozen=True)
class Fault:
    name: str
    weight: float
    build: Build
    wires: tuple[str, ...] = WIRES
    modes: tuple[bool, ...] = (True, False)


FAULTS: tuple[Fault, ...] = (
    Fault("none", 30, no_fault),
    Fault("trickle", 5, trickle),
    Fault("429_stated_wait", 5, stated_429),
    Fault("429", 4, then_ok(Scenario.rate_limit())),
    Fault("429_every_attempt", 2, exhausted(Scenario.rate_limit(), r"HTTP 429")),
    Fault("529", 4, then_ok(Scenario.overloaded())),
    Fault("500", 4, then_ok(Scenario.server_error())),
    Fault("500_every_attempt", 1, exhausted(Scenario.server_error(), r"HTTP 500")),
    Fault("reset_before_response", 4, then_ok(Scenario.reset())),
    Fault("reset_before_stream", 2, then_ok(Scenario.cut("")), modes=(True,)),
    Fault("reset_mid_stream", 3, mid_stream(Scenario.cut, BROKE)),
    Fault("error_frame_in_200", 3, mid_stream(Scenario.stream_error, MID_STREAM)),
    Fault("bare_error_finish", 2, mid_stream(Scenario.finish_error, FINISH_ERROR), ("o",)),
    Fault("error_body_in_200", 2, then_ok(Scenario.error_body())),
    Fault("no_terminal", 3, mid_stream(Scenario.cut, ENDED, clean=True)),
    Fault("stall", 2, then_ok(Scenario.stall()), modes=(True,)),
    Fault("stall_whole", 0.3, then_ok(Scenario.stall()), modes=(False,)),
    Fault("stall_every_attempt", 1, stalls, modes=(True,)),
    Fault("stall_after_text", 1, mid_stream(Scenario.stall, PROGRESS), modes=(True,)),
    Fault("refusal", 3, refusal),
    Fault("tool_call", 3, tool_call),
    Fault("credentials_echoed", 1, fails(Scenario.echoes_credentials(), r"HTTP 401")),
    Fault("cancel", 3, cancelled),
)
"""Weights are relative frequencies."""


# -- the plan -----------------------------------------------------------------------------


def burst(n: int, server: str, rng: random.Random) -> list[Plan]:
    """More requests on the limited provider at once than its limit lets through."""
    out = []
    for k in range(n, n + 4 * BURST_LIMIT):
        stream = rng.random() < 0.5
        scenario, expect = ok(BURST_PROVIDER, stream, k, delay_s=0.05)
        out.append(Plan(k, server, BURST_PROVIDER, stream, "burst", (scenario,), expect, True))
    return out


def warm_up(servers: list[str], rng: random.Random) -> list[Plan]:
    """What starts the host's lazily started parts (the fleet store's wake-up listener, the
    provider hold's and the rate limit's lease renewers) before the resources are first
    sampled: a stated 429 on every wire, then a burst."""
    out: list[Plan] = []
    for n, wire in enumerate(WIRES):
        scenarios, expect = stated_429(wire, n % 2 == 0, n)
        out.append(
            Plan(
                n, servers[n % len(servers)], wire, n % 2 == 0, "429_stated_wait", scenarios, expect
            )
        )
    return out + burst(len(out), servers[0], rng)


def plan(seed: int, count: int, servers: list[str]) -> tuple[list[Plan], list[Plan]]:
    """The warm-up and every request of the run, from the seed alone: the same seed, the
    same plans. About one burst per thousand requests, at least one."""
    rng = random.Random(seed)
    first = warm_up(servers, rng)
    weights = [f.weight for f in FAULTS]
    n = len(first)
    end = n + count
    bursts = set(rng.sample(range(n, end - 4 * BURST_LIMIT), max(1, count // 1000)))
    out: list[Plan] = []
    while n < end:
        server = rng.choice(servers)
        if n in bursts:
            out += burst(n, server, rng)
            n = out[-1].n + 1
            continue
        fault = rng.choices(FAULTS, weights)[0]
        wire = rng.choice(fault.wires)
        stream = rng.choice(fault.modes)
        scenarios, expect = fault.build(wire, stream, n)
        out.append(Plan(n, server, wire, stream, fault.name, scenarios, expect))
        n += 1
    return first, out


# -- the provider side ----------------------------------------------------------------------

MARKER = re.compile(r"soak-(\d+):")


class Provider:
    """The loopback provider, playing each request's plan attempt by attempt: the request's
    marker says whose plan, the calls seen so far for it say which attempt."""

    def __init__(self, plans: dict[int, Plan]) -> None:
        self.plans = plans
        self.calls: dict[int, list[Call]] = defaultdict(list)
        self.server = LoopbackServer(choose=self.choose)
        self.hostile: Hostile | None = None

    def choose(self, call: Call) -> Scenario | None:
        body = json.dumps(call.body)
        found = MARKER.search(body)
        if found is None:  # a hostile server's call, else 400 "nothing scripted"
            return self.hostile.scenario(body) if self.hostile is not None else None
        n = int(found.group(1))
        scenarios = self.plans[n].scenarios
        attempts = self.calls[n]
        attempts.append(call)
        return scenarios[min(len(attempts), len(scenarios)) - 1]

    def most_at_once(self, provider: str) -> int:
        """The most calls to `provider` the server was serving at one time."""
        edges: list[tuple[float, int]] = []
        for calls in self.calls.values():
            for c in calls:
                if c.provider == provider:
                    edges += [(c.started_at, 1), (c.ended_at or math.inf, -1)]
        now = most = 0
        for _, step in sorted(edges):  # an end before a start at the same instant
            now += step
            most = max(most, now)
        return most


# -- the MCPL servers -----------------------------------------------------------------------

GARBAGE: tuple[tuple[str, int], ...] = (
    ("this is not JSON {", -32700),
    ("[1, 2, 3]", -32600),  # a batch
    ("42", -32600),  # not an object
    ('{"jsonrpc": "2.0", "id": "junk-%d", "method": "no/such/method"}', -32601),
)
"""Frames sent between valid ones, and the error each must be answered with."""


class Index:
    """One session's messages by request id, in arrival order (the transcript of each)."""

    def __init__(self) -> None:
        self.by_id: dict[Any, list[Received]] = defaultdict(list)
        self.policy_updates = 0
        """`featureSets/update` requests the host sent."""

    def __call__(self, item: Received) -> None:
        message = item.message
        method = message.get("method")
        if method == "inference/chunk":
            self.by_id[(message.get("params") or {}).get("requestId")].append(item)
        elif method is None:
            self.by_id[message.get("id")].append(item)
        elif method == "featureSets/update":
            self.policy_updates += 1


@dataclass
class Outcome:
    """What happened to one request."""

    plan: Plan
    expect: Expect
    session: ServerSession | None = None
    rid: Any = None
    sent_at: float = 0.0
    answered_at: float | None = None
    abandoned: bool = False
    """The server left (or was leaving) before its answer: nothing to check."""
    problem: str | None = None


@dataclass
class Sent:
    """A garbage frame, and the answer it must get."""

    frame: str
    code: int
    id: str | None


class Driver:
    """One MCPL server's side of the run: its session(s), a window of requests in flight,
    and its server-side faults (garbage, leaving and coming back, a policy change)."""

    def __init__(self, tag: str, hub: Hub, soak: Soak) -> None:
        self.tag = tag
        self.hub = hub
        self.soak = soak
        self.session: ServerSession | None = None
        self.sessions: list[ServerSession] = []
        self.indexes: dict[int, Index] = {}
        self.window = asyncio.Semaphore(soak.config.window)
        self.tasks: set[asyncio.Task[None]] = set()
        self.disabled: set[str] = set()
        self.garbage: dict[int, list[Sent]] = defaultdict(list)
        self.exits = 0

    def index(self, session: ServerSession) -> Index:
        return self.indexes[id(session)]

    async def attach(self, timeout: float = 30.0) -> None:
        """Take the newest session with this tag (the host opens one per (re)connection)."""
        deadline = time.monotonic() + timeout
        while True:
            fresh = [s for s in self.hub.sessions if s.tag == self.tag and s not in self.sessions]
            if fresh:
                break
            process = self.soak.process
            if process is not None and process.returncode is not None:
                said = (self.soak.workdir / "serve.err").read_text(errors="replace")
                raise RuntimeError(f"agentcore serve exited {process.returncode}: {said}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {self.tag}: the host did not (re)connect")
            await asyncio.sleep(0.01)
        session = fresh[0]
        index = Index()
        for item in session.received:  # what arrived before we looked
            index(item)
        session.on_message = index
        self.indexes[id(session)] = index
        self.sessions.append(session)
        await asyncio.wait_for(session.ready.wait(), timeout)
        self.session = session

    async def run(self, plans: list[Plan], actions: dict[int, list[str]]) -> None:
        for p in plans:
            for action in actions.get(p.n, ()):
                await self.act(action)
            if not p.burst:
                await self.window.acquire()
            task = asyncio.create_task(self.one(p))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            self.soak.sent += 1
        await self.drain()

    async def drain(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks))

    async def act(self, action: str) -> None:
        if action == "garbage":
            await self.send_garbage()
        elif action == "exit":
            await self.leave_and_return()
        elif action in ("disable", "enable"):
            await self.change_policy(disable=action == "disable")

    async def send_garbage(self) -> None:
        session = self.session
        assert session is not None
        frame, code = self.soak.rng.choice(GARBAGE)
        junk_id = None
        if "%d" in frame:
            junk_id = f"junk-{self.soak.sent}"
            frame = frame.replace("%d", str(self.soak.sent))
        self.garbage[id(session)].append(Sent(frame, code, junk_id))
        await session.channel.send(frame)

    async def leave_and_return(self) -> None:
        """The server exits with requests in flight (they are abandoned); the host must
        reconnect (``reconnect = true``) and serve the new session as the old."""
        session = self.session
        assert session is not None
        index = self.index(session)
        sent = self.garbage[id(session)]
        nulls = sum(g.id is None for g in sent)
        deadline = time.monotonic() + 5.0  # let the garbage's answers in first (checked)
        while time.monotonic() < deadline and (
            len(index.by_id.get(None, [])) < nulls
            or any(not index.by_id.get(g.id) for g in sent if g.id is not None)
        ):
            await asyncio.sleep(0.01)
        self.exits += 1
        await session.close()
        await self.attach()

    async def change_policy(self, *, disable: bool) -> None:
        """SIGHUP with this server's `disabled_feature_sets` changed, mid-load for the
        others: this server's own requests drain first, so each is sent under a policy
        known to be in force (narrowed at once; widened once the receipt is applied)."""
        await self.drain()
        session = self.session
        assert session is not None
        index = self.index(session)
        updates = index.policy_updates

        def change(data: dict[str, Any]) -> None:
            server = data["mcpl"]["servers"][self.tag]
            server["disabled_feature_sets"] = [SIGHUP_FEATURE] if disable else []

        rewrite_settings(self.soak.settings_path, change)
        assert self.soak.process is not None
        self.soak.process.send_signal(signal.SIGHUP)
        self.soak.sighups += 1
        if disable:  # §6.7: a narrowing applies before the featureSets/update goes out
            await until(lambda: index.policy_updates > updates)
            self.disabled = {SIGHUP_FEATURE}
        else:  # a widening applies once the receipt is in: its trace says so
            await self.soak.traces.wait_for(
                "mcpl:policy_change",
                lambda e: (
                    e.get("serverId") == self.tag
                    and SIGHUP_FEATURE in e.get("featureSetsEnabled", [])
                ),
            )
            self.disabled = set()

    async def one(self, p: Plan) -> None:
        expect = p.expect
        if f"fs.{p.wire}" in self.disabled:
            expect = Expect(0, error=r"not enabled", code=-32001)
        outcome = Outcome(p, expect)
        self.soak.outcomes.append(outcome)
        try:
            await self.ask(outcome)
        finally:
            if not p.burst:
                self.window.release()

    async def ask(self, outcome: Outcome) -> None:
        p = outcome.plan
        session = self.session
        assert session is not None
        outcome.session = session
        params = {
            "featureSet": f"fs.{p.wire}",
            "stream": p.stream,
            "messages": [{"role": "user", "content": f"{p.marker}: tell me something"}],
        }
        if session.left:  # sent as its server leaves: it never reaches the host
            outcome.abandoned = True
            return
        outcome.sent_at = time.time()
        try:
            outcome.rid = await session.request("inference/request", params)
            if not outcome.expect.answered:
                await self.cancel_once_started(outcome, session)
                return
            await session.answer(outcome.rid, ANSWER_TIMEOUT_S)
            outcome.answered_at = time.time()
        except ConnectionError:
            outcome.abandoned = True
        except TimeoutError:
            outcome.problem = f"no answer within {ANSWER_TIMEOUT_S:g} s"
        if session.left and outcome.answered_at is None:
            outcome.abandoned = True

    async def cancel_once_started(self, outcome: Outcome, session: ServerSession) -> None:
        """`notifications/cancelled` mid-stream (after the first chunk), or for a whole
        request once its provider call is under way; then wait for that call to close."""
        p, index = outcome.plan, self.index(session)
        calls = self.soak.provider.calls

        def started() -> bool:
            return bool(index.by_id.get(outcome.rid) if p.stream else calls.get(p.n))

        try:
            await until(lambda: started() or session.closed.is_set(), timeout=20.0)
        except AssertionError:
            outcome.problem = "the cancelled request never started"
            return
        if session.closed.is_set():
            outcome.abandoned = True
            return
        await session.cancel(outcome.rid, "the soak cancels it")
        try:
            await until(lambda: all(c.ended_at is not None for c in calls.get(p.n, [])), 20.0)
        except AssertionError:
            outcome.problem = "the cancelled request's provider call is still open after 20 s"
        outcome.answered_at = time.time()


async def until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s")
        await asyncio.sleep(0.005)


# -- the host's side: traces, resources ----------------------------------------------------


class Traces:
    """The serve process's JSONL traces, read as they grow (and not kept)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new(self, containing: bytes) -> list[dict[str, Any]]:
        """The traces written since the last read whose line holds `containing` (only those
        are parsed: the file grows by tens of thousands of lines)."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [json.loads(line) for line in data[:end].splitlines() if containing in line]

    async def wait_for(
        self, type: str, match: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """The first trace of `type` from now on that matches."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.read_new(f'"type": "{type}"'.encode()):
                if match(event):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError("the awaited trace never came")
            await asyncio.sleep(0.02)


@dataclass
class Sample:
    """The serve process, drained, at the end of a round (or at the start)."""

    label: str
    fds: dict[str, int]
    tasks: int
    rss_kb: int
    provider_connections: int
    """Connections the loopback provider holds open (serve's idle pool) at that moment."""
    cpu_s: float
    """Serve's CPU time so far (user and system)."""
    peak_rss_kb: int
    """Serve's peak RSS so far (VmHWM)."""


def serve_fds(pid: int, provider_port: int, redis_port: int | None) -> dict[str, int]:
    """Serve's file descriptors: provider sockets, Redis sockets, and all the others."""
    ports: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            parts = line.split()
            ports[parts[9]] = int(parts[2].rsplit(":", 1)[1], 16)  # inode -> remote port
    counts = {"provider": 0, "redis": 0, "other": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        socket = re.fullmatch(r"socket:\[(\d+)\]", target)
        port = ports.get(socket.group(1)) if socket else None
        if port == provider_port:
            counts["provider"] += 1
        elif port is not None and port == redis_port:
            counts["redis"] += 1
        else:
            counts["other"] += 1
    return counts


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Config:
    requests: int = 10_000
    seed: int = 1
    stdio: int = 3
    ws: int = 3
    rounds: int = 5
    window: int = 12
    """Requests each server keeps in flight (bursts go past it)."""
    redis: RedisServer | None = None
    """A running Redis to use (and restart once); None: the run starts its own."""
    use_redis: bool = True
    hostile: bool = True
    """The hostile mix (`hostile`) beside the normal servers."""
    flood: int = 40
    """Its 3 MB `eventId`s."""
    keep: bool = False
    """Keep the work folder (settings, traces, serve's output) even when everything held."""


def schedule(plans: list[Plan], seed: int) -> dict[str, dict[int, list[str]]]:
    """The server-side actions, from the seed: each server leaves once, somewhere in the
    middle; garbage frames now and then; the SIGHUP pair on `SIGHUP_SERVER`."""
    rng = random.Random(seed + 1)
    own: dict[str, list[Plan]] = defaultdict(list)
    for p in plans:
        own[p.server].append(p)
    actions: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    count = len(plans)
    for tag, mine in sorted(own.items()):
        if len(mine) < 10:
            continue
        actions[tag][mine[int(len(mine) * rng.uniform(0.15, 0.85))].n].append("exit")
        for p in rng.sample(mine, max(2, len(mine) // 100)):
            actions[tag][p.n].append("garbage")
    mine = own[SIGHUP_SERVER]
    for share, action in ((0.3, "disable"), (0.6, "enable")):
        first = next((p for p in mine if p.n >= share * count), None)
        if first is not None:  # a run too short for it fails the SIGHUP check, saying so
            actions[SIGHUP_SERVER][first.n].append(action)
    return actions


class GcPauses:
    """This process's garbage-collector pauses. The loopback provider runs on a thread of
    this process, so a long pause here stalls every stream it plays, and the host then
    rightly cuts them at its progress timeout: the soak keeps its own pauses short
    (`gc.freeze` after each round: what it keeps for the checks is never scanned again)
    and reports the longest."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.longest_s = max(self.longest_s, time.perf_counter() - self._started)

    def __enter__(self) -> GcPauses:
        gc.freeze()
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)
        gc.unfreeze()


class Soak:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed + 2)
        self.secret = f"sk-soak-{secrets.token_hex(16)}"
        servers = [f"s{i}" for i in range(config.stdio)] + [f"w{i}" for i in range(config.ws)]
        if SIGHUP_SERVER not in servers:
            raise ValueError(f"the soak needs stdio server {SIGHUP_SERVER} (--stdio 1 or more)")
        self.warm_up, self.plans = plan(config.seed, config.requests, servers)
        self.actions = schedule(self.plans, config.seed)
        self.provider = Provider({p.n: p for p in self.warm_up + self.plans})
        self.hubs: dict[str, Hub] = {}
        self.drivers: dict[str, Driver] = {}
        self.outcomes: list[Outcome] = []
        self.samples: list[Sample] = []
        self.status_texts: list[str] = []
        self.sent = 0
        self.sighups = 0
        self.redis_restarts = 0
        self.load_s = 0.0
        self.process: asyncio.subprocess.Process | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix="agentcore-soak-"))
        self.hostile = Hostile(self.workdir, config.flood) if config.hostile else None
        self.provider.hostile = self.hostile
        self.settings_path = self.workdir / "agentcore.toml"
        self.traces = Traces(self.workdir / "traces.jsonl")
        self.console_port = free_port()
        self.redis: RedisServer | None = None
        self.exit_code: int | None = None
        self.gc = GcPauses()

    async def run(self) -> Report:
        with self.gc:
            return await self._run()

    async def _run(self) -> Report:
        own_redis = self.config.use_redis and self.config.redis is None
        self.provider.server.start_in_thread()
        try:
            if own_redis:
                self.redis = await asyncio.to_thread(RedisServer().start)
            elif self.config.use_redis:
                self.redis = self.config.redis
            await self.start()
            await self.load()
            await self.stop()
        finally:
            for hub in self.hubs.values():
                await hub.stop()
            if self.process is not None and self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
            self.provider.server.stop_in_thread()
            if own_redis and self.redis is not None:
                self.redis.close()
        report = Report(self)
        if report.ok and not self.config.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return report

    async def start(self) -> None:
        stdio, ws = await StdioHub().start(), await WsHub().start()
        servers: dict[str, dict[str, Any]] = {}
        for i in range(self.config.stdio):
            self.hubs[f"s{i}"] = stdio
        for i in range(self.config.ws):
            self.hubs[f"w{i}"] = ws
        for tag, hub in self.hubs.items():
            servers[tag] = hub.config(tag, reconnect=True)
            self.drivers[tag] = Driver(tag, hub, self)
        if self.hostile is not None:
            servers.update(self.hostile.servers())
        self.settings_path.write_text(
            settings(
                self.provider.server,
                servers,
                redis_url=self.redis.url if self.redis is not None else None,
                traces=self.traces.path,
                console_port=self.console_port,
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
        env[API_KEY_ENV] = self.secret
        with (
            (self.workdir / "serve.out").open("wb") as out,
            (self.workdir / "serve.err").open("wb") as err,
        ):
            self.process = await asyncio.create_subprocess_exec(
                AGENTCORE,
                "serve",
                "--settings",
                str(self.settings_path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=REPO,
                env=env,
            )
        await asyncio.gather(*(d.attach() for d in self.drivers.values()))
        deadline = time.monotonic() + 30.0
        while True:  # the console listens once the kernel has started
            try:
                await self.status()
                break
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        await self.run_round(self.warm_up)
        gc.freeze()
        self.samples.append(await self.sample("start"))

    async def run_round(self, plans: list[Plan]) -> float:
        """Run `plans` on every server at once; how long it took."""
        started = time.monotonic()
        await asyncio.gather(
            *(
                d.run([p for p in plans if p.server == tag], self.actions[tag])
                for tag, d in self.drivers.items()
            )
        )
        return time.monotonic() - started

    async def status(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.console_port}/status"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            text = await response.text()
        self.status_texts.append(text)
        state: dict[str, Any] = json.loads(text)
        return state

    async def sample(self, label: str) -> Sample:
        """Serve's resources, everything drained. Its provider sockets must be exactly the
        connections the loopback provider holds open (its idle pool): any other would be
        a socket leaked half-closed."""
        assert self.process is not None
        await self.provider.server.wait_idle(connections=False, timeout_s=30.0)
        pid, port = self.process.pid, self.provider.server.port
        redis_port = self.redis.port if self.redis is not None else None
        while True:
            before = self.provider.server.open_connections
            fds = serve_fds(pid, port, redis_port)
            if before == self.provider.server.open_connections:
                break
        state = await self.status()
        tasks = int(state["process"]["asyncioTasks"])
        return Sample(
            label,
            fds,
            tasks,
            proc_status(pid, "VmRSS"),
            before,
            cpu_seconds(pid),
            proc_status(pid, "VmHWM"),
        )

    async def load(self) -> None:
        rounds = max(1, self.config.rounds)
        size = math.ceil(len(self.plans) / rounds)
        restart = asyncio.create_task(self.restart_redis_midway())
        try:
            for r in range(rounds):
                if r == 0 and self.hostile is not None:
                    self.hostile.start()
                self.load_s += await self.run_round(self.plans[r * size : (r + 1) * size])
                if r == 0 and self.hostile is not None:
                    await self.hostile.wait_done()
                gc.freeze()
                self.samples.append(await self.sample(f"round {r + 1}"))
        finally:
            if not restart.done():
                restart.cancel()
            await asyncio.gather(restart, return_exceptions=True)

    async def restart_redis_midway(self) -> None:
        """Redis stopped (everything it held is lost) and started again on the same port,
        with half the requests sent: `closed` mode makes calls wait for it, then go on."""
        if self.redis is None:
            return
        halfway = len(self.warm_up) + len(self.plans) // 2
        await until(lambda: self.sent >= halfway, timeout=math.inf)
        await asyncio.to_thread(self.redis.stop)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(self.redis.start)
        self.redis_restarts += 1

    async def stop(self) -> None:
        """SIGTERM: serve exits 0 and every provider connection is closed."""
        assert self.process is not None
        self.process.terminate()
        try:
            self.exit_code = await asyncio.wait_for(self.process.wait(), 15.0)
        except TimeoutError:
            self.exit_code = None
        await asyncio.sleep(0)


# -- the checks -------------------------------------------------------------------------------


def expected_result(expect: Expect) -> dict[str, Any]:
    assert expect.content is not None
    return {
        "content": expect.content,
        "model": SERVED,
        "finishReason": "end_turn",
        "usage": {"inputTokens": 12, "outputTokens": count_words(expect.content)},
    }


def check_request(outcome: Outcome, index: Index | None, calls: list[Call]) -> str | None:
    """What is wrong with one request's answer, chunks and provider calls, or None."""
    expect = outcome.expect
    if outcome.problem is not None:
        return outcome.problem
    if outcome.abandoned or index is None:
        return None  # its server left: no answer can come, and none is checked
    events = index.by_id.get(outcome.rid, [])
    chunks = [e for e in events if e.message.get("method") == "inference/chunk"]
    answers = [e for e in events if "method" not in e.message]
    if not expect.answered:
        if answers:
            return f"cancelled, yet answered: {answers[0].message}"
    else:
        if len(answers) != 1:
            return f"{len(answers)} answers, where exactly one is the contract"
        answer = answers[0]
        if any(c.seq > answer.seq for c in chunks):
            return "an inference/chunk after the answer"
        message = answer.message
        if expect.content is not None:
            if message.get("result") != expected_result(expect):
                return f"answered {message}; expected the result {expected_result(expect)}"
        else:
            error = message.get("error") or {}
            text = str(error.get("message", ""))
            if error.get("code") != expect.code or not re.search(expect.error or "", text):
                return f"answered {message}; expected error {expect.code} matching {expect.error!r}"
            shown = "".join(expect.chunks).strip()
            if shown and shown in text:
                return f"the error after chunks carries their text: {text!r}"
        deltas = [e.message.get("params") or {} for e in chunks]
        if [d.get("index") for d in deltas] != list(range(len(deltas))):
            return f"chunk indexes {[d.get('index') for d in deltas]}"
        # The text is the contract, not where chunks break: the router holds back a chunk's
        # tail that could begin a secret until the next chunk (agentcore.redaction
        # .StreamRedactor), and a failed stream drops that held tail with its error.
        got = [str(d.get("delta", "")) for d in deltas]
        want = "".join(expect.chunks)
        if "" in got:
            return f"an empty chunk in {got}"
        text = "".join(got)
        if text != want if expect.content is not None else not want.startswith(text):
            return f"chunks {got}; expected the text of {list(expect.chunks)}"
    if len(calls) != expect.calls:
        return f"{len(calls)} provider calls; its plan makes {expect.calls}"
    if chunks and any(c.started_at > chunks[0].at for c in calls):
        return "a provider call started after a chunk reached the server (a retry after text)"
    if any(c.ended_at is None for c in calls):
        return "a provider call still open"
    if not expect.answered and calls and not calls[-1].disconnected:
        return "cancelled, yet its provider call ran to its end (it was not closed)"
    return None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


LEAK_SIGNS = ("Traceback", "Task exception was never retrieved", "Task was destroyed")


class Report:
    """Every check, and the figures, of one run."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self.failures: list[str] = []
        self.request_failures: list[tuple[Outcome, str]] = []
        self.lines: list[str] = []
        self._check()

    @property
    def ok(self) -> bool:
        return not self.failures and not self.request_failures

    def fail(self, what: str) -> None:
        self.failures.append(what)

    def _check(self) -> None:
        soak = self.soak
        indexes = {id(s): d.index(s) for d in soak.drivers.values() for s in d.sessions}
        held: dict[str, int] = defaultdict(int)
        injected: dict[str, int] = defaultdict(int)
        for outcome in soak.outcomes:
            session = outcome.session
            index = indexes.get(id(session)) if session is not None else None
            calls = soak.provider.calls.get(outcome.plan.n, [])
            problem = check_request(outcome, index, calls)
            name = outcome.plan.fault if outcome.expect.code != -32001 else "feature_set_disabled"
            injected[name] += 1
            if problem is None:
                held[name] += 1
            else:
                self.request_failures.append((outcome, problem))
        planned = len(soak.warm_up) + len(soak.plans)
        if len(soak.outcomes) != planned:
            self.fail(f"{len(soak.outcomes)} requests sent of {planned} planned")
        self.injected, self.held = injected, held
        self._check_garbage(indexes)
        self._check_host()
        self._check_resources()
        self._check_secrets()
        if self.soak.hostile is not None:
            for problem in self.soak.hostile.check(self.soak.traces.path):
                self.fail(problem)

    def _check_garbage(self, indexes: dict[int, Index]) -> None:
        self.garbage = 0
        for driver in self.soak.drivers.values():
            for session in driver.sessions:
                sent = driver.garbage.get(id(session), [])
                self.garbage += len(sent)
                index = indexes[id(session)]
                nulls = sorted(e.message.get("error", {}).get("code") for e in index.by_id[None])
                want = sorted(g.code for g in sent if g.id is None)
                if nulls != want:
                    self.fail(f"{driver.tag}: id-null answers {nulls}, for garbage wanting {want}")
                for g in sent:
                    if g.id is None:
                        continue
                    codes = [e.message.get("error", {}).get("code") for e in index.by_id[g.id]]
                    if codes != [g.code]:
                        self.fail(f"{driver.tag}: {g.frame} answered {codes}, not [{g.code}]")

    def _check_host(self) -> None:
        soak = self.soak
        if soak.exit_code != 0:
            self.fail(f"agentcore serve exited {soak.exit_code} on SIGTERM, not 0 within 15 s")
        try:
            soak.provider.server.wait_idle_sync(connections=True, timeout_s=5.0)
        except AssertionError as exc:
            self.fail(f"after serve exited: {exc}")
        stderr = (soak.workdir / "serve.err").read_text(errors="replace")
        for sign in LEAK_SIGNS:
            if sign in stderr:
                self.fail(f"serve's stderr says {sign!r} (see {soak.workdir / 'serve.err'})")
        if soak.sighups != 2:
            self.fail(f"{soak.sighups} SIGHUP policy changes, not 2")
        if soak.redis is not None and soak.redis_restarts != 1:
            self.fail("Redis was not restarted")
        exits = sum(d.exits for d in soak.drivers.values())
        if exits < len(soak.drivers) and len(soak.plans) >= 10 * len(soak.drivers):
            self.fail(f"only {exits} of {len(soak.drivers)} servers left and came back")
        most = soak.provider.most_at_once(BURST_PROVIDER)
        if most > BURST_LIMIT:
            self.fail(f"{most} calls at once to {BURST_PROVIDER}, over its limit {BURST_LIMIT}")
        self.most_at_once = most

    def _check_resources(self) -> None:
        samples = self.soak.samples
        start = samples[0]
        for s in samples[1:]:
            if s.tasks != start.tasks:
                self.fail(f"{s.label}: {s.tasks} asyncio tasks in serve, {start.tasks} at start")
            if s.fds["other"] != start.fds["other"]:
                self.fail(
                    f"{s.label}: {s.fds['other']} file descriptors (not provider or Redis "
                    f"sockets) in serve, {start.fds['other']} at the start"
                )
            if s.fds["provider"] != s.provider_connections:
                self.fail(
                    f"{s.label}: serve holds {s.fds['provider']} provider sockets, the provider "
                    f"{s.provider_connections} connections"
                )
        rounds = samples[1:]
        if len(rounds) >= 3:
            warm = rounds[1].rss_kb  # after the second round
            if rounds[-1].rss_kb > warm * 1.10:
                self.fail(
                    f"RSS grew once warm: {warm} kB after round 2, {rounds[-1].rss_kb} kB at "
                    "the end (more than 10 %)"
                )

    def _check_secrets(self) -> None:
        soak = self.soak
        secret = soak.secret
        places = {
            "serve's stdout": (soak.workdir / "serve.out").read_text(errors="replace"),
            "serve's stderr": (soak.workdir / "serve.err").read_text(errors="replace"),
            "the traces": soak.traces.path.read_text(errors="replace")
            if soak.traces.path.exists()
            else "",
            "the console's /status": "".join(soak.status_texts),
        }
        for driver in soak.drivers.values():
            for session in driver.sessions:
                places[f"what server {driver.tag} received"] = json.dumps(
                    [r.message for r in session.received]
                )
        for where, text in places.items():
            if secret in text:
                self.fail(f"the API key appears in {where}")

    def text(self) -> str:
        soak = self.soak
        out: list[str] = []
        answered = [o for o in soak.outcomes if o.answered_at is not None and not o.abandoned]
        out.append(
            f"soak: seed {soak.config.seed}, {len(soak.plans)} requests, "
            f"{len(soak.drivers)} servers ({soak.config.stdio} stdio, {soak.config.ws} WebSocket), "
            f"{soak.config.rounds} rounds, Redis {'on' if soak.redis else 'off'}"
        )
        out.append(f"{'fault':<24}{'injected':>9}{'held':>7}")
        for name in sorted(self.injected, key=lambda n: -self.injected[n]):
            out.append(f"{name:<24}{self.injected[name]:>9}{self.held[name]:>7}")
        abandoned = sum(o.abandoned for o in soak.outcomes)
        out.append(
            f"server side: {sum(d.exits for d in soak.drivers.values())} exits and reconnects "
            f"({abandoned} requests abandoned in flight), {self.garbage} garbage frames, "
            f"bursts to {BURST_PROVIDER}: at most {self.most_at_once} calls at once "
            f"(limit {BURST_LIMIT})"
        )
        if soak.hostile is not None:
            out.append(soak.hostile.describe())
        out.append(
            f"host side: {soak.sighups} SIGHUP policy changes, "
            f"{soak.redis_restarts} Redis restarts, serve exit status {soak.exit_code}"
        )
        # Added latency of requests with no fault of their own: the time from sending the
        # request to the provider call's start (routing, admission: waits for holds and
        # probes other requests' faults caused, for the rate limit) and from the call's
        # end to the answer (the response path alone).
        before, after = [], []
        for o in answered:
            calls = soak.provider.calls.get(o.plan.n, [])
            if o.plan.fault == "none" and o.answered_at is not None and len(calls) == 1:
                before.append(calls[0].started_at - o.sent_at)
                after.append(o.answered_at - (calls[0].ended_at or o.answered_at))
        total = [b + a for b, a in zip(before, after, strict=True)]
        main = sum(1 for o in answered if o.plan.n >= len(soak.warm_up))
        rate = main / soak.load_s if soak.load_s else 0.0
        out.append(f"throughput {rate:.0f} requests/s over {soak.load_s:.1f} s of load")
        for label, values in (("added", total), ("  before", before), ("  after", after)):
            out.append(
                f"{label} latency (no fault): p50 {percentile(values, 0.5) * 1000:.1f} ms, "
                f"p99 {percentile(values, 0.99) * 1000:.1f} ms"
            )
        cpu = soak.samples[-1].cpu_s - soak.samples[0].cpu_s if len(soak.samples) > 1 else 0.0
        sent = len(soak.plans)
        out.append(
            f"serve's CPU: {cpu:.1f} s for {sent} requests ({cpu / max(1, sent) * 1000:.1f} ms "
            f"each, faults and retries included; {cpu / max(soak.load_s, 1e-9) * 100:.0f} % of "
            "one CPU)"
        )
        out.append(f"the soak's own longest GC pause: {soak.gc.longest_s * 1000:.0f} ms")
        peak = proc_peak(soak)
        for s in soak.samples:
            out.append(
                f"  {s.label:<9} RSS {s.rss_kb / 1024:6.1f} MB  tasks {s.tasks:3}  fds "
                f"other {s.fds['other']:3} provider {s.fds['provider']:3} (pool "
                f"{s.provider_connections}) redis {s.fds['redis']:2}"
            )
        out.append(f"serve's RSS: peak {peak}")
        if self.ok:
            out.append("everything held")
        else:
            out.append(f"FAILED (seed {soak.config.seed}; work folder {soak.workdir}):")
            out += [f"  {f}" for f in self.failures]
            for outcome, problem in self.request_failures[:10]:
                out.append(f"  request {outcome.plan.describe()} (id {outcome.rid}): {problem}")
                for c in soak.provider.calls.get(outcome.plan.n, []):
                    ended = f"{c.ended_at - outcome.sent_at:+.3f} s" if c.ended_at else "open"
                    out.append(
                        f"    call {c.scenario.kind if c.scenario else None}: started "
                        f"{c.started_at - outcome.sent_at:+.3f} s, ended {ended}"
                        f"{', client left' if c.disconnected else ''}"
                    )
            if len(self.request_failures) > 10:
                out.append(f"  ... and {len(self.request_failures) - 10} more requests")
        return "\n".join(out)


def proc_peak(soak: Soak) -> str:
    last = soak.samples[-1]
    return f"{last.peak_rss_kb / 1024:.1f} MB (VmHWM), final {last.rss_kb / 1024:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stdio", type=int, default=3)
    parser.add_argument("--ws", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=12)
    parser.add_argument("--no-redis", action="store_true", help='[fleet] backend = "memory"')
    parser.add_argument("--flood", type=int, default=40, help="3 MB eventIds from h-flood")
    parser.add_argument("--no-hostile", action="store_true", help="no hostile servers")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    config = Config(
        requests=args.requests,
        seed=args.seed,
        stdio=args.stdio,
        ws=args.ws,
        rounds=args.rounds,
        window=args.window,
        use_redis=not args.no_redis,
        hostile=not args.no_hostile,
        flood=args.flood,
        keep=args.keep,
    )
    report = asyncio.run(Soak(config).run())
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
