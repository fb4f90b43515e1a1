"""`agentcore serve` with a server that behaves as those built on mcpl-core-ts do.

The server (``servers/ts_core_server.py``, a real stdio subprocess of a real ``agentcore
serve``) announces MCPL 0.4, declares its feature sets as a JSON array, answers 0.5's
``featureSets/update`` Request with -32601, starts sending without waiting for a receipt,
and gives up on a request after its own timeout without cancelling it: heartbeat-mcpl
0.1.3 on each of these points. What it received and was answered is read back from its
log; what ``serve`` said, from its stderr and its traces file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, RETRY, ROUTING
from e2e_support import TIMEOUT_S, serving, until

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

SERVER = Path(__file__).parent / "servers" / "ts_core_server.py"
USER = [{"role": "user", "content": "Consolidate these notes."}]
FEATURE_SETS = [  # mcpl-core-ts's FeatureSetDeclaration[], as heartbeat-mcpl sends them
    {
        "name": "heartbeat",
        "description": "Periodic self-wake heartbeats",
        "uses": ["tools"],  # heartbeat-mcpl pushes events on it all the same
        "rollback": False,
        "hostState": False,
    },
    {
        "name": "assist",
        "description": "Asks the host for inference",
        "uses": ["inferenceRequest"],
        "rollback": False,
        "hostState": False,
    },
]
GRANT = ["tools", "pushEvents", "inferenceRequest", "inferenceRequest.streaming", "modelInfo"]
PUSH = {
    "featureSet": "heartbeat",
    "eventId": "heartbeat_1",
    "timestamp": "2026-01-01T00:00:00Z",
    "origin": {"source": "heartbeat", "reason": "manual"},
    "payload": {"content": [{"type": "text", "text": "[heartbeat] check in"}]},
}
MODEL_INFO = {"vendor": "acme", "context_window": 8192, "capabilities": ["tools"]}


class TsServer:
    """The server's log, read back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_jsonl(self.path) if kind is None or e["event"] == kind]

    def received(self, method: str) -> list[dict[str, Any]]:
        return [
            e["message"] for e in self.events("received") if e["message"].get("method") == method
        ]

    def outcome(self, action: int) -> dict[str, Any]:
        [found] = [
            e
            for e in self.events()
            if e["event"] in ("answer", "timeout") and e["action"] == action
        ]
        return found

    async def finished(self) -> None:
        await until(lambda: self.events("done"), TIMEOUT_S)


def server_config(
    tmp_path: Path,
    actions: list[list[Any]],
    *,
    version: str = "0.4",
    deadline_s: float | None = None,
    start_on: str = "notifications/initialized",
) -> tuple[dict[str, Any], TsServer]:
    log = tmp_path / "ts-server.jsonl"
    config = {"log": str(log), "version": version, "feature_sets": FEATURE_SETS}
    config["start_on"] = start_on
    table: dict[str, Any] = {
        "command": [sys.executable, str(SERVER)],
        "env": {"MCPL_TS_CONFIG": json.dumps({**config, "actions": actions})},
        "grant": GRANT,
    }
    if deadline_s is not None:
        table["request_deadline_s"] = deadline_s
    return table, TsServer(log)


def settings(
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    server: dict[str, Any],
    *,
    retry: dict[str, Any] = RETRY,
) -> tuple[Path, Path]:
    traces = tmp_path / "traces.jsonl"
    path = loopback_settings(
        PROVIDERS,
        inference={"progress_timeout_s": 30.0, "request_timeout_s": 30.0},
        sections={
            "retry": retry,
            "provider_hold": {"default_hold_s": 0.01, "max_wait_s": 5.0},
            "mcpl": {"servers": {"ts": server}, "routing": ROUTING},
            "traces": {"jsonl": str(traces)},
        },
    )
    models = '\n[providers.a.models."claude-e2e"]\n' + "\n".join(
        f"{k} = {json.dumps(v)}" for k, v in MODEL_INFO.items()
    )
    path.write_text(path.read_text() + models + "\n")
    return path, traces


def traced(traces: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(traces) if e["type"] == kind]


@pytest.fixture
def transport() -> str:
    return "stdio"


