"""The JSON-RPC peer over an in-memory transport: framing errors, refusals, exactly-once answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcore.mcpl.jsonrpc import (
    ConnectionClosed,
    FrameTooLarge,
    InboundRequest,
    JsonRpcPeer,
    Params,
    RemoteError,
    encode_params,
)
from agentcore.mcpl.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    McplError,
)
from agentcore.mcpl.transports import MemoryTransport, memory_pair

TIMEOUT = 5.0


async def handler(request: InboundRequest) -> Any:
    """A small server: echo, errors of each kind, and a request that waits forever."""
    method, params = request.method, request.params
    if method == "echo":
        return params
    if method == "params":
        if not isinstance(params, dict) or "n" not in params:
            raise McplError(INVALID_PARAMS, "Invalid params: n is required")
        return params["n"]
    if method == "boom":
        raise RuntimeError("it broke")
    if method == "unserializable":
        return object()
    if method == "forever":
        await asyncio.Event().wait()
    raise McplError(METHOD_NOT_FOUND, f"Method not found: {method}")


async def receive(raw: MemoryTransport) -> Any:
    text = await asyncio.wait_for(raw.receive(), TIMEOUT)
    assert text is not None
    return json.loads(text)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[JsonRpcPeer, MemoryTransport]]:
    """A peer under test, and the raw other end the test writes frames to."""
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler, name="under-test")
    peer.start()
    yield peer, raw
    await peer.close()


async def ask(raw: MemoryTransport, text: str) -> Any:
    await raw.send(text)
    return await receive(raw)


async def test_request_round_trip(pair: tuple[JsonRpcPeer, MemoryTransport]) -> None:
    _, raw = pair
    answer = await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":[1,2]}}')
    assert answer == {"jsonrpc": "2.0", "id": 1, "result": {"a": [1, 2]}}
    answer = await ask(raw, '{"jsonrpc":"2.0","id":"s","method":"echo"}')
    assert answer == {"jsonrpc": "2.0", "id": "s", "result": None}


async def test_an_answered_request_leaves_no_task_behind(
    pair: tuple[JsonRpcPeer, MemoryTransport],
) -> None:
    """Each request's task is forgotten once done (one shared callback, no context copy)."""
    peer, raw = pair
    for i in range(3):
        answer = await ask(raw, f'{{"jsonrpc":"2.0","id":{i},"method":"echo"}}')
        assert answer["id"] == i
    for _ in range(100):  # the done callbacks run a turn or two after the answers
        if not peer._tasks:
            break
        await asyncio.sleep(0)
    assert not peer._tasks


async def test_requests_both_ways_between_two_peers() -> None:
    a_end, b_end = memory_pair()
    a = JsonRpcPeer(a_end, handler, name="a")
    b = JsonRpcPeer(b_end, handler, name="b")
    a.start()
    b.start()
    assert await a.request("echo", {"x": 1}) == {"x": 1}
    assert await b.request("echo", ["y"]) == ["y"]
    with pytest.raises(RemoteError) as caught:
        await a.request("params", {})
    assert caught.value.code == INVALID_PARAMS
    await a.close()
    await b.wait_closed()


async def test_invalid_json_is_answered_minus_32700_with_id_null(
    pair: tuple[JsonRpcPeer, MemoryTransport],
) -> None:
    _, raw = pair
    for text in ['{"jsonrpc": "2.0", "id": 1, "method"', "not json", '{"a": NaN}', "[1,]"]:
        answer = await ask(raw, text)
        assert answer["id"] is None
        assert answer["error"]["code"] == PARSE_ERROR
    # The connection survived.
    assert (await ask(raw, '{"jsonrpc":"2.0","id":2,"method":"echo","params":[]}'))["result"] == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"jsonrpc":"2.0","id":' + "9" * 5000 + ',"method":"echo"}', "more than 4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": NaN}', "NaN is not JSON"),
        ("not json", "Expecting value"),
    ],
    ids=["long-number", "deep-nesting", "nan", "garbage"],
)
async def test_a_parse_error_says_what_was_wrong_with_the_frame_not_how_to_tune_python(
    pair: tuple[JsonRpcPeer, MemoryTransport], text: str, said: str
) -> None:
    _, raw = pair
    error = (await ask(raw, text))["error"]
    assert error["code"] == PARSE_ERROR
    assert said in error["message"]
    assert "sys." not in error["message"] and "recursion" not in error["message"]


