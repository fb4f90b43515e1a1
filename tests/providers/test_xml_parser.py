"""XML tool mode's parser: what it reads out of the model's text, piece by piece.

Pure tests (no HTTP): the parser on text deltas, and the XML translator on recorded SSE
bodies (``fixtures/anthropic_xml_*.sse``) at every byte split. Every case checks the same
invariant as well: the visible tokens join up to exactly the text content.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from providers_support import fixture, splits, terminal, translate, visible

from agentcore.inference import (
    BlockStart,
    BlockStop,
    Complete,
    OutputBlock,
    StopInfo,
    StopReason,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolUseBlock,
    Usage,
)
from agentcore.providers.anthropic_xml import XmlTranslator
from agentcore.providers.blocks import Blocks
from agentcore.providers.xml_parser import (
    PREFIX,
    TOOL_CALLS_STOP,
    XmlParser,
    XmlReport,
    parameter_value,
    read_invokes,
    xml_stop,
)

CALL = (
    '<function_calls>\n<invoke name="search">\n'
    '<parameter name="query">tides</parameter>\n</invoke>\n'
)


def parse(
    pieces: list[str], reason: StopReason = "end_turn", sequence: str | None = None
) -> tuple[list[StreamEvent], list[OutputBlock], XmlReport]:
    blocks = Blocks()
    parser = XmlParser(blocks)
    events: list[StreamEvent] = []
    for piece in pieces:
        parser.feed(piece, events)
    report = parser.finish(events, reason, sequence)
    blocks.close(events)
    content = blocks.content()
    text = "".join(b.text for b in content if isinstance(b, TextBlock))
    assert visible(events) == text  # chunks equal content, always
    return events, content, report


def prefixed(text: str) -> str:
    """The same markup with every tag carrying the ``antml:`` prefix."""
    for name in ("function_calls", "invoke", "parameter", "thinking"):
        text = text.replace(f"<{name}", f"<{PREFIX}{name}").replace(
            f"</{name}", f"</{PREFIX}{name}"
        )
    return text


# -- prose, thinking, markup in prose ----------------------------------------------------------


def test_prose_is_visible_and_its_leading_space_is_not_the_answer() -> None:
    events, content, report = parse([" Hello ", "there."])
    assert content == [TextBlock("Hello there.")]
    assert [e.text for e in events if isinstance(e, Token)] == ["Hello ", "there."]
    assert report == XmlReport()


def test_thinking_is_a_thinking_block_and_never_visible() -> None:
    events, content, report = parse(["<thinking>Which memories matter?</thinking>They met twice."])
    assert content == [ThinkingBlock("Which memories matter?"), TextBlock("They met twice.")]
    assert visible(events) == "They met twice."
    thinking = [e for e in events if isinstance(e, Token) and e.block == "thinking"]
    assert [(e.text, e.visible) for e in thinking] == [("Which memories matter?", False)]
    assert report.markup is False


def test_thinking_cut_off_at_max_tokens_stays_thinking() -> None:
    events, content, report = parse(["Well. <thinking>Which memo"], "max_tokens")
    assert content == [TextBlock("Well. "), ThinkingBlock("Which memo")]
    assert visible(events) == "Well. "
    assert report == XmlReport()


def test_function_results_and_invoke_in_prose_are_prose() -> None:
    text = 'Results arrive in <function_results> blocks; use <invoke name="x"> to call.'
    _, content, report = parse([text])
    assert content == [TextBlock(text)]
    assert report == XmlReport()


def test_a_lone_angle_bracket_and_other_tags_are_prose() -> None:
    text = "a < b, <b>bold</b>, <thinkin> and <function_call> stay, and x<"
    _, content, _ = parse([text])
    assert content == [TextBlock(text)]


# -- tool calls -------------------------------------------------------------------------------


def test_a_call_stopped_at_its_close_is_read() -> None:
    events, content, report = parse(["Let me look.\n", CALL], "stop_sequence", TOOL_CALLS_STOP)
    call = ToolUseBlock("toolu_xml_1", "search", {"query": "tides"})
    assert content == [TextBlock("Let me look.\n"), call]
    assert report == XmlReport([call], False, TOOL_CALLS_STOP, True)
    assert BlockStart(1, "tool_use", "search", "toolu_xml_1") in events
    assert BlockStop(1, call) in events
    tool = [e for e in events if isinstance(e, Token) and e.block == "tool_use"]
    assert [(json.loads(e.text), e.visible) for e in tool] == [({"query": "tides"}, False)]


def test_several_invokes_are_several_calls_in_order() -> None:
    block = (
        '<function_calls><invoke name="a"><parameter name="n">1</parameter></invoke>'
        '<invoke name="b"></invoke><invoke name="a"></invoke>'
    )
    _, content, report = parse([block], "stop_sequence", TOOL_CALLS_STOP)
    assert [(c.id, c.name, c.input) for c in report.calls] == [
        ("toolu_xml_1", "a", {"n": "1"}),
        ("toolu_xml_2", "b", {}),
        ("toolu_xml_3", "a", {}),
    ]
    assert content == report.calls


def test_the_prefixed_form_is_read_and_its_written_close_ends_the_reply() -> None:
    text = prefixed(CALL + "</function_calls>") + "\n<function_results>made up</function_results>"
    _, content, report = parse(["Looking.", text, " and more"])
    call = ToolUseBlock("toolu_xml_1", "search", {"query": "tides"})
    assert content == [TextBlock("Looking."), call]
    assert report.calls == [call]
    assert report.triggered_sequence == f"</{PREFIX}function_calls>"
    assert xml_stop(StopInfo("tool_use"), report).reason == "tool_use"


def test_an_empty_block_and_an_invoke_with_no_name_read_no_call() -> None:
    for block in ("<function_calls>", '<function_calls><invoke><parameter name="q">x</parameter>'):
        _, content, report = parse(["Hmm. ", block], "stop_sequence", TOOL_CALLS_STOP)
        assert content == [TextBlock("Hmm. ")]
        assert report == XmlReport([], False, TOOL_CALLS_STOP, True)
        stop = xml_stop(StopInfo("stop_sequence", "stop_sequence", TOOL_CALLS_STOP), report)
        assert (stop.reason, stop.tool_markup, stop.unclosed_tool_block) == (
            "stop_sequence",
            True,
            False,
        )


def test_a_block_cut_off_at_max_tokens_is_still_open() -> None:
    _, content, report = parse(["On it. ", CALL[:40]], "max_tokens")
    assert content == [TextBlock("On it. ")]
    assert report == XmlReport([], True, None, True)


def test_prose_that_opens_a_block_and_ends_its_turn_leaves_it_open() -> None:
    _, content, report = parse(["I would write <function_calls> here."], "end_turn")
    assert content == [TextBlock("I would write ")]
    assert report.unclosed_tool_block and report.markup and not report.calls


def test_an_opening_tag_cut_by_the_token_limit_is_an_open_block() -> None:
    _, content, report = parse(["Now <function_c"], "max_tokens")
    assert content == [TextBlock("Now ")]
    assert report.unclosed_tool_block
    _, content, report = parse(["Now <thinki"], "max_tokens")
    assert (content, report) == ([TextBlock("Now ")], XmlReport())
    # The model chose to stop there: what it wrote is prose.
    _, content, report = parse(["Now <function_c"], "end_turn")
    assert content == [TextBlock("Now <function_c")]
    assert report == XmlReport()


def test_a_stop_at_the_close_outside_any_block_is_markup() -> None:
    _, content, report = parse(["Plain words"], "stop_sequence", TOOL_CALLS_STOP)
    assert content == [TextBlock("Plain words")]
    assert report == XmlReport([], False, TOOL_CALLS_STOP, True)


def test_parameter_values_are_text_and_json_looking_ones_are_json() -> None:
    assert parameter_value("42") == "42"
    assert parameter_value(" tides ") == " tides "
    assert parameter_value('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parameter_value("\n[1, 2]\n") == [1, 2]
    assert parameter_value("{not json}") == "{not json}"
    assert read_invokes(
        "<invoke name='q'><parameter name=\"a\">1</parameter><parameter>x</parameter></invoke>"
        '<invoke name="open">'
    ) == [("q", {"a": "1"})]


# -- a tag split across two deltas, at every offset ----------------------------------------


FRAGMENTS = [
    "Hello ",
    "a < b ",
    "<b>x</b>",
    "<function_results>r</function_results>",
    '<invoke name="p">',
    "<thinking>deep</thinking>",
    "<thinking>mid",
    f"<{PREFIX}thinking>t</{PREFIX}thinking>",
    CALL + "</function_calls>",
    prefixed(CALL + "</function_calls>"),
    '<function_calls><invoke name="e">',
    "<function_calls></function_calls>",
    "\n\n",
    " Z\u00fcrich \U0001f642 ",
    "</thinking>",
    "<",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6),
    st.sampled_from(["end_turn", "max_tokens", "stop_sequence"]),
)
def test_any_split_into_two_deltas_reads_as_one(fragments: list[str], reason: StopReason) -> None:
    text = "".join(fragments)
    sequence = TOOL_CALLS_STOP if reason == "stop_sequence" else None
    events, content, report = parse([text], reason, sequence)
    whole = (visible(events), content, report)
    for cut in range(1, len(text)):
        events, content, report = parse([text[:cut], text[cut:]], reason, sequence)
        assert (visible(events), content, report) == whole, cut


# -- the translator, on recorded streams --------------------------------------------------------


def xml_translator() -> XmlTranslator:
    return XmlTranslator("anth", "claude-x")


def test_recorded_tool_call_at_every_byte_split() -> None:
    payload = fixture("anthropic_xml_tool_call.sse")
    call = ToolUseBlock(
        "toolu_xml_1",
        "search_notes",
        {"query": "tides in Z\u00fcrich", "filters": {"year": 2024, "tags": ["lake"]}},
    )
    for chunks in splits(payload, every=1):
        events = translate(xml_translator(), chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        response = end.response
        assert response.content == [TextBlock("Let me look that up in the notes.\n\n"), call]
        assert response.stop == StopInfo(
            "tool_use", "stop_sequence", TOOL_CALLS_STOP, tool_markup=True
        )
        assert response.usage == Usage(812, 57, cache_read_tokens=0, cache_write_tokens=0)
        assert response.model_served == "claude-opus-4-1-20250805"
        assert visible(events) == "Let me look that up in the notes.\n\n"


def test_recorded_thinking_at_every_byte_split() -> None:
    payload = fixture("anthropic_xml_thinking.sse")
    for chunks in splits(payload, every=1):
        events = translate(xml_translator(), chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        assert end.response.content == [
            ThinkingBlock("Which memories matter? The second meeting."),
            TextBlock("They met twice: in M\u00e4rz and in May."),
        ]
        assert end.response.stop == StopInfo("stop_sequence", "stop_sequence", "\nUser:")
        assert visible(events) == "They met twice: in M\u00e4rz and in May."


def test_recorded_prefixed_call_ends_the_reply_at_its_written_close() -> None:
    payload = fixture("anthropic_xml_prefixed_call.sse")
    for chunks in splits(payload, every=7):
        translator = xml_translator()
        events = translate(translator, chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        assert end.response.content == [
            TextBlock("Checking.\n"),
            ToolUseBlock("toolu_xml_1", "get_weather", {"city": "Oslo"}),
        ]
        assert end.response.stop.reason == "tool_use"
        assert end.response.stop.sequence == f"</{PREFIX}function_calls>"
        assert translator.cut_short  # the driver closes the connection, not drains it
        assert "sunny" not in visible(events)


def whole_body(payload: bytes) -> dict[str, Any]:
    """The whole (non-streamed) reply that carries the same text as a recorded stream."""
    text, start, delta = "", {}, {}
    for line in payload.decode().splitlines():
        if not line.startswith("data: "):
            continue
        data = json.loads(line[6:])
        if data["type"] == "content_block_delta":
            text += data["delta"]["text"]
        elif data["type"] == "message_start":
            start = data["message"]
        elif data["type"] == "message_delta":
            delta = data
    return {
        **start,
        "content": [{"type": "text", "text": text}],
        "stop_reason": delta["delta"]["stop_reason"],
        "stop_sequence": delta["delta"]["stop_sequence"],
        "usage": {**start["usage"], **delta["usage"]},
    }


def test_streamed_and_whole_give_the_same_reply() -> None:
    for name in (
        "anthropic_xml_tool_call.sse",
        "anthropic_xml_thinking.sse",
        "anthropic_xml_prefixed_call.sse",
    ):
        payload = fixture(name)
        streamed = terminal(translate(xml_translator(), [payload]))
        assert isinstance(streamed, Complete)
        whole = xml_translator().reply(whole_body(payload))
        assert whole.content == streamed.response.content, name
        assert whole.stop == streamed.response.stop, name
