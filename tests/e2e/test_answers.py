"""The answer table, end to end: every way an inference ends, streamed and whole, on both
provider wires, over a real stdio subprocess and a real WebSocket.

Each case drives one `inference/request` from the MCPL server through `McplHost`, the
kernel (every default plugin discovered: retry, provider-hold, waiting-trace,
mcpl-router) and the loopback provider, and asserts

- the exact answer (the whole result object, or the whole error object),
- everything that reached the server for that request, in arrival order: the
  ``inference/chunk``s (visible text only, ``index`` from 0) and then the answer,
- the ``mcpl:inference_start`` and ``mcpl:inference_complete`` / ``_fail`` traces,
- how many calls the provider received (retries happen only before the first
  chunk), and that the request reached the provider as asked.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import INFERENCE, MODELS, PROVIDERS, RETRY, RigFactory, settings_sections
from e2e_support import AGENTCORE, TIMEOUT_S, Hub, serving

from agentcore import hookimpl
from agentcore.inference import TERMINAL_TYPES, Complete, Request, StreamEvent, UsageUpdate
from agentcore.kernel import Kernel
from agentcore.providers.xml_parser import PREFIX
from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

# Provider names: a = anthropic, o = openai (chat completions), r = openai-responses, g = gemini.
WIRES = ("a", "o", "r", "g")
SERVED = "served-e2e-1"
PROMPT = "Summarize the notes."
MAX_TOKENS = 64
# A case runs with the rig's calm [inference] timeouts (`INFERENCE`) unless it tests one: a
# 0.3 s progress timeout turned a slow first byte on a loaded machine into a retry whose
# fresh call found no scenario left (`infer --stream` printed nothing for xml_tool_call).
# The cases that test a timeout set their own, `CUT_S`: long enough that a loaded machine
# still gets the request to the provider and its first text back before it (at 0.3 s a retry's
# fresh call was cut before the loopback saw it), short enough to keep the suite quick.
CUT_S = 1.0
QUICK: dict[str, Any] = {"progress_timeout_s": CUT_S}
WHOLE_QUICK: dict[str, Any] = {"request_timeout_s": CUT_S}
WHOLE_TIMEOUT = f"The attempt took longer than {CUT_S:g} s ([inference] request_timeout_s)"
PROGRESS = (
    "The inference stopped before it finished (timeout): "
    f"No visible progress within {CUT_S:g} s ([inference] progress_timeout_s)"
)
FINISH_ERROR = "The provider ended the inference with an error (finish_reason 'error')"
BROKE = (
    "The connection to the provider broke mid-reply "
    "(the connection closed in the middle of a chunked body)"
)
BROKE_WHOLE = re.compile(
    r"The connection to the provider broke mid-reply "
    r"\(the connection closed before the body's declared length came\)"
)
ENDED = "The inference stream ended without a result"  # the adapters' words and the kernel's
NOT_JSON = re.compile(r"The provider's reply is not JSON: '\{.*'")
TOOL = "The model called a tool (get_weather), and inference/request offers none"
TOOL_CUT = (
    "The model's output ended (max_tokens) inside a call to a tool (get_weather), "
    "and inference/request offers no tools"
)
TOOL_STOP = "The model stopped to call a tool, and inference/request offers none"
REFUSED = "The model refused to answer (stop reason 'refusal')"
PAUSED = (
    "The provider paused the turn (stop reason 'pause_turn'), which inference/request cannot resume"
)
NO_RESULT = "The inference stream ended without a result"
UNMAPPED = (
    "The provider ended the inference with stop token 'weird_stop', "
    "which agentcore has no stop reason for"
)
WHOLE_STREAM_ERRORS = {
    "a": "The provider answered HTTP 529: Overloaded",
    "g": "The provider answered HTTP 503: Overloaded",
}


@dataclass(frozen=True)
class Case:
    row: str
    wire: str
    stream: bool
    scenarios: tuple[Scenario, ...]
    calls: int
    """Provider calls made: 1, or the retry limit (2) when retried."""
    chunks: tuple[str, ...] = ()
    result: dict[str, Any] | None = None
    error: str | re.Pattern[str] | None = None
    inference: dict[str, Any] = field(default_factory=dict)
    plugins: dict[str, object] = field(default_factory=dict)
    cut_short: bool = False
    """The host closed the provider call while the provider was still writing."""

    @property
    def id(self) -> str:
        return f"{self.row}-{self.wire}-{'streamed' if self.stream else 'whole'}"


def result(content: str, finish: str, inp: int, out: int, model: str = SERVED) -> dict[str, Any]:
    return {
        "content": content,
        "model": model,
        "finishReason": finish,
        "usage": {"inputTokens": inp, "outputTokens": out},
    }


class DropTerminal:
    """Replaces the provider's `Complete` with a usage update: the stream then ends
    with no terminal event, which the kernel must fail, not complete."""

    @hookimpl
    def on_stream_event(self, event: Any) -> Any:
        if isinstance(event, Complete):
            return UsageUpdate(event.response.usage)
        return None


def expand(row: str, wires: Sequence[str], modes: Sequence[bool], **kw: Any) -> list[Case]:
    """One case per wire and mode; a callable value is called with (wire, stream)."""
    out: list[Case] = []
    for wire in wires:
        for stream in modes:
            values = {k: (v(wire, stream) if callable(v) else v) for k, v in kw.items()}
            out.append(Case(row, wire, stream, **values))
    return out


def cases() -> list[Case]:
    out: list[Case] = []

    def add(row: str, wires: Sequence[str], modes: Sequence[bool], **kw: Any) -> None:
        out.extend(expand(row, wires, modes, **kw))

    both = (True, False)
    streamed = (True,)
    text = Scenario.text("Hello there friend", model=SERVED, input_tokens=7, output_tokens=3)
    add(
        "end_turn",
        WIRES,
        both,
        scenarios=(text,),
        calls=1,
        chunks=("Hello ", "there ", "friend"),
        result=result("Hello there friend", "end_turn", 7, 3),
    )
    add(
        "max_tokens",
        WIRES,
        both,
        scenarios=(Scenario.max_tokens("Cut off right", model=SERVED, output_tokens=64),),
        calls=1,
        chunks=("Cut ", "off ", "right"),
        result=result("Cut off right", "max_tokens", 12, 64),
    )
    # On the openai wire a stop sequence is known only from the request's own `stop`
    # list, and inference/request asks for none (SPEC §11.2): vLLM's `stop_reason`
    # then names a sequence nobody asked for, and the stop is a plain end_turn. Gemini
    # says STOP for a stop sequence too; the Responses API has no stop sequences.
    add(
        "stop_sequence",
        ("a", "o", "g"),
        both,
        scenarios=(Scenario.stop_sequence("Counting: 1 2 3", sequence="END", model=SERVED),),
        calls=1,
        chunks=("Counting: ", "1 ", "2 ", "3"),
        result=lambda w, s: result(
            "Counting: 1 2 3", "stop_sequence" if w == "a" else "end_turn", 12, 4
        ),
    )
    add(
        "thinking",
        WIRES,
        both,
        scenarios=(
            Scenario.thinking("Let me think this through.", "The answer is 42.", model=SERVED),
        ),
        calls=1,
        chunks=("The ", "answer ", "is ", "42."),
        result=result("The answer is 42.", "end_turn", 12, 4),
    )
    # A stop token no adapter maps has no MCPL finishReason: an error naming the token,
    # by default (unknown_stop = "error") and as much when the kernel let it end end_turn.
    add(
        "unknown_stop",
        WIRES,
        both,
        scenarios=(Scenario.text("Odd end", raw_stop="weird_stop", model=SERVED),),
        calls=1,
        chunks=("Odd ", "end"),
        error=UNMAPPED,
    )
    add(
        "unknown_stop_as_end_turn",
        WIRES,
        both,
        scenarios=(Scenario.text("Odd end", raw_stop="weird_stop", model=SERVED),),
        calls=1,
        chunks=("Odd ", "end"),
        error=UNMAPPED,
        inference={"unknown_stop": "end_turn"},
    )
    add(
        "http_400",
        WIRES,
        both,
        scenarios=(Scenario.bad_request("max_tokens: too large"),),
        calls=1,
        error="The provider answered HTTP 400: max_tokens: too large",
    )
    add(
        "http_401",
        WIRES,
        both,
        scenarios=(Scenario.unauthorized(),),
        calls=1,
        error="The provider answered HTTP 401: invalid x-api-key",
    )
    add(
        "http_500_after_retries",
        WIRES,
        both,
        scenarios=(Scenario.server_error(), Scenario.server_error()),
        calls=2,
        error="The provider answered HTTP 500: Internal server error",
    )
    add(
        "http_429_after_retries",
        WIRES,
        both,
        scenarios=(Scenario.rate_limit(retry_after=0), Scenario.rate_limit(retry_after=0)),
        calls=2,
        error="The provider answered HTTP 429: Rate limit exceeded",
    )
    # Streamed: anthropic `event: error`, openai an error frame inside the 200, responses
    # `error` and `response.failed`, gemini an error chunk. Whole: anthropic and gemini
    # answer the status the error type implies, openai a 200 error body, responses a
    # 200 failed response.
    add(
        "stream_error",
        WIRES,
        streamed,
        scenarios=(Scenario.stream_error("Partial "), text),
        calls=1,
        chunks=("Partial ",),
        error="The provider reported an error mid-stream: Overloaded",
    )
    add(
        "stream_error",
        WIRES,
        (False,),
        scenarios=(Scenario.stream_error("Partial "), Scenario.stream_error("Partial ")),
        calls=2,
        error=lambda w, s: WHOLE_STREAM_ERRORS.get(w, "Overloaded"),
    )
    add(
        "finish_reason_error",
        ("o",),
        streamed,
        scenarios=(Scenario.finish_error("Partial "), text),
        calls=1,
        chunks=("Partial ",),
        error=FINISH_ERROR,
    )
    add(
        "finish_reason_error",
        ("o",),
        (False,),
        scenarios=(Scenario.finish_error("Partial "), Scenario.finish_error("Partial ")),
        calls=2,
        error=FINISH_ERROR,
    )
    add(
        "error_body_in_200",
        WIRES,
        both,
        scenarios=(Scenario.error_body(), Scenario.error_body()),
        calls=2,
        error="Provider returned error",
    )
    add(
        "stall",
        WIRES,
        streamed,
        scenarios=(Scenario.stall(), Scenario.stall()),
        calls=2,
        error=PROGRESS,
        inference=QUICK,
    )
    add(
        "stall",
        WIRES,
        (False,),
        scenarios=(Scenario.stall(), Scenario.stall()),
        calls=2,
        error=WHOLE_TIMEOUT,
        inference=WHOLE_QUICK,
    )
    add(
        "stall_after_text",
        WIRES,
        streamed,
        scenarios=(Scenario.stall("Partial "), text),
        calls=1,
        chunks=("Partial ",),
        error=PROGRESS,
        inference=QUICK,
    )
    add(
        "connection_cut",
        WIRES,
        streamed,
        scenarios=(Scenario.cut("Partial "), text),
        calls=1,
        chunks=("Partial ",),
        error=BROKE,
    )
    add(
        "connection_cut_before_text",
        WIRES,
        streamed,
        scenarios=(Scenario.cut(""), Scenario.cut("")),
        calls=2,
        error=BROKE,
    )
    add(
        "connection_cut",
        WIRES,
        (False,),
        scenarios=(Scenario.cut("Partial "), Scenario.cut("Partial ")),
        calls=2,
        error=BROKE_WHOLE,
    )
    add(
        "no_terminal",
        WIRES,
        streamed,
        scenarios=(Scenario.cut("Partial ", clean=True), text),
        calls=1,
        chunks=("Partial ",),
        error=ENDED,
    )
    add(
        "no_terminal_before_text",
        WIRES,
        streamed,
        scenarios=(Scenario.cut("", clean=True), Scenario.cut("", clean=True)),
        calls=2,
        error=ENDED,
    )
    add(
        "no_terminal",
        WIRES,
        (False,),
        scenarios=(Scenario.cut("Partial ", clean=True), Scenario.cut("Partial ", clean=True)),
        calls=2,
        error=NOT_JSON,
    )
    add(
        "terminal_dropped_by_a_plugin",
        WIRES,
        streamed,
        scenarios=(text, text),
        calls=1,
        chunks=("Hello ", "there ", "friend"),
        error=NO_RESULT,
        plugins={"drop-terminal": DropTerminal()},
    )
    add(
        "refusal",
        WIRES,
        both,
        scenarios=(Scenario.refusal("I can't help with that."),),
        calls=1,
        chunks=("I ", "can't ", "help ", "with ", "that."),
        error=REFUSED,
    )
    add(
        "pause_turn",
        ("a",),
        both,
        scenarios=(Scenario.pause_turn("Still working on it."),),
        calls=1,
        chunks=("Still ", "working ", "on ", "it."),
        error=PAUSED,
    )
    add(
        "tool_use",
        WIRES,
        both,
        scenarios=(Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Let me check. "),),
        calls=1,
        chunks=("Let ", "me ", "check. "),
        error=TOOL,
    )
    # A tool_use stop with no tool block (no call came with it): still a stop to call one.
    # Only the wires with a stop token of their own for a tool call can say this: the
    # Responses API and Gemini signal a call by its output item or part alone.
    add(
        "tool_use_without_a_call",
        ("a", "o"),
        both,
        scenarios=lambda w, s: (
            Scenario.text("Let me check.", raw_stop="tool_use" if w == "a" else "tool_calls"),
        ),
        calls=1,
        chunks=("Let ", "me ", "check."),
        error=TOOL_STOP,
    )
    add(
        "tool_use_cut_at_max_tokens",
        WIRES,
        both,
        scenarios=(
            Scenario.tool_use("get_weather", {"city": "Oslo"}, text="Checking. ", cut=True),
        ),
        calls=1,
        chunks=("Checking. ",),
        error=TOOL_CUT,
    )
    return out


# -- XML tool mode (provider x): the reference's XML list ---------------------------------

XML = ("x",)
XML_TOOL = "The model called a tool (search_notes), and inference/request offers none"
XML_MARKUP = "The model wrote tool-call markup, and inference/request offers no tools"
XML_OPEN = (
    "The model's output ended with a tool-call block still open, "
    "and inference/request offers no tools"
)
# The Anthropic wire has no bare finish_reason "error": a stop token "error" is one no
# adapter maps, answered as such.
XML_ERROR_STOP = (
    "The provider ended the inference with stop token 'error', "
    "which agentcore has no stop reason for"
)
CALL_BLOCK = (
    '\n<function_calls>\n<invoke name="search_notes">\n'
    '<parameter name="query">tides</parameter>\n</invoke>\n'
)


def said(*chunks: str, stop: str = "end_turn", **options: Any) -> Scenario:
    """The model's text in exactly these deltas (a whole reply carries it in one piece);
    the first starts with the space a model writes after the open turn's ``Assistant:``."""
    return Scenario.text("".join(chunks), chunks=chunks, stop=stop, model=SERVED, **options)