@pytest.mark.parametrize(
    ("text", "answer_id"),
    [
        ("5", None),
        ('"a string"', None),
        ("null", None),
        ("{}", None),
        ('{"jsonrpc":"2.0","id":3}', 3),  # neither method nor result
        ('{"id":4,"method":"echo"}', 4),  # jsonrpc missing
        ('{"jsonrpc":"1.0","id":5,"method":"echo"}', 5),
        ('{"jsonrpc":"2.0","id":6,"method":7}', 6),
        ('{"jsonrpc":"2.0","id":7,"method":null}', 7),
        ('{"jsonrpc":"2.0","id":8,"method":"echo","params":"x"}', 8),
        ('{"jsonrpc":"2.0","id":1.5,"method":"echo"}', None),
        ('{"jsonrpc":"2.0","id":true,"method":"echo"}', None),
        ('{"jsonrpc":"2.0","id":{"a":1},"method":"echo"}', None),
        ('{"jsonrpc":"2.0","id":[1],"method":"echo"}', None),
        ('{"jsonrpc":"2.0","id":null,"method":"echo"}', None),
        ('{"jsonrpc":"2.0","method":5}', None),  # a malformed notification
        ("[]", None),  # batches are answered -32600
        ('[{"jsonrpc":"2.0","id":9,"method":"echo"}]', None),
    ],
)
async def test_malformed_requests_are_answered_minus_32600(
    pair: tuple[JsonRpcPeer, MemoryTransport], text: str, answer_id: Any
) -> None:
    _, raw = pair
    answer = await ask(raw, text)
    assert answer["error"]["code"] == INVALID_REQUEST
    assert answer["id"] == answer_id
    assert (await ask(raw, '{"jsonrpc":"2.0","id":"ok","method":"echo"}'))["id"] == "ok"


async def test_unknown_method_bad_params_and_handler_failures(
    pair: tuple[JsonRpcPeer, MemoryTransport],
) -> None:
    _, raw = pair
    answer = await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"nope"}')
    assert answer["error"]["code"] == METHOD_NOT_FOUND
    answer = await ask(raw, '{"jsonrpc":"2.0","id":2,"method":"params","params":{}}')
    assert answer["error"] == {"code": INVALID_PARAMS, "message": "Invalid params: n is required"}
    answer = await ask(raw, '{"jsonrpc":"2.0","id":3,"method":"boom"}')
    assert answer["error"] == {"code": INTERNAL_ERROR, "message": "it broke"}
    answer = await ask(raw, '{"jsonrpc":"2.0","id":4,"method":"unserializable"}')
    assert answer["error"]["code"] == INTERNAL_ERROR
    assert answer["id"] == 4


async def test_error_data_is_carried(pair: tuple[JsonRpcPeer, MemoryTransport]) -> None:
    peer_end, raw = memory_pair()

    async def refuse(request: InboundRequest) -> Any:
        raise McplError(-32002, "Capability denied", {"capability": "modelInfo"})

    peer = JsonRpcPeer(peer_end, refuse)
    peer.start()
    answer = await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"model/info"}')
    assert answer["error"] == {
        "code": -32002,
        "message": "Capability denied",
        "data": {"capability": "modelInfo"},
    }
    await peer.close()


async def test_response_for_unknown_id_is_logged_and_dropped(
    pair: tuple[JsonRpcPeer, MemoryTransport], log_messages: list[str]
) -> None:
    peer, raw = pair
    await raw.send('{"jsonrpc":"2.0","id":999,"result":{"x":1}}')
    await raw.send('{"jsonrpc":"2.0","id":"nobody","error":{"code":1,"message":"m"}}')
    # The next answer is to the next request: nothing was sent for the responses.
    assert (await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo"}'))["id"] == 1
    assert any("unknown id 999" in m for m in log_messages)
    assert any("unknown id 'nobody'" in m for m in log_messages)
    assert not peer.closed


async def test_response_with_a_string_id_does_not_match_an_integer_one() -> None:
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    pending = asyncio.create_task(peer.request("x", timeout=TIMEOUT))
    sent = await receive(raw)
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": str(sent["id"]), "result": "wrong"}))
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": "right"}))
    assert await pending == "right"
    await peer.close()


async def test_remote_errors_and_malformed_responses() -> None:
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    first = asyncio.create_task(peer.request("a", timeout=TIMEOUT))
    sent = await receive(raw)
    error = {"code": -32001, "message": "Feature set not enabled", "data": {"featureSet": "f"}}
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent["id"], "error": error}))
    with pytest.raises(RemoteError) as caught:
        await first
    assert (caught.value.code, caught.value.data) == (-32001, {"featureSet": "f"})
    second = asyncio.create_task(peer.request("b", timeout=TIMEOUT))
    sent = await receive(raw)
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": 1, "error": error}))
    with pytest.raises(RemoteError, match="malformed"):
        await second
    await peer.close()


