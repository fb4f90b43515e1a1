"""An incremental server-sent events decoder, following the WHATWG event-stream rules.

Why our own and not `httpx-sse`: the decoder runs once per network chunk on the
hot path of every streamed inference, and we want control over what that
costs. This one is fed raw bytes as they arrive (one call per network read,
however many events it holds), decodes UTF-8 incrementally so a character split
across two reads is never mangled, splits lines with `str.split` rather than a
regex or a per-line generator, and hands back a plain list of events. httpx-sse
sits on `aiter_lines`, which costs an async-generator step per line (two per
event) before any event is built. Here the usual events, a single ``data:`` line
or an ``event:`` line and one ``data:`` line, cost a slice comparison or two after
a C-level split on blank lines; anything else (``id:``, multi-line data, comments)
takes the line-by-line path.
`feed_tuples` hands the adapters plain ``(event, data, id)`` tuples, which cost a
fraction of an object each; `feed` wraps them as `ServerSentEvent` for everyone else.

The rules (https://html.spec.whatwg.org/multipage/server-sent-events.html):
lines end with CRLF, LF or CR; a line starting with ``:`` is a comment; a
``field: value`` line loses one space after the colon; ``data`` lines of one
event are joined with LF; a blank line dispatches the event, unless it has no
data; ``id`` without NUL sets the last event id (it carries over to later events); ``retry``
with digits only sets the stream's reconnection time; a leading byte-order mark is dropped; unknown
fields are ignored.

One deliberate leniency: at end of stream the spec discards an event that was
not closed by a blank line. `close()` dispatches it instead, because servers
that end with ``data: [DONE]`` and no trailing blank line exist, and dropping
the terminal would misreport a finished inference as a cut one.
"""

from __future__ import annotations

import codecs
from typing import TypeAlias

__all__ = ["EventTuple", "SSEDecoder", "ServerSentEvent"]


class ServerSentEvent:
    """One dispatched event. `event` is ``"message"`` when the stream named none."""

    __slots__ = ("data", "event", "id")

    def __init__(self, event: str, data: str, id: str | None = None) -> None:
        self.event = event
        self.data = data
        self.id = id

    def __repr__(self) -> str:
        return f"ServerSentEvent(event={self.event!r}, data={self.data!r}, id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerSentEvent):
            return NotImplemented
        return (self.event, self.data, self.id) == (other.event, other.data, other.id)

    __hash__ = None  # type: ignore[assignment]


EventTuple: TypeAlias = tuple[str, str, str | None]
"""``(event, data, id)``: what `SSEDecoder.feed_tuples` returns for each event."""


class SSEDecoder:
    """Feed bytes as they arrive, get the events they complete; call `close()` at the end.

    Between feeds the decoder holds only the text of the event not yet complete
    (it always starts at an event boundary), the undecoded tail of a split UTF-8
    character, and whether a CR ended the last feed (an LF that follows belongs to it).
    """

    __slots__ = (
        "_buf",
        "_decoder",
        "_partial",
        "_skip_lf",
        "_started",
        "last_event_id",
        "retry_ms",
    )

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = False  # the incremental decoder holds part of a character
        self._buf = ""
        self._skip_lf = False
        self._started = False  # the byte-order mark check is done
        self.last_event_id: str | None = None
        """The last ``id`` field seen; it carries over to later events, as the spec says."""
        self.retry_ms: int | None = None
        """The reconnection time the stream asked for with ``retry:``, if any."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by this chunk, in order (often none, often several)."""
        return [ServerSentEvent(e, d, i) for e, d, i in self.feed_tuples(chunk)]

    def close(self) -> list[ServerSentEvent]:
        """End of stream: dispatch a last event not closed by a blank line (see above)."""
        return [ServerSentEvent(e, d, i) for e, d, i in self.close_tuples()]

    def feed_tuples(self, chunk: bytes) -> list[EventTuple]:
        """`feed`, as ``(event, data, id)`` tuples: the adapters' hot path.

        UTF-8, a character split across reads kept whole, bad bytes replaced: a read that
        holds whole, valid characters (nearly all) is one C call, here with no call of its
        own; the incremental decoder, three times the cost, takes the rest (`_decode`).
        """
        if self._partial:
            return self._feed_text(self._decode(chunk))
        try:
            text = chunk.decode()
        except UnicodeDecodeError:
            text = self._decode(chunk)
        return self._feed_text(text)

    def _decode(self, chunk: bytes) -> str:
        """The incremental decoder's way: it keeps the undecoded tail of a split character."""
        text: str = self._decoder.decode(chunk)
        self._partial = bool(self._decoder.getstate()[0])
        return text

    def close_tuples(self) -> list[EventTuple]:
        """`close`, as ``(event, data, id)`` tuples."""
        # An incomplete UTF-8 sequence at the very end decodes as U+FFFD.
        events = self._feed_text(self._decoder.decode(b"", final=True))
        rest, self._buf = self._buf, ""
        if rest:
            event = self._block(rest)
            if event is not None:
                events.append(event)
        return events

    def _feed_text(self, text: str) -> list[EventTuple]:
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text[:1] == "\n":
                text = text[1:]
        if "\r" in text:
            # A CR at the very end may be the first half of a CRLF split across reads.
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        buf = self._buf
        if buf:
            if "\n\n" not in text and not (text[:1] == "\n" and buf[-1] == "\n"):
                self._buf = buf + text
                return []
            text = buf + text
        elif "\n\n" not in text:
            self._buf = text
            return []
        blocks = text.split("\n\n")
        self._buf = blocks.pop()
        events: list[EventTuple] = []
        for block in blocks:
            # The common cases: one "data: ..." line, or "event: ..." and then one.
            if block[:6] == "data: " and "\n" not in block:
                events.append(("message", block[6:], self.last_event_id))
                continue
            if block[:7] == "event: ":
                name, _, data = block.partition("\n")
                if data[:6] == "data: " and "\n" not in data:
                    events.append((name[7:] or "message", data[6:], self.last_event_id))
                    continue
            if block:
                event = self._block(block)
                if event is not None:
                    events.append(event)
        return events

    def _block(self, block: str) -> EventTuple | None:
        """The lines of one event (between blank lines), the spec's rules one by one."""
        data: list[str] = []
        name = ""
        for line in block.split("\n"):
            if not line or line[0] == ":":  # a leading blank line, or a comment
                continue
            field, colon, value = line.partition(":")
            if colon and value[:1] == " ":
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                name = value
            elif field == "id":
                if "\x00" not in value:
                    self.last_event_id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        if not data:
            return None
        return (name or "message", "\n".join(data), self.last_event_id)
