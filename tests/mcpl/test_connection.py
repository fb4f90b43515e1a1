"""ServerConnection against a real MCPL server subprocess over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentcore.mcpl.connection import (
    HOST_MCPL_CAPABILITIES,
    McplRequestHandler,
    McplStartError,
    ServerConnection,
    host_capabilities,
)
from agentcore.mcpl.deadline import Deadline
from agentcore.mcpl.jsonrpc import ConnectionClosed
from agentcore.mcpl.protocol import (
    CAPABILITY_DENIED,
    FEATURE_SET_NOT_ENABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNKNOWN_FEATURE_SET,
    McplError,
    McplRequest,
)
from agentcore.mcpl.transports import ReconnectPolicy, stdio_factory
from agentcore.testing.serve import read_jsonl

TIMEOUT = 10.0

MANIFEST: dict[str, Any] = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "pushEvents": True,
    "contextHooks": {"beforeInference": True},
    "featureSets": {
        "memory.consolidation": {"description": "summarize", "uses": ["inferenceRequest"]},
        "memory.streamed": {
            "description": "summarize, streamed",
            "uses": ["inferenceRequest", "inferenceRequest.streaming"],
        },
        "memory.model": {"description": "reads model info", "uses": ["modelInfo"]},
        "memory.extraction": {"description": "lifecycle", "uses": ["inferenceLifecycle"]},
        "memory.off": {"description": "configured off", "uses": ["inferenceRequest"]},
        "memory.retrieval": {
            "description": "injects",
            "uses": ["contextHooks.beforeInference.inject.beforeUser"],
        },
        "broken": {"description": "no uses"},
    },
}
GRANT = [
    "inferenceRequest",
    "inferenceRequest.streaming",
    "modelInfo",
    "tools",
    "channels.publish",
    "contextHooks.beforeInference.inject.*",
]
INFER = {"featureSet": "memory.consolidation", "messages": [{"role": "user", "content": "hi"}]}
RESULT = {
    "content": "ok",
    "model": "echo:test",
    "finishReason": "end_turn",
    "usage": {"inputTokens": 1, "outputTokens": 1},
}


class Host:
    """The host side's handler: records what reached it and answers inference/request."""

    def __init__(self) -> None:
        self.seen: list[McplRequest] = []
        self.entered = asyncio.Event()
        self.block = False

    async def __call__(self, request: McplRequest) -> Any:
        self.seen.append(request)
        self.entered.set()
        if self.block:
            await asyncio.Event().wait()
        if request.method == "inference/request":
            return RESULT
        return None  # model/info and the rest: no plugin answers


Connect = Callable[..., Any]


@pytest.fixture
async def connect(scripted_server: Any) -> AsyncIterator[Connect]:
    """Start a ServerConnection to a scripted server; closes each at teardown."""
    opened: list[ServerConnection] = []

    async def start(
        *,
        grant: list[str] = GRANT,
        disabled: tuple[str, ...] = ("memory.off",),
        host: McplRequestHandler | None = None,
        max_frame_bytes: int = 4 * 1024 * 1024,
        reconnect: ReconnectPolicy | None = None,
        deadline: Deadline | None = None,
        **config: Any,
    ) -> ServerConnection:
        config.setdefault("manifest", MANIFEST)
        config.setdefault("tools", True)
        command, env = scripted_server(**config)
        conn = ServerConnection(
            "scripted",
            stdio_factory(
                "scripted", command, env=env, max_frame_bytes=max_frame_bytes, shutdown_grace_s=5.0
            ),
            grant=grant,
            disabled_feature_sets=disabled,
            handler=host or Host(),
            reconnect=reconnect,
            request_timeout_s=TIMEOUT,
            deadline=deadline,
        )
        opened.append(conn)
        await asyncio.wait_for(conn.start(), TIMEOUT)
        return conn

    yield start
    for conn in opened:
        await conn.close()


async def call(conn: ServerConnection, method: str, params: Any = None) -> Any:
    """Have the server send `method` to the host; returns the host's whole response."""
    return await conn.request("test/call", {"method": method, "params": params}, timeout=TIMEOUT)


async def observed(conn: ServerConnection) -> Any:
    return await conn.request("test/observed", {}, timeout=TIMEOUT)


# -- the handshake -----------------------------------------------------------