def prefixed(markup: str) -> str:
    """The markup with its tags in the ``antml:`` form, which no stop sequence matches."""
    for name in ("function_calls", "invoke", "parameter"):
        markup = markup.replace(f"<{name}", f"<{PREFIX}{name}")
        markup = markup.replace(f"</{name}", f"</{PREFIX}{name}")
    return markup


def xml_cases() -> list[Case]:
    both = (True, False)
    summary = said(" A summ", "ary of the notes.", input_tokens=9, output_tokens=6)
    out = expand(
        "xml_end_turn",
        XML,
        both,
        scenarios=(summary,),
        calls=1,
        chunks=("A summ", "ary of the notes."),
        result=result("A summary of the notes.", "end_turn", 9, 6),
    )
    out += expand(
        "xml_max_tokens",
        XML,
        both,
        scenarios=(said(" A summ", "ary of", stop="max_tokens", output_tokens=64),),
        calls=1,
        chunks=("A summ", "ary of"),
        result=result("A summary of", "max_tokens", 12, 64),
    )
    out += expand(
        "xml_stop_sequence",
        XML,
        both,
        scenarios=(
            said(" A summ", "ary.", stop="stop_sequence", sequence="\nUser:", output_tokens=3),
        ),
        calls=1,
        chunks=("A summ", "ary."),
        result=result("A summary.", "stop_sequence", 12, 3),
    )
    out += expand(
        "xml_provider_error_partway",
        XML,
        (True,),
        scenarios=(Scenario.stream_error(" A summ", chunks=(" A summ",)), summary),
        calls=1,
        chunks=("A summ",),
        error="The provider reported an error mid-stream: Overloaded",
    )
    out += expand(
        "xml_provider_error",
        XML,
        (False,),
        scenarios=(Scenario.stream_error(" A summ"), Scenario.stream_error(" A summ")),
        calls=2,
        error="The provider answered HTTP 529: Overloaded",
    )
    out += expand(
        "xml_timeout_partway",
        XML,
        (True,),
        scenarios=(Scenario.stall(" A summ", chunks=(" A summ",)), summary),
        calls=1,
        chunks=("A summ",),
        error=PROGRESS,
        inference=QUICK,
    )
    out += expand(
        "xml_timeout",
        XML,
        (False,),
        scenarios=(Scenario.stall(), Scenario.stall()),
        calls=2,
        error=WHOLE_TIMEOUT,
        inference=WHOLE_QUICK,
    )
    out += expand(
        "xml_refusal",
        XML,
        both,
        scenarios=(said(" I can't", " help with that.", stop="refusal"),),
        calls=1,
        chunks=("I can't", " help with that."),
        error=REFUSED,
    )
    out += expand(
        "xml_error_stop",
        XML,
        both,
        scenarios=(said(" A summ", raw_stop="error"),),
        calls=1,
        chunks=("A summ",),
        error=XML_ERROR_STOP,
    )
    # The provider stops at </function_calls> and does not echo it: the block closes there.
    out += expand(
        "xml_tool_call",
        XML,
        both,
        scenarios=(
            said(
                " Let me look.",
                CALL_BLOCK[:10],
                CALL_BLOCK[10:],
                stop="stop_sequence",
                sequence="</function_calls>",
            ),
        ),
        calls=1,
        chunks=("Let me look.", "\n"),
        error=XML_TOOL,
    )
    # The model closes the block itself, in the prefixed form no stop sequence matches, and
    # writes on (results it made up), then the provider stalls: the host reads the call,
    # closes the provider call at once, and answers.
    written_close = prefixed(CALL_BLOCK + "</function_calls>")
    out += expand(
        "xml_tool_call_provider_writes_on",
        XML,
        (True,),
        scenarios=(
            Scenario.stall(
                "",
                chunks=(" Let me look.", written_close, "\n<function_results>sunny"),
                model=SERVED,
            ),
        ),
        calls=1,
        chunks=("Let me look.", "\n"),
        error=XML_TOOL,
        cut_short=True,
    )
    out += expand(
        "xml_tool_call_provider_writes_on",
        XML,
        (False,),
        scenarios=(said(" Let me look.", written_close, "\n<function_results>made up"),),
        calls=1,
        error=XML_TOOL,
    )
    out += expand(
        "xml_tool_call_cut_at_max_tokens",
        XML,
        both,
        scenarios=(said(" On it.", CALL_BLOCK[:60], stop="max_tokens"),),
        calls=1,
        chunks=("On it.", "\n"),
        error=XML_OPEN,
    )
    out += expand(
        "xml_empty_block",
        XML,
        both,
        scenarios=(
            said(
                " Hmm.",
                "\n<function_calls>\n",
                stop="stop_sequence",
                sequence="</function_calls>",
            ),
        ),
        calls=1,
        chunks=("Hmm.", "\n"),
        error=XML_MARKUP,
    )
    out += expand(
        "xml_invoke_without_name",
        XML,
        both,
        scenarios=(
            said(
                " Hmm.",
                CALL_BLOCK.replace(' name="search_notes"', ""),
                stop="stop_sequence",
                sequence="</function_calls>",
            ),
        ),
        calls=1,
        chunks=("Hmm.", "\n"),
        error=XML_MARKUP,
    )
    out += expand(
        "xml_prose_names_function_calls",
        XML,
        both,
        scenarios=(said(" To call a tool I write ", "<function_calls> and wait."),),
        calls=1,
        chunks=("To call a tool I write ",),
        error=XML_OPEN,
    )
    out += expand(
        "xml_thinking",
        XML,
        both,
        scenarios=(
            said(
                " <thinking>Which memories",
                " matter?</thinking>",
                "They met twice.",
                output_tokens=11,
            ),
        ),
        calls=1,
        chunks=("They met twice.",),
        result=result("They met twice.", "end_turn", 12, 11),
    )
    out += expand(
        "xml_thinking_cut_at_max_tokens",
        XML,
        both,
        scenarios=(said(" Noted.", " <thinking>Which memo", stop="max_tokens", output_tokens=8),),
        calls=1,
        chunks=("Noted.", " "),
        result=result("Noted. ", "max_tokens", 12, 8),
    )
    out += expand(
        "xml_function_results_in_prose",
        XML,
        both,
        scenarios=(said(" Results arrive in <function_", "results> blocks.", output_tokens=9),),
        calls=1,
        chunks=("Results arrive in ", "<function_results> blocks."),
        result=result("Results arrive in <function_results> blocks.", "end_turn", 12, 9),
    )
    return out


