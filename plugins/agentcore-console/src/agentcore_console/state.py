"""The host's live state, folded from trace events: what the console page and ``/status`` show.

`HostState.apply` is called from `on_trace` for every event and does only dictionary
work (no I/O, no awaiting); `snapshot()` is the JSON object the page renders, built
when a client asks, not per event. Everything kept is bounded: in-flight entries end
with their terminal traces, and failures and the throughput window are capped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from agentcore.api import (
    HoldPayload,
    ReleasePayload,
    SlotsPayload,
    TraceEvent,
    WaitingPayload,
    payload,
)

LAST_FAILURES = 20
THROUGHPUT_WINDOW_MS = 60_000
MAX_RECENT_COMPLETIONS = 10_000
"""At most this many completions are kept for the one-minute throughput figure."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Inference:
    """One inference in flight, as the page lists it. A slotted object, not a dict: every
    stream holds one while it runs (~0.17 KB less each)."""

    __slots__ = (
        "attempt",
        "inference_id",
        "last_error",
        "model",
        "provider",
        "server_id",
        "since_ms",
        "streamed",
    )

    def __init__(self, fields: dict[str, Any], since_ms: int) -> None:
        self.inference_id = fields.get("inferenceId")
        self.model = fields.get("model")
        self.provider = fields.get("provider")
        self.streamed = fields.get("streamed")
        self.server_id = fields.get("serverId")
        self.attempt = 1
        self.since_ms = since_ms
        self.last_error: Any = _NONE

    def to_json(self) -> dict[str, Any]:
        shown = {
            "inferenceId": self.inference_id,
            "model": self.model,
            "provider": self.provider,
            "streamed": self.streamed,
            "serverId": self.server_id,
            "attempt": self.attempt,
            "sinceMs": self.since_ms,
        }
        if self.last_error is not _NONE:  # once it was retried
            shown["lastError"] = self.last_error
        return shown


class _Request:
    """One MCPL `inference/request` in flight, as the page lists it (slotted, as above)."""

    __slots__ = ("feature_set", "model", "request_id", "since_ms", "streamed")

    def __init__(self, fields: dict[str, Any], since_ms: int) -> None:
        self.request_id = fields.get("requestId")
        self.feature_set = fields.get("featureSet")
        self.model = fields.get("model")
        self.streamed = fields.get("streamed")
        self.since_ms = since_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            "featureSet": self.feature_set,
            "model": self.model,
            "streamed": self.streamed,
            "sinceMs": self.since_ms,
        }


_NONE: Any = object()