async def test_handshake_and_feature_sets_update_params(
    connect: Connect, log_messages: list[str]
) -> None:
    conn = await connect()
    seen = await observed(conn)
    init = seen["initialize"]
    assert init["capabilities"] == {"experimental": {"mcpl": HOST_MCPL_CAPABILITIES}}
    # A bare connection advertises what the connection layer supports; the rest comes
    # from the plugins that provide each policy (`McplHost`, test_host_turns.py).
    assert init["capabilities"]["experimental"]["mcpl"] == {"version": "0.5", "featureSets": True}
    assert init["clientInfo"]["name"] == "agentcore"
    assert isinstance(init["protocolVersion"], str)
    assert seen["initialized"] is True
    inject = "contextHooks.beforeInference.inject"
    assert seen["featureSetsUpdate"] == {
        # configured ∩ advertised: channels.publish was configured, never advertised
        "effectiveCapabilities": [
            f"{inject}.afterUser",
            f"{inject}.beforeUser",
            f"{inject}.system",
            "inferenceRequest",
            "inferenceRequest.streaming",
            "modelInfo",
            "tools",
        ],
        "deniedCapabilities": [
            "contextHooks",
            "contextHooks.beforeInference",
            f"{inject}",
            "contextHooks.beforeInference.observe",
            "pushEvents",
        ],
        "enabled": ["memory.consolidation", "memory.model", "memory.retrieval", "memory.streamed"],
        "disabled": ["broken", "memory.extraction", "memory.off"],
    }
    assert conn.ready
    assert conn.grant == frozenset(seen["featureSetsUpdate"]["effectiveCapabilities"])
    assert conn.feature_sets["broken"].reason == "invalid_uses"
    assert conn.feature_sets["memory.extraction"].reason == "missing_capabilities"
    assert conn.feature_sets["memory.off"].reason == "disabled"
    assert any("policy accepted" in m for m in log_messages)


async def test_a_plain_mcp_server_never_gets_mcpl(connect: Connect) -> None:
    conn = await connect(manifest=None)
    assert conn.state == "absent"
    assert (await observed(conn))["featureSetsUpdate"] is None
    answer = await call(conn, "inference/request", INFER)
    assert answer["error"]["code"] == CAPABILITY_DENIED
    assert answer["error"]["data"] == {"capability": "inferenceRequest", "reason": "mcpl_absent"}


async def test_a_refused_policy_leaves_mcpl_disabled(connect: Connect) -> None:
    receipt = {"accepted": False, "fallback": "mcp-only", "missingCapabilities": ["x"]}
    conn = await connect(receipt=receipt)
    assert conn.state == "refused"
    answer = await call(conn, "inference/request", INFER)
    assert answer["error"]["data"]["reason"] == "policy_refused"
    # Testimony never widens (§6.7), and a policy activates only on an accepting receipt.
    assert conn.grant == frozenset()


async def test_a_refusal_asking_to_close_fails_start(connect: Connect) -> None:
    with pytest.raises(McplStartError, match="asked to close"):
        await connect(receipt={"accepted": False, "fallback": "close", "reason": "no"})


async def test_a_server_that_cannot_handshake_fails_start() -> None:
    tool = Path(__file__).parent / "servers" / "line_tool.py"
    conn = ServerConnection(
        "mute",
        stdio_factory("mute", [sys.executable, str(tool), "tail"], shutdown_grace_s=0.5),
        grant=GRANT,
        handler=Host(),
        request_timeout_s=TIMEOUT,
    )
    with pytest.raises(McplStartError):
        await asyncio.wait_for(conn.start(), TIMEOUT)
    assert conn.closed.is_set()


# -- checks before the handler, in order -------------------------------------


