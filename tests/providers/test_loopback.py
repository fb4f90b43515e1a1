"""Every wire format and every ending, streamed and whole, through the kernel against the
loopback provider server; each case also proves no HTTP connection is left open."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from agentcore.inference import (
    Aborted,
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.kernel import Kernel
from agentcore.providers.errors import MID_STREAM
from agentcore.providers.openai import FINISH_ERROR
from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario
from agentcore.testing.wires.gemini import thought_signature

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides

PROVIDERS = ["anthropic", "openai", "openrouter", "compat", "responses", "gemini"]
OPENAI_FAMILY = ["openai", "openrouter", "compat"]
REFUSAL_RAW = {"anthropic": "refusal", "responses": "content_filter", "gemini": "SAFETY"}
"""Each wire's own word for a refusal (the rest of the openai family: ``content_filter``)."""
WHOLE_STREAM_ERROR_STATUS = {"anthropic": 529, "gemini": 503}
"""The status a whole call gets for an error the stream would name; the rest answer 200."""
TEXT = "Hello there, w\u00f6rld \u2603"


@dataclass
class Outcome:
    """What the consumer saw: the terminal (Complete, Failed or Aborted) and every event."""

    end: Complete | Failed | Aborted
    events: list[StreamEvent]

    @property
    def visible(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Token) and e.visible)

    @property
    def error(self) -> InferenceError:
        assert isinstance(self.end, Failed | Aborted), self.end
        return self.end.error


@pytest.fixture
def kernel_for(loopback_settings: Callable[..., Path]) -> Callable[..., Kernel]:
    def make(**inference: Any) -> Kernel:
        path = loopback_settings(inference=inference or None)
        return Kernel.load(path, environ=LOOPBACK_ENV, discover_plugins=False)

    return make


def request(provider: str) -> Request:
    # The Responses API has no stop sequences (test_stop_sequence asks for one there).
    stop = [] if provider == "responses" else ["END"]
    return Request(f"{provider}:model-x", [Message.user("hi")], stop_sequences=stop)


async def run(
    kernel: Kernel, provider: str, streamed: bool, request_stop: tuple[str, ...] | None = None
) -> Outcome:
    req = request(provider)
    if request_stop is not None:
        req.stop_sequences = [*request_stop]
    if not streamed:
        try:
            return Outcome(Complete(await kernel.complete(req)), [])
        except InferenceError as error:
            return Outcome(Failed(error), [])
    events = [event async for event in kernel.stream(req)]
    ends = [e for e in events if isinstance(e, Complete | Failed | Aborted)]
    assert len(ends) == 1 and events[-1] is ends[0], events
    return Outcome(ends[0], events)


async def play(
    server: LoopbackServer,
    kernel_for: Callable[..., Kernel],
    provider: str,
    streamed: bool,
    scenario: Scenario,
    **inference: Any,
) -> Outcome:
    """Script one call, make it, and check that nothing is left open, during and after."""
    server.script(scenario, provider=provider)
    async with kernel_for(**inference) as kernel:
        outcome = await run(kernel, provider, streamed)
        await server.wait_idle(connections=False)  # no request left in flight
    await server.wait_idle()  # and, once the kernel closed its client, no connection at all
    assert server.pending(provider) == 0
    call = server.calls_to(provider)[-1]
    assert call.stream is streamed
    return outcome


def response(outcome: Outcome) -> Any:
    assert isinstance(outcome.end, Complete), outcome.end
    return outcome.end.response


