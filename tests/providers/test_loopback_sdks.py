"""The loopback server checked against the official SDKs: what it sends on each wire, for
every scenario family, streamed and whole, parses without error in `anthropic`, `openai`
(chat completions and the Responses API) and `google-genai`, and they read the text,
thinking, stop, usage, served model, tool call and error the scenario scripted."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from agentcore.testing import API_KEY, LoopbackServer, Scenario
from agentcore.testing.wires.gemini import thought_signature

MODEL = "model-x"
SERVED = "served-sdk-1"
TEXT = "Hello there, w\u00f6rld \u2603"
PROMPT = "hi"
SDK_WIRES = ["anthropic", "openai", "openai-responses", "gemini"]


@dataclass
class Seen:
    """What an SDK read from one call."""

    text: str = ""
    deltas: list[str] = field(default_factory=list)
    """Streamed: the visible text pieces, in order."""
    thought: str = ""
    stop: str | None = None
    """The wire's own stop word (Responses: the status, or the incomplete reason)."""
    model: str | None = None
    usage: tuple[int, int] | None = None
    cache: tuple[int | None, int | None] | None = None
    """The cache's reads and writes, as the SDK's usage type reads them."""
    tools: list[tuple[str, str, Any]] = field(default_factory=list)
    error: str | None = None
    """The SDK's exception: its class name and text."""
    status: int | None = None


Reader = Callable[[LoopbackServer, bool, float], Seen]


def _failed(exc: Exception, seen: Seen) -> Seen:
    seen.error = f"{type(exc).__name__}: {exc}"
    seen.status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
    return seen


# -- one reader per SDK -----------------------------------------------------------------------


def read_anthropic(server: LoopbackServer, streamed: bool, read_s: float = 2.0) -> Seen:
    client = anthropic.Anthropic(
        api_key=API_KEY,
        base_url=server.base_url("anthropic"),
        max_retries=0,
        timeout=read_s,
    )
    ask = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]}
    seen = Seen()
    try:
        if streamed:
            with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
                seen.deltas = [e.text for e in stream if e.type == "text"]
                message = stream.get_final_message()
        else:
            message = client.messages.create(**ask)  # type: ignore[arg-type]
    except Exception as exc:  # recorded: what the SDK raised is what the test checks
        return _failed(exc, seen)
    finally:
        client.close()
    for block in message.content:
        if block.type == "text":
            seen.text += block.text
        elif block.type == "thinking":
            seen.thought += block.thinking
        elif block.type == "tool_use":
            seen.tools.append((block.id, block.name, block.input))
    seen.stop, seen.model = message.stop_reason, message.model
    seen.usage = (message.usage.input_tokens, message.usage.output_tokens)
    seen.cache = (
        message.usage.cache_read_input_tokens,
        message.usage.cache_creation_input_tokens,
    )
    return seen


def read_openai(server: LoopbackServer, streamed: bool, read_s: float = 2.0) -> Seen:
    client = openai.OpenAI(
        api_key=API_KEY, base_url=server.base_url("openai"), max_retries=0, timeout=read_s
    )
    ask: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    seen = Seen()
    try:
        if streamed:
            calls: dict[int, list[str]] = {}
            with client.chat.completions.create(**ask, stream=True) as stream:
                for chunk in stream:
                    seen.model = chunk.model
                    if chunk.usage is not None:
                        seen.usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                        seen.cache = _openai_cached(chunk.usage)
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            seen.deltas.append(delta.content)
                        seen.thought += (delta.model_extra or {}).get("reasoning") or ""
                        for call in delta.tool_calls or []:
                            _add_call_piece(calls, call)
                        seen.stop = choice.finish_reason or seen.stop
            seen.text = "".join(seen.deltas)
            seen.tools = [(c[0], c[1], _json_or_raw(c[2])) for c in calls.values()]
            return seen
        completion = client.chat.completions.create(**ask)
    except Exception as exc:  # recorded
        return _failed(exc, seen)
    finally:
        client.close()
    if (completion.model_extra or {}).get("error"):  # a 200 whose body is an error
        seen.error = f"body: {completion.model_extra['error']}"  # type: ignore[index]
        return seen
    choice = completion.choices[0]
    seen.text = choice.message.content or ""
    seen.thought = (choice.message.model_extra or {}).get("reasoning") or ""
    for call in choice.message.tool_calls or []:
        assert call.type == "function"
        seen.tools.append((call.id, call.function.name, _json_or_raw(call.function.arguments)))
    seen.stop, seen.model = choice.finish_reason, completion.model
    assert completion.usage is not None
    seen.usage = (completion.usage.prompt_tokens, completion.usage.completion_tokens)
    seen.cache = _openai_cached(completion.usage)
    return seen


