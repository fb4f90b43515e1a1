"""The MCPL fuzz: running scenarios against one kernel, host and scripted provider, and
checking every answer against the oracle (`fuzz`, `play`)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from loguru import logger

from agentcore.kernel import Kernel
from agentcore.mcpl.connection import ServerConnection
from agentcore.mcpl.host import McplHost
from agentcore.mcpl.protocol import INTERNAL_ERROR
from agentcore.mcpl.transports import StdioTransport
from agentcore.testing import ScriptedProvider, scripted_kind
from agentcore.testing.fuzz.oracle import (
    DISABLED,
    GRANT,
    MANIFEST,
    MAX_FRAME_BYTES,
    SETTINGS_TOML,
    WAIT_S,
    InProcessChild,
    Model,
    answer_for,
    frame,
    id_key,
)
from agentcore.testing.fuzz.scenarios import Scenario, scenarios
from agentcore.testing.serve import read_jsonl
from agentcore.traces import JsonlTraceSink

# -- running one --------------------------------------------------------------------


def router_plugin() -> object:
    """The mcpl-router plugin, by its entry point: agentcore imports no plugin package."""
    (entry,) = importlib.metadata.entry_points(group="agentcore.plugins", name="mcpl-router")
    return entry.load()()


@dataclass
class Figures:
    examples: int = 0
    frames: int = 0
    answers: int = 0
    cancelled: int = 0
    seconds: float = 0.0
    outcomes: Counter[int | str] = field(default_factory=Counter)

    def __str__(self) -> str:
        rate = self.frames / self.seconds if self.seconds else 0.0
        return (
            f"{self.examples} examples, {self.frames} frames, {self.answers} answers checked, "
            f"{self.cancelled} requests cancelled (no answer), {self.seconds:.1f} s "
            f"({rate:.0f} frames/s)\nanswers by outcome: "
            + ", ".join(f"{k}: {n}" for k, n in self.outcomes.most_common())
        )


class Rig:
    """One kernel, host and scripted provider, serving one connection per example."""

    def __init__(self, kernel: Kernel, provider: ScriptedProvider, traces: Path) -> None:
        self.kernel = kernel
        self.host = McplHost(kernel)
        self.provider = provider
        self.traces = traces
        # Bad input is answered, never a traceback: an error logged is a finding.
        self.errors: list[str] = []
        self._sink = logger.add(self._on_error, level="ERROR", format="{message}")

    def _on_error(self, message: Any) -> None:
        self.errors.append(str(message))

    @classmethod
    async def open(cls, directory: Path) -> Rig:
        path = directory / "agentcore.toml"
        traces = directory / "traces.jsonl"
        path.write_text(SETTINGS_TOML.format(traces=traces))
        provider = ScriptedProvider(answer_for=answer_for)
        kernel = Kernel.load(
            path,
            environ={},
            discover_plugins=False,
            plugins={
                "mcpl-router": router_plugin(),
                "scripted": scripted_kind(provider),
                "jsonl-traces": JsonlTraceSink(),  # as serve loads it, by its entry point
            },
        )
        await kernel.start()
        return cls(kernel, provider, traces)

    async def close(self) -> None:
        await self.kernel.stop()
        logger.remove(self._sink)

    async def play(self, scenario: Scenario, figures: Figures) -> None:
        self.provider.calls.clear()
        self.provider.log.clear()
        self.provider.endings.clear()
        self.errors.clear()
        self.traces.write_text("")
        session = Session(self.host, scenario)
        await session.run()
        assert not self.errors, "the host logged errors:\n" + "\n".join(self.errors)
        self._check_traces(session)
        figures.examples += 1
        figures.frames += session.model.lines
        figures.answers += session.checked
        figures.outcomes.update(session.outcomes)
        figures.cancelled += len(session.model.cancelled)

    def _check_traces(self, session: Session) -> None:
        """Every trace reached the JSONL file whole (SPEC §13.2: the audit trail), one
        `mcpl:inference_start` for each call the provider took."""
        starts = 0
        for trace in read_jsonl(self.traces):
            starts += trace.get("type") == "mcpl:inference_start"
        assert starts == len(self.provider.calls), (
            f"{len(self.provider.calls)} provider calls, {starts} mcpl:inference_start traces"
        )


class Session:
    """One connection: the handshake, the frames, the answers, the checks."""

    def __init__(self, host: McplHost, scenario: Scenario) -> None:
        self.host = host
        self.scenario = scenario
        self.child = InProcessChild()
        self.received: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.model = Model(None)
        self.checked = 0
        self.outcomes: Counter[int | str] = Counter()

    async def run(self) -> None:
        await self.child.open()
        collector = asyncio.ensure_future(self._collect())
        connection = ServerConnection(
            "fuzz",
            self._transport,
            grant=GRANT,
            handler=self.host.handle,
            disabled_feature_sets=DISABLED,
            request_timeout_s=WAIT_S,
            manifest_fetch_interval_s=0.0,
        )
        try:
            await asyncio.wait_for(connection.start(), WAIT_S)
            assert connection.ready, connection.state
            hook = None
            if self.scenario.hook:
                hook = asyncio.ensure_future(
                    connection.request("context/beforeInference", {"fuzz": True})
                )
                self.model.hook_id = await self._wait_for_request("context/beforeInference")
            wire = self._compile()
            await self._feed(wire)
            await self._settle()
            assert not connection.closed.is_set(), "the connection did not survive the frames"
            if self.scenario.ending == "eof":
                self.child.stdout.feed_eof()
            await asyncio.wait_for(connection.close(), WAIT_S)
            await asyncio.wait_for(collector, WAIT_S)
            if hook is not None:
                await asyncio.gather(hook, return_exceptions=True)
        finally:
            await connection.close()
            collector.cancel()
        self._check()

    async def _transport(self) -> StdioTransport:
        return StdioTransport(
            self.child,  # type: ignore[arg-type]  # see InProcessChild
            name="fuzz",
            max_frame_bytes=MAX_FRAME_BYTES,
        )

    def _compile(self) -> bytes:
        """The frames as bytes on the wire, walked through the oracle in the same order,
        then a probe (a ping each side knows) and, for an EOF ending, a last unterminated
        frame."""
        lines: list[bytes] = []
        for spec in self.scenario.frames:
            for line in spec.render(self.model):
                self.model.line(line)
                lines.append(line)
        probe = frame({"jsonrpc": "2.0", "id": "probe", "method": "ping"})
        self.model.line(probe)
        wire = b"\n".join([*lines, probe]) + b"\n"
        if self.scenario.ending == "eof":
            # MCP stdio: a last line without its newline is still a frame at EOF.
            last = frame({"jsonrpc": "2.0", "id": "last", "method": "ping"})
            self.model.line(last)
            self.model.ids[id_key("last")].outcomes.add(INTERNAL_ERROR)  # racing the close
            wire += last
        return wire

    async def _feed(self, wire: bytes) -> None:
        sizes = self.scenario.chunk_sizes or [len(wire)]
        offset, turn = 0, 0
        while offset < len(wire):
            size = sizes[turn % len(sizes)]
            self.child.feed(wire[offset : offset + size])
            offset += size
            turn += 1
            await asyncio.sleep(0)  # the reader takes this read before the next arrives

    async def _collect(self) -> None:
        """Read everything the host writes; answer the handshake as a server does."""
        while True:
            line = await self.child.host_frames.readline()
            if not line:
                return
            assert line.endswith(b"\n"), f"a host frame without its newline: {line[:200]!r}"
            message = json.loads(line)  # the host writes JSON, one message a line
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
            self.received.append(message)
            self.arrived.set()
            method = message.get("method")
            if method == "initialize":
                result = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": MANIFEST}},
                    "serverInfo": {"name": "fuzz", "version": "0"},
                }
                self.child.feed(
                    frame({"jsonrpc": "2.0", "id": message["id"], "result": result}) + b"\n"
                )
            elif method == "featureSets/update":
                receipt = {"accepted": True}
                self.child.feed(
                    frame({"jsonrpc": "2.0", "id": message["id"], "result": receipt}) + b"\n"
                )

    async def _wait_for_request(self, method: str) -> Any:
        async with asyncio.timeout(WAIT_S):
            while True:
                for message in self.received:
                    if message.get("method") == method and "id" in message:
                        return message["id"]
                self.arrived.clear()
                await self.arrived.wait()

    async def _settle(self) -> None:
        """Wait for the probe's answer (every frame before it was read) and for every
        answer due before the end: all but those of requests still stalled."""
        stalled = set(self.model.stalled)

        def due() -> bool:
            counts = self._counts()
            return all(
                counts.get(key, 0) >= expected.low - (key in stalled)
                for key, expected in self.model.ids.items()
                if key != id_key("last")
            )

        try:
            async with asyncio.timeout(WAIT_S):
                while not due():
                    self.arrived.clear()
                    await self.arrived.wait()
        except TimeoutError:
            raise AssertionError(self._report("answers still missing before the end")) from None

    def _responses(self) -> list[dict[str, Any]]:
        return [m for m in self.received if "method" not in m]

    def _duplicate_of(self, response: dict[str, Any]) -> str | None:
        error = response.get("error")
        if response.get("id") is not None or not isinstance(error, dict):
            return None
        found = re.fullmatch(
            r"Invalid Request: id (.*) is already in flight", str(error.get("message"))
        )
        if found is None:
            return None
        name = found.group(1)
        assert name in self.model.names, f"a duplicate refused for an id never sent: {name}"
        return self.model.names[name]

    def _counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for response in self._responses():
            if response.get("id") is not None:
                counts[id_key(response["id"])] += 1
            else:
                duplicate = self._duplicate_of(response)
                if duplicate is not None:
                    counts[duplicate] += 1
        return counts

    def _check(self) -> None:
        model = self.model
        counts = self._counts()
        nulls: Counter[int] = Counter()
        answered_at: dict[str, int] = {}
        for position, message in enumerate(self.received):
            if message.get("method") == "inference/chunk":
                key = id_key(message["params"]["requestId"])
                assert key not in answered_at or model.ids[key].high > 1, self._report(
                    f"a chunk for {key} after its answer"
                )
                continue
            if "method" in message:
                continue
            self.checked += 1
            assert ("result" in message) != ("error" in message), message
            self.outcomes["result" if "result" in message else message["error"]["code"]] += 1
            if "error" in message:
                error = message["error"]
                assert isinstance(error.get("code"), int) and isinstance(
                    error.get("message"), str
                ), message
            if message["id"] is None:
                if self._duplicate_of(message) is None:
                    nulls[message["error"]["code"]] += 1
                continue
            key = id_key(message["id"])
            answered_at.setdefault(key, position)
            expected = model.ids.get(key)
            assert expected is not None, self._report(f"an answer for {key}, never a request id")
            outcome = "result" if "result" in message else message["error"]["code"]
            assert outcome in expected.outcomes, self._report(
                f"{key} answered {message}, expected one of {expected.outcomes}"
            )
        for key, expected in model.ids.items():
            assert expected.low <= counts.get(key, 0) <= expected.high, self._report(
                f"{key}: {counts.get(key, 0)} answers, expected {expected.low}..{expected.high}"
            )
        for code in set(nulls) | set(model.null_high):
            assert model.null_low[code] <= nulls[code] <= model.null_high[code], self._report(
                f"{nulls[code]} answers with id null and code {code}, expected "
                f"{model.null_low[code]}..{model.null_high[code]}"
            )

    def _report(self, problem: str) -> str:
        shown = [json.dumps(m)[:300] for m in self._responses()][-40:]
        return f"{problem}\nthe last answers:\n" + "\n".join(shown)


# -- entry points -------------------------------------------------------------------

settings.register_profile(
    "mcpl-fuzz",
    deadline=None,
    database=None,  # no .hypothesis/ directory; the seed makes each run repeat
    print_blob=True,  # a failure prints @reproduce_failure(...) to replay it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # In make test, a failure is reported as found: shrinking one can take minutes, past
    # pytest's timeout, which would lose the report. The blob replays it to shrink later.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.register_profile(
    "mcpl-fuzz-full", settings.get_profile("mcpl-fuzz"), phases=list(Phase)
)  # bench/fuzz.py --shrink: a failure shrunk to its smallest form (no timeout there)
SEED = 20261201
CI_EXAMPLES = 40
"""In `make test`: a few thousand frames in well under a minute; `bench/fuzz.py` runs 100,000."""


def fuzz(
    examples: int,
    *,
    seed_value: int = SEED,
    figures: Figures | None = None,
    profile: str = "mcpl-fuzz",
) -> Figures:
    """Run `examples` generated scenarios against one kernel; returns the figures."""
    figures = figures if figures is not None else Figures()
    started = time.perf_counter()
    with asyncio.Runner() as runner, tempfile.TemporaryDirectory() as directory:
        rig = runner.run(Rig.open(Path(directory)))
        try:

            @seed(seed_value)
            @settings(settings.get_profile(profile), max_examples=examples)
            @given(scenarios)
            def one(scenario: Scenario) -> None:
                runner.run(rig.play(scenario, figures))

            one()
        finally:
            runner.run(rig.close())
    figures.seconds += time.perf_counter() - started
    return figures


def play(scenarios: Iterable[Scenario]) -> Figures:
    """Play the given scenarios, in order, against one kernel (no generation)."""
    figures = Figures()
    with asyncio.Runner() as runner, tempfile.TemporaryDirectory() as directory:
        rig = runner.run(Rig.open(Path(directory)))
        try:
            for scenario in scenarios:
                runner.run(rig.play(scenario, figures))
        finally:
            runner.run(rig.close())
    return figures
