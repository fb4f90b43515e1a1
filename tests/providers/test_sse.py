"""The SSE decoder against the WHATWG rules, fed in every awkward way a network can split."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore.providers.sse import ServerSentEvent, SSEDecoder


def decode(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


def every_split(payload: bytes) -> list[list[bytes]]:
    """Whole, byte by byte, and in two at every position."""
    return [[payload], [payload[i : i + 1] for i in range(len(payload))]] + [
        [payload[:i], payload[i:]] for i in range(1, len(payload))
    ]


def assert_all_splits(payload: bytes, expected: list[ServerSentEvent]) -> None:
    for chunks in every_split(payload):
        assert decode(chunks) == expected, chunks


def ev(data: str, event: str = "message", id: str | None = None) -> ServerSentEvent:
    return ServerSentEvent(event, data, id)


def test_plain_data_events() -> None:
    assert_all_splits(b"data: one\n\ndata: two\n\n", [ev("one"), ev("two")])


def test_named_events_and_json() -> None:
    payload = b'event: message_start\ndata: {"type": "message_start"}\n\nevent: ping\ndata: {}\n\n'
    assert_all_splits(payload, [ev('{"type": "message_start"}', "message_start"), ev("{}", "ping")])


def test_multi_line_data_is_joined_with_lf() -> None:
    assert_all_splits(b"data: a\ndata: b\ndata:\ndata: c\n\n", [ev("a\nb\n\nc")])


def test_comments_are_skipped_and_dispatch_nothing() -> None:
    payload = b": OPENROUTER PROCESSING\n\ndata: x\n: inside an event\ndata: y\n\n:\n\n"
    assert_all_splits(payload, [ev("x\ny")])


def test_crlf_and_cr_line_endings() -> None:
    expected = [ev("a\nb", "e"), ev("c")]
    assert_all_splits(b"event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n", expected)
    assert_all_splits(b"event: e\rdata: a\rdata: b\r\rdata: c\r\r", expected)
    assert_all_splits(b"event: e\r\ndata: a\rdata: b\n\r\ndata: c\n\r", expected)


def test_utf8_split_inside_a_character() -> None:
    text = "caf\u00e9 \u2603 \U0001f642"
    payload = f"data: {text}\n\n".encode()
    assert_all_splits(payload, [ev(text)])


def test_last_event_without_trailing_newline_is_dispatched() -> None:
    # The spec would drop it; servers that end with "data: [DONE]" and no blank line exist.
    assert_all_splits(b"data: one\n\ndata: [DONE]", [ev("one"), ev("[DONE]")])
    assert_all_splits(b"data: one\n\ndata: [DONE]\n", [ev("one"), ev("[DONE]")])
    assert_all_splits(b"data: one\r\n\r\ndata: [DONE]\r", [ev("one"), ev("[DONE]")])


def test_field_rules() -> None:
    payload = (
        b"data:no space\n\n"  # no space after the colon
        b"data:  two spaces\n\n"  # only one space is removed
        b"data\n\n"  # a field name alone: empty value, still an event
        b"event: only a name\n\n"  # no data: nothing dispatched
        b"unknown: field\ndata: kept\n\n"
        b"data: \n\n"  # empty data is an event with empty data
    )
    assert_all_splits(payload, [ev("no space"), ev(" two spaces"), ev(""), ev("kept"), ev("")])


def test_event_name_does_not_leak_into_the_next_event() -> None:
    assert_all_splits(b"event: error\ndata: 1\n\ndata: 2\n\n", [ev("1", "error"), ev("2")])


def test_ids_carry_over_and_retry_sets_the_reconnection_time() -> None:
    payload = b"id: 1\ndata: a\n\ndata: b\n\nid: bad\x00\ndata: c\n\nretry: 1500\n\nretry: x\n\n"
    decoder = SSEDecoder()
    assert decoder.feed(payload) == [ev("a", id="1"), ev("b", id="1"), ev("c", id="1")]
    assert decoder.retry_ms == 1500
    assert decoder.last_event_id == "1"


def test_byte_order_mark_is_dropped_once() -> None:
    assert_all_splits(b"\xef\xbb\xbfdata: x\n\n", [ev("x")])
    # A BOM anywhere else is data.
    assert decode([b"data: \xef\xbb\xbfx\n\n"]) == [ev("\ufeffx")]


def test_extra_blank_lines_between_events() -> None:
    assert_all_splits(b"\n\ndata: a\n\n\n\n\ndata: b\n\n\n", [ev("a"), ev("b")])


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert decode([b"data: \xff\n\n"]) == [ev("\ufffd")]
    # A character cut off by the end of the stream.
    assert decode([b"data: a\xe2\x98"]) == [ev("a\ufffd")]
    # A bad byte, then characters split across reads, then plain reads again.
    payload = b"data: \xff " + "\u2603 \U0001f642\n\nevent: e\ndata: ok\n\n".encode()
    assert_all_splits(payload, [ev("\ufffd \u2603 \U0001f642"), ev("ok", "e")])


def test_tuples_api_matches_objects() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_tuples(b"event: a\ndata: 1\n\ndata: 2") == [("a", "1", None)]
    assert decoder.close_tuples() == [("message", "2", None)]


# -- against a plain reading of the spec, on generated streams ------------------------------


def reference(payload: bytes) -> list[ServerSentEvent]:
    """The spec's algorithm, line by line, with our one leniency at end of stream."""
    text = payload.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    events: list[ServerSentEvent] = []
    data: list[str] = []
    name = ""
    last_id: str | None = None
    for line in [*lines, ""]:
        if line == "":
            if data:
                events.append(ServerSentEvent(name or "message", "\n".join(data), last_id))
            data, name = [], ""
            continue
        if line.startswith(":"):
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id" and "\x00" not in value:
            last_id = value
    return events


_pieces = st.sampled_from(
    [
        "data: ",
        "data:",
        "data",
        "event: ",
        "id: ",
        "retry: 5",
        ": c",
        "x",
        "{}",
        "\u00e9",
        "\U0001f642",
        "\n",
        "\r",
        "\r\n",
        "\n\n",
        " ",
        ":",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_pieces, max_size=30), st.lists(st.integers(0, 200), max_size=6))
def test_matches_the_reference_on_any_split(pieces: list[str], cuts: list[int]) -> None:
    payload = "".join(pieces).encode()
    positions = sorted({c % (len(payload) + 1) for c in cuts})
    chunks = [
        payload[a:b] for a, b in zip([0, *positions], [*positions, len(payload)], strict=True)
    ]
    assert decode(chunks) == reference(payload)