class HostState:
    """See the module docstring. `version` grows with every event that changed something."""

    def __init__(self) -> None:
        self.version = 0
        self.started_ms = _now_ms()
        self.providers: dict[str, dict[str, Any]] = {}
        self.holds: dict[tuple[str, str], dict[str, Any]] = {}
        self.waiting: dict[str, dict[str, Any]] = {}
        self.inferences: dict[str, _Inference] = {}
        self.servers: dict[str, dict[str, Any]] = {}
        self.failures: deque[dict[str, Any]] = deque(maxlen=LAST_FAILURES)
        self.totals = {
            "started": 0,
            "completed": 0,
            "failed": 0,
            "inputTokens": 0,
            "outputTokens": 0,
            "costUsd": 0.0,
            "unpriced": 0,
        }
        """``costUsd`` sums the priced completions; ``unpriced`` counts those with no price."""
        self._completions: deque[int] = deque(maxlen=MAX_RECENT_COMPLETIONS)
        self._handlers: dict[str, Callable[[TraceEvent], None]] = {
            "inference:start": self._start,
            "inference:complete": self._complete,
            "inference:fail": self._fail,
            "inference:retry": self._retry,
            "inference:waiting": self._waiting,
            "provider:hold": self._hold,
            "provider:release": self._release,
            "rate_limit:slots": self._slots,
            "mcpl:server_state": self._server_state,
            "mcpl:policy_change": self._policy_change,
            "mcpl:inference_start": self._mcpl_start,
            "mcpl:inference_complete": self._mcpl_end,
            "mcpl:inference_fail": self._mcpl_end,
        }

    def apply(self, event: TraceEvent) -> bool:
        """Fold one trace in; True when it changed what the page shows."""
        handler = self._handlers.get(event.type)
        if handler is None:
            return False
        handler(event)
        self.version += 1
        return True

    # -- inferences ----------------------------------------------------------------------

    def _provider(self, name: str) -> dict[str, Any]:
        provider = self.providers.get(name)
        if provider is None:
            provider = {
                "name": name,
                "kind": None,
                "inFlight": 0,
                "completed": 0,
                "failed": 0,
                "costUsd": 0.0,
                "slots": None,
            }
            self.providers[name] = provider
        return provider

    def _start(self, event: TraceEvent) -> None:
        f = event.fields
        provider = self._provider(str(f.get("provider")))
        provider["kind"] = f.get("providerKind") or provider["kind"]
        provider["inFlight"] += 1
        self.totals["started"] += 1
        self.inferences[str(f.get("inferenceId"))] = _Inference(f, event.timestamp)

    def _end(self, event: TraceEvent) -> _Inference | None:
        f = event.fields
        inference = self.inferences.pop(str(f.get("inferenceId")), None)
        for wait_id in [
            w for w, v in self.waiting.items() if v["inferenceId"] == f.get("inferenceId")
        ]:
            del self.waiting[wait_id]  # a wait cut short by the end (shutdown) ends with it
        if inference is not None:
            provider = self._provider(str(inference.provider))
            provider["inFlight"] = max(0, provider["inFlight"] - 1)
        return inference

    def _complete(self, event: TraceEvent) -> None:
        f = event.fields
        inference = self._end(event)
        given = f.get("costUsd")
        priced = isinstance(given, int | float)
        cost = float(given) if isinstance(given, int | float) else 0.0
        if inference is not None:
            provider = self._provider(str(inference.provider))
            provider["completed"] += 1
            provider["costUsd"] += cost
        self.totals["completed"] += 1
        self.totals["inputTokens"] += int(f.get("inputTokens") or 0)
        self.totals["outputTokens"] += int(f.get("outputTokens") or 0)
        self.totals["costUsd"] += cost
        self.totals["unpriced"] += 0 if priced else 1
        self._completions.append(event.timestamp)

    def _fail(self, event: TraceEvent) -> None:
        f = event.fields
        inference = self._end(event)
        if inference is not None:
            self._provider(str(inference.provider))["failed"] += 1
        self.totals["failed"] += 1
        self.failures.appendleft(
            {
                "atMs": event.timestamp,
                "inferenceId": f.get("inferenceId"),
                "model": f.get("model"),
                "serverId": f.get("serverId"),
                "errorKind": f.get("errorKind"),
                "error": f.get("error"),
            }
        )

    def _retry(self, event: TraceEvent) -> None:
        inference = self.inferences.get(str(event.fields.get("inferenceId")))
        if inference is not None:
            inference.attempt = int(event.fields.get("attempt") or 0) + 1
            inference.last_error = event.fields.get("error")

    def _waiting(self, event: TraceEvent) -> None:
        f = payload(event, WaitingPayload)
        wait_id = f["waitId"]
        if f["ended"]:
            self.waiting.pop(wait_id, None)
            return
        remaining = f["remainingMs"]
        self.waiting[wait_id] = {
            "waitId": wait_id,
            "inferenceId": f["inferenceId"],
            "provider": f["provider"],
            "model": f["model"],
            "reason": f["reason"],
            "attempt": f["attempt"],
            "sinceMs": event.timestamp - f["waitedMs"],
            "untilMs": None if remaining is None else event.timestamp + int(remaining),
        }

    # -- holds ---------------------------------------------------------------------------

    def _hold(self, event: TraceEvent) -> None:
        f = payload(event, HoldPayload)
        provider = f["provider"]
        self._provider(provider)
        model = "*" if f["key"] == "provider" else f["model"]
        self.holds[provider, model] = {
            "provider": provider,
            "model": model,
            "reason": f["reason"],
            "error": f["error"],
            "sinceMs": self.holds.get((provider, model), {}).get("sinceMs", event.timestamp),
            "untilMs": f["untilMs"],
        }

    def _release(self, event: TraceEvent) -> None:
        f = payload(event, ReleasePayload)
        model = "*" if f["key"] == "provider" else f["model"]
        self.holds.pop((f["provider"], model), None)

    # -- rate-limit slots ------------------------------------------------------------------

    def _slots(self, event: TraceEvent) -> None:
        """Each trace carries the count after the change, so the latest one is the truth."""
        f = payload(event, SlotsPayload)
        self._provider(f["provider"])["slots"] = {
            "inUse": f["inUse"],
            "limit": f["maxInFlight"],
            "scope": f["scope"],
        }

    # -- MCPL servers ----------------------------------------------------------------------

    def _server(self, server_id: str) -> dict[str, Any]:
        server = self.servers.get(server_id)
        if server is None:
            server = {
                "serverId": server_id,
                "state": "unknown",
                "grant": [],
                "featureSets": [],
                "error": None,
                "crashLooping": False,
                "reconnects": 0,
                "requests": {},
                "served": 0,
                "failed": 0,
                "sinceMs": None,
            }
            self.servers[server_id] = server
        return server

    def _server_state(self, event: TraceEvent) -> None:
        f = event.fields
        server = self._server(str(f.get("serverId")))
        server["state"] = f.get("state")
        server["sinceMs"] = event.timestamp
        server["error"] = f.get("error")
        # A server that keeps failing (`[mcpl.servers.NAME] crash_loop_after`): until a
        # session stays up, its ready traces say so too.
        server["crashLooping"] = bool(f.get("crashLooping"))
        server["reconnects"] = f.get("attempt") or 0
        if "grant" in f:
            server["grant"] = list(f.get("grant") or [])
        if "featureSets" in f:
            server["featureSets"] = list(f.get("featureSets") or [])
        if f.get("state") == "closed":
            server["requests"].clear()

    def _policy_change(self, event: TraceEvent) -> None:
        f = event.fields
        server = self._server(str(f.get("serverId")))
        grant = set(server["grant"]) - set(f.get("removed") or ())
        server["grant"] = sorted(grant | set(f.get("added") or ()))

    def _mcpl_start(self, event: TraceEvent) -> None:
        f = event.fields
        server = self._server(str(f.get("serverId")))
        server["requests"][str(f.get("requestId"))] = _Request(f, event.timestamp)

    def _mcpl_end(self, event: TraceEvent) -> None:
        f = event.fields
        server = self._server(str(f.get("serverId")))
        server["requests"].pop(str(f.get("requestId")), None)
        if event.type == "mcpl:inference_complete":
            server["served"] += 1
            return
        server["failed"] += 1
        self.failures.appendleft(
            {
                "atMs": event.timestamp,
                "serverId": f.get("serverId"),
                "requestId": f.get("requestId"),
                "model": f.get("model"),
                "errorKind": "mcpl",
                "error": f.get("error"),
            }
        )

    # -- what the page gets ----------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = _now_ms()
        while self._completions and self._completions[0] < now - THROUGHPUT_WINDOW_MS:
            self._completions.popleft()
        return {
            "version": self.version,
            "nowMs": now,
            "startedMs": self.started_ms,
            "totals": {**self.totals, "completedLastMinute": len(self._completions)},
            "providers": sorted(self.providers.values(), key=lambda p: str(p["name"])),
            "holds": sorted(self.holds.values(), key=lambda h: (h["provider"], h["model"])),
            "waiting": sorted(self.waiting.values(), key=lambda w: w["sinceMs"]),
            "inferences": [
                i.to_json() for i in sorted(self.inferences.values(), key=lambda i: i.since_ms)
            ],
            "servers": [
                {**s, "requests": [r.to_json() for r in sorted(s["requests"].values(), key=_since)]}
                for s in sorted(self.servers.values(), key=lambda s: str(s["serverId"]))
            ],
            "failures": list(self.failures),
        }


def _since(request: _Request) -> int:
    return request.since_ms


__all__ = ["LAST_FAILURES", "HostState"]
