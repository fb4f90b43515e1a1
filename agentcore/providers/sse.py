"""An incremental server-sent events decoder, following the WHATWG event-stream rules.

Why our own and not `httpx-sse`: the decoder runs once per network chunk on the
hot path of every streamed inference, and we want control over what that
costs. This one is fed raw bytes as they arrive (one call per network read,
however many events it holds), decodes UTF-8 incrementally so a character split
across two reads is never mangled, splits lines with `str.split` rather than a
regex or a per-line generator, and hands back a plain list of events. httpx-sse
sits on `aiter_lines`, which costs an async-generator step per line (two per
event) before any event is built.

The rules (https://html.spec.whatwg.org/multipage/server-sent-events.html):
lines end with CRLF, LF or CR; a line starting with ``:`` is a comment; a
``field: value`` line loses one space after the colon; ``data`` lines of one
event are joined with LF; a blank line dispatches the event, unless it has no
data; ``id`` without NUL sets the last event id; ``retry`` with digits only
sets the reconnection time; a leading byte-order mark is dropped; unknown
fields are ignored.

One deliberate leniency: at end of stream the spec discards an event that was
not closed by a blank line. `close()` dispatches it instead, because servers
that end with ``data: [DONE]`` and no trailing blank line exist, and dropping
the terminal would misreport a finished inference as a cut one.
"""

from __future__ import annotations

import codecs

__all__ = ["SSEDecoder", "ServerSentEvent"]


class ServerSentEvent:
    """One dispatched event. `event` is ``"message"`` when the stream named none."""

    __slots__ = ("data", "event", "id", "retry")

    def __init__(
        self, event: str, data: str, id: str | None = None, retry: int | None = None
    ) -> None:
        self.event = event
        self.data = data
        self.id = id
        self.retry = retry

    def __repr__(self) -> str:
        return f"ServerSentEvent(event={self.event!r}, data={self.data!r}, id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerSentEvent):
            return NotImplemented
        return (self.event, self.data, self.id, self.retry) == (
            other.event,
            other.data,
            other.id,
            other.retry,
        )

    __hash__ = None  # type: ignore[assignment]


class SSEDecoder:
    """Feed bytes with `feed()`, get the events they complete; call `close()` at end of stream."""

    __slots__ = (
        "_data",
        "_decoder",
        "_event",
        "_has_data",
        "_line",
        "_retry",
        "_skip_lf",
        "_started",
        "last_event_id",
    )

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""  # the incomplete last line of what was fed so far
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._started = False  # the byte-order mark check is done
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._retry: int | None = None
        self.last_event_id: str | None = None
        """The last ``id`` field seen; it carries over to later events, as the spec says."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by this chunk, in order (often none, often several)."""
        return self._feed_text(self._decoder.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        """End of stream: flush a last line without a newline and an event without a blank line."""
        text = self._decoder.decode(b"", final=True)
        events = self._feed_text(text + "\n") if (text or self._line) else []
        if self._has_data:
            events.extend(self._lines(("",)))
        return events

    def _feed_text(self, text: str) -> list[ServerSentEvent]:
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
        if "\n" not in text:
            self._line += text
            return []
        lines = text.split("\n")
        if self._line:
            lines[0] = self._line + lines[0]
        self._line = lines.pop()
        return self._lines(lines)

    def _lines(self, lines: list[str] | tuple[str, ...]) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        data = self._data
        for line in lines:
            if not line:  # a blank line dispatches
                if self._has_data:
                    events.append(
                        ServerSentEvent(
                            self._event or "message",
                            data[0] if len(data) == 1 else "\n".join(data),
                            self.last_event_id,
                            self._retry,
                        )
                    )
                    data.clear()
                    self._has_data = False
                    self._retry = None
                self._event = ""
                continue
            if line[0] == ":":  # a comment: keep-alives such as ": OPENROUTER PROCESSING"
                continue
            # The common case first: "data: ..." needs no search for the colon.
            if line[:6] == "data: ":
                data.append(line[6:])
                self._has_data = True
                continue
            field, colon, value = line.partition(":")
            if colon and value[:1] == " ":
                value = value[1:]
            if field == "data":
                data.append(value)
                self._has_data = True
            elif field == "event":
                self._event = value
            elif field == "id":
                if "\x00" not in value:
                    self.last_event_id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                self._retry = int(value)
        return events
