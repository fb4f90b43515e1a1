"""The ``application/vnd.amazon.eventstream`` body as ``(event, data, id)`` tuples.

Framing, both CRCs and headers are botocore's `EventStreamBuffer`; nothing here reads
a byte of the framing. InvokeModel's ``chunk`` events carry an Anthropic event as
base64 in ``bytes``: it is handed on as that event's JSON text. An exception frame (or
one that fails its checks) becomes one ``error`` tuple in Anthropic's error shape, which
both translators raise as the typed error its name says.
"""

from __future__ import annotations

import json
from binascii import Error as Base64Error
from binascii import a2b_base64
from typing import Any

from botocore.eventstream import EventStreamBuffer, ParserError

from agentcore.api import EventTuple, fast_loads

ERROR = "error"
_SLICE = 16 * 1024
_KNOWN_HEADERS = 256
"""How many distinct header blocks `_Buffer` remembers: a stream repeats a handful."""


class _Buffer(EventStreamBuffer):
    """botocore's buffer (prelude and message CRCs, lengths, header parsing), remembering
    each header block it parsed: every text delta of a stream carries the same three
    headers, and parsing them again was half the decoder's CPU (bench/stream_overhead.py)."""

    _parsed: dict[bytes, dict[str, Any]] = {}

    def _parse_headers(self) -> dict[str, Any]:
        # botocore's own state (its stubs leave the private members out): the header
        # block sits after the 12-byte prelude.
        raw = self._data[12 : self._prelude.headers_end]  # type: ignore[attr-defined]
        headers = self._parsed.get(raw)
        if headers is None:
            headers = super()._parse_headers()  # type: ignore[misc]
            if len(self._parsed) < _KNOWN_HEADERS:
                self._parsed[raw] = headers
        return headers


def error_tuple(name: str, message: str) -> EventTuple:
    body = {"type": "error", "error": {"type": name, "message": message}}
    return (ERROR, json.dumps(body), None)


class EventStreamDecoder:
    """One streamed body's decoder (`agentcore.api.StreamDecoder`)."""

    __slots__ = ("_broken", "_buffer")

    def __init__(self) -> None:
        self._buffer = _Buffer()
        self._broken = False

    def feed_tuples(self, chunk: bytes) -> list[EventTuple]:
        if self._broken:
            return []
        out: list[EventTuple] = []
        try:
            # botocore copies what is left of its buffer after each message: a large read
            # goes in in slices, so that copy stays small (quadratic in one big read).
            for start in range(0, len(chunk), _SLICE):
                self._buffer.add_data(chunk[start : start + _SLICE])
                self._read(out)
        except (ParserError, Base64Error, ValueError, KeyError, TypeError) as exc:
            self._broken = True
            why = f"{type(exc).__name__}: {exc}"
            out.append(error_tuple("api_error", f"an event-stream frame cannot be read ({why})"))
        return out

    def _read(self, out: list[EventTuple]) -> None:
        for message in self._buffer:
            headers: Any = message.headers
            if headers.get(":message-type") == "event":
                name = headers.get(":event-type", "")
                text = message.payload.decode()
                if name == "chunk":
                    text = a2b_base64(fast_loads(text)["bytes"]).decode()
                out.append((name, text, None))
            else:
                out.append(_exception(headers, message.payload))

    def close_tuples(self) -> list[EventTuple]:
        return []


def _exception(headers: dict[str, Any], payload: bytes) -> EventTuple:
    """An exception (or error) frame: its name from the headers, its message from the body."""
    name = headers.get(":exception-type") or headers.get(":error-code") or "unknown"
    try:
        body = json.loads(payload) if payload else {}
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return error_tuple(str(name), str(message or headers.get(":error-message") or name))