# -- endings that complete ----------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
class TestCompletes:
    async def test_normal_end(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.text(TEXT, model="served-model-7", input_tokens=11, output_tokens=5)
        outcome = await play(loopback_provider, kernel_for, provider, streamed, scenario)
        got = response(outcome)
        assert got.content == [TextBlock(TEXT)]
        assert got.stop.reason == "end_turn"
        assert (got.model_requested, got.model_served, got.provider) == (
            "model-x",
            "served-model-7",
            provider,
        )
        assert (got.usage.input_tokens, got.usage.output_tokens) == (11, 5)
        if streamed:
            assert outcome.visible == TEXT
            assert len([e for e in outcome.events if isinstance(e, Token)]) > 1

    async def test_cache_counts(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        """Input is the total on every wire; the cache's reads (and, where the wire says
        them, writes) come through as the scenario played them."""
        scenario = Scenario.text(
            TEXT, input_tokens=100, output_tokens=5, cache_read_tokens=60, cache_write_tokens=30
        )
        outcome = await play(loopback_provider, kernel_for, provider, streamed, scenario)
        usage = response(outcome).usage
        writes = 30 if provider == "anthropic" else None  # only Anthropic's wire says writes
        assert (usage.input_tokens, usage.output_tokens) == (100, 5)
        assert (usage.cache_read_tokens, usage.cache_write_tokens) == (60, writes)

    async def test_max_tokens(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        outcome = await play(
            loopback_provider, kernel_for, provider, streamed, Scenario.max_tokens("Cut at")
        )
        assert response(outcome).stop.reason == "max_tokens"
        assert response(outcome).text == "Cut at"

    async def test_stop_sequence(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        if provider == "responses":  # no stop sequences on that wire: asking for one says so
            async with kernel_for() as kernel:
                outcome = await run(kernel, provider, streamed, request_stop=("END",))
            assert (outcome.error.kind, outcome.error.retryable) == ("invalid_request", False)
            assert "Responses API has no stop sequences" in outcome.error.message
            assert loopback_provider.calls_to(provider) == []  # refused before any call
            return
        scenario = Scenario.stop_sequence("1 2 3", sequence="END")
        stop = response(
            await play(loopback_provider, kernel_for, provider, streamed, scenario)
        ).stop
        if provider == "gemini":  # Gemini says STOP for a stop sequence too: not detectable
            assert (stop.reason, stop.raw, stop.sequence) == ("end_turn", "STOP", None)
        else:
            assert (stop.reason, stop.sequence) == ("stop_sequence", "END")

    async def test_refusal(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        got = response(
            await play(loopback_provider, kernel_for, provider, streamed, Scenario.refusal())
        )
        assert got.stop.reason == "refusal"
        assert got.stop.raw == REFUSAL_RAW.get(provider, "content_filter")

    async def test_tool_use(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Let me check.")
        outcome = await play(loopback_provider, kernel_for, provider, streamed, scenario)
        got = response(outcome)
        assert got.stop.reason == "tool_use"
        assert got.content == [
            TextBlock("Let me check."),
            ToolUseBlock("toolu_loopback_1", "get_weather", {"city": "Oslo"}),
        ]
        if streamed:
            assert outcome.visible == "Let me check."  # tool input is never visible

    async def test_a_tool_loop_sends_the_reply_back_with_the_result(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        """The loop's next call carries the reply as it came, then the tool's result, and
        the wire takes it. Gemini's call goes back with the signature it was signed with:
        Gemini 3 refuses a current turn whose call lost it (the loopback does too)."""
        first = Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Let me check.")
        got = response(await play(loopback_provider, kernel_for, provider, streamed, first))
        [call] = got.tool_calls
        history = [
            Message.user("Weather in Oslo?"),
            Message("assistant", list(got.content)),
            Message("user", [ToolResultBlock(call.id, "4 C, clear")]),
        ]
        loopback_provider.script(Scenario.text("4 degrees."), provider=provider)
        async with kernel_for() as kernel:
            second = await kernel.complete(Request(f"{provider}:model-x", history))
        assert second.text == "4 degrees."
        if provider == "gemini":
            contents = loopback_provider.calls_to(provider)[-1].body["contents"]
            sent = contents[1]["parts"][-1]
            assert sent["thoughtSignature"] == thought_signature("toolu_loopback_1")

    async def test_tool_use_cut_at_max_tokens(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.tool_use("get_weather", {"city": "Oslo"}, cut=True)
        got = response(await play(loopback_provider, kernel_for, provider, streamed, scenario))
        assert got.stop.reason == "max_tokens"
        assert [(c.id, c.name) for c in got.tool_calls] == [("toolu_loopback_1", "get_weather")]

    async def test_thinking_before_text(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.thinking("Let me think.", "The answer is 42.")
        outcome = await play(loopback_provider, kernel_for, provider, streamed, scenario)
        got = response(outcome)
        assert [type(b) for b in got.content] == [ThinkingBlock, TextBlock]
        assert got.content[0].thinking == "Let me think."
        assert got.text == "The answer is 42."
        if streamed:
            assert outcome.visible == "The answer is 42."
            thinking = [e for e in outcome.events if isinstance(e, Token) and e.block == "thinking"]
            assert thinking and not any(e.visible for e in thinking)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_a_tool_loop_sends_redacted_thinking_back_as_it_came(
    loopback_provider: LoopbackServer, kernel_for: Any, streamed: bool
) -> None:
    """With thinking on, Anthropic refuses a tool loop's next call whose last assistant
    message lost the thinking it began with (the loopback does too). Thinking a safety
    system redacted comes as its encrypted data only, and goes back as it came."""
    extras = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    data = "EmwKAhgBEgy3va3pzix"
    first = Scenario.tool_use("get_weather", {"city": "Oslo"}, redacted_thinking=data)
    loopback_provider.script(first, Scenario.text("4 degrees."), provider="anthropic")
    ask = [Message.user("Weather in Oslo?")]
    async with kernel_for() as kernel:
        request = Request("anthropic:model-x", ask, extras=extras)
        if streamed:
            events = [event async for event in kernel.stream(request)]
            assert isinstance(events[-1], Complete), events[-1]
            got = events[-1].response
        else:
            got = await kernel.complete(request)
        assert got.content[0] == ThinkingBlock("", redacted=data)
        [call] = got.tool_calls
        turn = [Message("assistant", list(got.content))]
        turn.append(Message("user", [ToolResultBlock(call.id, "4 C, clear")]))
        second = await kernel.complete(Request("anthropic:model-x", ask + turn, extras=extras))
    assert second.text == "4 degrees."
    sent = loopback_provider.calls_to("anthropic")[-1].body["messages"][1]["content"]
    assert sent[0] == {"type": "redacted_thinking", "data": data}


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_pause_turn(
    loopback_provider: LoopbackServer, kernel_for: Any, streamed: bool
) -> None:
    scenario = Scenario.pause_turn("Still working.")
    got = response(await play(loopback_provider, kernel_for, "anthropic", streamed, scenario))
    assert got.stop.reason == "pause_turn"


async def test_unplayable_scenario_says_so(
    loopback_provider: LoopbackServer, kernel_for: Any
) -> None:
    outcome = await play(loopback_provider, kernel_for, "openai", True, Scenario.pause_turn())
    assert outcome.error.kind == "invalid_request"
    assert (
        "cannot be played" in outcome.error.message or "no finish_reason" in outcome.error.message
    )


# -- endings that fail inside a 200 ---------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
class TestFailsInside200:
    async def test_error_mid_stream(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.stream_error(
            "Partial ", error_type="overloaded_error", message="Overloaded"
        )
        error = (await play(loopback_provider, kernel_for, provider, streamed, scenario)).error
        assert (error.kind, error.retryable) == ("overloaded", True)
        if streamed:
            assert error.message == MID_STREAM + "Overloaded"
        else:
            # Anthropic and Gemini answer a whole call with the status the type implies,
            # OpenRouter 200 with only the error, Responses 200 with a failed response.
            assert error.status == WHOLE_STREAM_ERROR_STATUS.get(provider, 200)

    async def test_error_body_in_a_200(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.error_body("Provider returned error", code=502)
        error = (await play(loopback_provider, kernel_for, provider, streamed, scenario)).error
        assert error.message == "Provider returned error"
        assert error.kind == "server" and error.status == 200

    async def test_connection_cut(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        outcome = await play(
            loopback_provider, kernel_for, provider, streamed, Scenario.cut("Part ")
        )
        assert (outcome.error.kind, outcome.error.retryable) == ("network", True)
        if streamed:
            assert outcome.visible == "Part "

    async def test_stream_that_just_stops(
        self, loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
    ) -> None:
        scenario = Scenario.cut("Part ", clean=True)
        error = (await play(loopback_provider, kernel_for, provider, streamed, scenario)).error
        if streamed:
            assert (error.kind, error.code) == ("network", "no_terminal")
        else:
            assert error.kind == "server" and "not JSON" in error.message  # a half body


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", OPENAI_FAMILY)
async def test_bare_finish_reason_error(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
) -> None:
    outcome = await play(loopback_provider, kernel_for, provider, streamed, Scenario.finish_error())
    assert outcome.error.message == FINISH_ERROR
    assert outcome.error.kind == "server"


# -- stalls ----------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("after", ["", "Some text "], ids=["before-text", "after-text"])
async def test_stall_is_cut_by_the_progress_timeout(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str, after: str
) -> None:
    # Pings keep coming; they are not progress. 0.5 s, not 0.2 s: the text before the stall
    # must reach the consumer before the timer fires, though the server's thread shares this
    # process (and its GIL) with the client on a loaded machine.
    scenario = Scenario.stall(after, keepalive_s=0.02)
    outcome = await play(
        loopback_provider, kernel_for, provider, True, scenario, progress_timeout_s=0.5
    )
    assert isinstance(outcome.end, Aborted) and outcome.end.reason == "timeout"
    assert (outcome.error.kind, outcome.error.code) == ("timeout", "progress_timeout")
    assert outcome.visible == after
    assert loopback_provider.calls_to(provider)[-1].disconnected


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_whole_stall_is_cut_by_the_request_timeout(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str
) -> None:
    outcome = await play(
        loopback_provider, kernel_for, provider, False, Scenario.stall(), request_timeout_s=0.2
    )
    assert (outcome.error.kind, outcome.error.code) == ("timeout", "request_timeout")
    assert loopback_provider.calls_to(provider)[-1].disconnected


# -- HTTP errors ----------------------------------------------------------------

RATE_LIMITS = {
    "retry-after seconds": (Scenario.rate_limit(retry_after=2), 2.0),
    "retry-after-ms": (Scenario.rate_limit(retry_after_ms=1500), 1.5),
    "retry-after date": (Scenario.rate_limit(retry_after_date=30), 30.0),
    "body retry_after": (Scenario.rate_limit(body_retry_after=7), 7.0),
    "body retry_after_ms": (Scenario.rate_limit(body_retry_after_ms=2500), 2.5),
    "body retryDelay": (Scenario.rate_limit(retry_delay="30s"), 30.0),
    "no stated wait": (Scenario.rate_limit(), None),
}


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("form", list(RATE_LIMITS))
async def test_rate_limit_with_each_stated_wait(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool, form: str
) -> None:
    scenario, wait = RATE_LIMITS[form]
    error = (await play(loopback_provider, kernel_for, provider, streamed, scenario)).error
    assert (error.kind, error.status, error.retryable) == ("rate_limit", 429, True)
    if wait is None:
        assert error.retry_after_s is None
    elif form == "retry-after date":
        # An HTTP date has one-second resolution (rounded up) and is relative to now.
        assert error.retry_after_s is not None and wait - 2 <= error.retry_after_s <= wait + 1
    else:
        assert error.retry_after_s == wait


HTTP_ERRORS = {
    "529": (Scenario.overloaded(), "overloaded", 529, True),
    "500": (Scenario.server_error(), "server", 500, True),
    "400": (Scenario.bad_request(), "invalid_request", 400, False),
    "401": (Scenario.unauthorized(), "auth", 401, False),
    "quota 429": (Scenario.quota(), "quota", 429, False),
    "context length": (Scenario.context_length(), "context_length", 400, False),
    "503 with body and headers": (
        Scenario.http_error(503, body=b"upstream unavailable", headers={"retry-after": "4"}),
        "server",
        503,
        True,
    ),
}


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", list(HTTP_ERRORS))
async def test_http_errors(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool, case: str
) -> None:
    scenario, kind, status, retryable = HTTP_ERRORS[case]
    error = (await play(loopback_provider, kernel_for, provider, streamed, scenario)).error
    assert (error.kind, error.status, error.retryable) == (kind, status, retryable)
    if case == "503 with body and headers":
        assert (error.message, error.retry_after_s) == ("upstream unavailable", 4.0)


# -- connections, keys ----------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_leaving_a_stream_early_closes_its_connection(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str
) -> None:
    loopback_provider.script(Scenario.stall("Hello there ", keepalive_s=0.02), provider=provider)
    async with kernel_for() as kernel:
        stream: AsyncIterator[StreamEvent] = kernel.stream(request(provider))
        async with aclosing(stream) as events:  # type: ignore[type-var]
            async for event in events:
                if isinstance(event, Token) and event.visible:
                    break
        # The kernel (and its pooled client) is still up, yet the server saw the client go.
        await loopback_provider.wait_idle(connections=False)
        assert loopback_provider.calls_to(provider)[-1].disconnected
    await loopback_provider.wait_idle()


async def test_pooled_connection_is_reused(
    loopback_provider: LoopbackServer, kernel_for: Any
) -> None:
    loopback_provider.script(*[Scenario.text("hi")] * 3, provider="openai")
    async with kernel_for() as kernel:
        for _ in range(3):
            await run(kernel, "openai", True)
        await loopback_provider.wait_idle(connections=False)
        assert loopback_provider.open_connections == 1
    await loopback_provider.wait_idle()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_key_is_sent_and_never_logged(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str
) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message} {extra}")
    try:
        loopback_provider.script(
            Scenario.unauthorized(), Scenario.text("x", raw_stop="odd_stop"), provider=provider
        )
        async with kernel_for() as kernel:
            await run(kernel, provider, True)
            await run(kernel, provider, True)
    finally:
        logger.remove(sink)
    headers = loopback_provider.calls_to(provider)[-1].headers
    if provider == "anthropic":
        assert headers["x-api-key"] == API_KEY and "authorization" not in headers
    elif provider == "gemini":
        assert headers["x-goog-api-key"] == API_KEY and "authorization" not in headers
    else:
        assert headers["authorization"] == f"Bearer {API_KEY}"
    assert lines, "the unmapped stop token should have been logged"
    assert not any(API_KEY in line for line in lines)
    assert API_KEY not in repr(loopback_provider.calls_to(provider)[-1])


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_text_with_a_lone_surrogate_is_sent_as_a_json_escape(
    loopback_provider: LoopbackServer, kernel_for: Any, provider: str, streamed: bool
) -> None:
    """A lone UTF-16 surrogate is valid in JSON text (``"\\ud800"``) but has no UTF-8 form:
    the body carries it as the same JSON escape, so the provider gets exactly what the
    caller sent, and other text in the same body stays as it was."""
    text = f"a\ud800b {TEXT}"
    loopback_provider.script(Scenario.text("ok"), provider=provider)
    async with kernel_for() as kernel:
        req = Request(f"{provider}:model-x", [Message.user(text)])
        if streamed:
            events = [event async for event in kernel.stream(req)]
            assert isinstance(events[-1], Complete), events[-1]
        else:
            await kernel.complete(req)
    await loopback_provider.wait_idle()
    call = loopback_provider.calls_to(provider)[-1]
    assert call.headers["content-type"] == "application/json"
    assert text in json.dumps(call.body, ensure_ascii=False)
