"""A streamed chunk's frame is redacted once: by the stream's redactor, which writes it from
text it has just redacted (`StreamRedactor.feed_json`) and seals it. The boundary
(`JsonRpcPeer.send_now`) sends a sealed frame as it is, and only the frame sealed last,
with no secret registered since (`redaction.is_sealed`). No registered secret may get
through that path: echoed whole, in another case, split across chunks or by whitespace,
in the request id, or registered mid-stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentcore.mcpl import jsonrpc
from agentcore.mcpl.chunks import ChunkStream
from agentcore.mcpl.jsonrpc import InboundRequest, JsonRpcPeer
from agentcore.redaction import (
    REDACTED,
    StreamRedactor,
    is_sealed,
    redact,
    register_secret,
    registered_secrets,
    restore_secrets,
)

SECRET = "sk-sealed-test-key-0001"
LATER = "later-registered-0002"


class Wire:
    """A transport that takes every frame at once (`send_nowait`), as stdio does below its
    high-water mark: the path on which a sealed frame skips the second redaction."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def send_nowait(self, text: str) -> bool:
        self.frames.append(text)
        return True

    async def send(self, text: str) -> None:
        self.frames.append(text)

    async def receive(self) -> str | None:
        return None

    async def close(self) -> None:
        pass


class Session:
    """A `FrameSink` straight over the peer, as `SessionHandle` is once its checks pass."""

    def __init__(self, peer: JsonRpcPeer) -> None:
        self.peer = peer

    def send_now(self, method: str, frame: str) -> bool:
        return self.peer.send_now(frame)

    async def send(self, method: str, frame: str) -> None:
        await self.peer.send_encoded(frame)


async def refuse(request: InboundRequest) -> Any:
    raise AssertionError("no request is sent to this peer")


@pytest.fixture(autouse=True)
def secret() -> Iterator[None]:
    saved = registered_secrets()
    register_secret(SECRET)
    yield
    restore_secrets(saved)


@pytest.fixture
def redactions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the peer's boundary redacts (a sealed frame is not among them)."""
    seen: list[str] = []

    def counted(text: str) -> str:
        seen.append(text)
        return redact(text)

    monkeypatch.setattr(jsonrpc, "redact", counted)
    return seen


def stream(request_id: int | str = 7) -> tuple[Wire, JsonRpcPeer, ChunkStream]:
    wire = Wire()
    peer = JsonRpcPeer(wire, refuse, name="sealed")
    return wire, peer, ChunkStream(Session(peer), request_id)


def deltas(frames: list[str]) -> str:
    return "".join(json.loads(frame)["params"]["delta"] for frame in frames)


async def test_no_secret_gets_through_a_sealed_frame(redactions: list[str]) -> None:
    """Echoed whole, upper-cased, split across chunks and by a newline, and in the request
    id: every frame on the wire is what the boundary's own redaction would leave it, and
    none of them went through that redaction (the path under test is the sealed one)."""
    pieces = [
        f"key: {SECRET[:5]}",
        f"{SECRET[5:]} and ",
        SECRET.upper(),
        f" then {SECRET[:9]}\n{SECRET[9:]}.",
    ]
    wire, _, chunks = stream(f"id-{SECRET}")
    for piece in pieces:
        assert chunks.send_now(piece) is None
    sealed = list(wire.frames)
    await chunks.end()
    assert len(sealed) == len(pieces) and not [f for f in redactions if f in sealed]
    for frame in wire.frames:
        assert redact(frame) == frame
        assert SECRET.lower() not in frame.lower()
        assert json.loads(frame)["params"]["requestId"] == f"id-{REDACTED}"
    assert deltas(wire.frames) == (f"key: {REDACTED} and {REDACTED} then {REDACTED}.")


async def test_a_secret_registered_mid_stream_is_masked_in_the_id_and_the_text() -> None:
    """The head (with the request id) was redacted when the first frame was made; a
    secret registered after it is masked in the next frame's id and text all the same."""
    wire, _, chunks = stream(f"id-{LATER}")
    await chunks.send("first ")
    register_secret(LATER)
    await chunks.send(f"then {LATER} ")
    assert LATER in wire.frames[0]  # not a secret yet when it went out
    later = json.loads(wire.frames[1])["params"]
    assert later == {"requestId": f"id-{REDACTED}", "index": 1, "delta": f"then {REDACTED} "}


async def test_a_secret_registered_between_sealing_and_sending_is_masked(
    redactions: list[str],
) -> None:
    """Registering a secret breaks the seal: a frame made before is redacted at the
    boundary like any other frame."""
    wire, peer, _ = stream()
    frame = StreamRedactor().feed_json(f"say {LATER} ", '{"head":', 0)
    assert frame is not None and is_sealed(frame) and LATER in frame
    register_secret(LATER)
    assert not is_sealed(frame)
    assert peer.send_now(frame)
    assert redactions == [frame]
    assert wire.frames == [frame.replace(LATER, REDACTED)]


async def test_only_the_very_frame_sealed_last_skips_the_redaction(
    redactions: list[str],
) -> None:
    """A text equal to the sealed frame but another object, or a frame sealed before the
    last, is redacted: the seal is the object, not its content."""
    wire, peer, _ = stream()
    redactor = StreamRedactor()
    first = redactor.feed_json("one ", '{"head":', 0)
    last = redactor.feed_json("two ", '{"head":', 1)
    assert first is not None and last is not None
    copy = "".join([last[:3], last[3:]])
    assert copy == last and copy is not last
    assert (is_sealed(first), is_sealed(copy), is_sealed(last)) == (False, False, True)
    forged = f"{last[:-2]} {SECRET}{last[-2:]}"
    for text in (first, copy, forged, last):
        assert peer.send_now(text)
    assert redactions == [first, copy, forged]
    assert SECRET not in wire.frames[2]