async def test_outbound_request_times_out_and_late_answer_is_dropped(
    log_messages: list[str],
) -> None:
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    with pytest.raises(TimeoutError):
        await peer.request("slow", timeout=0.01)
    sent = await receive(raw)
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": "late"}))
    assert (await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo"}'))["id"] == 1
    assert any("unknown id" in m for m in log_messages)
    await peer.close()


async def test_request_soon_with_params_encoded_once_for_many_peers(
    log_messages: list[str],
) -> None:
    """A fan-out's requests: sent at once with no task each, the params encoded once (and
    redacted), each future resolved by its own answer; a cancelled one's answer dropped."""
    ends = [memory_pair() for _ in range(3)]
    peers = [JsonRpcPeer(end, handler, name=f"p{i}") for i, (end, _) in enumerate(ends)]
    for peer in peers:
        peer.start()
    params = encode_params({"turn": 7, "text": "héllo"})
    futures = [peer.request_soon("context/x", params) for peer in peers]
    sent = [await receive(raw) for _, raw in ends]
    assert [m["params"] for m in sent] == [{"turn": 7, "text": "héllo"}] * 3
    assert all(m["method"] == "context/x" and m["jsonrpc"] == "2.0" for m in sent)
    futures[1].cancel()
    for i, (_, raw) in enumerate(ends):
        await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent[i]["id"], "result": i}))
    assert [await futures[0], await futures[2]] == [0, 2]
    assert futures[1].cancelled()
    # The cancelled request's late answer is dropped, and the peer reads on.
    assert (await ask(ends[1][1], '{"jsonrpc":"2.0","id":1,"method":"echo"}'))["id"] == 1
    assert any("unknown id" in m for m in log_messages)
    for peer in peers:
        await peer.close()


async def test_pending_outbound_requests_fail_when_the_connection_closes() -> None:
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    pending = asyncio.create_task(peer.request("never-answered"))
    await receive(raw)
    await raw.close()  # the other side goes away
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(pending, TIMEOUT)
    await asyncio.wait_for(peer.wait_closed(), TIMEOUT)
    with pytest.raises(ConnectionClosed):
        await peer.request("after")
    with pytest.raises(ConnectionClosed):
        await peer.notify("after")


async def test_pending_outbound_requests_fail_when_we_close() -> None:
    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    pending = asyncio.create_task(peer.request("never-answered"))
    await receive(raw)
    await peer.close(reason="shutting down")
    with pytest.raises(ConnectionClosed, match="shutting down"):
        await pending


async def test_close_answers_each_inflight_request_exactly_once() -> None:
    peer_end, raw = memory_pair()
    entered = asyncio.Event()
    release = asyncio.Event()

    async def stubborn(request: InboundRequest) -> Any:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # A handler that swallows its cancellation and answers anyway:
            # the guard must keep it from sending a second answer.
            await release.wait()
            return "too late"
        return None

    peer = JsonRpcPeer(peer_end, stubborn)
    peer.start()
    for request_id in (1, 2, "three"):
        await raw.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "m"}))
    await asyncio.wait_for(entered.wait(), TIMEOUT)
    while len(peer.inflight) < 3:
        await asyncio.sleep(0)
    closing = asyncio.create_task(
        peer.close(McplError(INTERNAL_ERROR, "the host is shutting down"))
    )
    received: list[Any] = []
    while len(received) < 3:
        received.append(await receive(raw))
    release.set()
    await asyncio.wait_for(closing, TIMEOUT)
    # After the transport closed, nothing else comes.
    assert await asyncio.wait_for(raw.receive(), TIMEOUT) is None
    assert sorted(str(m["id"]) for m in received) == ["1", "2", "three"]
    for message in received:
        assert message["error"] == {"code": INTERNAL_ERROR, "message": "the host is shutting down"}
    assert peer.inflight == frozenset()