async def test_each_refusal_code_in_order(connect: Connect) -> None:
    host = Host()
    conn = await connect(grant=["inferenceRequest", "modelInfo"], host=host)

    async def error_of(method: str, params: Any) -> dict[str, Any]:
        answer = await call(conn, method, params)
        assert "result" not in answer, answer
        return dict(answer["error"])

    # 1. capability: not in the grant, with data.capability
    error = await error_of("push/event", {"featureSet": "memory.consolidation"})
    assert (error["code"], error["data"]) == (CAPABILITY_DENIED, {"capability": "pushEvents"})
    error = await error_of("inference/request", {**INFER, "stream": True})
    assert (error["code"], error["data"]) == (
        CAPABILITY_DENIED,
        {"capability": "inferenceRequest.streaming"},
    )
    # ...checked before the feature set: an unknown set with a denied capability is -32002
    error = await error_of("inference/request", {**INFER, "stream": True, "featureSet": "nope"})
    assert error["code"] == CAPABILITY_DENIED
    # 2. the feature set is declared
    error = await error_of("inference/request", {**INFER, "featureSet": "nope"})
    assert (error["code"], error["data"]) == (UNKNOWN_FEATURE_SET, {"featureSet": "nope"})
    # 3. and enabled: off by configuration, by a missing capability, or invalid
    for name, reason in [
        ("memory.off", "disabled"),
        ("memory.streamed", "missing_capabilities"),
        ("broken", "invalid_uses"),
    ]:
        error = await error_of("inference/request", {**INFER, "featureSet": name})
        assert (error["code"], error["data"]) == (
            FEATURE_SET_NOT_ENABLED,
            {"featureSet": name, "reason": reason},
        )
    # 4. and its `uses` declares what the request exercises (§6.4 declaration mismatch)
    error = await error_of("inference/request", {**INFER, "featureSet": "memory.model"})
    assert error["code"] == FEATURE_SET_NOT_ENABLED
    assert error["data"]["reason"] == "declaration_mismatch"
    # bad params
    error = await error_of("inference/request", {"messages": []})
    assert error["code"] == INVALID_PARAMS
    error = await error_of("inference/request", {**INFER, "stream": "yes"})
    assert error["code"] == INVALID_PARAMS
    error = await error_of("inference/request", [1, 2])
    assert error["code"] == INVALID_PARAMS
    # None of those reached the handler.
    assert host.seen == []

    answer = await call(conn, "inference/request", INFER)
    assert answer["result"] == RESULT
    assert [r.method for r in host.seen] == ["inference/request"]
    # The request's handle is its session's, not the connection: see the session tests.
    assert host.seen[0].server.name == conn.name
    assert host.seen[0].server.grant == conn.grant
    assert host.seen[0].params == INFER


async def test_streaming_passes_when_granted_and_declared(connect: Connect) -> None:
    conn = await connect()
    answer = await call(conn, "inference/request", {**INFER, "stream": True})
    # memory.consolidation declares only inferenceRequest, so streaming is a mismatch...
    assert answer["error"]["data"]["reason"] == "declaration_mismatch"
    assert answer["error"]["data"]["capability"] == "inferenceRequest.streaming"
    # ...and a set that declares it streams.
    params = {**INFER, "stream": True, "featureSet": "memory.streamed"}
    assert (await call(conn, "inference/request", params))["result"] == RESULT


async def test_a_request_past_its_deadline_is_cancelled_and_answered_naming_it(
    connect: Connect,
) -> None:
    host = Host()
    host.block = True
    cancelled: list[float | None] = []

    async def blocked(request: McplRequest) -> Any:
        try:
            return await host(request)
        except asyncio.CancelledError:
            cancelled.append(request.deadline)
            raise

    conn = await connect(host=blocked, deadline=Deadline(0.2, "[test] request_deadline_s"))
    answer = await call(conn, "inference/request", INFER)
    assert answer["error"] == {
        "code": INTERNAL_ERROR,
        "message": "The request's deadline passed: no answer within 0.2 s "
        "([test] request_deadline_s); the host stopped working on it",
        "data": {"reason": "deadline", "deadlineS": 0.2},
    }
    assert len(cancelled) == 1 and cancelled[0] is not None  # it could tell why


async def test_a_handlers_own_timeout_is_not_taken_for_the_deadline(connect: Connect) -> None:
    async def times_out(request: McplRequest) -> Any:
        raise TimeoutError("the handler's own")

    conn = await connect(host=times_out, deadline=Deadline(30.0, "[test] request_deadline_s"))
    error = (await call(conn, "inference/request", INFER))["error"]
    assert error["code"] == INTERNAL_ERROR
    assert "deadline" not in error["message"] and error.get("data") is None


async def test_model_info_unanswered_by_plugins_gets_an_error_not_silence(
    connect: Connect,
) -> None:
    conn = await connect()
    answer = await call(conn, "model/info", {})
    assert answer["error"]["code"] == METHOD_NOT_FOUND
    denied = await connect(grant=["inferenceRequest"])
    answer = await call(denied, "model/info", {})
    assert answer["error"]["code"] == CAPABILITY_DENIED
    assert answer["error"]["data"] == {"capability": "modelInfo"}


async def test_ping_is_answered_by_the_connection(connect: Connect) -> None:
    conn = await connect()
    assert (await call(conn, "ping", None))["result"] == {}


