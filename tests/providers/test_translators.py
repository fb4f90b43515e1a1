"""Wire translators on recorded SSE bodies (``fixtures/*.sse``), with no HTTP at all."""

from __future__ import annotations

from providers_support import fixture, splits, terminal, translate, visible

from agentcore.inference import (
    BlockStart,
    BlockStop,
    Complete,
    Failed,
    InferenceError,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolUseBlock,
    Usage,
)
from agentcore.providers.anthropic import AnthropicTranslator
from agentcore.providers.errors import MID_STREAM
from agentcore.providers.openai import OpenAITranslator


def anthropic() -> AnthropicTranslator:
    return AnthropicTranslator("anth", "claude-x")


def test_anthropic_tool_use_recorded_at_every_split() -> None:
    payload = fixture("anthropic_tool_use.sse")
    for chunks in splits(payload, every=53):
        events = translate(anthropic(), chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        response = end.response
        assert response.content == [
            ThinkingBlock(
                "The user wants the weather; I should call the tool.",
                "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
            ),
            TextBlock("Okay, let me check the weather in Z\u00fcrich."),
            ToolUseBlock(
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "get_weather",
                {"location": "Z\u00fcrich", "unit": "celsius"},
            ),
        ]
        assert (response.stop.reason, response.stop.raw) == ("tool_use", "tool_use")
        assert response.model_served == "claude-sonnet-4-5-20250929"
        assert response.usage == Usage(600, 89, cache_read_tokens=128, cache_write_tokens=0)
        assert visible(events) == "Okay, let me check the weather in Z\u00fcrich."
        assert BlockStart(2, "tool_use", "get_weather", "toolu_01T1x1fJ34qAmk2tNTrN7Up6") in events
        stops = [e.index for e in events if isinstance(e, BlockStop)]
        assert stops == [0, 1, 2]
        assert all(e.visible == (e.block == "text") for e in events if isinstance(e, Token))


def test_anthropic_error_event_recorded() -> None:
    events = translate(anthropic(), [fixture("anthropic_overloaded.sse")])
    end = terminal(events)
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.code, end.error.retryable) == (
        "overloaded",
        "overloaded_error",
        True,
    )
    assert end.error.message == MID_STREAM + "Overloaded"
    assert visible(events) == "Partial"


def test_anthropic_body_that_ends_early_is_no_terminal() -> None:
    payload = fixture("anthropic_tool_use.sse")
    cut = payload[: payload.index(b"event: message_delta")]
    end = terminal(translate(anthropic(), [cut]))
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.code) == ("network", "no_terminal")


def test_anthropic_only_message_stop_lost_is_still_whole() -> None:
    payload = fixture("anthropic_tool_use.sse")
    cut = payload[: payload.index(b"event: message_stop")]
    end = terminal(translate(anthropic(), [cut]))
    assert isinstance(end, Complete) and end.response.stop.reason == "tool_use"


def openai(stops: tuple[str, ...] = ()) -> OpenAITranslator:
    return OpenAITranslator("oa", "gpt-x", stop_sequences=stops)


def test_openai_tool_calls_recorded_at_every_split() -> None:
    payload = fixture("openai_tool_calls.sse")
    for chunks in splits(payload, every=97):
        events = translate(openai(), chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        response = end.response
        assert response.content == [
            TextBlock("Let me check Z\u00fcrich and Oslo."),
            ToolUseBlock("call_zurich", "get_weather", {"location": "Z\u00fcrich"}),
            ToolUseBlock("call_oslo", "get_weather", {"location": "Oslo"}),
        ]
        assert (response.stop.reason, response.stop.raw) == ("tool_use", "tool_calls")
        assert response.model_served == "gpt-4o-2024-08-06"
        assert response.usage == Usage(82, 47, cache_read_tokens=64)
        assert visible(events) == "Let me check Z\u00fcrich and Oslo."
        starts = [e for e in events if isinstance(e, BlockStart)]
        assert starts == [
            BlockStart(0, "text"),
            BlockStart(1, "tool_use", "get_weather", "call_zurich"),
            BlockStart(2, "tool_use", "get_weather", "call_oslo"),
        ]
        assert [e.index for e in events if isinstance(e, BlockStop)] == [0, 1, 2]


def test_openrouter_error_inside_a_200_recorded() -> None:
    events = translate(openai(), [fixture("openrouter_error_mid_stream.sse")])
    end = terminal(events)
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.retryable) == ("server", True)
    assert end.error.message == MID_STREAM + "Provider disconnected unexpectedly"
    assert visible(events) == "Partial"
    thinking = [e for e in events if isinstance(e, Token) and e.block == "thinking"]
    assert [e.text for e in thinking] == ["Thinking it "] and not thinking[0].visible


def test_openai_usage_chunk_lost_after_the_finish_is_still_whole() -> None:
    payload = fixture("openai_tool_calls.sse")
    cut = payload[: payload.rindex(b"data: {")]  # up to the usage chunk
    broken = InferenceError("network", "The connection to the provider broke mid-reply")
    end = terminal(translate(openai(), [cut], cut=broken))
    assert isinstance(end, Complete) and end.response.stop.reason == "tool_use"


def test_a_cut_before_the_finish_fails_with_the_transport_error() -> None:
    payload = fixture("openai_tool_calls.sse")
    cut = payload[: payload.index(b": OPENROUTER")]
    broken = InferenceError("network", "The connection to the provider broke mid-reply")
    events = translate(openai(), [cut], cut=broken)
    end = terminal(events)
    assert isinstance(end, Failed) and end.error is broken
    assert visible(events) == "Let me check Z\u00fcrich and Oslo."


def test_feeding_after_the_end_adds_nothing() -> None:
    translator = openai()
    events = translate(translator, [fixture("openai_tool_calls.sse")])
    assert isinstance(terminal(events), Complete)
    assert translator.feed([("message", '{"choices": []}', None)]) == []
