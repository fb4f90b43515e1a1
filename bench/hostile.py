"""The soak's hostile mix: MCPL servers that try to exhaust the host (issue 22), run
beside the normal ones while they are served.

Three stdio servers (``agentcore/testing/hostile_server.py``, real subprocesses the host
spawns), connected from the start and probing together once the soak says go (the
first round of load):

- ``h-flood``: `push/event`s with 3 MB `eventId`s, then a duplicate pair: each big one
  must be answered -32602 naming ``max_event_id_bytes``, the duplicate as its first;
- ``h-params``: `inference/request`s asking for 10**30 tokens or a temperature of -7:
  each answered -32602 naming the parameter, and no provider call made;
- ``h-hog``: streamed `inference/request`s whose answers it never reads: past
  ``max_requests_in_flight`` (4) they are refused at once, and past ``max_queued_bytes``
  (32 KiB) the connection is closed (``mcpl:limit`` traces both); with ``reconnect`` the
  host starts it again, and that session only serves.

`Hostile.check` says what did not hold; the soak's own checks (every normal request
answered exactly once, serve's tasks, descriptors and memory steady, SIGTERM) run as
ever, with these servers among the host's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agentcore.testing import Scenario
from agentcore.testing.mcpl_server import HOSTILE_SERVER as SERVER

HOG_MARKER = "hostile-hog"
HOG_IN_FLIGHT = 4
HOG_QUEUED_BYTES = 32 * 1024
HOG_REQUESTS = 200
PARAMS_REQUESTS = 20
HOG_SCENARIO = Scenario.stall("".join(f"w{i} " for i in range(4000)))
"""Far more than a pipe holds, then the connection held open until the host leaves."""


class Hostile:
    def __init__(self, workdir: Path, flood: int) -> None:
        self.flood = flood
        self.go = workdir / "hostile.go"
        self.reports = {tag: workdir / f"{tag}.report" for tag in ("h-flood", "h-params", "h-hog")}
        self.hog_calls = 0
        self.hog_refused = 0
        self.started = 0.0
        self.done_s: float | None = None

    def servers(self) -> dict[str, dict[str, Any]]:
        """Their ``[mcpl.servers.NAME]`` sections."""
        inference = ["inferenceRequest", "inferenceRequest.streaming"]
        return {
            "h-flood": self._server("h-flood", "flood", ["pushEvents"]),
            "h-params": self._server("h-params", "params", inference, PARAMS_REQUESTS),
            "h-hog": {
                **self._server("h-hog", "hog", inference, HOG_REQUESTS),
                "reconnect": True,
                "max_requests_in_flight": HOG_IN_FLIGHT,
                "max_queued_bytes": HOG_QUEUED_BYTES,
            },
        }

    def _server(self, tag: str, mode: str, grant: list[str], requests: int = 0) -> dict[str, Any]:
        env = {
            "HOSTILE_MODE": mode,
            "HOSTILE_REPORT": str(self.reports[tag]),
            "HOSTILE_GO": str(self.go),
            "HOSTILE_FLOOD": str(self.flood),
            "HOSTILE_REQUESTS": str(requests),
        }
        return {"command": [sys.executable, str(SERVER)], "env": env, "grant": grant}

    def scenario(self, body_text: str) -> Scenario | None:
        """What the provider plays for a hostile call (None: not one)."""
        if HOG_MARKER in body_text:
            self.hog_calls += 1
            return HOG_SCENARIO
        return None

    def start(self) -> None:
        self.started = time.monotonic()
        self.go.write_text("go")

    async def wait_done(self, timeout: float = 120.0) -> None:
        """Until every probe is over: the reports written, and h-hog closed and back (its
        second session says so)."""
        deadline = time.monotonic() + timeout
        done = [*self.reports.values(), Path(f"{self.reports['h-hog']}.again")]
        while not all(path.exists() for path in done):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hostile probes did not finish within {timeout} s")
            await asyncio.sleep(0.05)
        self.done_s = time.monotonic() - self.started

    def check(self, traces: Path) -> list[str]:
        """What did not hold, one line each."""
        problems: list[str] = []
        flood = answers(self.reports["h-flood"])
        big = [flood.get(str(rid)) for rid in range(100, 100 + self.flood)]
        wrong = [
            a
            for a in big
            if not (a and a.get("code") == -32602 and "max_event_id_bytes" in a.get("message", ""))
        ]
        if wrong or len(big) != self.flood:
            problems.append(f"h-flood: {len(wrong)} 3 MB eventIds not refused naming the limit")
        if not (flood.get("90") == flood.get("91") and isinstance(flood.get("90"), dict)):
            problems.append(
                f"h-flood: a duplicate eventId answered {flood.get('91')}, first {flood.get('90')}"
            )
        params = answers(self.reports["h-params"])
        named = [
            a
            for a in params.values()
            if a.get("code") == -32602
            and a.get("data", {}).get("param")
            in ("preferences.maxTokens", "preferences.temperature")
        ]
        if len(named) != PARAMS_REQUESTS:
            problems.append(
                f"h-params: {len(named)} of {PARAMS_REQUESTS} refused -32602 naming the parameter"
            )
        hog = [t for t in limits(traces) if t["serverId"] == "h-hog"]
        refused = [t for t in hog if t["limit"] == "max_requests_in_flight"]
        closed = [t for t in hog if t["limit"] == "max_queued_bytes"]
        self.hog_refused = len(refused)
        if not refused or any(t["value"] != HOG_IN_FLIGHT for t in refused):
            problems.append(f"h-hog: {len(refused)} requests refused at max_requests_in_flight")
        if len(closed) != 1 or closed[0]["queuedBytes"] <= HOG_QUEUED_BYTES:
            problems.append(f"h-hog: closed {len(closed)} times past max_queued_bytes")
        # Never more calls than requests in flight; how many start before the bytes bound
        # closes the connection depends on timing (the first stream alone may pass it).
        if not 1 <= self.hog_calls <= HOG_IN_FLIGHT:
            problems.append(
                f"h-hog: {self.hog_calls} provider calls, not 1 to {HOG_IN_FLIGHT} "
                "(max_requests_in_flight)"
            )
        return problems

    def describe(self) -> str:
        """The mix in one line (after `check`, which reads what it needs)."""
        took = f"{self.done_s:.1f} s" if self.done_s is not None else "?"
        return (
            f"hostile: {self.flood} 3 MB eventIds and a duplicate (h-flood), "
            f"{PARAMS_REQUESTS} out-of-bounds params (h-params), h-hog {self.hog_refused} "
            f"refused at once and closed past {HOG_QUEUED_BYTES} bytes unread; all over in {took}"
        )


def answers(report: Path) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(report.read_text())["answers"]
    except (OSError, ValueError, KeyError):
        return {}
    return found


def limits(traces: Path) -> list[dict[str, Any]]:
    if not traces.exists():
        return []
    found = []
    with traces.open("rb") as lines:
        for line in lines:
            if b'"mcpl:limit"' in line:
                found.append(json.loads(line))
    return found