async def test_requests_before_the_receipt_are_refused(connect: Connect) -> None:
    host = Host()
    early = [["inference/request", INFER], ["model/info", {}]]
    conn = await connect(early=early, host=host)
    answers = (await observed(conn))["answers"]
    for request_id, capability in [("1001", "inferenceRequest"), ("1002", "modelInfo")]:
        error = answers[request_id]["error"]
        assert error["code"] == CAPABILITY_DENIED
        assert error["data"] == {"capability": capability, "reason": "policy_pending"}
    assert host.seen == []
    # The same request after the receipt passes.
    assert (await call(conn, "inference/request", INFER))["result"] == RESULT


async def test_a_request_right_behind_the_receipt_is_accepted(connect: Connect) -> None:
    # Receipt and request arrive in one write: the receipt must take effect first.
    conn = await connect(after_receipt=[["inference/request", INFER]])
    [answer] = await conn.request("test/wait", {"ids": [1001]}, timeout=TIMEOUT)
    assert answer["result"] == RESULT


async def test_inference_from_inside_a_context_hook_is_refused(connect: Connect) -> None:
    host = Host()
    conn = await connect(
        host=host,
        hook_calls=[["inference/request", INFER]],
        after_hook=[["inference/request", INFER]],
    )
    hook = await conn.request(
        "context/beforeInference",
        {"inferenceId": "inf_1", "conversationId": "c", "turnIndex": 0, "userMessage": None},
        timeout=TIMEOUT,
    )
    assert hook["featureSet"] == "memory.retrieval"
    inside, after = await conn.request("test/wait", {"ids": [1001, 1002]}, timeout=TIMEOUT)
    assert inside["error"]["code"] == INVALID_REQUEST
    assert inside["error"]["data"] == {"reason": "context_hook"}
    # Sent right behind the hook's answer, so outside the hook: accepted.
    assert after["result"] == RESULT
    assert len(host.seen) == 1


async def test_the_host_does_not_send_what_the_grant_does_not_allow(connect: Connect) -> None:
    conn = await connect(grant=["inferenceRequest"])
    with pytest.raises(McplError) as caught:
        await conn.request("context/beforeInference", {"inferenceId": "i"})
    assert caught.value.code == CAPABILITY_DENIED
    with pytest.raises(McplError):
        await conn.notify("inference/chunk", {"requestId": 1, "index": 0, "delta": "x"})
    with pytest.raises(McplError):
        await conn.notify("inference/lifecycle", {"inferenceId": "i", "phase": "started"})


# -- bad input over a real pipe ----------------------------------------------


async def test_bad_frames_are_answered_and_the_connection_survives(
    connect: Connect, log_messages: list[str]
) -> None:
    conn = await connect()
    frames = [
        "this is not json",
        "[]",
        '{"jsonrpc":"2.0","id":5,"method":7}',
        '{"jsonrpc":"2.0","id":6,"method":"no/such/method"}',
        '{"jsonrpc":"2.0","id":424242,"result":{}}',
    ]
    answers = await conn.request("test/raw", {"frames": frames, "await_count": 4}, timeout=TIMEOUT)
    by_id = {json.dumps(a["id"]): a["error"]["code"] for a in answers if a["id"] is not None}
    nulls = sorted(a["error"]["code"] for a in answers if a["id"] is None)
    assert nulls == [PARSE_ERROR, INVALID_REQUEST]
    assert by_id == {"5": INVALID_REQUEST, "6": METHOD_NOT_FOUND}
    assert any("unknown id 424242" in m for m in log_messages)
    assert (await call(conn, "inference/request", INFER))["result"] == RESULT


async def test_an_oversized_frame_is_refused_and_the_connection_survives(
    connect: Connect,
) -> None:
    conn = await connect(max_frame_bytes=64 * 1024)
    big = {
        "repeat": "x",
        "count": 1_000_000,
        "prefix": '{"jsonrpc":"2.0","id":77,"method":"model/info","params":{"pad":"',
        "suffix": '"}}',
    }
    frames = [big, '{"jsonrpc":"2.0","id":78,"method":"ping"}']
    refused, after = await conn.request(
        "test/raw", {"frames": frames, "await_count": 2}, timeout=TIMEOUT
    )
    assert refused["id"] is None
    assert refused["error"]["code"] == PARSE_ERROR
    assert refused["error"]["data"] == {"maxFrameBytes": 64 * 1024}
    assert after == {"jsonrpc": "2.0", "id": 78, "result": {}}
    assert (await call(conn, "inference/request", INFER))["result"] == RESULT