async def test_close_without_an_answer_cancels_inflight_handlers() -> None:
    peer_end, raw = memory_pair()
    cancelled = asyncio.Event()

    async def waits(request: InboundRequest) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    peer = JsonRpcPeer(peer_end, waits)
    peer.start()
    await raw.send('{"jsonrpc":"2.0","id":1,"method":"m"}')
    while not peer.inflight:
        await asyncio.sleep(0)
    await peer.close(None)
    assert cancelled.is_set()
    assert await asyncio.wait_for(raw.receive(), TIMEOUT) is None


async def test_a_cancelled_request_is_never_answered_not_even_by_close() -> None:
    peer_end, raw = memory_pair()
    cancelled = asyncio.Event()
    entered: list[InboundRequest] = []
    reasons: list[str | None] = []

    async def swallows(request: InboundRequest) -> Any:
        if request.method == "echo":
            return request.params
        entered.append(request)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # A handler that swallows its cancellation and answers anyway: unheard.
            reasons.append(request.cancel_reason)  # the request itself says why
            cancelled.set()
            return "too late"
        return None

    peer = JsonRpcPeer(peer_end, swallows)
    peer.start()
    await raw.send('{"jsonrpc":"2.0","id":1,"method":"slow"}')
    await raw.send('{"jsonrpc":"2.0","id":2,"method":"slow"}')
    while len(entered) < 2:
        await asyncio.sleep(0)
    assert not peer.cancel(1, method="other")  # another method: nothing changes
    assert not peer.cancel(3, method="slow")  # not in flight: nothing changes
    assert entered[0].cancel_reason is None and not entered[0].cancel_event.is_set()
    assert peer.cancel(1, method="slow", reason="no longer needed")
    await asyncio.wait_for(cancelled.wait(), TIMEOUT)
    assert reasons == ["no longer needed"]
    assert entered[0].cancel_event.is_set()
    assert entered[1].cancel_reason is None  # the other request is untouched
    assert peer.inflight == frozenset({2})
    # The id is free again, and the next answer that comes is the new request's.
    answer = await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}')
    assert answer == {"jsonrpc": "2.0", "id": 1, "result": [1]}
    await peer.close(McplError(INTERNAL_ERROR, "closing"))
    rest: list[Any] = []
    while (text := await asyncio.wait_for(raw.receive(), TIMEOUT)) is not None:
        rest.append(json.loads(text))
    assert [m["id"] for m in rest] == [2]  # close answered the other one only


async def test_a_concurrent_duplicate_id_is_refused_without_a_second_answer_under_that_id(
    pair: tuple[JsonRpcPeer, MemoryTransport],
) -> None:
    peer, raw = pair
    await raw.send('{"jsonrpc":"2.0","id":7,"method":"forever"}')
    answer = await ask(raw, '{"jsonrpc":"2.0","id":7,"method":"echo"}')
    assert answer["id"] is None
    assert answer["error"]["code"] == INVALID_REQUEST
    # A malformed message naming the in-flight id is refused with id null too.
    answer = await ask(raw, '{"jsonrpc":"2.0","id":7,"method":5}')
    assert answer["id"] is None
    assert peer.inflight == frozenset({7})


async def test_notifications_both_ways_in_order() -> None:
    peer_end, raw = memory_pair()
    seen: list[tuple[str, Params]] = []

    async def on_notification(method: str, params: Params) -> None:
        if method == "bad":
            raise RuntimeError("observer broke")
        seen.append((method, params))

    peer = JsonRpcPeer(peer_end, handler, on_notification)
    peer.start()
    for i in range(5):
        await raw.send(json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"i": i}}))
    await raw.send('{"jsonrpc":"2.0","method":"bad"}')
    await raw.send('{"jsonrpc":"2.0","method":"last"}')
    await peer.notify("out", {"x": 1})
    assert await receive(raw) == {"jsonrpc": "2.0", "method": "out", "params": {"x": 1}}
    # Sync on a request: notifications before it were handled before it.
    await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo"}')
    assert seen == [("n", {"i": i}) for i in range(5)] + [("last", None)]
    await peer.close()


