"""The openai-responses and gemini translators on SSE bodies in each API's documented shape
(``fixtures/*.sse``), with no HTTP at all; and the request bodies they build."""

from __future__ import annotations

import json
from typing import Any

import pytest
from providers_support import fixture, splits, sse, terminal, translate, visible

from agentcore.inference import (
    BlockStop,
    Complete,
    Failed,
    InferenceError,
    MediaBlock,
    Message,
    Request,
    TextBlock,
    ThinkingBlock,
    Token,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from agentcore.providers.anthropic import request_body as anthropic_body
from agentcore.providers.errors import MID_STREAM, error_from_response
from agentcore.providers.gemini import GeminiTranslator
from agentcore.providers.gemini import request_body as gemini_body
from agentcore.providers.openai import request_body as openai_body
from agentcore.providers.responses import ResponsesTranslator
from agentcore.providers.responses import request_body as responses_body
from agentcore.providers.xml_transcript import Participants, format_request

CONVERSATION = [
    Message.user("Weather in Z\u00fcrich?"),
    Message(
        "assistant",
        [TextBlock("Checking."), ToolUseBlock("call_1", "get_weather", {"city": "Z\u00fcrich"})],
    ),
    Message("user", [ToolResultBlock("call_1", "12 \u00b0C, rain")]),
]
TOOL = Tool("get_weather", "Current weather", {"type": "object", "properties": {}})


def responses(unknown_stop: str = "end_turn") -> ResponsesTranslator:
    return ResponsesTranslator("resp", "gpt-5", unknown_stop)


def gemini(unknown_stop: str = "end_turn") -> GeminiTranslator:
    return GeminiTranslator("gem", "gemini-2.5-flash", unknown_stop)


def complete(events: list[object]) -> Complete:
    end = terminal(events)  # type: ignore[arg-type]
    assert isinstance(end, Complete), events
    return end


def failed(events: list[object]) -> InferenceError:
    end = terminal(events)  # type: ignore[arg-type]
    assert isinstance(end, Failed), events
    return end.error


# -- openai-responses ---------------------------------------------------------------------------


def test_responses_reasoning_text_and_tool_call_at_every_split() -> None:
    payload = fixture("responses_tool_call.sse")
    for chunks in splits(payload, every=97):
        events = translate(responses(), chunks)
        response = complete(events).response
        assert response.content == [
            ThinkingBlock(
                "**Checking the weather**\n\n"
                "The user asks about Z\u00fcrich; I should call the tool."
            ),
            TextBlock("Let me check Z\u00fcrich for you."),
            ToolUseBlock(
                "call_9Dh3kXw2pQ", "get_weather", {"location": "Z\u00fcrich", "unit": "celsius"}
            ),
        ]
        assert (response.stop.reason, response.stop.raw) == ("tool_use", "completed")
        assert response.model_served == "gpt-5-2025-08-07"
        assert response.usage == Usage(312, 94, cache_read_tokens=128)
        assert visible(events) == "Let me check Z\u00fcrich for you."
        assert all(e.visible == (e.block == "text") for e in events if isinstance(e, Token))
        assert [e.index for e in events if isinstance(e, BlockStop)] == [0, 1, 2]


def test_responses_error_event_nested_as_the_live_api_sends_it() -> None:
    events = translate(responses(), [fixture("responses_error_nested.sse")])
    error = failed(events)
    assert (error.kind, error.code, error.retryable) == ("rate_limit", "rate_limit_exceeded", True)
    assert error.message.startswith(MID_STREAM + "Rate limit reached for gpt-5")
    assert visible(events) == "Partial"


def test_responses_error_event_flat_as_documented() -> None:
    flat = {"type": "error", "code": "server_error", "message": "boom", "param": None}
    error = failed(translate(responses(), [sse(("error", {**flat, "sequence_number": 1}))]))
    assert (error.kind, error.message) == ("server", MID_STREAM + "boom")


def test_responses_failed_terminal() -> None:
    failure = {"status": "failed", "error": {"code": "server_error", "message": "It broke"}}
    body = sse(("response.failed", {"type": "response.failed", "response": failure}))
    error = failed(translate(responses(), [body]))
    assert (error.kind, error.message) == ("server", MID_STREAM + "It broke")


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        ("max_output_tokens", "max_tokens"),
        ("content_filter", "refusal"),
        ("max_messages", "end_turn"),
    ],
)
def test_responses_incomplete_reasons(reason: str, stop: str) -> None:
    incomplete = {"status": "incomplete", "incomplete_details": {"reason": reason}, "output": []}
    body = sse(("response.incomplete", {"type": "response.incomplete", "response": incomplete}))
    got = complete(translate(responses(), [body])).response.stop
    assert (got.reason, got.raw) == (stop, reason)  # an unknown reason is kept raw