# -- shutdown and lost sessions ----------------------------------------------


async def test_close_answers_inflight_requests_exactly_once(
    connect: Connect, tmp_path: Path
) -> None:
    log = tmp_path / "server-read.jsonl"
    host = Host()
    host.block = True
    conn = await connect(host=host, log=str(log))
    frames = [
        json.dumps({"jsonrpc": "2.0", "id": 501, "method": "inference/request", "params": INFER}),
        json.dumps({"jsonrpc": "2.0", "id": 502, "method": "model/info", "params": {}}),
    ]
    await conn.request("test/raw", {"frames": frames, "await_count": 0}, timeout=TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        while len(host.seen) < 2:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(conn.close(), TIMEOUT)
    assert conn.closed.is_set()
    with pytest.raises(ConnectionClosed):
        await conn.notify("anything", {})

    read = read_jsonl(log)
    answers = [m for m in read if m.get("id") in (501, 502)]
    assert sorted(m["id"] for m in answers) == [501, 502]
    for answer in answers:
        assert answer["error"] == {"code": INTERNAL_ERROR, "message": "the host is shutting down"}


async def test_a_lost_session_closes_the_connection_without_reconnect(connect: Connect) -> None:
    conn = await connect()
    with pytest.raises(ConnectionClosed):
        await conn.request("test/exit", {}, timeout=TIMEOUT)
    await asyncio.wait_for(conn.closed.wait(), TIMEOUT)


async def test_reconnect_starts_a_new_session_with_a_new_handshake(connect: Connect) -> None:
    conn = await connect(reconnect=ReconnectPolicy(initial_delay_s=0.01, max_attempts=3))
    with pytest.raises(ConnectionClosed):
        await conn.request("test/exit", {}, timeout=TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        while not (conn.sessions == 2 and conn.ready):
            await asyncio.sleep(0.01)
    seen = await observed(conn)  # the new process saw a handshake of its own
    assert seen["initialize"] is not None
    assert seen["featureSetsUpdate"]["enabled"]
    assert (await call(conn, "inference/request", INFER))["result"] == RESULT
    assert not conn.closed.is_set()


async def test_a_request_sends_only_on_the_session_it_arrived_on(connect: Connect) -> None:
    # The soak's bug: a request of a lost session sent its chunks on the next session,
    # where request ids start again, so they landed on another request with the same id.
    host = Host()
    host.block = True
    conn = await connect(host=host, reconnect=ReconnectPolicy(initial_delay_s=0.01))
    calling = asyncio.create_task(call(conn, "inference/request", INFER))
    await asyncio.wait_for(host.entered.wait(), TIMEOUT)
    old = host.seen[0]
    with pytest.raises(ConnectionClosed):
        await conn.request("test/exit", {}, timeout=TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        while not (conn.sessions == 2 and conn.ready):
            await asyncio.sleep(0.01)
    chunk = {"requestId": old.id, "index": 0, "delta": "stale"}
    with pytest.raises(ConnectionClosed, match="session this request arrived on is gone"):
        await old.server.notify("inference/chunk", chunk)
    assert old.server.grant == frozenset()
    # A request of the new session sends on it.
    host.block = False
    streamed = {**INFER, "stream": True, "featureSet": "memory.streamed"}
    assert (await call(conn, "inference/request", streamed))["result"] == RESULT
    new = host.seen[-1]
    await new.server.notify("inference/chunk", {"requestId": new.id, "index": 0, "delta": "x"})
    assert new.server.grant == conn.grant
    with pytest.raises(ConnectionClosed):
        await calling


async def test_a_cancel_for_a_request_other_than_inference_changes_nothing(
    connect: Connect,
) -> None:
    # notifications/cancelled stops only an inference/request (MCP lets a receiver
    # ignore a cancellation): model/info in flight still gets its one answer.
    release = asyncio.Event()

    class Gate(Host):
        async def __call__(self, request: McplRequest) -> Any:
            self.seen.append(request)
            self.entered.set()
            await release.wait()
            return {"id": "m"} if request.method == "model/info" else RESULT

    host = Gate()
    conn = await connect(host=host)
    calling = asyncio.create_task(call(conn, "model/info", {"featureSet": "memory.model"}))
    await asyncio.wait_for(host.entered.wait(), TIMEOUT)
    rid = host.seen[0].id
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
    await conn.request("test/raw", {"frames": [cancel], "await_count": 0}, timeout=TIMEOUT)
    await conn.request("test/observed", {}, timeout=TIMEOUT)  # the cancel has been read
    assert host.seen[0].cancelled is None
    release.set()
    answer = await asyncio.wait_for(calling, TIMEOUT)
    assert answer == {"jsonrpc": "2.0", "id": rid, "result": {"id": "m"}}


async def test_a_cancelled_inference_tells_its_handler_why_and_gets_no_answer(
    connect: Connect,
) -> None:
    # One owner of the cancellation: the request the peer read records the server's
    # reason, and the handler reads it from its McplRequest as its task is cancelled.
    seen_why: list[str | None] = []
    stopped = asyncio.Event()

    class Waits(Host):
        async def __call__(self, request: McplRequest) -> Any:
            self.seen.append(request)
            self.entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen_why.append(request.cancelled)
                stopped.set()
                raise
            return RESULT

    host = Waits()
    conn = await connect(host=host)
    request = {"jsonrpc": "2.0", "id": 6000, "method": "inference/request", "params": INFER}
    await conn.request("test/raw", {"frames": [request], "await_count": 0}, timeout=TIMEOUT)
    await asyncio.wait_for(host.entered.wait(), TIMEOUT)
    assert host.seen[0].cancelled is None
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 6000, "reason": "the user moved on"},
    }
    await conn.request("test/raw", {"frames": [cancel], "await_count": 0}, timeout=TIMEOUT)
    await conn.request("test/observed", {}, timeout=TIMEOUT)  # the cancel has been read
    await asyncio.wait_for(stopped.wait(), TIMEOUT)
    assert seen_why == ["the user moved on"]
    assert host.seen[0].cancelled == "the user moved on"
    # The session goes on, and the cancelled request was never answered.
    assert "6000" not in (await observed(conn))["answers"]


async def test_an_inference_cancelled_right_behind_its_request_never_starts(
    connect: Connect,
) -> None:
    # Both in one write: the cancel is read before the request's task has taken a step.
    host = Host()
    conn = await connect(host=host)
    request = {"jsonrpc": "2.0", "id": 5000, "method": "inference/request", "params": INFER}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5000}}
    await conn.request("test/raw", {"frames": [request, cancel], "await_count": 0}, timeout=TIMEOUT)
    answer = await call(conn, "inference/request", INFER)  # answered: the session goes on
    assert answer["result"] == RESULT
    assert [r.id for r in host.seen] == [answer["id"]]
    assert "5000" not in (await observed(conn))["answers"]


