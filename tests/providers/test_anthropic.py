"""The Anthropic wire: its translator on SSE bytes split at awkward boundaries (no HTTP),
and its calls over HTTP against the loopback server (raw bodies played verbatim)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
from providers_support import (
    FACE,
    KEY,
    KEY_ENV,
    SNOWMAN,
    awkward_cuts,
    collect,
    create_provider,
    invisible,
    raw,
    request,
    splits,
    sse,
    terminal,
    translate,
    visible,
)

from agentcore.inference import (
    BlockStart,
    BlockStop,
    Complete,
    Failed,
    InferenceError,
    Message,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    UsageUpdate,
)
from agentcore.log import redact
from agentcore.providers.anthropic import AnthropicProvider, AnthropicTranslator
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.testing import LoopbackServer, Scenario


@pytest.fixture
async def provider(
    monkeypatch: pytest.MonkeyPatch, loopback_provider: LoopbackServer
) -> AsyncIterator[AnthropicProvider]:
    monkeypatch.setenv(KEY_ENV, KEY)
    base = loopback_provider.base_url("anthropic")
    config = ProviderSettings(kind="anthropic", base_url=base, api_key_env=KEY_ENV)
    made = create_provider("anth", config, InferenceSettings())
    assert isinstance(made, AnthropicProvider)
    yield made
    await made.aclose()


def translator(**inference: str) -> AnthropicTranslator:
    return AnthropicTranslator("anth", "m", **inference)


def play(chunks: list[bytes], **inference: str) -> list[StreamEvent]:
    return translate(translator(**inference), chunks)


def message_start(model: str = "claude-served-1") -> tuple[str, object]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 25,
                    "output_tokens": 1,
                    "cache_read_input_tokens": 7,
                    "cache_creation_input_tokens": 3,
                },
            },
        },
    )


def block_start(index: int, block: dict[str, object]) -> tuple[str, object]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def delta(index: int, body: dict[str, object]) -> tuple[str, object]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": body})


def text_delta(index: int, text: str) -> tuple[str, object]:
    return delta(index, {"type": "text_delta", "text": text})


def block_stop(index: int) -> tuple[str, object]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(
    stop: str, sequence: str | None = None, output: int = 9
) -> list[tuple[str, object]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": sequence},
                "usage": {"output_tokens": output},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


PING = ("ping", {"type": "ping"})
TEXT = f"Hello, w\u00f6rld {SNOWMAN}{FACE}!"


def text_stream(stop: str = "end_turn", sequence: str | None = None, eol: str = "\n") -> bytes:
    return sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        PING,
        text_delta(0, "Hello, w\u00f6rld "),
        text_delta(0, f"{SNOWMAN}{FACE}"),
        text_delta(0, "!"),
        block_stop(0),
        *message_end(stop, sequence),
        eol=eol,
    )


def test_text_stream_at_every_split() -> None:
    payload = text_stream()
    for chunks in splits(payload, every=7):
        events = play(chunks)
        end = terminal(events)
        assert isinstance(end, Complete), (chunks, events)
        assert visible(events) == TEXT
        response = end.response
        assert response.content == [TextBlock(TEXT)]
        assert (response.stop.reason, response.stop.raw) == ("end_turn", "end_turn")
        assert (response.model_requested, response.model_served) == ("m", "claude-served-1")
        usage = response.usage
        # Anthropic's 25 leaves out the 7 read from and the 3 written to the cache.
        assert (usage.input_tokens, usage.output_tokens) == (35, 9)
        assert (usage.cache_read_tokens, usage.cache_write_tokens) == (7, 3)


def test_awkward_boundaries() -> None:
    """Mid-line, mid-UTF-8 character, mid-event, between CR and LF."""
    for eol in ("\n", "\r\n", "\r"):
        payload = text_stream(eol=eol)
        markers = [SNOWMAN.encode(), FACE.encode(), b"event: content_block_delta"]
        cuts = awkward_cuts(payload, *markers, *([b"\r\n"] if eol == "\r\n" else []))
        for cut in cuts:
            events = play([payload[:cut], payload[cut:]])
            end = terminal(events)
            assert isinstance(end, Complete), (eol, cut, events)
            assert end.response.text == TEXT


def test_event_order_and_shapes() -> None:
    events = play([text_stream()])
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "UsageUpdate",
        "BlockStart",
        "Token",
        "Token",
        "Token",
        "BlockStop",
        "UsageUpdate",
        "Complete",
    ]
    assert events[1] == BlockStart(0, "text")
    assert events[2] == Token("Hello, w\u00f6rld ", "text", 0, True)
    assert events[5] == BlockStop(0, TextBlock(TEXT))
    first_usage = events[0]
    assert isinstance(first_usage, UsageUpdate) and first_usage.usage.output_tokens == 1


async def test_request_wire_format_and_headers(
    provider: AnthropicProvider, loopback_provider: LoopbackServer
) -> None:
    server = loopback_provider
    req = request(
        "What's the weather?",
        system="Be brief.",
        max_tokens=77,
        temperature=0.2,
        stop_sequences=["END"],
        tools=[Tool("get_weather", "Look it up", {"type": "object"})],
        extras={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )
    req.messages += [
        Message(
            "assistant",
            [
                ThinkingBlock("hmm", "sig"),
                ThinkingBlock("", redacted="EmwKAhgBEgy3va3pzix"),
                ThinkingBlock("never signed"),  # the API would refuse it: not sent
                ToolUseBlock("t1", "get_weather", {"c": 1}),
            ],
        ),
        Message("user", [ToolResultBlock("t1", "sunny")]),
    ]
    raw(server, text_stream())
    assert isinstance(terminal(await collect(provider, req)), Complete)
    sent = server.calls[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    body = sent.body
    assert body["model"] == "m" and body["stream"] is True
    assert body["max_tokens"] == 77 and body["temperature"] == 0.2
    assert body["system"] == "Be brief." and body["stop_sequences"] == ["END"]
    assert body["tools"] == [
        {"name": "get_weather", "description": "Look it up", "input_schema": {"type": "object"}}
    ]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What's the weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"c": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "sunny", "is_error": False}
            ],
        },
    ]


def test_key_is_registered_as_a_secret(provider: AnthropicProvider) -> None:
    assert KEY not in redact(f"x-api-key: {KEY} and again {KEY}")


def test_missing_key_is_an_auth_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    config = ProviderSettings(kind="anthropic", api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(InferenceError) as info:
        AnthropicProvider("anth", config, InferenceSettings())
    assert info.value.kind == "auth" and "NO_SUCH_KEY_VAR" in info.value.message


@pytest.mark.parametrize(
    ("stop", "reason"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("tool_use", "tool_use"),
        ("pause_turn", "pause_turn"),
        ("refusal", "refusal"),
        ("model_context_window_exceeded", "max_tokens"),
    ],
)
def test_stop_reasons(stop: str, reason: str) -> None:
    sequence = "END" if stop == "stop_sequence" else None
    end = terminal(play([text_stream(stop, sequence)]))
    assert isinstance(end, Complete)
    assert (end.response.stop.reason, end.response.stop.raw) == (reason, stop)
    assert end.response.stop.sequence == sequence


def test_unknown_stop_is_an_error_by_default() -> None:
    end = terminal(play([text_stream("brand_new_reason")]))
    assert isinstance(end, Failed)
    assert end.error.message == (
        "The provider ended the inference with stop token 'brand_new_reason', "
        "which agentcore has no stop reason for"
    )


def test_unknown_stop_as_end_turn_is_marked_unmapped() -> None:
    end = terminal(play([text_stream("brand_new_reason")], unknown_stop="end_turn"))
    assert isinstance(end, Complete)
    stop = end.response.stop
    assert (stop.reason, stop.raw, stop.mapped) == ("end_turn", "brand_new_reason", False)


def tool_stream(cut: bool) -> bytes:
    arguments = '{"city": "Os', 'lo", "unit": "c"}'
    events = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        text_delta(0, "Checking."),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": ""}),
        delta(1, {"type": "input_json_delta", "partial_json": arguments[0]}),
    ]
    if not cut:
        events += [
            delta(1, {"type": "input_json_delta", "partial_json": arguments[1]}),
            block_stop(1),
        ]
    events += message_end("max_tokens" if cut else "tool_use")
    return sse(*events)


def test_tool_use() -> None:
    payload = tool_stream(cut=False)
    for chunks in splits(payload, every=11):
        events = play(chunks)
        end = terminal(events)
        assert isinstance(end, Complete)
        assert end.response.stop.reason == "tool_use"
        assert end.response.content == [
            TextBlock("Checking."),
            ToolUseBlock("toolu_1", "get_weather", {"city": "Oslo", "unit": "c"}),
        ]
        assert invisible(events, "tool_use") == '{"city": "Oslo", "unit": "c"}'
        assert visible(events) == "Checking."
        assert BlockStart(1, "tool_use", "get_weather", "toolu_1") in events


def test_tool_use_cut_at_max_tokens() -> None:
    events = play([tool_stream(cut=True)])
    end = terminal(events)
    assert isinstance(end, Complete)
    assert end.response.stop.reason == "max_tokens"
    assert end.response.tool_calls == [ToolUseBlock("toolu_1", "get_weather", {})]
    # The unclosed block is closed before the terminal, so starts and stops pair up.
    assert sum(isinstance(e, BlockStart) for e in events) == sum(
        isinstance(e, BlockStop) for e in events
    )


def test_thinking_before_text() -> None:
    payload = sse(
        message_start(),
        block_start(0, {"type": "thinking", "thinking": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
        delta(0, {"type": "thinking_delta", "thinking": "think."}),
        delta(0, {"type": "signature_delta", "signature": "EqQBCgYIAR"}),
        block_stop(0),
        block_start(1, {"type": "redacted_thinking", "data": "xyz"}),
        block_stop(1),
        block_start(2, {"type": "text", "text": ""}),
        text_delta(2, "42"),
        block_stop(2),
        *message_end("end_turn"),
    )
    events = play([payload])
    end = terminal(events)
    assert isinstance(end, Complete)
    # The redacted block is kept whole (its data), to go back as it came in a tool loop.
    assert end.response.content == [
        ThinkingBlock("Let me think.", "EqQBCgYIAR"),
        ThinkingBlock("", redacted="xyz"),
        TextBlock("42"),
    ]
    assert invisible(events, "thinking") == "Let me think."
    assert visible(events) == "42"
    assert all(e.block == "thinking" for e in events if isinstance(e, Token) and not e.visible)


@pytest.mark.parametrize(
    ("etype", "kind", "retryable"),
    [
        ("overloaded_error", "overloaded", True),
        ("rate_limit_error", "rate_limit", True),
        ("api_error", "server", True),
        ("invalid_request_error", "invalid_request", False),
        ("authentication_error", "auth", False),
    ],
)
def test_error_event_mid_stream(etype: str, kind: str, retryable: bool) -> None:
    payload = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        text_delta(0, "Part"),
        ("error", {"type": "error", "error": {"type": etype, "message": "Boom"}}),
    )
    events = play([payload])
    end = terminal(events)
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.retryable, end.error.code) == (kind, retryable, etype)
    assert end.error.message == "The provider reported an error mid-stream: Boom"
    assert visible(events) == "Part"


async def test_stream_ending_without_message_stop(
    provider: AnthropicProvider, loopback_provider: LoopbackServer
) -> None:
    payload = sse(
        message_start(), block_start(0, {"type": "text", "text": ""}), text_delta(0, "Hi")
    )
    raw(loopback_provider, payload)  # a body that just ends, over HTTP and with no HTTP
    for end in (terminal(await collect(provider)), terminal(play([payload]))):
        assert isinstance(end, Failed)
        assert (end.error.kind, end.error.code) == ("network", "no_terminal")


async def test_stream_broken_mid_way(
    provider: AnthropicProvider, loopback_provider: LoopbackServer
) -> None:
    loopback_provider.script(Scenario.cut("Hi "))
    events = await collect(provider)
    end = terminal(events)
    assert isinstance(end, Failed) and end.error.kind == "network"
    assert "broke mid-reply" in end.error.message
    assert visible(events) == "Hi "
    await loopback_provider.wait_idle()  # the cut connection is closed, not pooled


def test_non_json_event_fails_typed() -> None:
    payload = sse(message_start(), ("content_block_delta", "{not json"))
    end = terminal(play([payload]))
    assert isinstance(end, Failed) and end.error.kind == "server"


async def test_leaving_early_closes_the_response(
    provider: AnthropicProvider, loopback_provider: LoopbackServer
) -> None:
    loopback_provider.script(Scenario.stall("Hi ", keepalive_s=0.02))
    async with aclosing(provider.stream(request(), "m")) as events:
        async for event in events:
            if isinstance(event, Token):
                break
    await loopback_provider.wait_idle()  # the server saw the client go, with its connection
    assert loopback_provider.calls[-1].disconnected


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "wait"),
    [
        (
            429,
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
            {"retry-after": "3"},
            "rate_limit",
            3.0,
        ),
        (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            {},
            "overloaded",
            None,
        ),
        (
            500,
            {"type": "error", "error": {"type": "api_error", "message": "oops"}},
            {},
            "server",
            None,
        ),
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
            {},
            "invalid_request",
            None,
        ),
        (
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "no"}},
            {},
            "auth",
            None,
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 300000 tokens > 200000 maximum",
                },
            },
            {},
            "context_length",
            None,
        ),
    ],
)
async def test_http_errors_streamed_and_whole(
    provider: AnthropicProvider,
    loopback_provider: LoopbackServer,
    status: int,
    body: object,
    headers: dict[str, str],
    kind: str,
    wait: float | None,
) -> None:
    for _ in range(2):
        loopback_provider.script(Scenario.http_error(status, body=body, headers=headers))
    end = terminal(await collect(provider))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert isinstance(end, Failed)
    for error in (end.error, info.value):
        assert (error.kind, error.status, error.retry_after_s) == (kind, status, wait)


async def test_whole_reply(provider: AnthropicProvider, loopback_provider: LoopbackServer) -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-served-2",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 4},
    }
    loopback_provider.script(Scenario.http_error(200, body=body))
    response = await provider.complete(request(), "m")
    assert loopback_provider.calls[-1].body["stream"] is False
    assert response.content == [
        ThinkingBlock("hmm", "s"),
        ThinkingBlock("", redacted="EmwKAhgB"),
        TextBlock("Let me look."),
        ToolUseBlock("toolu_9", "get_weather", {"city": "Oslo"}),
    ]
    assert response.stop.reason == "tool_use"
    assert (response.model_requested, response.model_served) == ("m", "claude-served-2")
    # The total: Anthropic's 10 uncached and the 4 read from the cache.
    assert (response.usage.input_tokens, response.usage.output_tokens) == (14, 20)
    assert response.usage.cache_read_tokens == 4


async def test_whole_network_failure_is_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with LoopbackServer() as gone:
        base = gone.url
    config = ProviderSettings(kind="anthropic", base_url=base, api_key_env=KEY_ENV)
    refused = AnthropicProvider("anth", config, InferenceSettings())  # its port refuses now
    try:
        with pytest.raises(InferenceError) as info:
            await refused.complete(request(), "m")
        end = terminal(await collect(refused))
    finally:
        await refused.aclose()
    assert info.value.kind == "network"
    assert "Could not connect" in info.value.message
    assert isinstance(end, Failed) and end.error.kind == "network"


async def test_json_body_where_a_stream_was_asked(
    provider: AnthropicProvider, loopback_provider: LoopbackServer
) -> None:
    body = {
        "type": "message",
        "model": "claude-x",
        "content": [{"type": "text", "text": "whole"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    loopback_provider.script(Scenario.http_error(200, body=body))
    events = await collect(provider)
    end = terminal(events)
    assert isinstance(end, Complete) and end.response.text == "whole"
    assert visible(events) == "whole"


async def test_a_subclass_that_overrides_stream_is_what_an_attempt_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's attempt takes the driver's `watched_stream` (the watch applied inline)
    only when `stream` is the driver's own: a subclass's override still runs."""
    import asyncio

    from agentcore.inference.calls import Attempt, Inference
    from agentcore.provider_calls import ProviderCalls

    monkeypatch.setenv(KEY_ENV, KEY)
    config = ProviderSettings(kind="anthropic", api_key_env=KEY_ENV)

    class Tagged(AnthropicProvider):
        async def stream(self, request: Any, model: str) -> AsyncIterator[StreamEvent]:  # type: ignore[override]
            yield Failed(InferenceError("server", "the override ran"))

    plain, tagged = (
        AnthropicProvider("a", config, InferenceSettings()),
        Tagged("t", config, InferenceSettings()),
    )
    assert plain.stream_is_watched() and not tagged.stream_is_watched()
    calls = ProviderCalls(InferenceSettings(), asyncio.Event())
    attempt = Attempt(Inference("inf_1", request(), "t", "m", True), 1)
    async with aclosing(calls.stream(tagged, attempt)) as events:
        got = [event async for event in events]
    assert len(got) == 1 and isinstance(got[0], Failed)
    assert got[0].error.message == "the override ran"