def _openai_cached(usage: Any) -> tuple[int | None, None]:
    details = usage.prompt_tokens_details
    return (details.cached_tokens if details is not None else None, None)


def _add_call_piece(calls: dict[int, list[str]], call: Any) -> None:
    entry = calls.setdefault(call.index, ["", "", ""])
    entry[0] = call.id or entry[0]
    if call.function is not None:
        entry[1] = call.function.name or entry[1]
        entry[2] += call.function.arguments or ""


def read_responses(server: LoopbackServer, streamed: bool, read_s: float = 2.0) -> Seen:
    client = openai.OpenAI(
        api_key=API_KEY,
        base_url=server.base_url("openai-responses"),
        max_retries=0,
        timeout=read_s,
    )
    ask: dict[str, Any] = {"model": MODEL, "input": PROMPT, "max_output_tokens": 64}
    seen = Seen()
    try:
        if streamed:
            with client.responses.stream(**ask) as stream:
                response = None
                for event in stream:
                    if event.type == "response.output_text.delta":
                        seen.deltas.append(event.delta)
                    elif event.type in TERMINALS:
                        response = event.response
                if response is not None and response.status == "completed":
                    response = stream.get_final_response()
            if response is None:  # the stream ended with no terminal event
                return seen
        else:
            response = client.responses.create(**ask)
    except Exception as exc:  # recorded
        return _failed(exc, seen)
    finally:
        client.close()
    for item in response.output:
        if item.type == "message":
            seen.text += "".join(c.text for c in item.content if c.type == "output_text")
        elif item.type == "reasoning":
            seen.thought += "".join(s.text for s in item.summary)
        elif item.type == "function_call":
            seen.tools.append((item.call_id, item.name, _json_or_raw(item.arguments)))
    details = response.incomplete_details
    seen.stop = details.reason if details is not None and details.reason else response.status
    if response.error is not None:
        seen.error = f"failed: {response.error.code}: {response.error.message}"
    seen.model = response.model
    if response.usage is not None:
        seen.usage = (response.usage.input_tokens, response.usage.output_tokens)
        seen.cache = (response.usage.input_tokens_details.cached_tokens, None)
    return seen


TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def _json_or_raw(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_gemini(server: LoopbackServer, streamed: bool, read_s: float = 2.0) -> Seen:
    client = genai.Client(
        api_key=API_KEY,
        http_options=genai_types.HttpOptions(
            base_url=server.base_url("gemini"), timeout=int(read_s * 1000)
        ),
    )
    seen = Seen()
    try:
        if streamed:
            chunks = list(client.models.generate_content_stream(model=MODEL, contents=PROMPT))
        else:
            chunks = [client.models.generate_content(model=MODEL, contents=PROMPT)]
    except Exception as exc:  # recorded
        return _failed(exc, seen)
    for chunk in chunks:
        seen.model = chunk.model_version or seen.model
        if chunk.usage_metadata is not None and chunk.usage_metadata.candidates_token_count:
            meta = chunk.usage_metadata
            seen.usage = (meta.prompt_token_count or 0, meta.candidates_token_count or 0)
            seen.cache = (meta.cached_content_token_count, None)
        for candidate in chunk.candidates or []:
            if candidate.finish_reason is not None:
                seen.stop = candidate.finish_reason.value
            for part in (candidate.content.parts if candidate.content else None) or []:
                if part.thought:
                    seen.thought += part.text or ""
                elif part.text:
                    seen.deltas.append(part.text)
                elif part.function_call is not None:
                    call = part.function_call
                    seen.tools.append((call.id or "", call.name or "", call.args))
    seen.text = "".join(seen.deltas)
    if not streamed:
        seen.deltas = []
    return seen


READERS: dict[str, Reader] = {
    "anthropic": read_anthropic,
    "openai": read_openai,
    "openai-responses": read_responses,
    "gemini": read_gemini,
}


def play(server: LoopbackServer, wire: str, streamed: bool, scenario: Scenario, **kw: Any) -> Seen:
    server.script(scenario)
    seen = READERS[wire](server, streamed, **kw)
    call = server.calls[-1]
    assert (call.wire, call.stream, call.model) == (wire, streamed, MODEL)
    assert server.pending() == 0
    return seen


# -- what each wire calls each stop -----------------------------------------------------------

STOPS: dict[str, dict[str, str | None]] = {
    "end_turn": {"anthropic": "end_turn", "openai": "stop", "gemini": "STOP"},
    "max_tokens": {"anthropic": "max_tokens", "openai": "length", "gemini": "MAX_TOKENS"},
    "stop_sequence": {"anthropic": "stop_sequence", "openai": "stop", "gemini": "STOP"},
    "refusal": {"anthropic": "refusal", "openai": "content_filter", "gemini": "SAFETY"},
    "tool_use": {"anthropic": "tool_use", "openai": "tool_calls", "gemini": "STOP"},
}
STOPS["end_turn"]["openai-responses"] = "completed"
STOPS["max_tokens"]["openai-responses"] = "max_output_tokens"
STOPS["stop_sequence"]["openai-responses"] = None  # the Responses API has no stop sequences
STOPS["refusal"]["openai-responses"] = "content_filter"
STOPS["tool_use"]["openai-responses"] = "completed"

REPLIES = {
    "end_turn": Scenario.text(TEXT),
    "max_tokens": Scenario.max_tokens(TEXT),
    "stop_sequence": Scenario.stop_sequence(TEXT, sequence="END"),
    "refusal": Scenario.refusal(TEXT),
}

wires = pytest.mark.parametrize("wire", SDK_WIRES)
modes = pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])


@modes
@wires
@pytest.mark.parametrize("stop", list(REPLIES))
def test_reply_text_stop_usage_and_model(
    loopback_provider: LoopbackServer, wire: str, streamed: bool, stop: str
) -> None:
    scenario = REPLIES[stop].replace(model=SERVED, input_tokens=11, output_tokens=5)
    seen = play(loopback_provider, wire, streamed, scenario)
    if STOPS[stop][wire] is None:
        assert seen.status == 400 and seen.error and "no stop sequences" in seen.error
        return
    assert seen.error is None, seen.error
    assert (seen.text, seen.stop, seen.model, seen.usage) == (
        TEXT,
        STOPS[stop][wire],
        SERVED,
        (11, 5),
    )
    if streamed:
        assert "".join(seen.deltas) == TEXT and len(seen.deltas) > 1


# What each SDK reads for 100 input tokens of which 60 were read from the cache and 30
# written to it: Anthropic's input_tokens leave both out; the others count the total and
# have no word for writes.
CACHED_USAGE = {
    "anthropic": ((10, 5), (60, 30)),
    "openai": ((100, 5), (60, None)),
    "openai-responses": ((100, 5), (60, None)),
    "gemini": ((100, 5), (60, None)),
}


@modes
@wires
def test_cache_token_counts(loopback_provider: LoopbackServer, wire: str, streamed: bool) -> None:
    scenario = Scenario.text(
        TEXT, input_tokens=100, output_tokens=5, cache_read_tokens=60, cache_write_tokens=30
    )
    seen = play(loopback_provider, wire, streamed, scenario)
    assert seen.error is None, seen.error
    assert (seen.usage, seen.cache) == CACHED_USAGE[wire]


@modes
@wires
def test_tool_call(loopback_provider: LoopbackServer, wire: str, streamed: bool) -> None:
    scenario = Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Let me check.")
    seen = play(loopback_provider, wire, streamed, scenario)
    assert seen.error is None, seen.error
    assert seen.tools == [("toolu_loopback_1", "get_weather", {"city": "Oslo"})]
    assert (seen.text, seen.stop) == ("Let me check.", STOPS["tool_use"][wire])


@modes
@wires
def test_tool_call_cut_at_max_tokens(
    loopback_provider: LoopbackServer, wire: str, streamed: bool
) -> None:
    scenario = Scenario.tool_use("get_weather", {"city": "Oslo"}, cut=True)
    seen = play(loopback_provider, wire, streamed, scenario)
    assert seen.error is None, seen.error
    assert [(t[0], t[1]) for t in seen.tools] == [("toolu_loopback_1", "get_weather")]
    assert seen.tools[0][2] != {"city": "Oslo"}  # cut off: never the whole input
    assert seen.stop == STOPS["max_tokens"][wire]