async def test_a_frame_the_transport_refuses_is_answered_and_reading_goes_on() -> None:
    class Refusing(MemoryTransport):
        async def receive(self) -> str | None:
            text = await super().receive()
            if text == "<too big>":
                raise FrameTooLarge(1024)
            return text

    a_to_b: asyncio.Queue[str | None] = asyncio.Queue()
    b_to_a: asyncio.Queue[str | None] = asyncio.Queue()
    peer_end, raw = Refusing(b_to_a, a_to_b), MemoryTransport(a_to_b, b_to_a)
    peer = JsonRpcPeer(peer_end, handler)
    peer.start()
    answer = await ask(raw, "<too big>")
    assert answer["id"] is None
    assert answer["error"]["code"] == PARSE_ERROR
    assert answer["error"]["data"] == {"maxFrameBytes": 1024}
    assert (await ask(raw, '{"jsonrpc":"2.0","id":1,"method":"echo"}'))["id"] == 1
    await peer.close()


async def test_a_response_resumes_its_waiter_before_a_later_request_is_handled() -> None:
    """The ordering promise a policy exchange relies on (see jsonrpc's docstring)."""
    peer_end, raw = memory_pair()
    state = {"ready": False}
    seen_ready: list[bool] = []

    async def check(request: InboundRequest) -> Any:
        seen_ready.append(state["ready"])
        return None

    peer = JsonRpcPeer(peer_end, check)
    peer.start()

    async def exchange() -> None:
        await peer.request("featureSets/update")
        state["ready"] = True

    task = asyncio.create_task(exchange())
    sent = await receive(raw)
    # Response and request reach the peer back to back.
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": {}}))
    await raw.send('{"jsonrpc":"2.0","id":"after","method":"m"}')
    assert (await receive(raw))["id"] == "after"
    await task
    assert seen_ready == [True]
    await peer.close()


# -- hostile input -----------------------------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
# Ids a hostile frame may carry: never one of the valid requests' ids below.
hostile_id = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(max_value=0),
    st.text(max_size=6).map(lambda s: "h" + s),
    st.lists(st.integers(), max_size=2),
)
hostile_object = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), json_value),
        "id": hostile_id,
        "method": st.one_of(st.sampled_from(["echo", "boom", "nope"]), json_value),
        "params": json_value,
        "result": json_value,
        "error": json_value,
    },
).map(json.dumps)


def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "dict":
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth  # unbalanced


hostile_frame = st.one_of(
    st.text(max_size=50),
    st.binary(max_size=50).map(lambda b: b.decode("latin-1")),
    st.tuples(st.integers(1, 50_000), st.sampled_from(["list", "dict", "open"])).map(
        lambda t: _nested(*t)
    ),
    json_value.map(json.dumps),
    hostile_object,
    st.just('{"jsonrpc":"2.0","id":' + "9" * 5000 + ',"method":"echo"}'),  # over int digits
    st.just('{"jsonrpc":"2.0","id":"h1","id":-3,"method":5}'),  # duplicate keys
    st.just('{"jsonrpc":"2.0","id":-1,"result":Infinity}'),
    st.lists(hostile_object, max_size=3).map(lambda objs: "[" + ",".join(objs) + "]"),
)
valid_id = st.one_of(
    st.integers(min_value=1, max_value=2**200),
    st.sampled_from([1, 2, 3, "v", "v1"]),  # a small pool makes duplicates likely
    st.text(max_size=10).map(lambda s: "v" + s),
)
valid_request = st.tuples(
    valid_id,
    st.sampled_from(["echo", "boom", "nope", "unserializable"]),
    st.one_of(
        st.none(),
        json_value.filter(lambda v: isinstance(v, dict | list)),
        # Nested deep, but not past what the parser accepts.
        st.integers(1, 150).map(lambda depth: {"deep": json.loads(_nested(depth, "list"))}),
    ),
)


def _valid_frame(request_id: Any, method: str, params: Any) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


