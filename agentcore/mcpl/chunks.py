"""One streamed `inference/request`'s back-channel: its `inference/chunk` notifications.

A streamed answer (MCPL §11) is text chunks, ``index`` from 0, each
``{"requestId", "index", "delta"}``, all before the result. `ChunkStream` is made once per
request (`McplRequest.chunk_stream`) and owns what every chunk of it shares: the request
id, the next index, and the `StreamRedactor` that holds back a tail that could start a
secret (so a key echoed in two chunks is masked too).

Why a bound object and not `server.notify` per chunk: a chunk is the hot path of a
thousand concurrent streams. The frame is written from a template made once per request
(the C string escaper for the delta, the same text `frames.dumps` makes of the whole
message), and it goes to the session's `send_now` (`SessionHandle`): the session's checks
(still live, the method still granted, §5.4) and the redaction boundary, per frame, with
no coroutine of its own while the transport takes the frame at once. The frame is made by
the stream's redactor (`StreamRedactor.feed_json`, and `flush_json` for the held tail) from
text it has just redacted, so the boundary sends it without a second pass over the whole
frame (`redaction.is_sealed`). A server handle without `send_now` (a test's stand-in) gets
each chunk through its `notify`.
"""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any, Protocol

from agentcore.redaction import StreamRedactor

CHUNK = "inference/chunk"


class FrameSink(Protocol):
    """A session that takes a notification already encoded (`SessionHandle`): it checks the
    session and the grant, and redacts the frame, as `notify` would."""

    def send_now(self, method: str, frame: str) -> bool:
        """Sent (True), or nothing sent because the transport must be waited for."""
        ...

    async def send(self, method: str, frame: str) -> None: ...


class Notifies(Protocol):
    """What any server handle has (`ServerHandle.notify`)."""

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...


class _Notifier:
    """A `FrameSink` over a server handle that only has `notify`: each frame's params
    decoded again and notified (a stand-in's way; a session takes the frame itself)."""

    __slots__ = ("_server",)

    def __init__(self, server: Notifies) -> None:
        self._server = server

    def send_now(self, method: str, frame: str) -> bool:
        return False

    async def send(self, method: str, frame: str) -> None:
        await self._server.notify(method, json.loads(frame)["params"])


class ChunkStream:
    """The `inference/chunk` notifications of one streamed request, in order (see the
    module docstring). `send` each piece of visible text as it comes; `end` once the
    inference completed, for the held tail. A failed inference just stops: the tail it
    held never goes out (an error after chunks carries no partial text)."""

    __slots__ = ("_head", "_index", "_redactor", "_sink")

    def __init__(self, server: Notifies, request_id: int | str) -> None:
        self._index = 0
        self._redactor = StreamRedactor()
        sends = callable(getattr(type(server), "send_now", None))
        self._sink: FrameSink = server if sends else _Notifier(server)  # type: ignore[assignment]
        rid = json.dumps(request_id)  # as `frames.dumps` writes a string or an integer
        self._head = f'{{"jsonrpc":"2.0","method":"{CHUNK}","params":{{"requestId":{rid},"index":'

    @property
    def sent(self) -> int:
        """How many chunks went out (the next one's index)."""
        return self._index

    async def send(self, text: str) -> None:
        """Send what of `text` can go now, redacted (none of it: no chunk is sent)."""
        waiting = self.send_now(text)
        if waiting is not None:
            await waiting

    def send_now(self, text: str) -> Coroutine[Any, Any, None] | None:
        """`send` with no coroutine of its own while the transport takes the frame at once
        (a stream's hot path): None once done; else the send still to await, the frame's
        turn to wait for the transport. Await it before the next `send_now`."""
        frame = self._redactor.feed_json(text, self._head, self._index)
        if frame is not None:
            self._index += 1
            if not self._sink.send_now(CHUNK, frame):
                return self._sink.send(CHUNK, frame)
        return None

    async def end(self) -> None:
        """The inference completed: send the tail held back as a secret's possible start."""
        frame = self._redactor.flush_json(self._head, self._index)
        if frame is not None:
            self._index += 1
            if not self._sink.send_now(CHUNK, frame):
                await self._sink.send(CHUNK, frame)


__all__ = ["CHUNK", "ChunkStream", "FrameSink"]