@modes
@wires
def test_thinking_then_text(loopback_provider: LoopbackServer, wire: str, streamed: bool) -> None:
    scenario = Scenario.thinking("Let me think.", "The answer is 42.")
    seen = play(loopback_provider, wire, streamed, scenario)
    assert seen.error is None, seen.error
    assert (seen.thought, seen.text) == ("Let me think.", "The answer is 42.")


@modes
@wires
def test_echo_reads_the_last_user_message(
    loopback_provider: LoopbackServer, wire: str, streamed: bool
) -> None:
    seen = play(loopback_provider, wire, streamed, Scenario.echo())
    assert (seen.error, seen.text) == (None, PROMPT)


@wires
def test_long_stream(loopback_provider: LoopbackServer, wire: str) -> None:
    seen = play(loopback_provider, wire, True, Scenario.long(300))
    assert seen.error is None, seen.error
    assert len(seen.deltas) == 300 and seen.stop == STOPS["end_turn"][wire]


# -- failures -----------------------------------------------------------------------------------

# How each SDK reports an error inside the 200 stream, and in a whole reply.
STREAM_ERRORS = {
    ("anthropic", True): "APIStatusError",
    ("anthropic", False): "OverloadedError",  # 529
    ("openai", True): "APIError",
    ("openai", False): "body",  # OpenRouter's 200 holding only the error
    ("openai-responses", True): "APIError",
    ("openai-responses", False): "failed",  # a 200 response with status "failed"
    ("gemini", False): "ServerError",  # 503 UNAVAILABLE
}


@modes
@wires
def test_error_during_the_stream(
    loopback_provider: LoopbackServer, wire: str, streamed: bool
) -> None:
    scenario = Scenario.stream_error(
        "Partial ", error_type="overloaded_error", message="Overloaded"
    )
    seen = play(loopback_provider, wire, streamed, scenario)
    if (wire, streamed) == ("gemini", True):
        # google-genai 1.19 yields the error chunk as an empty response; newer ones raise
        # APIError from it. Either way the SDK's APIError reads the chunk's error object.
        assert seen.error is None or seen.error.startswith("ServerError"), seen.error
        error = genai_errors.APIError(0, _last_data(loopback_provider, wire))
        assert (error.code, error.status, error.message) == (503, "UNAVAILABLE", "Overloaded")
        return
    assert seen.error is not None and seen.error.startswith(STREAM_ERRORS[wire, streamed])
    assert "Overloaded" in seen.error


def _last_data(server: LoopbackServer, wire: str) -> Any:
    """The last SSE data of the scripted scenario, fetched raw once more."""
    scenario = server.calls[-1].scenario
    assert scenario is not None
    server.script(scenario)
    path = "/v1beta/models/m:streamGenerateContent?alt=sse"
    with httpx.stream("POST", server.url + path, json={"contents": []}) as reply:
        datas = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    return json.loads(datas[-1])


HTTP_ERRORS = {
    "429 retry-after": (Scenario.rate_limit(retry_after=2), 429, "Rate limit exceeded"),
    "500": (Scenario.server_error(), 500, "Internal server error"),
    "401": (Scenario.unauthorized(), 401, "invalid x-api-key"),
    "quota": (Scenario.quota(), 429, "exceeded your current quota"),
}


@modes
@wires
@pytest.mark.parametrize("case", list(HTTP_ERRORS))
def test_error_before_the_stream(
    loopback_provider: LoopbackServer, wire: str, streamed: bool, case: str
) -> None:
    scenario, status, message = HTTP_ERRORS[case]
    seen = play(loopback_provider, wire, streamed, scenario)
    assert seen.status == status and seen.error and message in seen.error


