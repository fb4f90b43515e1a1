"""`frames.dumps`, every frame's JSON: the C encoder called directly must write what
``json.dumps(..., separators=(",", ":"), allow_nan=False)`` writes, and fail as it fails."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentcore.mcpl.chunks import ChunkStream
from agentcore.mcpl.frames import dumps


def reference(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "method": "inference/chunk", "params": {"requestId": 1, "index": 0}},
        {"text": 'caf\u00e9 \ud800 "quoted" \\ \n\t', "list": [1.5, -0.0, 1e300, None, True]},
        {1: "int key", None: "none key", 2.5: "float key", False: "bool key"},
        "a bare string",
        [],
    ],
)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    assert dumps(value) == reference(value)
    assert dumps(value).isascii()


@pytest.mark.parametrize("value", [{"x": math.nan}, {"x": object()}, {(1, 2): "tuple key"}])
def test_dumps_refuses_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as expected:
        reference(value)
    with pytest.raises(expected.type, match=str(expected.value)):
        dumps(value)


def test_a_circular_frame_is_refused_every_time() -> None:
    """Each call checks for cycles afresh: a refused frame leaves nothing behind that
    would refuse the next."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference"):
            dumps(looped)
        assert dumps({"self": {}}) == '{"self":{}}'


# -- a streamed answer's chunks, written from a template (`ChunkStream`) --------------------


class Recorder:
    """A session that takes every encoded frame at once (`FrameSink`), as a stdio one
    does below its high-water mark."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def send_now(self, method: str, frame: str) -> bool:
        assert method == "inference/chunk"
        self.frames.append(frame)
        return True

    async def send(self, method: str, frame: str) -> None:
        raise AssertionError("send_now took every frame")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        raise AssertionError("a session that takes frames is not notified")


@pytest.mark.parametrize(
    "request_id", [0, 7, -3, 2**70, "", "req-1", 'a "quoted" \\ id', "\u00e9\ud800"]
)
async def test_a_chunk_frame_is_what_dumps_writes_of_the_whole_message(request_id: Any) -> None:
    """The template's text is exactly `dumps` of the message, for any id and any text:
    quotes, backslashes, controls, non-ASCII, a lone surrogate, the empty index 0 up."""
    deltas = ["w0 ", 'caf\u00e9 "quoted" \\ \n\t\x00\x1f', "\ud800 lone", "\u2028\U0001f600", "}"]
    session = Recorder()
    chunks = ChunkStream(session, request_id)
    for delta in deltas:
        await chunks.send(delta)
    await chunks.end()
    expected = [
        dumps(
            {
                "jsonrpc": "2.0",
                "method": "inference/chunk",
                "params": {"requestId": request_id, "index": index, "delta": delta},
            }
        )
        for index, delta in enumerate(deltas)
    ]
    assert session.frames == expected
    assert chunks.sent == len(deltas)


async def test_a_handle_with_only_notify_gets_each_chunk_as_params() -> None:
    """A server handle without `send_now` (a plugin test's stand-in) is notified."""
    notified: list[tuple[str, dict[str, Any]]] = []

    class Handle:
        async def notify(self, method: str, params: dict[str, Any]) -> None:
            notified.append((method, params))

    chunks = ChunkStream(Handle(), "r")
    await chunks.send("one ")
    await chunks.send("")
    await chunks.send("\ud800")
    await chunks.end()
    assert notified == [
        ("inference/chunk", {"requestId": "r", "index": 0, "delta": "one "}),
        ("inference/chunk", {"requestId": "r", "index": 1, "delta": "\ud800"}),
    ]


async def test_send_now_hands_back_the_send_to_await_when_the_transport_is_full() -> None:
    """`send_now` (the router's hot path) sends at once while the session takes the frame;
    when it does not, nothing is sent until the returned send is awaited, in order."""

    class Full(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.takes = True
            self.waited: list[str] = []

        def send_now(self, method: str, frame: str) -> bool:
            return self.takes and super().send_now(method, frame)

        async def send(self, method: str, frame: str) -> None:
            self.waited.append(frame)

    session = Full()
    chunks = ChunkStream(session, "r")
    assert chunks.send_now("one ") is None
    session.takes = False
    waiting = chunks.send_now("two ")
    assert waiting is not None
    assert session.waited == []
    await waiting
    assert [json.loads(f)["params"] for f in session.frames + session.waited] == [
        {"requestId": "r", "index": 0, "delta": "one "},
        {"requestId": "r", "index": 1, "delta": "two "},
    ]
    assert chunks.sent == 2
