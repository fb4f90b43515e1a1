"""Every ending on both Bedrock APIs, streamed and whole, through a kernel holding the
`bedrock` plugin alone, against the loopback server (SigV4 checked on every call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentcore.api import (
    Aborted,
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    Response,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.testing import Kernel, LoopbackServer, Scenario

ANTHROPIC = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
OTHER = "amazon.nova-pro-v1:0"
APIS = {"invoke": ANTHROPIC, "converse": OTHER}
WIRES = {"invoke": "bedrock", "converse": "bedrock-converse"}
# 1 s, not 0.5 s: the stall's "Hello " must reach the consumer before the progress timeout,
# on a loaded machine too (the request is signed and sent, and the server thread shares
# this process's GIL); the silence after it is what the timer cuts.
QUICK = {"progress_timeout_s": 1.0, "request_timeout_s": 2.0}


async def run(kernel: Kernel, model: str, streamed: bool) -> tuple[Response | InferenceError, str]:
    """The inference's result (or error) and the visible text streamed."""
    request = Request(f"br:{model}", [Message.user("Say hello.")], max_tokens=64)
    if not streamed:
        try:
            return await kernel.complete(request), ""
        except InferenceError as error:
            return error, ""
    seen: list[str] = []
    async for event in kernel.stream(request):
        if isinstance(event, Token) and event.visible:
            seen.append(event.text)
        elif isinstance(event, Complete):
            return event.response, "".join(seen)
        elif isinstance(event, Failed | Aborted):
            return event.error, "".join(seen)
    raise AssertionError("no terminal event")


def text_of(response: Response | InferenceError) -> str:
    assert isinstance(response, Response), response
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


