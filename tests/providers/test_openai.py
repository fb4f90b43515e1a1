"""The chat-completions wire (openai, openrouter, openai-compatible): its translator on SSE
bytes (no HTTP), and its calls over HTTP against the loopback server (raw bodies)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
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
    Request,
    StopInfo,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.inference.outcome import completion_problem
from agentcore.log import redact
from agentcore.providers.openai import FINISH_ERROR, OpenAIProvider, OpenAITranslator
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.testing import LoopbackServer, Scenario

Make = Callable[..., OpenAIProvider]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
async def make(loopback_provider: LoopbackServer) -> AsyncIterator[Make]:
    """Providers pointed at the loopback server, closed after the test."""
    made: list[OpenAIProvider] = []

    def factory(kind: str = "openai", *, key: bool = True, **inference: Any) -> OpenAIProvider:
        base = loopback_provider.base_url("openai")
        env = KEY_ENV if key else None
        config = ProviderSettings(kind=kind, base_url=base, api_key_env=env)
        provider = create_provider("oa", config, InferenceSettings(**inference))
        assert isinstance(provider, OpenAIProvider)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


@pytest.fixture
def provider(make: Make) -> OpenAIProvider:
    return make()


def play(chunks: list[bytes], req: Request | None = None, **inference: Any) -> list[StreamEvent]:
    stops = (req or request()).stop_sequences
    return translate(OpenAITranslator("oa", "m", stop_sequences=stops, **inference), chunks)


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> tuple[None, dict[str, Any]]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    choice.update(extra.pop("choice", {}))
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-served-1",
        "choices": [choice],
    }
    body.update(extra)
    return (None, body)


USAGE = (
    None,
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-served-1",
        "choices": [],
        "usage": {
            "prompt_tokens": 21,
            "completion_tokens": 5,
            "total_tokens": 26,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
    },
)
DONE = (None, "[DONE]")
TEXT = f"Hello, w\u00f6rld {SNOWMAN}{FACE}!"


def text_stream(finish: str = "stop", eol: str = "\n", **choice: Any) -> bytes:
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello, w\u00f6rld "}),
        chunk({"content": f"{SNOWMAN}{FACE}"}),
        chunk({"content": "!"}),
        chunk({}, finish, choice=choice),
        USAGE,
        DONE,
        eol=eol,
    )
    # An OpenRouter keep-alive comment in the middle.
    return body.replace(b"data: {", b": OPENROUTER PROCESSING" + eol.encode() * 2 + b"data: {", 1)


def test_text_stream_at_every_split() -> None:
    payload = text_stream()
    if True:
        for chunks in splits(payload, every=7):
            events = play(chunks)
            end = terminal(events)
            assert isinstance(end, Complete), (chunks, events)
            assert visible(events) == TEXT
            response = end.response
            assert response.content == [TextBlock(TEXT)]
            assert (response.stop.reason, response.stop.raw) == ("end_turn", "stop")
            assert (response.model_requested, response.model_served) == ("m", "gpt-served-1")
            assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 5)
            assert response.usage.cache_read_tokens == 8


def test_awkward_boundaries() -> None:
    for eol in ("\n", "\r\n", "\r"):
        payload = text_stream(eol=eol)
        markers = [SNOWMAN.encode(), FACE.encode(), b": OPENROUTER", b"[DONE]"]
        cuts = awkward_cuts(payload, *markers, *([b"\r\n"] if eol == "\r\n" else []))
        if True:
            for cut in cuts:
                end = terminal(play([payload[:cut], payload[cut:]]))
                assert isinstance(end, Complete), (eol, cut)
                assert end.response.text == TEXT


def test_events_in_order() -> None:
    events = play([text_stream()])
    assert [type(e).__name__ for e in events] == [
        "BlockStart",
        "Token",
        "Token",
        "Token",
        "UsageUpdate",
        "BlockStop",
        "Complete",
    ]
    assert events[0] == BlockStart(0, "text")
    assert events[1] == Token("Hello, w\u00f6rld ", "text", 0, True)


@pytest.mark.parametrize(
    ("kind", "limit_field"),
    [
        ("openai", "max_completion_tokens"),
        ("openrouter", "max_tokens"),
        ("openai-compatible", "max_tokens"),
    ],
)
async def test_request_wire_format(
    make: Make, loopback_provider: LoopbackServer, kind: str, limit_field: str
) -> None:
    provider = make(kind)
    req = request(
        "Weather?",
        system="Be brief.",
        max_tokens=55,
        temperature=0.5,
        stop_sequences=["END"],
        tools=[Tool("get_weather", "Look it up", {"type": "object"})],
        extras={"top_p": 0.9},
    )
    req.messages += [
        Message(
            "assistant",
            [
                ThinkingBlock("hmm"),
                TextBlock("Checking."),
                ToolUseBlock("c1", "get_weather", {"c": 1}),
            ],
        ),
        Message("user", [ToolResultBlock("c1", "sunny"), TextBlock("Thanks")]),
    ]
    raw(loopback_provider, text_stream())
    assert isinstance(terminal(await collect(provider, req)), Complete)
    sent = loopback_provider.calls[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body[limit_field] == 55
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["stop"] == ["END"] and body["temperature"] == 0.5 and body["top_p"] == 0.9
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Look it up",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"c": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
    ]


async def test_compatible_without_key_sends_no_authorization(
    monkeypatch: pytest.MonkeyPatch, make: Make, loopback_provider: LoopbackServer
) -> None:
    monkeypatch.delenv(KEY_ENV)
    provider = make("openai-compatible", key=False)
    raw(loopback_provider, text_stream())
    assert isinstance(terminal(await collect(provider)), Complete)
    assert "authorization" not in loopback_provider.calls[-1].headers


def test_compatible_needs_a_base_url() -> None:
    config = ProviderSettings(kind="openai-compatible")
    with pytest.raises(InferenceError) as info:
        create_provider("local", config, InferenceSettings())
    assert info.value.kind == "invalid_request" and "base_url" in info.value.message


def test_openai_needs_a_key(monkeypatch: pytest.MonkeyPatch, make: Make) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(InferenceError) as info:
        make("openai")
    assert info.value.kind == "auth" and KEY_ENV in info.value.message


def test_key_is_registered_as_a_secret(provider: OpenAIProvider) -> None:
    assert KEY not in redact(f"token {KEY}")


@pytest.mark.parametrize(
    ("finish", "choice", "reason", "sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("length", {}, "max_tokens", None),
        ("tool_calls", {}, "tool_use", None),
        ("function_call", {}, "tool_use", None),
        ("content_filter", {}, "refusal", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the sequence
        ("stop", {"stop_reason": 128009}, "end_turn", None),  # ... or the token id
        ("stop", {"native_finish_reason": "stop_sequence"}, "stop_sequence", None),  # OpenRouter
    ],
)
def test_finish_reasons(
    finish: str, choice: dict[str, Any], reason: str, sequence: str | None
) -> None:
    end = terminal(play([text_stream(finish, **choice)], request(stop_sequences=["END"])))
    assert isinstance(end, Complete)
    assert (end.response.stop.reason, end.response.stop.raw) == (reason, finish)
    assert end.response.stop.sequence == sequence


def test_unknown_finish_is_an_error_by_default() -> None:
    end = terminal(play([text_stream("eos_weird")]))
    assert isinstance(end, Failed)
    assert end.error.message == (
        "The provider ended the inference with stop token 'eos_weird', "
        "which agentcore has no stop reason for"
    )


def test_unknown_finish_as_end_turn_is_marked_unmapped() -> None:
    end = terminal(play([text_stream("eos_weird")], unknown_stop="end_turn"))
    assert isinstance(end, Complete)
    stop = end.response.stop
    assert (stop.reason, stop.raw, stop.mapped) == ("end_turn", "eos_weird", False)


def test_refusal_delta() -> None:
    payload = sse(chunk({"role": "assistant", "refusal": "I can't."}), chunk({}, "stop"), DONE)
    end = terminal(play([payload]))
    assert isinstance(end, Complete)
    assert (end.response.stop.reason, end.response.text) == ("refusal", "I can't.")


def tool_stream(cut: bool) -> bytes:
    first = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    second = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "get_time", "arguments": ""},
    }
    events = [
        chunk({"role": "assistant", "content": "Checking."}),
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"tz": "UTC"}'}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "function": {"arguments": '"Oslo"}' if not cut else '"Os'}}
                ]
            }
        ),
        chunk({}, "length" if cut else "tool_calls"),
        USAGE,
        DONE,
    ]
    return sse(*events)


def test_tool_calls_accumulate_by_index() -> None:
    payload = tool_stream(cut=False)
    if True:
        for chunks in splits(payload, every=13):
            events = play(chunks)
            end = terminal(events)
            assert isinstance(end, Complete)
            assert end.response.stop.reason == "tool_use"
            assert end.response.content == [
                TextBlock("Checking."),
                ToolUseBlock("call_a", "get_weather", {"city": "Oslo"}),
                ToolUseBlock("call_b", "get_time", {"tz": "UTC"}),
            ]
            assert visible(events) == "Checking."
            assert invisible(events, "tool_use") == '{"city": {"tz": "UTC"}"Oslo"}'
            starts = [e for e in events if isinstance(e, BlockStart)]
            assert starts == [
                BlockStart(0, "text"),
                BlockStart(1, "tool_use", "get_weather", "call_a"),
                BlockStart(2, "tool_use", "get_time", "call_b"),
            ]
            assert len([e for e in events if isinstance(e, BlockStop)]) == 3


def test_tool_call_cut_at_max_tokens() -> None:
    end = terminal(play([tool_stream(cut=True)]))
    assert isinstance(end, Complete)
    assert end.response.stop.reason == "max_tokens"
    assert end.response.tool_calls == [
        ToolUseBlock("call_a", "get_weather", {}),
        ToolUseBlock("call_b", "get_time", {"tz": "UTC"}),
    ]


def test_every_call_numbered_zero_is_still_two_calls() -> None:
    a = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{}"}}
    b = {"index": 0, "id": "call_b", "function": {"name": "g", "arguments": '{"x": 1}'}}
    payload = sse(
        chunk({"tool_calls": [a]}), chunk({"tool_calls": [b]}), chunk({}, "tool_calls"), DONE
    )
    end = terminal(play([payload]))
    assert isinstance(end, Complete)
    assert end.response.tool_calls == [
        ToolUseBlock("call_a", "f", {}),
        ToolUseBlock("call_b", "g", {"x": 1}),
    ]


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_is_invisible_thinking(field: str) -> None:
    payload = sse(
        chunk({"role": "assistant", field: "Let me "}),
        chunk({field: "think.", "content": None}),
        chunk({"content": "42", field: None}),
        chunk({}, "stop"),
        DONE,
    )
    events = play([payload])
    end = terminal(events)
    assert isinstance(end, Complete)
    assert end.response.content == [ThinkingBlock("Let me think."), TextBlock("42")]
    assert invisible(events, "thinking") == "Let me think."
    assert visible(events) == "42"


def test_error_frame_inside_a_200() -> None:
    payload = sse(
        chunk({"role": "assistant", "content": "Part"}),
        chunk(
            {"content": ""},
            "error",
            error={"code": "server_error", "message": "Provider disconnected unexpectedly"},
        ),
    )
    events = play([payload])
    end = terminal(events)
    assert isinstance(end, Failed)
    assert end.error.kind == "server" and end.error.retryable
    assert end.error.message == (
        "The provider reported an error mid-stream: Provider disconnected unexpectedly"
    )
    assert visible(events) == "Part"


def test_error_frame_without_choices() -> None:
    payload = sse((None, {"error": {"message": "Rate limit exceeded", "code": 429}}))
    end = terminal(play([payload]))
    assert isinstance(end, Failed) and end.error.kind == "rate_limit"


def test_vllm_error_object_mid_stream() -> None:
    frame = {"object": "error", "message": "CUDA out of memory", "type": "InternalServerError"}
    payload = sse(chunk({"content": "Part"}), (None, {**frame, "code": 500}))
    end = terminal(play([payload]))
    assert isinstance(end, Failed)
    assert end.error.kind == "server"
    assert end.error.message == "The provider reported an error mid-stream: CUDA out of memory"


def test_bare_finish_reason_error() -> None:
    payload = sse(chunk({"content": "Part"}), chunk({}, "error"), DONE)
    end = terminal(play([payload]))
    assert isinstance(end, Failed)
    assert end.error.message == FINISH_ERROR
    assert FINISH_ERROR == "The provider ended the inference with an error (finish_reason 'error')"


async def test_openrouter_200_whose_body_is_only_an_error(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make("openrouter")
    body = {"error": {"code": 502, "message": "Provider returned error", "metadata": {"raw": "x"}}}
    loopback_provider.script(*[Scenario.http_error(200, body=body)] * 2)
    end = terminal(await collect(provider))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert isinstance(end, Failed)
    for error in (end.error, info.value):
        assert error.message == "Provider returned error"
        assert (error.kind, error.status) == ("server", 200)


def test_finish_without_done_is_complete() -> None:
    payload = sse(chunk({"content": "Hi"}), chunk({}, "stop"), USAGE)
    end = terminal(play([payload]))
    assert isinstance(end, Complete) and end.response.text == "Hi"


def test_done_without_trailing_blank_line() -> None:
    payload = sse(chunk({"content": "Hi"}), chunk({}, "stop")) + b"data: [DONE]"
    end = terminal(play([payload]))
    assert isinstance(end, Complete)


def test_stream_that_just_stops_is_no_terminal() -> None:
    payload = sse(chunk({"content": "Hi"}))
    end = terminal(play([payload]))
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.code) == ("network", "no_terminal")


@pytest.mark.parametrize("finish", [None, ""])  # null throughout, or Ollama's ""
def test_done_without_a_finish_reason_is_a_normal_end(finish: str | None) -> None:
    """A lax compatible server names no finish_reason, but its [DONE] says the reply is
    whole: ``end_turn`` (raw None), whatever ``unknown_stop`` says, as the SDKs read it."""
    payload = sse(chunk({"content": "Hi"}, finish), chunk({}, finish), DONE)
    for unknown_stop in ("error", "end_turn"):
        end = terminal(play([payload], unknown_stop=unknown_stop))
        assert isinstance(end, Complete), end
        assert end.response.text == "Hi"
        assert end.response.stop == StopInfo("end_turn")
        assert completion_problem(end.response) is None


def test_done_without_a_finish_reason_after_a_tool_call_is_tool_use() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}
    payload = sse(chunk({"tool_calls": [call]}), DONE)
    end = terminal(play([payload]))
    assert isinstance(end, Complete) and end.response.stop.reason == "tool_use"


def test_done_with_nothing_before_it_is_no_terminal() -> None:
    """No text, no finish_reason: the server said nothing, so there is no reply to keep."""
    payload = sse(chunk({"role": "assistant"}), DONE)
    end = terminal(play([payload]))
    assert isinstance(end, Failed) and end.error.code == "no_terminal"


def test_odd_shapes_fail_typed_not_crash() -> None:
    for payload in (
        sse((None, "[1, 2]")),
        sse((None, "not json")),
        sse((None, '{"choices": [7]}')),
    ):
        end = terminal(play([payload]))
        assert isinstance(end, Failed) and end.error.kind == "server", payload


async def test_leaving_early_closes_the_response(
    provider: OpenAIProvider, loopback_provider: LoopbackServer
) -> None:
    loopback_provider.script(Scenario.stall("Hi ", keepalive_s=0.02))
    async with aclosing(provider.stream(request(), "m")) as events:
        async for event in events:
            if isinstance(event, Token):
                break
    await loopback_provider.wait_idle()  # the server saw the client go, with its connection
    assert loopback_provider.calls[-1].disconnected


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "wait", "retryable"),
    [
        (
            429,
            {"error": {"message": "slow", "type": "requests", "code": "rate_limit_exceeded"}},
            {"retry-after-ms": "250"},
            "rate_limit",
            0.25,
            True,
        ),
        (
            429,
            {
                "error": {
                    "message": "You exceeded your current quota",
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                }
            },
            {},
            "quota",
            None,
            False,
        ),
        (500, {"error": {"message": "oops", "type": "server_error"}}, {}, "server", None, True),
        (
            503,
            {"error": {"message": "The engine is currently overloaded"}},
            {},
            "overloaded",
            None,
            True,
        ),
        (
            400,
            {"error": {"message": "bad", "type": "invalid_request_error"}},
            {},
            "invalid_request",
            None,
            False,
        ),
        (
            404,
            {"error": {"message": "no such model", "code": "model_not_found"}},
            {},
            "invalid_request",
            None,
            False,
        ),
        (
            401,
            {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}},
            {},
            "auth",
            None,
            False,
        ),
        (
            400,
            {"error": {"message": "too long", "code": "context_length_exceeded"}},
            {},
            "context_length",
            None,
            False,
        ),
        (
            402,
            {"error": {"code": 402, "message": "Insufficient credits"}},
            {},
            "quota",
            None,
            False,
        ),
    ],
)
async def test_http_errors_streamed_and_whole(
    provider: OpenAIProvider,
    loopback_provider: LoopbackServer,
    status: int,
    body: object,
    headers: dict[str, str],
    kind: str,
    wait: float | None,
    retryable: bool,
) -> None:
    loopback_provider.script(*[Scenario.http_error(status, body=body, headers=headers)] * 2)
    end = terminal(await collect(provider))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert isinstance(end, Failed)
    for error in (end.error, info.value):
        assert (error.kind, error.status, error.retry_after_s, error.retryable) == (
            kind,
            status,
            wait,
            retryable,
        )


async def test_whole_reply(make: Make, loopback_provider: LoopbackServer) -> None:
    provider = make("openrouter")
    body = {
        "id": "gen-1",
        "model": "anthropic/claude-served",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning": "hmm",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    loopback_provider.script(Scenario.http_error(200, body=body))
    response = await provider.complete(request(), "m")
    sent = loopback_provider.calls[-1].body
    assert sent["stream"] is False and "stream_options" not in sent
    assert response.content == [
        ThinkingBlock("hmm"),
        TextBlock("Let me look."),
        ToolUseBlock("call_1", "get_weather", {"city": "Oslo"}),
    ]
    assert (response.stop.reason, response.model_served) == ("tool_use", "anthropic/claude-served")
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 4)


async def test_whole_finish_reason_error(make: Make, loopback_provider: LoopbackServer) -> None:
    provider = make("openrouter")
    bare = {"choices": [{"index": 0, "finish_reason": "error", "message": {"content": "x"}}]}
    framed = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "error",
                "error": {"code": 502, "message": "upstream died"},
            }
        ]
    }
    loopback_provider.script(Scenario.http_error(200, body=bare))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert info.value.message == FINISH_ERROR
    loopback_provider.script(Scenario.http_error(200, body=framed))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert "upstream died" in info.value.message and info.value.kind == "server"


async def test_whole_reply_without_a_finish_reason(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make("openai-compatible")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    texts = {"index": 0, "finish_reason": None, "message": {"content": "Hi"}}
    calls = {"index": 0, "message": {"content": None, "tool_calls": [call]}}  # no key at all
    empty = {"index": 0, "finish_reason": "", "message": {"content": None}}
    for choice, stop in ((texts, "end_turn"), (calls, "tool_use")):
        loopback_provider.script(Scenario.http_error(200, body={"choices": [choice]}))
        response = await provider.complete(request(), "m")
        assert response.stop == StopInfo(stop)
    loopback_provider.script(Scenario.http_error(200, body={"choices": [empty]}))
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert info.value.code == "no_terminal"


async def test_whole_reply_that_is_not_json(
    provider: OpenAIProvider, loopback_provider: LoopbackServer
) -> None:
    raw(loopback_provider, b"<html>oops</html>", content_type="text/html")
    with pytest.raises(InferenceError) as info:
        await provider.complete(request(), "m")
    assert info.value.kind == "server"


def test_usage_reads_cached_tokens_and_deepseeks_cache_hits() -> None:
    from agentcore.inference import Usage
    from agentcore.providers.openai import _usage

    usage = _usage(
        {
            "prompt_tokens": 10,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 2},
        },
        Usage(),
    )
    assert usage == Usage(10, 4, cache_read_tokens=6, cache_write_tokens=2)
    deepseek = _usage({"prompt_tokens": 10, "prompt_cache_hit_tokens": 7}, Usage())
    assert deepseek.cache_read_tokens == 7
    assert _usage({"prompt_tokens": "10", "prompt_tokens_details": None}, Usage()) == Usage()