def test_host_capabilities_merge_what_plugins_provide() -> None:
    merged = host_capabilities(
        [
            {"contextHooks": {"beforeInference": {"observe": True}}},
            {"contextHooks": {"beforeInference": True}, "inferenceLifecycle": True},
            {"inferenceRequest": {"streaming": True}, "contextHooks": {"afterward": True}},
            {"inferenceLifecycle": False},
        ]
    )
    assert merged == {
        **HOST_MCPL_CAPABILITIES,
        "contextHooks": {"beforeInference": True, "afterward": True},
        "inferenceLifecycle": True,
        "inferenceRequest": {"streaming": True},
    }


async def test_a_notification_outside_mcpl_goes_to_the_notification_handler(
    scripted_server: Any,
) -> None:
    heard: list[tuple[ServerConnection, str, dict[str, Any]]] = []
    arrived = asyncio.Event()

    async def on_notification(conn: ServerConnection, method: str, params: dict[str, Any]) -> None:
        heard.append((conn, method, params))
        arrived.set()

    command, env = scripted_server(manifest=MANIFEST, tools=True)
    conn = ServerConnection(
        "scripted",
        stdio_factory("scripted", command, env=env, shutdown_grace_s=5.0),
        grant=GRANT,
        handler=Host(),
        notification_handler=on_notification,
        request_timeout_s=TIMEOUT,
    )
    await asyncio.wait_for(conn.start(), TIMEOUT)
    try:
        hello = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}}
        await conn.request("test/raw", {"frames": [hello], "await_count": 0}, timeout=TIMEOUT)
        await asyncio.wait_for(arrived.wait(), TIMEOUT)
        assert heard == [(conn, "notifications/message", {"data": "hi"})]
    finally:
        await conn.close()