@pytest.fixture(params=["invoke", "converse"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[True, False], ids=["streamed", "whole"])
def streamed(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


ENDINGS: dict[str, tuple[Scenario, str]] = {
    "ok": (Scenario.text("Hello there, friend."), "end_turn"),
    "max_tokens": (Scenario.max_tokens("Cut off at"), "max_tokens"),
    "stop_sequence": (Scenario.stop_sequence("Counting: 1 2 3"), "stop_sequence"),
    "refusal": (Scenario.refusal("I can't help with that."), "refusal"),
    "thinking": (Scenario.thinking("Step by step.", "It is 42."), "end_turn"),
}


@pytest.mark.parametrize("ending", ENDINGS)
async def test_an_ending_arrives_as_on_every_wire(
    bedrock_server: LoopbackServer,
    bedrock_kernel: Callable[..., Kernel],
    api: str,
    streamed: bool,
    ending: str,
) -> None:
    scenario, reason = ENDINGS[ending]
    bedrock_server.script(scenario)
    async with bedrock_kernel() as kernel:
        response, said = await run(kernel, APIS[api], streamed)
    assert isinstance(response, Response), response
    assert response.stop.reason == reason
    assert text_of(response) == scenario.reply  # type: ignore[attr-defined]
    if streamed:
        assert said == scenario.reply  # type: ignore[attr-defined]
    if ending == "stop_sequence" and api == "invoke":
        assert response.stop.sequence == "END"
    if ending == "thinking":
        thought = response.content[0]
        assert getattr(thought, "thinking", None) == "Step by step."
        assert getattr(thought, "signature", None) == "sig-loopback"
    words = len(scenario.reply.split())  # type: ignore[attr-defined]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, words)
    (call,) = bedrock_server.calls
    assert call.wire == WIRES[api] and call.stream is streamed and call.model == APIS[api]


async def test_redacted_reasoning_goes_back_as_it_came_in_a_tool_loop(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel], api: str, streamed: bool
) -> None:
    """Reasoning a safety system redacted (Invoke: Anthropic's ``redacted_thinking``;
    Converse: ``reasoningContent.redactedContent``) is kept as its data and goes back as it
    came; on Invoke with thinking on, a loop that lost it is refused as Anthropic does."""
    data = "cmVkYWN0ZWQtcmVhc29uaW5n"  # base64, as Bedrock's blobs travel
    bedrock_server.script(Scenario.tool_use(redacted_thinking=data), Scenario.text("4 degrees."))
    extras: dict[str, Any] = {}
    if api == "invoke":
        extras = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    ask = [Message.user("Weather in Paris?")]
    model = f"br:{APIS[api]}"
    async with bedrock_kernel() as kernel:
        first = Request(model, ask, max_tokens=2048, extras=extras)
        if streamed:
            events = [event async for event in kernel.stream(first)]
            assert isinstance(events[-1], Complete), events[-1]
            got = events[-1].response
        else:
            got = await kernel.complete(first)
        assert got.content[0] == ThinkingBlock("", redacted=data)
        [call] = got.tool_calls
        turn = [Message("assistant", list(got.content))]
        turn.append(Message("user", [ToolResultBlock(call.id, "4 C")]))
        second = await kernel.complete(Request(model, ask + turn, max_tokens=2048, extras=extras))
    assert text_of(second) == "4 degrees."
    sent = bedrock_server.calls[-1].body["messages"][1]["content"][0]
    if api == "invoke":
        assert sent == {"type": "redacted_thinking", "data": data}
    else:
        assert sent == {"reasoningContent": {"redactedContent": data}}


async def test_a_tool_call_is_a_tool_use_block(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel], api: str, streamed: bool
) -> None:
    bedrock_server.script(Scenario.tool_use(text="Let me look."))
    async with bedrock_kernel() as kernel:
        response, _ = await run(kernel, APIS[api], streamed)
    assert isinstance(response, Response), response
    assert response.stop.reason == "tool_use"
    assert response.content == [
        TextBlock("Let me look."),
        ToolUseBlock("toolu_loopback_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
    ]


FAILURES: dict[str, tuple[Scenario, dict[str, Any]]] = {
    # A mid-stream exception frame after visible text: a failure, with the kind its name says.
    "stream_error": (
        Scenario.stream_error("Partial ", error_type="overloaded_error", message="Busy now"),
        {"kind": "overloaded"},
    ),
    "model_stream_error": (
        Scenario.stream_error("Partial ", error_type="modelStreamErrorException", message="x"),
        {"kind": "server"},
    ),
    "throttling": (Scenario.rate_limit(), {"kind": "rate_limit", "status": 429}),
    "quota": (
        Scenario.http_error(400, "quota", error_type="ServiceQuotaExceededException"),
        {"kind": "quota", "status": 400, "code": "ServiceQuotaExceededException"},
    ),
    "daily_tokens": (
        Scenario.http_error(429, "Too many tokens per day, please wait before trying again."),
        {"kind": "quota", "status": 429},
    ),
    "validation": (
        Scenario.bad_request("messages: field required"),
        {"kind": "invalid_request", "status": 400, "code": "ValidationException"},
    ),
    "no_terminal": (Scenario.cut("Partial "), {"kind": "network"}),
}


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failure_is_its_typed_error(
    bedrock_server: LoopbackServer,
    bedrock_kernel: Callable[..., Kernel],
    api: str,
    streamed: bool,
    failure: str,
) -> None:
    scenario, expected = FAILURES[failure]
    bedrock_server.script(scenario)
    async with bedrock_kernel() as kernel:
        error, said = await run(kernel, APIS[api], streamed)
    assert isinstance(error, InferenceError), error
    for field, value in expected.items():
        if field == "status" and failure.endswith("error") and not streamed:
            continue
        assert getattr(error, field) == value, (field, error)
    if failure.endswith("stream_error") and streamed:
        assert said == "Partial "
        assert error.message.startswith("The provider reported an error mid-stream: ")
    assert len(bedrock_server.calls) == 1  # no policy here retries


async def test_a_stall_is_a_progress_timeout(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel], api: str
) -> None:
    bedrock_server.script(Scenario.stall("Hello "))
    async with bedrock_kernel(inference=QUICK) as kernel:
        error, said = await run(kernel, APIS[api], True)
    assert isinstance(error, InferenceError), error
    assert error.kind == "timeout" and said == "Hello "