async def test_a_0_4_server_gets_mcpl_in_its_own_version(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    loopback_provider.script(
        Scenario.text("Whole."), Scenario.text("Stream", chunks=("Str", "eam"))
    )
    actions = [
        ["push/event", PUSH],
        ["inference/request", {"featureSet": "assist", "messages": USER}],
        # `assist` declares no streaming: 0.4 has no declaration-mismatch rule (§6.4(2) is
        # 0.5's), so the grant decides, and it grants streaming.
        ["inference/request", {"featureSet": "assist", "stream": True, "messages": USER}],
        ["model/info", {}],
        ["inference/request", {"featureSet": "undeclared", "messages": USER}],
    ]
    table, server = server_config(tmp_path, actions)
    path, traces = settings(loopback_settings, tmp_path, table)
    async with serving(path) as served:
        await server.finished()
        code, _, stderr = await served.stop()
    assert code == 0, stderr

    # 0.4's featureSets/update: a Notification with enabled and disabled only; never 0.5's
    # Request, which such a server answers -32601.
    [update] = server.received("featureSets/update")
    assert "id" not in update
    assert update["params"] == {"enabled": ["assist", "heartbeat"], "disabled": []}

    # Everything it sent was admitted, in force from the notification on.
    assert server.outcome(0)["response"]["result"] == {
        "accepted": False,
        "reason": "no plugin on this host acts on push events",
    }
    assert server.outcome(1)["response"]["result"]["content"] == "Whole."
    streamed = server.outcome(2)["response"]["result"]
    assert streamed["content"] == "Stream"
    chunks = [m["params"]["delta"] for m in server.received("inference/chunk")]
    assert "".join(chunks) == "Stream"
    assert server.outcome(3)["response"]["result"] == {
        "id": "claude-e2e",
        "vendor": "acme",
        "contextWindow": 8192,
        "capabilities": ["tools"],
    }
    assert server.outcome(4)["response"]["error"]["code"] == -32003  # §6.6, any version
    assert server.events("timeout") == [] and server.events("late") == []

    # The log says what was negotiated, names the array form, and warns of each use a
    # feature set did not declare; no refusal is claimed.
    assert "declares featureSets as a JSON array (mcpl-core-ts's form" in stderr
    assert (
        "mcpl server ts: ready: MCPL '0.4' spoken as 0.4; featureSets/update as a "
        "Notification, in force when sent (MCPL 0.4); feature sets declared as array; "
        "granted ['inferenceRequest', 'inferenceRequest.streaming', 'modelInfo', "
        "'pushEvents', 'tools']; feature sets ['assist', 'heartbeat']"
    ) in stderr
    assert "feature set heartbeat exercised pushEvents, which its uses does not declare" in stderr
    assert "refused" not in stderr
    [state, closed] = traced(traces, "mcpl:server_state")
    assert state == {
        **{k: state[k] for k in ("type", "timestamp")},
        "serverId": "ts",
        "state": "ready",
        "grant": sorted(GRANT),
        "featureSets": ["assist", "heartbeat"],
        "mcplVersion": "0.4",
        "spokenAs": "0.4",
        "policyExchange": "notification",
        "featureSetsForm": "array",
    }
    assert closed["state"] == "closed"


async def test_a_server_that_takes_no_policy_is_not_called_ready_or_refused(
    loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    # Announcing 0.5, it gets 0.5's Request, answers it -32601 and pushes all the same.
    actions = [["push/event", PUSH]]
    table, server = server_config(tmp_path, actions, version="0.5", start_on="featureSets/update")
    path, traces = settings(loopback_settings, tmp_path, table)
    async with serving(path) as served:
        await server.finished()
        code, _, stderr = await served.stop()
    assert code == 0, stderr

    [update] = server.received("featureSets/update")
    assert "id" in update and update["params"]["effectiveCapabilities"] == sorted(GRANT)
    assert server.outcome(0)["response"]["error"] == {
        "code": -32002,
        "message": "Capability denied: pushEvents (the server did not take the host's "
        "initial policy, so MCPL is off)",
        "data": {"capability": "pushEvents", "reason": "policy_unacknowledged"},
    }
    assert "ready" not in stderr and "refused" not in stderr
    assert "mcpl server ts: connected, MCPL off (unacknowledged: the server did not take" in stderr
    state = traced(traces, "mcpl:server_state")[0]
    assert (state["state"], state["grant"], state["featureSets"]) == ("unacknowledged", [], [])
    assert state["reason"] == "the server did not take the host's initial policy, so MCPL is off"
    assert (state["mcplVersion"], state["spokenAs"], state["policyExchange"]) == (
        "0.5",
        "0.5",
        "request",
    )


async def test_a_request_the_client_gave_up_on_is_not_worked_on_past_its_deadline(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    # The provider is overloaded for good, and the retry policy would go on for minutes:
    # the deadline stops it and answers, while the client (30 s) still waits.
    loopback_provider.default = Scenario.overloaded()
    forever = {"max_attempts": 10_000, "initial_delay_s": 0.01, "max_delay_s": 0.02}
    retry = {**RETRY, **forever, "jitter_s": 0.0, "overloaded": {**forever, "jitter_s": 0.0}}
    actions = [
        ["inference/request", {"featureSet": "assist", "messages": USER}],
        ["model/info", {}],
    ]
    # 2 s: long enough that a loaded machine still makes the first provider call before it.
    table, server = server_config(tmp_path, actions, deadline_s=2.0)
    path, traces = settings(loopback_settings, tmp_path, table, retry=retry)
    async with serving(path) as served:
        await until(lambda: server.events("answer"))
        calls_at_answer = len(loopback_provider.calls)
        await server.finished()
        calls_after = len(loopback_provider.calls)
        code, _, stderr = await served.stop()
    assert code == 0, stderr

    assert server.outcome(0)["response"]["error"] == {
        "code": -32603,
        "message": "The request's deadline passed: no answer within 2 s "
        "([mcpl.servers.ts] request_deadline_s); the host stopped working on it",
        "data": {"reason": "deadline", "deadlineS": 2.0},
    }
    assert server.events("timeout") == [] and server.events("late") == []
    assert calls_at_answer >= 1  # it was being retried...
    assert calls_after == calls_at_answer  # ...and no more once answered
    [fail] = traced(traces, "mcpl:inference_fail")
    assert fail["error"] == "The request's deadline passed; the host stopped working on it"