def test_responses_unknown_incomplete_reason_can_be_an_error() -> None:
    incomplete = {"status": "incomplete", "incomplete_details": {"reason": "max_messages"}}
    body = sse(("response.incomplete", {"type": "response.incomplete", "response": incomplete}))
    error = failed(translate(responses("error"), [body]))
    assert "max_messages" in error.message


def test_responses_whole_reply_with_a_refusal_part() -> None:
    refusal = {"type": "refusal", "refusal": "I can't help with that."}
    data = {
        "status": "completed",
        "model": "gpt-5-2025-08-07",
        "output": [{"type": "message", "role": "assistant", "content": [refusal]}],
        "usage": {"input_tokens": 9, "output_tokens": 7},
    }
    response = responses().reply(data)
    assert response.content == [TextBlock("I can't help with that.")]
    assert (response.stop.reason, response.usage) == ("refusal", Usage(9, 7))


def test_responses_request_body() -> None:
    request = Request(
        "r:gpt-5", CONVERSATION, system="Be brief.", max_tokens=99, temperature=0.3, tools=[TOOL]
    )
    body = responses_body(request, "gpt-5", stream=True)
    assert body["input"] == [
        {"role": "user", "content": "Weather in Z\u00fcrich?"},
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": json.dumps({"city": "Z\u00fcrich"}),
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "12 \u00b0C, rain"},
    ]
    assert (body["instructions"], body["max_output_tokens"], body["temperature"]) == (
        "Be brief.",
        99,
        0.3,
    )
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather",
            "parameters": TOOL.input_schema,
        }
    ]
    assert (body["stream"], body["store"]) == (True, False)


def test_responses_refuses_stop_sequences_saying_so() -> None:
    with pytest.raises(InferenceError) as info:
        responses_body(Request("r:m", CONVERSATION, stop_sequences=["END"]), "m", stream=False)
    assert (info.value.kind, info.value.retryable) == ("invalid_request", False)
    assert "no stop sequences" in info.value.message and "END" in info.value.message


# -- gemini ------------------------------------------------------------------------------------


def test_gemini_thinking_text_and_tool_call_at_every_split() -> None:
    payload = fixture("gemini_thinking_tool_call.sse")
    for chunks in splits(payload, every=61):
        events = translate(gemini(), chunks)
        response = complete(events).response
        assert response.content == [
            ThinkingBlock(
                "**Weather lookup**\nThe user wants Z\u00fcrich's weather.",
                "CiQBVKhc7kN1bWJvIGp1bWJv",
            ),
            TextBlock("Let me check Z\u00fcrich."),
            ToolUseBlock("call_1", "get_weather", {"location": "Z\u00fcrich", "unit": "celsius"}),
        ]
        assert (response.stop.reason, response.stop.raw) == ("tool_use", "STOP")
        assert response.model_served == "gemini-2.5-flash"
        # The last usageMetadata counts; thinking tokens are output, as billed.
        assert response.usage == Usage(41, 23 + 48, cache_read_tokens=16)
        assert visible(events) == "Let me check Z\u00fcrich."
        assert all(e.visible == (e.block == "text") for e in events if isinstance(e, Token))


