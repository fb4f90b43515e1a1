"""Folding traces into the page's state: holds, waits, servers, requests, failures."""

from __future__ import annotations

from agentcore_console import HostState

from agentcore.api import TraceEvent


def feed(host: HostState, type: str, /, at: int = 1_000, **fields: object) -> None:
    host.apply(TraceEvent(type, dict(fields), timestamp=at))


def test_a_hold_is_shown_until_its_release() -> None:
    state = HostState()
    feed(
        state,
        "inference:start",
        inferenceId="inf_1",
        model="a:m",
        provider="a",
        providerKind="anthropic",
        streamed=True,
    )
    feed(
        state,
        "provider:hold",
        at=1_000,
        provider="a",
        model="m",
        key="provider_model",
        untilMs=5_000,
        durationMs=4_000,
        reason="rate_limit",
        error="rate_limit 429: slow",
    )
    feed(
        state,
        "inference:waiting",
        at=1_100,
        reason="backoff",
        provider="a",
        model="m",
        attempt=1,
        inferenceId="inf_1",
        waitId="w2",
        remainingMs=3_900,
        waitedMs=100,
        ended=False,
    )
    snap = state.snapshot()
    [hold] = snap["holds"]
    assert (hold["provider"], hold["model"], hold["untilMs"], hold["reason"]) == (
        "a",
        "m",
        5_000,
        "rate_limit",
    )
    [wait] = snap["waiting"]
    assert (wait["reason"], wait["sinceMs"], wait["untilMs"]) == ("backoff", 1_000, 5_000)
    assert snap["providers"] == [
        {
            "name": "a",
            "kind": "anthropic",
            "inFlight": 1,
            "completed": 0,
            "failed": 0,
            "costUsd": 0.0,
            "slots": None,
        }
    ]
    feed(
        state,
        "inference:waiting",
        at=5_000,
        reason="backoff",
        provider="a",
        model="m",
        attempt=1,
        inferenceId="inf_1",
        waitId="w2",
        remainingMs=0,
        waitedMs=4_000,
        ended=True,
    )
    feed(state, "provider:release", at=5_200, provider="a", model="m", key="provider_model")
    feed(
        state,
        "inference:complete",
        at=5_300,
        inferenceId="inf_1",
        model="a:m",
        inputTokens=3,
        outputTokens=4,
        finishReason="end_turn",
    )
    snap = state.snapshot()
    assert snap["holds"] == [] and snap["waiting"] == [] and snap["inferences"] == []
    assert snap["providers"][0]["completed"] == 1 and snap["providers"][0]["inFlight"] == 0
    assert (snap["totals"]["inputTokens"], snap["totals"]["outputTokens"]) == (3, 4)
    assert (snap["totals"]["costUsd"], snap["totals"]["unpriced"]) == (0.0, 1)  # no costUsd


def test_spend_is_summed_per_provider_and_in_total() -> None:
    state = HostState()
    for n, cost in enumerate((0.25, None, 0.5)):
        inference = f"inf_{n}"
        feed(state, "inference:start", at=n, inferenceId=inference, model="a:m", provider="a")
        feed(
            state,
            "inference:complete",
            at=n + 1,
            inferenceId=inference,
            model="a:m",
            inputTokens=1,
            outputTokens=1,
            costUsd=cost,
            finishReason="end_turn",
        )
    snap = state.snapshot()
    assert (snap["totals"]["costUsd"], snap["totals"]["unpriced"]) == (0.75, 1)
    assert snap["providers"][0]["costUsd"] == 0.75


def test_servers_their_grant_and_requests_in_flight() -> None:
    state = HostState()
    feed(
        state,
        "mcpl:server_state",
        serverId="srv",
        state="ready",
        grant=["inferenceRequest", "modelInfo"],
        featureSets=["fs.a"],
    )
    feed(
        state,
        "mcpl:inference_start",
        at=2_000,
        serverId="srv",
        requestId=7,
        streamed=True,
        model="a:m",
        featureSet="fs.a",
    )
    [server] = state.snapshot()["servers"]
    assert server["state"] == "ready" and server["grant"] == ["inferenceRequest", "modelInfo"]
    assert [r["requestId"] for r in server["requests"]] == [7]
    feed(
        state,
        "mcpl:policy_change",
        serverId="srv",
        added=["inferenceRequest.streaming"],
        removed=["modelInfo"],
    )
    feed(
        state,
        "mcpl:inference_fail",
        at=3_000,
        serverId="srv",
        requestId=7,
        model="a:m",
        streamed=True,
        error="server 500: boom",
    )
    [server] = state.snapshot()["servers"]
    assert server["grant"] == ["inferenceRequest", "inferenceRequest.streaming"]
    assert server["requests"] == [] and server["failed"] == 1
    [failure] = state.snapshot()["failures"]
    assert failure["error"] == "server 500: boom" and failure["serverId"] == "srv"
    feed(state, "mcpl:server_state", serverId="srv", state="closed")
    assert state.snapshot()["servers"][0]["state"] == "closed"