CASES = cases() + xml_cases()


def params(wire: str, stream: bool) -> dict[str, Any]:
    return {
        "featureSet": f"fs.{wire}",
        "conversationId": "conv_e2e",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": PROMPT},
        ],
        "preferences": {"maxTokens": MAX_TOKENS, "temperature": 0.2},
    }


def matches(expected: str | re.Pattern[str], actual: Any) -> bool:
    if isinstance(expected, re.Pattern):
        return isinstance(actual, str) and expected.fullmatch(actual) is not None
    return bool(expected == actual)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_answer(rig: RigFactory, case: Case) -> None:
    r = await rig(inference=case.inference, plugins=case.plugins)
    r.provider.script(*case.scenarios, provider=case.wire)
    rid = await r.server.request("inference/request", params(case.wire, case.stream))
    answer = await r.server.answer(rid)
    assert answer.message.get("result", answer.message.get("error"))
    await r.provider.wait_idle(connections=False)  # the provider saw every call end
    check(case, rid, r.server.transcript(rid), r.traces.mcpl(rid), r.provider)


def check(
    case: Case,
    rid: Any,
    seen: list[tuple[Any, ...]],
    traces: list[dict[str, Any]],
    provider: LoopbackServer,
) -> None:
    """What reached the server for request `rid` (`seen`: its chunks and answer, in arrival
    order), its ``mcpl:*`` traces, and what the provider was asked, against `case`."""
    # Chunks (streamed only), then the one answer.
    chunks = case.chunks if case.stream else ()
    assert seen[:-1] == [("chunk", i, delta) for i, delta in enumerate(chunks)]
    kind, body = seen[-1]
    start = {
        "type": "mcpl:inference_start",
        "model": MODELS[case.wire],
        "featureSet": f"fs.{case.wire}",
        "serverId": "srv",
        "requestId": rid,
        "streamed": case.stream,
    }
    if case.result is not None:
        assert (kind, body) == ("result", case.result)
        assert traces == [
            start,
            {
                "type": "mcpl:inference_complete",
                "model": case.result["model"],
                "inputTokens": case.result["usage"]["inputTokens"],
                "outputTokens": case.result["usage"]["outputTokens"],
                # What each wire says of the cache is tested in tests/providers and test_spend.
                "cacheReadTokens": traces[-1].get("cacheReadTokens"),
                "cacheWriteTokens": traces[-1].get("cacheWriteTokens"),
                "costUsd": None,  # the loopback's models have no price
                "finishReason": case.result["finishReason"],
                "serverId": "srv",
                "requestId": rid,
                "streamed": case.stream,
            },
        ]
    else:
        assert case.error is not None
        assert kind == "error"
        # Exactly code and message: no data, and no partial text anywhere in it.
        assert set(body) == {"code", "message"}, body
        assert body["code"] == -32603
        assert matches(case.error, body["message"]), body["message"]
        if chunks:
            assert "".join(chunks).strip() not in body["message"]
        assert len(traces) == 2 and traces[0] == start, traces
        fail = dict(traces[1])
        assert matches(case.error, fail.pop("error"))
        assert fail == {
            "type": "mcpl:inference_fail",
            "model": MODELS[case.wire],
            "serverId": "srv",
            "requestId": rid,
            "streamed": case.stream,
        }

    # The provider saw the request as asked, and as many calls as the case says:
    # a failure after a chunk is never retried, so its second scenario stays queued.
    calls = provider.calls_to(provider=case.wire)
    assert len(calls) == case.calls, calls
    assert provider.pending(case.wire) == len(case.scenarios) - case.calls
    for call in calls:
        assert call.stream is case.stream
        assert call.model == MODELS[case.wire].split(":", 1)[1]
        assert asked(call.wire, call.body) == (MAX_TOKENS, 0.2)
        assert PROMPT in str(call.body) and "Be brief." in str(call.body)
        if case.wire in XML:  # the prefill transcript, and XML tool mode's stop sequences
            assert call.body["messages"] == [
                {"role": "user", "content": [{"type": "text", "text": f"User: {PROMPT}"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Assistant:"}]},
            ]
            assert call.body["stop_sequences"] == ["</function_calls>", "\nUser:"]
            assert "tools" not in call.body
    if case.cut_short:  # the provider call was closed while the provider was still writing
        assert calls[-1].disconnected


def asked(wire: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """The output limit and temperature a request body asks for, wherever its wire puts them."""
    if wire == "gemini":
        config = body["generationConfig"]
        return config["maxOutputTokens"], config["temperature"]
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if name in body:
            return body[name], body["temperature"]
    raise AssertionError(f"no output limit in {body}")


XML_CASES = [c for c in CASES if c.wire in XML]


@pytest.mark.parametrize("transport", ["stdio"])
async def test_xml_answers_through_serve(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """The XML cases once more, through `agentcore serve` (a real subprocess) serving the
    stdio server: one serve per set of [inference] settings, the traces from its file."""
    groups: dict[str, list[Case]] = {}
    for case in XML_CASES:
        groups.setdefault(json.dumps(case.inference, sort_keys=True), []).append(case)
    for n, group in enumerate(groups.values()):
        traces = tmp_path / f"traces-{n}.jsonl"
        settings = loopback_settings(
            PROVIDERS,
            name=f"serve-{n}.toml",
            inference={**INFERENCE, **group[0].inference},
            sections={
                **settings_sections(hub, {"srv": hub.config("srv")}),
                "traces": {"jsonl": str(traces)},
            },
        )
        async with serving(settings) as served:
            session = await hub.next_session()
            await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
            for case in group:
                loopback_provider.reset()
                loopback_provider.script(*case.scenarios, provider=case.wire)
                rid = await session.request("inference/request", params(case.wire, case.stream))
                await session.answer(rid)
                await loopback_provider.wait_idle(connections=False)
                written = read_jsonl(traces)
                mcpl = [
                    {k: v for k, v in e.items() if k != "timestamp"}
                    for e in written
                    if e["type"].startswith("mcpl:") and e.get("requestId") == rid
                ]
                check(case, rid, session.transcript(rid), mcpl, loopback_provider)
            code, _, stderr = await served.stop()
        assert code == 0, stderr
        assert session.unanswered_or_twice() == {}


# What `agentcore infer` says for a failure (the kernel's error, as `describe` puts it);
# for every other ending it says what the router says, naming itself as the caller.
INFER_FAILURES = {
    "xml_provider_error_partway": (
        "the inference failed: overloaded: The provider reported an error mid-stream: Overloaded"
    ),
    "xml_provider_error": "the inference failed: overloaded 529: Overloaded",
    "xml_error_stop": f"the inference failed: unknown: {XML_ERROR_STOP}",
    "xml_timeout": f"the inference failed: timeout: {WHOLE_TIMEOUT}",
}


INFER_PARTS = 2
"""The XML cases of each mode are shared out over this many tests, every case in exactly one:
each case is an `agentcore infer` process of its own, and all of a mode's in one test came
near the per-test time limit on a busy machine."""


@pytest.mark.parametrize("part", range(INFER_PARTS), ids=lambda part: f"part{part + 1}")
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_xml_answers_through_infer(
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    stream: bool,
    part: int,
) -> None:
    """The XML cases through `agentcore infer` (a real subprocess each, a few at a time,
    each on a provider of its own): streamed, the chunks are what it prints; whole, the
    result object it prints with ``--json``; a failure exits 1 saying why on stderr."""
    cases = [c for c in XML_CASES if c.stream is stream][part::INFER_PARTS]
    names = [f"x{i}" for i in range(len(cases))]
    settings = loopback_settings(
        dict.fromkeys(names, PROVIDERS["x"]), inference=INFERENCE, sections={"retry": RETRY}
    )
    for name, case in zip(names, cases, strict=True):
        loopback_provider.script(*case.scenarios, provider=name)
    gate = asyncio.Semaphore(4)

    async def infer(name: str, case: Case) -> tuple[int, str, str, list[dict[str, Any]]]:
        traces = tmp_path / f"{name}.jsonl"
        env = {
            **os.environ,
            "AGENTCORE_TRACES__JSONL": str(traces),
            **{f"AGENTCORE_INFERENCE__{k.upper()}": str(v) for k, v in case.inference.items()},
        }
        args = ["--stream"] if stream else ["--no-stream", "--json"]
        async with gate:
            process = await asyncio.create_subprocess_exec(
                AGENTCORE,
                "infer",
                "--settings",
                str(settings),
                "--model",
                f"{name}:{MODELS['x'].split(':', 1)[1]}",
                "--max-tokens",
                str(MAX_TOKENS),
                *args,
                PROMPT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
        written = read_jsonl(traces)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode(), written

    ran = await asyncio.gather(*(infer(n, c) for n, c in zip(names, cases, strict=True)))
    await loopback_provider.wait_idle(connections=False)
    for name, case, (code, out, err, traces) in zip(names, cases, ran, strict=True):
        printed = "".join(case.chunks) + "\n" if stream and case.chunks else ""
        ends = [t for t in traces if t["type"] in ("inference:complete", "inference:fail")]
        assert len(ends) == 1, (case.id, traces)
        if case.result is not None:
            assert (code, err) == (0, ""), (case.id, err)
            assert out == (printed if stream else json.dumps(case.result) + "\n"), case.id
            assert ends[0]["type"] == "inference:complete", case.id
            assert ends[0]["finishReason"] == case.result["finishReason"], case.id
        else:
            assert (code, out) == (1, printed), (case.id, out)
            assert isinstance(case.error, str)
            said = INFER_FAILURES.get(
                case.row, case.error.replace("inference/request", "agentcore infer")
            )
            assert err.splitlines()[-1] == f"agentcore: {said}", (case.id, err)
        calls = loopback_provider.calls_to(provider=name)
        assert len(calls) == case.calls, case.id
        assert all(c.body["stop_sequences"] == ["</function_calls>", "\nUser:"] for c in calls)
        assert all(c.stream is stream for c in calls)
        if case.cut_short:
            assert calls[-1].disconnected, case.id


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    "first",
    [
        pytest.param(Scenario.rate_limit(retry_after=0), id="429"),
        pytest.param(Scenario.overloaded(), id="529"),
        # Thinking is invisible: a failure after it is still before the first chunk.
        pytest.param(
            Scenario.stream_error("", thought="Hmm, let me see."),
            id="error-after-thinking",
        ),
    ],
)
async def test_retries_happen_before_the_first_chunk(
    rig: RigFactory, wire: str, first: Scenario
) -> None:
    r = await rig()
    second = Scenario.text("Fresh attempt here", model=SERVED)
    r.provider.script(first, second, provider=wire)
    rid = await r.server.request("inference/request", params(wire, True))
    answer = await r.server.answer(rid)
    assert answer.result == result("Fresh attempt here", "end_turn", 12, 3)
    assert r.server.transcript(rid) == [
        ("chunk", 0, "Fresh "),
        ("chunk", 1, "attempt "),
        ("chunk", 2, "here"),
        ("result", answer.result),
    ]
    assert len(r.provider.calls_to(provider=wire)) == 2
    retries = [e for e in r.traces.of("inference:retry") if e.get("model") == MODELS[wire]]
    assert [e["attempt"] for e in retries] == [1]
    # The kernel's own traces carry the server that asked.
    complete = r.traces.of("inference:complete")
    assert [e["serverId"] for e in complete] == ["srv"]
    assert complete[0]["attempts"] == 2


class TerminalLosingKernel(Kernel):
    """A kernel whose stream ends with no terminal event. `Kernel.stream` always ends with
    one (a plugin that drops it gets the kernel's own failure, above), so only another
    kernel reaches the router's own check that a stream brought a result."""

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        async with aclosing(super().stream(request)) as events:
            async for event in events:
                if not isinstance(event, TERMINAL_TYPES):
                    yield event


@pytest.mark.parametrize("wire", WIRES)
async def test_a_kernel_stream_with_no_terminal_is_answered_by_the_router(
    rig: RigFactory, wire: str
) -> None:
    r = await rig(kernel_type=TerminalLosingKernel)
    r.provider.script(Scenario.text("Hello there friend", model=SERVED), provider=wire)
    rid = await r.server.request("inference/request", params(wire, True))
    await r.server.answer(rid)
    assert r.server.transcript(rid) == [
        ("chunk", 0, "Hello "),
        ("chunk", 1, "there "),
        ("chunk", 2, "friend"),
        ("error", {"code": -32603, "message": NO_RESULT}),
    ]
    assert [(t["type"], t.get("error")) for t in r.traces.mcpl(rid)] == [
        ("mcpl:inference_start", None),
        ("mcpl:inference_fail", NO_RESULT),
    ]