@modes
def test_gemini_rate_limit_states_its_wait_in_retry_info(
    loopback_provider: LoopbackServer, streamed: bool
) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_delay="30s"))
    client = genai.Client(
        api_key=API_KEY, http_options=genai_types.HttpOptions(base_url=loopback_provider.url)
    )
    call = client.models.generate_content_stream if streamed else client.models.generate_content
    with pytest.raises(genai_errors.ClientError) as info:
        list(call(model=MODEL, contents=PROMPT))  # type: ignore[arg-type, call-overload]
    assert (info.value.code, info.value.status) == (429, "RESOURCE_EXHAUSTED")
    details = info.value.details["error"]["details"]
    assert details == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]
    assert loopback_provider.calls[-1].headers["x-goog-api-key"] == API_KEY


@modes
def test_anthropic_redacted_thinking_as_the_sdk_reads_it(
    loopback_provider: LoopbackServer, streamed: bool
) -> None:
    """The loopback's ``redacted_thinking`` block is one the official SDK reads as such,
    whole and streamed (its data whole at the block's start, no deltas)."""
    loopback_provider.script(Scenario.text("Done.", redacted_thinking="EmwKAhgB"))
    client = anthropic.Anthropic(
        api_key=API_KEY, base_url=loopback_provider.base_url("anthropic"), max_retries=0
    )
    ask: Any = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]}
    try:
        if streamed:
            with client.messages.stream(**ask) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(**ask)
    finally:
        client.close()
    first, text = message.content
    assert (first.type, getattr(first, "data", None)) == ("redacted_thinking", "EmwKAhgB")
    assert (text.type, getattr(text, "text", None)) == ("text", "Done.")


def test_gemini_thought_signatures_go_round_as_the_sdk_sends_them(
    loopback_provider: LoopbackServer,
) -> None:
    """google-genai reads the loopback's signed call and sends the model's turn back as it
    came: accepted. The same history with the signature dropped (what a host that rebuilds
    the call sends) is refused as Gemini 3 refuses it, 400 naming the missing signature."""
    client = genai.Client(
        api_key=API_KEY, http_options=genai_types.HttpOptions(base_url=loopback_provider.url)
    )
    loopback_provider.script(Scenario.tool_use("get_weather", {"city": "Oslo"}))
    first = client.models.generate_content(model=MODEL, contents=PROMPT)
    assert first.candidates and first.candidates[0].content
    turn = first.candidates[0].content
    [call] = [p for p in turn.parts or [] if p.function_call is not None]
    assert call.thought_signature  # bytes, decoded from the wire's base64
    answer = genai_types.Part.from_function_response(name="get_weather", response={"c": 4})
    history = [
        genai_types.Content(role="user", parts=[genai_types.Part.from_text(text=PROMPT)]),
        turn,
        genai_types.Content(role="user", parts=[answer]),
    ]
    loopback_provider.script(Scenario.text("4 degrees."))
    assert client.models.generate_content(model=MODEL, contents=history).text == "4 degrees."
    sent = loopback_provider.calls[-1].body["contents"][1]["parts"]
    assert sent[-1]["thoughtSignature"] == thought_signature("toolu_loopback_1")

    unsigned = turn.model_copy(
        update={"parts": [p.model_copy(update={"thought_signature": None}) for p in turn.parts]}
    )
    loopback_provider.script(Scenario.text("never played"))
    with pytest.raises(genai_errors.ClientError) as info:
        client.models.generate_content(model=MODEL, contents=[history[0], unsigned, history[2]])
    assert (info.value.code, info.value.status) == (400, "INVALID_ARGUMENT")
    assert "Function call is missing a thought_signature" in str(info.value.message)
    assert "`default_api:get_weather`, position 2" in str(info.value.message)


@modes
@wires
def test_connection_cut(loopback_provider: LoopbackServer, wire: str, streamed: bool) -> None:
    seen = play(loopback_provider, wire, streamed, Scenario.cut("Part "))
    assert seen.error is not None  # the SDK sees the connection break


@wires
def test_stream_that_just_stops(loopback_provider: LoopbackServer, wire: str) -> None:
    seen = play(loopback_provider, wire, True, Scenario.cut("Part ", clean=True))
    assert seen.stop is None  # no terminal: no stop, whatever else the SDK makes of it


@modes
@wires
def test_stall_runs_into_the_sdks_read_timeout(
    loopback_provider: LoopbackServer, wire: str, streamed: bool
) -> None:
    seen = play(loopback_provider, wire, streamed, Scenario.stall("Some "), read_s=0.3)
    assert seen.error is not None and "Timeout" in seen.error
    loopback_provider.wait_idle_sync()