def test_a_crash_looping_server_is_shown_until_a_session_stays_up() -> None:
    state = HostState()
    feed(state, "mcpl:server_state", serverId="srv", state="ready", grant=[], featureSets=[])
    for attempt in (1, 2):
        feed(
            state,
            "mcpl:server_state",
            serverId="srv",
            state="reconnecting",
            error="session lost (the server closed the connection)",
            attempt=attempt,
            delayMs=500 * attempt,
            crashLooping=attempt == 2,
        )
    [server] = state.snapshot()["servers"]
    assert server["state"] == "reconnecting"
    assert server["crashLooping"] is True and server["reconnects"] == 2
    assert server["error"] == "session lost (the server closed the connection)"
    # A new session, not yet known to stay up: still crash-looping.
    ready = {"serverId": "srv", "state": "ready", "grant": ["modelInfo"], "featureSets": []}
    feed(state, "mcpl:server_state", **ready, crashLooping=True)
    [server] = state.snapshot()["servers"]
    assert (server["state"], server["crashLooping"]) == ("ready", True)
    feed(state, "mcpl:server_state", **ready, crashLooping=False)
    [server] = state.snapshot()["servers"]
    assert (server["state"], server["crashLooping"], server["error"]) == ("ready", False, None)
    assert server["grant"] == ["modelInfo"]


def slots(state: HostState, change: str, in_use: int, provider: str = "a") -> None:
    feed(
        state,
        "rate_limit:slots",
        change=change,
        provider=provider,
        inUse=in_use,
        maxInFlight=2,
        scope="replica",
        inferenceId=f"inf_{in_use}",
        attempt=1,
    )


def providers(state: HostState) -> dict[str, object]:
    return {p["name"]: p["slots"] for p in state.snapshot()["providers"]}


def test_rate_limit_slots_in_use_follow_each_slot_taken_and_given_back() -> None:
    state = HostState()
    feed(state, "inference:start", inferenceId="inf_0", model="b:m", provider="b")
    assert providers(state) == {"b": None}  # no limit on b: nothing to show
    slots(state, "taken", 1)
    version = state.version
    slots(state, "taken", 2)
    assert state.version > version  # a change the page is told of
    assert providers(state)["a"] == {"inUse": 2, "limit": 2, "scope": "replica"}
    slots(state, "released", 1)
    slots(state, "taken", 2)
    slots(state, "released", 1)
    slots(state, "released", 0)
    assert providers(state) == {"a": {"inUse": 0, "limit": 2, "scope": "replica"}, "b": None}


def test_unknown_traces_change_nothing_and_failures_are_capped() -> None:
    state = HostState()
    assert not state.apply(TraceEvent("something:else", {}))
    assert state.version == 0
    for n in range(50):
        feed(
            state,
            "inference:fail",
            inferenceId=f"inf_{n}",
            model="a:m",
            error=f"e{n}",
            errorKind="server",
        )
    failures = state.snapshot()["failures"]
    assert len(failures) == 20 and failures[0]["error"] == "e49"


def test_an_inference_in_flight_shows_its_attempt_and_last_error_once_retried() -> None:
    state = HostState()
    start = {"model": "a:m", "provider": "a", "streamed": True, "serverId": "s"}
    feed(state, "inference:start", at=2_000, inferenceId="inf_2", **start)
    feed(state, "inference:start", at=1_000, inferenceId="inf_1", **start)
    first, second = state.snapshot()["inferences"]
    assert first == {
        "inferenceId": "inf_1",
        "model": "a:m",
        "provider": "a",
        "streamed": True,
        "serverId": "s",
        "attempt": 1,
        "sinceMs": 1_000,
    }
    assert second["inferenceId"] == "inf_2" and "lastError" not in second
    feed(state, "inference:retry", inferenceId="inf_1", attempt=1, error="overloaded 529")
    first = state.snapshot()["inferences"][0]
    assert (first["attempt"], first["lastError"]) == (2, "overloaded 529")
    feed(state, "inference:complete", inferenceId="inf_1", costUsd=0.5)
    assert [i["inferenceId"] for i in state.snapshot()["inferences"]] == ["inf_2"]
    assert state.snapshot()["providers"][0]["completed"] == 1