SIGNED = "CiwBjz1rX2Vuc2lnbmVkLXBhcmlzLXN0ZXAtMQ=="


def test_gemini_3_signs_the_first_of_parallel_calls_and_the_signature_is_kept() -> None:
    payload = fixture("gemini3_parallel_calls.sse")
    whole = json.loads(payload.split(b"data: ")[1])
    for response in [
        *(complete(translate(gemini(), chunks)).response for chunks in splits(payload, every=53)),
        gemini().reply(whole),
    ]:
        paris, london = response.tool_calls
        assert (paris.id, paris.input, paris.signature) == (
            "fc_paris",
            {"location": "Paris"},
            SIGNED,
        )
        assert (london.id, london.signature) == ("fc_london", None)


def test_gemini_sends_each_calls_thought_signature_back_with_it() -> None:
    # The host's next request carries the reply as it came: Gemini 3 refuses a current
    # turn whose step's first call lost its signature (400 "missing a thought_signature").
    reply = complete(translate(gemini(), [fixture("gemini3_parallel_calls.sse")])).response
    results = [
        ToolResultBlock("fc_paris", "18 \u00b0C"),
        ToolResultBlock("fc_london", "12 \u00b0C"),
    ]
    unsigned = [ToolUseBlock("c1", "get_weather"), ToolUseBlock("c2", "get_weather")]
    conversation = [
        Message.user("Weather in Paris and London?"),
        Message("assistant", list(reply.content)),
        Message("user", list(results)),
        Message("assistant", list(unsigned)),  # calls another provider made
    ]
    contents = gemini_body(Request("g:gemini-3-pro-preview", conversation))["contents"]
    signatures = [[p.get("thoughtSignature") for p in c["parts"]] for c in contents]
    assert signatures == [
        [None],
        [SIGNED, None],  # only the first of parallel calls is signed, as Gemini signs them
        [None, None],
        ["skip_thought_signature_validator", None],
    ]


def test_gemini_error_chunk_mid_stream() -> None:
    events = translate(gemini(), [fixture("gemini_error_mid_stream.sse")])
    error = failed(events)
    assert (error.kind, error.code, error.retryable) == ("overloaded", "UNAVAILABLE", True)
    assert error.message == MID_STREAM + "The model is overloaded. Please try again later."
    assert visible(events) == "Partial"


def chunk(finish: str, text: str = "Some text") -> bytes:
    candidate = {"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": finish}
    return sse((None, {"candidates": [candidate], "modelVersion": "gemini-2.5-pro"}))


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("STOP", "end_turn"),
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "refusal"),
        ("RECITATION", "refusal"),
        ("BLOCKLIST", "refusal"),
        ("PROHIBITED_CONTENT", "refusal"),
        ("SPII", "refusal"),
        ("OTHER", "end_turn"),
        ("MALFORMED_FUNCTION_CALL", "end_turn"),
    ],
)
def test_gemini_finish_reasons(finish: str, stop: str) -> None:
    got = complete(translate(gemini(), [chunk(finish)])).response.stop
    assert (got.reason, got.raw) == (stop, finish)  # OTHER and the rest kept raw


def test_gemini_other_can_be_an_error_by_the_unknown_stop_rule() -> None:
    error = failed(translate(gemini("error"), [chunk("OTHER")]))
    assert "OTHER" in error.message


def test_gemini_prompt_blocked_before_any_candidate() -> None:
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "modelVersion": "g-1"}
    response = complete(translate(gemini(), [sse((None, blocked))])).response
    assert (response.content, response.stop.reason, response.stop.raw) == (
        [],
        "refusal",
        "PROHIBITED_CONTENT",
    )