async def _hostile_scenario(frames: list[tuple[str, Any]]) -> None:
    peer_end, raw = memory_pair()
    release = asyncio.Event()
    synced = asyncio.Event()

    async def held(request: InboundRequest) -> Any:
        await release.wait()
        return await handler(request)

    async def on_notification(method: str, params: Params) -> None:
        if method == "sync-7f3e9a":
            synced.set()

    peer = JsonRpcPeer(peer_end, held, on_notification)
    peer.start()
    for text, _ in frames:
        await raw.send(text)
    # Notifications are handled in order, so this one means every frame was read.
    await raw.send('{"jsonrpc":"2.0","method":"sync-7f3e9a"}')
    await asyncio.wait_for(synced.wait(), TIMEOUT)
    release.set()
    async with asyncio.timeout(TIMEOUT):
        while peer.inflight:
            await asyncio.sleep(0.001)
    # The peer survived: it still answers, after the answers to everything before.
    await raw.send('{"jsonrpc":"2.0","id":"final-check","method":"echo"}')
    answers: list[Any] = []
    while not answers or answers[-1].get("id") != "final-check":
        answers.append(await receive(raw))
    assert answers.pop() == {"jsonrpc": "2.0", "id": "final-check", "result": None}
    await peer.close()
    while True:
        rest = await asyncio.wait_for(raw.receive(), TIMEOUT)
        if rest is None:
            break
        answers.append(json.loads(rest))
    for answer in answers:
        assert answer["jsonrpc"] == "2.0"
        assert "id" in answer
        assert ("result" in answer) != ("error" in answer)
    valid_ids = {json.dumps(rid) for _, rid in frames if rid is not None}
    answered = [json.dumps(a["id"]) for a in answers if a["id"] is not None]
    for key in valid_ids:
        assert answered.count(key) == 1, key


@settings(
    max_examples=60,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.one_of(
            hostile_frame.map(lambda text: (text, None)),
            valid_request.map(lambda r: (_valid_frame(*r), r[0])),
        ),
        max_size=30,
    )
)
def test_hostile_frames_never_kill_the_peer_and_valid_requests_get_one_answer(
    frames: list[tuple[str, Any]],
) -> None:
    asyncio.run(_hostile_scenario(frames))


class GatedTransport(MemoryTransport):
    """A transport with `send_nowait` whose buffer is full until `drained` is set: then
    `send_nowait` refuses and `send` waits, as a stdio child that stopped reading."""

    def __init__(self) -> None:
        super().__init__(asyncio.Queue(), asyncio.Queue())
        self.full = False
        self.drained = asyncio.Event()
        self.wire: list[str] = []

    def send_nowait(self, text: str) -> bool:
        if self.full:
            return False
        self.wire.append(json.loads(text)["method"])
        return True

    async def send(self, text: str) -> None:
        self.wire.append(json.loads(text)["method"])
        await self.drained.wait()
        self.full = False


async def test_a_frame_sent_while_another_waits_on_the_transport_goes_after_it() -> None:
    transport = GatedTransport()
    peer = JsonRpcPeer(transport, handler, name="gated")
    await peer.notify("first")  # queued at once, no waiting
    transport.full = True
    waiting = asyncio.ensure_future(peer.notify("second"))  # waits for the drain
    await asyncio.sleep(0.01)
    transport.full = False  # room again, but "second" still holds the send
    third = asyncio.ensure_future(peer.notify("third"))
    await asyncio.sleep(0.01)
    assert transport.wire == ["first", "second"]  # "third" queues behind, not past it
    transport.drained.set()
    await asyncio.wait_for(asyncio.gather(waiting, third), TIMEOUT)
    assert transport.wire == ["first", "second", "third"]


async def test_a_handler_that_swallowed_its_cancellation_is_cancelled_again_on_close(
    log_messages: list[str],
) -> None:
    # The soak saw an inference/request run on after its session closed (its first
    # cancellation lost on the way); close() must not leave it running.
    entered = asyncio.Event()
    ended: list[str] = []

    async def swallows_once(request: InboundRequest) -> Any:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # the lost cancel
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled again")
            raise
        return None

    peer_end, raw = memory_pair()
    peer = JsonRpcPeer(peer_end, swallows_once, name="under-test")
    peer.start()
    await raw.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "slow"}))
    await asyncio.wait_for(entered.wait(), TIMEOUT)
    await asyncio.wait_for(peer.close(McplError(INTERNAL_ERROR, "closing")), TIMEOUT)
    await asyncio.sleep(0)
    assert ended == ["cancelled again"]
    [logged] = [m for m in log_messages if "kept running after its session closed" in m]
    assert "swallows_once" in logged