def test_gemini_whole_reply_and_its_error_body() -> None:
    data = json.loads(fixture("gemini_thinking_tool_call.sse").split(b"data: ")[-1])
    data["candidates"][0]["content"]["parts"].insert(0, {"text": "Hello"})
    response = gemini().reply(data)
    assert response.content == [
        TextBlock("Hello"),
        ToolUseBlock("call_1", "get_weather", {"location": "Z\u00fcrich", "unit": "celsius"}),
    ]
    assert (response.stop.reason, response.model_served) == ("tool_use", "gemini-2.5-flash")
    with pytest.raises(InferenceError) as info:
        gemini().reply({"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}})
    assert (info.value.kind, info.value.status, info.value.message) == (
        "server",
        200,
        "Internal error",
    )


def test_gemini_429_states_its_wait_in_retry_info() -> None:
    body = {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
            ],
        }
    }
    error = error_from_response(429, {}, json.dumps(body).encode(), provider="gem", model="g")
    assert (error.kind, error.retry_after_s, error.retryable) == ("rate_limit", 37.0, True)
    del body["error"]["details"][1]  # the same words with no wait: the daily quota is gone
    error = error_from_response(429, {}, json.dumps(body).encode(), provider="gem", model="g")
    assert (error.kind, error.retryable) == ("quota", False)


def test_gemini_request_body() -> None:
    request = Request(
        "g:gemini-2.5-flash",
        CONVERSATION,
        system="Be brief.",
        max_tokens=99,
        temperature=0.3,
        stop_sequences=["END"],
        tools=[TOOL],
    )
    body = gemini_body(request)
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Z\u00fcrich?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Checking."},
                {
                    "functionCall": {
                        "id": "call_1",
                        "name": "get_weather",
                        "args": {"city": "Z\u00fcrich"},
                    },
                    # A call Gemini did not sign goes with Google's documented skip value.
                    "thoughtSignature": "skip_thought_signature_validator",
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "call_1",
                        "name": "get_weather",
                        "response": {"content": "12 \u00b0C, rain"},
                    }
                }
            ],
        },
    ]
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {
        "maxOutputTokens": 99,
        "stopSequences": ["END"],
        "temperature": 0.3,
    }
    declaration = {
        "name": "get_weather",
        "description": "Current weather",
        "parametersJsonSchema": TOOL.input_schema,
    }
    assert body["tools"] == [{"functionDeclarations": [declaration]}]


def test_gemini_finishing_chunk_with_an_empty_part_makes_no_token() -> None:
    def text(piece: str) -> dict[str, object]:
        return {"candidates": [{"content": {"parts": [{"text": piece}], "role": "model"}}]}

    body = sse(
        (None, text("Hello ")), (None, text("there")), (None, json.loads(chunk("STOP", "")[6:]))
    )
    events = translate(gemini(), [body])
    assert [e.text for e in events if isinstance(e, Token)] == ["Hello ", "there"]
    assert complete(events).response.content == [TextBlock("Hello there")]


@pytest.mark.parametrize(
    ("build", "media", "wire"),
    [
        (lambda r: anthropic_body(r, "m", stream=True), "audio/wav", "Anthropic Messages"),
        (lambda r: responses_body(r, "m", stream=True), "audio/wav", "OpenAI Responses"),
        (lambda r: openai_body(r, "m", stream=True), "image/tiff", "OpenAI chat completions"),
        (lambda r: gemini_body(r), "video/x-unknown", "Gemini"),
        (
            lambda r: format_request(r, "m", stream=True, participants=Participants()),
            "image/png",
            "Anthropic XML tool mode (a text transcript)",
        ),
    ],
)
def test_media_a_wire_cannot_carry_is_refused_naming_it(build: Any, media: str, wire: str) -> None:
    """An embedding host that puts media in a message a wire has no place for hears so
    before anything is sent (the MCPL context plugin drops such blocks before they get here)."""
    request = Request("p:m", [Message("user", [TextBlock("hi"), MediaBlock(media, "AAAA")])])
    with pytest.raises(InferenceError) as caught:
        build(request)
    assert caught.value.kind == "invalid_request"
    assert caught.value.message.startswith(f"The {wire} wire does not carry ")
    assert media in caught.value.message
