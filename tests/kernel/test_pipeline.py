"""The inference pipeline: complete() and stream() through echo and scripted providers,
retries and backoff waits, timeouts, cancellation, shutdown, traces and the JSONL sink."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from kernel_support import (
    Stall,
    Traces,
    collect,
    reply,
    request,
    response,
    server_error,
    text_of,
)

from agentcore import hookimpl
from agentcore.inference import (
    NO_TERMINAL,
    PROGRESS_TIMEOUT,
    REQUEST_TIMEOUT,
    SHUTTING_DOWN,
    Aborted,
    BlockStart,
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    Retrying,
    Token,
)
from agentcore.inference.calls import GiveUp, Retry
from agentcore.testing.serve import read_jsonl
from agentcore.traces import JsonlTraceSink

GUARD_S = 5.0
"""A bound on waits that end at once when the kernel works (a stall reached, a stop's
terminal): a guard against hanging, never a timing. 1-2 s left a loaded machine (a worker's
first test also importing on first use) little room; each case still fails on a wrong
outcome, and on a hang (its stalls run 30 s)."""


class Policy:
    """A retry policy scripted by the test: one decision per failed attempt."""

    def __init__(self, *decisions: Retry | GiveUp | None) -> None:
        self.decisions = list(decisions)
        self.asked: list[tuple[int, str]] = []
        self.waits: list[tuple[str, str, float | None]] = []
        self.ends: list[tuple[int, str | None]] = []

    @hookimpl
    def on_inference_error(self, attempt, error):
        self.asked.append((attempt.number, error.kind))
        return self.decisions.pop(0) if self.decisions else None

    @hookimpl
    def on_attempt_end(self, attempt, error):
        self.ends.append((attempt.number, error and error.kind))

    @hookimpl
    def on_wait_start(self, wait):
        self.waits.append(("start", wait.reason, wait.until and wait.until - wait.started))

    @hookimpl
    async def on_wait_end(self, wait):
        self.waits.append(("end", wait.reason, None))


# -- the echo provider ----------------------------------------------------------------


async def test_stream_and_complete_through_the_echo_provider(make_kernel):
    traces = Traces()
    kernel = make_kernel(plugins={"traces": traces})
    echo = Request("echo:any-model", [Message.user("hello big world")])
    async with kernel:
        events = await collect(kernel.stream(echo))
        whole = await kernel.complete(echo)
    assert [e.text for e in events if isinstance(e, Token)] == ["hello ", "big ", "world"]
    final = events[-1]
    assert isinstance(final, Complete)
    assert final.response.text == "hello big world"
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (3, 3)
    assert final.response.stop.reason == "end_turn"
    assert whole.text == "hello big world"
    assert whole.model_served == "any-model"
    assert traces.types == ["inference:start", "inference:complete"] * 2


async def test_echo_cuts_at_max_tokens(make_kernel):
    kernel = make_kernel()
    cut = Request("echo:m", [Message.user("one two three four")], max_tokens=2)
    async with kernel:
        events = await collect(kernel.stream(cut))
    final = events[-1]
    assert isinstance(final, Complete)
    assert final.response.text == "one two "
    assert final.response.stop.reason == "max_tokens"


async def test_an_unknown_provider_or_bad_reference_fails_the_stream(make_kernel):
    kernel = make_kernel()
    async with kernel:
        (unknown,) = await collect(kernel.stream(request("nobody:m")))
        (malformed,) = await collect(kernel.stream(request("no-colon")))
        with pytest.raises(InferenceError, match="no provider named 'nobody'"):
            await kernel.complete(request("nobody:m"))
    assert isinstance(unknown, Failed)
    assert "no provider named 'nobody'" in str(unknown.error)
    assert isinstance(malformed, Failed)
    assert "NAME:MODEL" in str(malformed.error)


# -- retries ---------------------------------------------------------------------------


async def test_stream_retries_after_the_delay_a_plugin_decides(make_kernel, scripted):
    provider = scripted(
        [BlockStart(1, "thinking"), Token("hmm", "thinking", 1, False), server_error("busy")],
        reply("hello again"),
    )
    policy, traces = Policy(Retry(0.03)), Traces()
    kernel = make_kernel(plugins={"policy": policy, "traces": traces})
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert len(provider.calls) == 2
    kinds = [type(e).__name__ for e in events]
    # the failed attempt's invisible events, then Retrying, then the fresh attempt
    assert kinds[:3] == ["BlockStart", "Token", "Retrying"]
    retrying = events[2]
    assert isinstance(retrying, Retrying)
    assert (retrying.attempt, retrying.delay_s, retrying.error.message) == (1, 0.03, "busy")
    assert text_of(events) == "hello again"
    assert isinstance(events[-1], Complete)
    assert policy.asked == [(1, "server")]
    assert policy.ends == [(1, "server"), (2, None)]
    assert policy.waits == [
        ("start", "backoff", pytest.approx(0.03, abs=0.01)),
        ("end", "backoff", None),
    ]
    (retry,) = traces.of("inference:retry")
    assert retry["attempt"] == 1
    assert retry["delayMs"] == 30
    assert retry["error"] == "server 503: busy"
    (done,) = traces.of("inference:complete")
    assert done["attempts"] == 2


async def test_complete_retries_after_the_delay_a_plugin_decides(make_kernel, scripted):
    provider = scripted([server_error("first")], [server_error("second")], [response("third")])
    policy, traces = Policy(Retry(0.01), Retry(0.02)), Traces()
    kernel = make_kernel(plugins={"policy": policy, "traces": traces})
    async with kernel:
        result = await kernel.complete(request())
    assert result.text == "third"
    assert len(provider.calls) == 3
    assert policy.asked == [(1, "server"), (2, "server")]
    assert [(t["attempt"], t["delayMs"], t["error"]) for t in traces.of("inference:retry")] == [
        (1, 10, "server 503: first"),
        (2, 20, "server 503: second"),
    ]
    assert [w[:2] for w in policy.waits] == [("start", "backoff"), ("end", "backoff")] * 2


@pytest.mark.parametrize(
    "decision",
    [None, GiveUp(), GiveUp(InferenceError("quota", "the policy's own words"))],
    ids=["nobody-decides", "give-up", "give-up-with-error"],
)
async def test_giving_up_fails_the_stream(decision, make_kernel, scripted):
    provider = scripted([server_error("down")])
    policy, traces = Policy(decision, decision), Traces()
    kernel = make_kernel(plugins={"policy": policy, "traces": traces})
    async with kernel:
        (failed,) = await collect(kernel.stream(request()))
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    expected = decision.error if isinstance(decision, GiveUp) and decision.error else None
    message = str(expected) if expected else "down"
    assert isinstance(failed, Failed)
    assert str(failed.error) == message
    assert str(caught.value) == message
    assert len(provider.calls) == 2  # one attempt each, no retry
    fails = traces.of("inference:fail")
    assert [f["streamed"] for f in fails] == [True, False]
    assert all(f["error"].endswith(message) for f in fails)
    assert all(f["attempts"] == 1 for f in fails)


async def test_no_retry_once_a_visible_token_reached_the_consumer(make_kernel, scripted):
    failure = Failed(server_error("cut mid-stream"))
    provider = scripted([BlockStart(0, "text"), Token("partial", "text"), failure])
    policy = Policy(Retry(0.001))
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert text_of(events) == "partial"
    assert events[-1] is failure  # the provider's own terminal reaches the consumer
    assert not any(isinstance(e, Retrying) for e in events)
    assert policy.asked == []
    assert policy.ends == [(1, "server")]
    assert len(provider.calls) == 1


async def test_no_retry_after_a_visible_token_when_the_provider_raises(make_kernel, scripted):
    scripted([Token("partial", "text"), server_error("connection reset")])
    policy = Policy(Retry(0.001))
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert isinstance(events[-1], Failed)
    assert str(events[-1].error) == "connection reset"
    assert policy.asked == []


async def test_a_provider_stream_with_no_terminal_fails_no_terminal(make_kernel, scripted):
    scripted([BlockStart(0, "text"), Token("cut", "text")])
    kernel = make_kernel()
    async with kernel:
        events = await collect(kernel.stream(request()))
    final = events[-1]
    assert isinstance(final, Failed)
    assert final.error.code == NO_TERMINAL
    assert "ended without a result" in str(final.error)


# -- timeouts ------------------------------------------------------------------------------


async def test_a_stalled_stream_is_cut_by_the_progress_timeout(make_kernel, scripted):
    provider = scripted([BlockStart(0, "text"), Token("slow", "text"), Stall(30)])
    kernel = make_kernel(env={"AGENTCORE_INFERENCE__PROGRESS_TIMEOUT_S": "0.05"})
    async with kernel:
        events = await asyncio.wait_for(collect(kernel.stream(request())), GUARD_S)
    final = events[-1]
    assert isinstance(final, Aborted)
    assert final.reason == "timeout"
    assert final.error.code == PROGRESS_TIMEOUT
    assert "progress_timeout_s" in str(final.error)
    assert provider.endings == ["CancelledError"]  # the provider call was stopped


async def test_a_progress_timeout_before_anything_visible_is_offered_for_retry(
    make_kernel, scripted
):
    provider = scripted([BlockStart(0, "text"), Stall(30)], reply("awake"))
    policy = Policy(Retry(0.001))
    kernel = make_kernel(
        plugins={"policy": policy}, env={"AGENTCORE_INFERENCE__PROGRESS_TIMEOUT_S": "0.05"}
    )
    async with kernel:
        events = await asyncio.wait_for(collect(kernel.stream(request())), GUARD_S)
    assert policy.asked == [(1, "timeout")]
    assert text_of(events) == "awake"
    assert provider.endings == ["CancelledError", "finished"]


async def test_a_slow_stream_is_cut_by_the_request_timeout(make_kernel, scripted):
    trickle = [x for _ in range(200) for x in (Token("tick ", "text"), Stall(0.01))]
    provider = scripted(trickle)
    kernel = make_kernel(
        env={
            "AGENTCORE_INFERENCE__PROGRESS_TIMEOUT_S": "1",
            "AGENTCORE_INFERENCE__REQUEST_TIMEOUT_S": "0.1",
        }
    )
    async with kernel:
        events = await asyncio.wait_for(collect(kernel.stream(request())), GUARD_S)
    final = events[-1]
    assert isinstance(final, Aborted)
    assert final.error.code == REQUEST_TIMEOUT
    assert "request_timeout_s" in str(final.error)
    assert len(text_of(events)) > 0
    assert provider.endings[0] in {"CancelledError", "GeneratorExit"}


async def test_complete_is_cut_by_the_request_timeout(make_kernel, scripted):
    provider = scripted([Stall(30)])
    kernel = make_kernel(env={"AGENTCORE_INFERENCE__REQUEST_TIMEOUT_S": "0.05"})
    async with kernel:
        with pytest.raises(InferenceError) as caught:
            await asyncio.wait_for(kernel.complete(request()), GUARD_S)
    assert caught.value.code == REQUEST_TIMEOUT
    assert len(provider.calls) == 1


async def test_a_slow_consumer_is_not_cancelled_by_the_watchdog(make_kernel, scripted):
    """The watchdog cancels only while the kernel waits on the provider; a consumer busy
    with its own await when the deadline passes sees an Aborted terminal instead."""
    scripted([Token("one", "text"), Token("two", "text"), Complete(response("one two"))])
    kernel = make_kernel(env={"AGENTCORE_INFERENCE__PROGRESS_TIMEOUT_S": "0.03"})
    events = []
    async with kernel, contextlib.aclosing(kernel.stream(request())) as stream:
        async for event in stream:
            events.append(event)
            await asyncio.sleep(0.06)  # the consumer's own await is never cut
    assert isinstance(events[-1], Aborted)
    assert events[-1].error.code == PROGRESS_TIMEOUT


# -- cancellation and shutdown ------------------------------------------------------------


async def test_leaving_the_loop_early_closes_the_provider_call(make_kernel, scripted):
    provider = scripted([Token("first", "text"), Token("second", "text"), Stall(30)])
    policy = Policy()
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        async with contextlib.aclosing(kernel.stream(request())) as stream:
            async for event in stream:
                if isinstance(event, Token):
                    break
        # closed at once: nothing waited for the stall or the rest of the stream
        assert provider.endings == ["GeneratorExit"]
        assert policy.ends == [(1, "cancelled")]
    assert provider.closed


async def test_cancelling_the_consumer_task_stops_the_provider_call(make_kernel, scripted):
    provider = scripted([Token("first", "text"), Stall(30)])
    policy = Policy(Retry(0.001))
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        consumer = asyncio.ensure_future(collect(kernel.stream(request())))
        await asyncio.wait_for(provider.stalled.wait(), GUARD_S)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        assert provider.endings == ["CancelledError"]
        assert policy.ends == [(1, "cancelled")]
        assert policy.asked == []  # a cancellation is not retried


async def test_cancelling_a_complete_stops_the_provider_call(make_kernel, scripted):
    provider = scripted([Stall(30)])
    policy = Policy()
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        call = asyncio.ensure_future(kernel.complete(request()))
        await asyncio.wait_for(provider.stalled.wait(), GUARD_S)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert policy.ends == [(1, "cancelled")]


@pytest.mark.parametrize("how", ["leave", "cancel-stream", "cancel-complete"])
async def test_a_cancelled_inference_ends_with_a_fail_trace(make_kernel, scripted, how):
    provider = scripted(
        [Token("first", "text"), Stall(30)] if how != "cancel-complete" else [Stall(30)]
    )
    traces = Traces()
    kernel = make_kernel(plugins={"traces": traces})
    async with kernel:
        if how == "leave":
            async with contextlib.aclosing(kernel.stream(request())) as stream:
                async for _ in stream:
                    break
        else:
            run = (
                collect(kernel.stream(request()))
                if how == "cancel-stream"
                else kernel.complete(request())
            )
            task = asyncio.ensure_future(run)
            await asyncio.wait_for(provider.stalled.wait(), GUARD_S)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert traces.types == ["inference:start", "inference:fail"]
    assert traces.of("inference:fail")[0]["errorKind"] == "cancelled"


class BlockingPolicy(Policy):
    """Retries after a long backoff and says when the wait began."""

    def __init__(self) -> None:
        super().__init__(Retry(30))
        self.waiting = asyncio.Event()

    @hookimpl
    def on_wait_start(self, wait):
        super().on_wait_start(wait)
        self.waiting.set()


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_stopping_the_kernel_during_a_backoff_fails_the_inference(
    streamed, make_kernel, scripted
):
    provider = scripted([server_error()])
    policy, traces = BlockingPolicy(), Traces()
    kernel = make_kernel(plugins={"policy": policy, "traces": traces})
    await kernel.start()
    if streamed:
        call = asyncio.ensure_future(collect(kernel.stream(request())))
    else:
        call = asyncio.ensure_future(kernel.complete(request()))
    await asyncio.wait_for(policy.waiting.wait(), GUARD_S)
    await kernel.stop()
    if streamed:
        events = await asyncio.wait_for(call, GUARD_S)
        assert isinstance(events[-2], Retrying)
        final = events[-1]
        assert isinstance(final, Aborted)
        error = final.error
    else:
        with pytest.raises(InferenceError) as caught:
            await asyncio.wait_for(call, GUARD_S)
        error = caught.value
    assert str(error) == "The host is shutting down"
    assert error.code == SHUTTING_DOWN
    assert [w[:2] for w in policy.waits] == [("start", "backoff"), ("end", "backoff")]
    assert len(provider.calls) == 1
    (fail,) = traces.of("inference:fail")
    assert fail["error"] == "cancelled: The host is shutting down"


async def test_a_stopped_kernel_admits_nothing(make_kernel, scripted):
    provider = scripted(reply("never"))
    kernel = make_kernel()
    await kernel.start()
    await kernel.stop()
    (final,) = await collect(kernel.stream(request()))
    assert isinstance(final, Failed)
    assert final.error.code == SHUTTING_DOWN
    assert len(provider.calls) == 0


# -- traces ----------------------------------------------------------------------------------


async def test_inference_traces_carry_their_fields(make_kernel, scripted):
    scripted(reply("two words"))
    traces = Traces()
    kernel = make_kernel(plugins={"traces": traces})
    async with kernel:
        await collect(kernel.stream(request()))
    start, complete = traces.events
    for event in (start, complete):
        assert isinstance(event["timestamp"], int)
        assert event["inferenceId"] == start["inferenceId"]
        assert event["model"] == "fake:m1"
    assert start["type"] == "inference:start"
    assert (start["provider"], start["streamed"]) == ("fake", True)
    assert complete["type"] == "inference:complete"
    assert (complete["inputTokens"], complete["outputTokens"]) == (3, 2)
    assert complete["finishReason"] == "end_turn"
    assert complete["modelServed"] == "m1-served"


async def test_traces_carry_the_mcpl_server_id(make_kernel, scripted):
    scripted([server_error()])
    traces = Traces()
    kernel = make_kernel(plugins={"traces": traces})
    asked = request()
    asked.metadata["serverId"] = "memory"
    async with kernel:
        await collect(kernel.stream(asked))
    assert [(t["type"], t["serverId"]) for t in traces.events] == [
        ("inference:start", "memory"),
        ("inference:fail", "memory"),
    ]


async def test_a_plugin_emits_traces_through_its_context(make_kernel):
    traces = Traces()

    class Emitter:
        @hookimpl
        async def agentcore_start(self, context):
            await context.emit("acme:ready", plugin=context.name)

    kernel = make_kernel(plugins={"traces": traces, "emitter": Emitter()})
    async with kernel:
        pass
    assert [(t["type"], t["plugin"]) for t in traces.events] == [("acme:ready", "emitter")]


async def test_the_jsonl_sink_writes_each_trace_as_it_happens(make_kernel, scripted, tmp_path):
    path = tmp_path / "out" / "traces.jsonl"
    path.parent.mkdir()  # a folder that does not exist is a settings error
    provider = scripted([Token("hi", "text"), Stall(30)])
    kernel = make_kernel(
        plugins={"jsonl-traces": JsonlTraceSink},
        env={"AGENTCORE_TRACES__JSONL": str(path)},
    )
    async with kernel:
        async with contextlib.aclosing(kernel.stream(request())) as stream:
            async for event in stream:
                assert isinstance(event, Token)
                # the inference is still running; its start is already on disk
                (line,) = path.read_text().splitlines()
                start = json.loads(line)
                assert start["type"] == "inference:start"
                assert start["model"] == "fake:m1"
                break
        assert provider.endings == ["GeneratorExit"]
        await kernel.emit("acme:note", someField=1)
        lines = [json.loads(x) for x in path.read_text().splitlines()]
    # leaving early ends the inference too: its fail trace says it was cancelled
    assert [x["type"] for x in lines] == ["inference:start", "inference:fail", "acme:note"]
    assert lines[1]["errorKind"] == "cancelled"
    assert lines[2]["someField"] == 1
    assert isinstance(lines[2]["timestamp"], int)


async def test_the_jsonl_sink_appends_across_kernels(make_kernel, scripted, tmp_path):
    path = tmp_path / "traces.jsonl"
    scripted(reply("hi"))
    for _ in range(2):
        kernel = make_kernel(
            plugins={"jsonl-traces": JsonlTraceSink}, env={"AGENTCORE_TRACES__JSONL": str(path)}
        )
        async with kernel:
            await collect(kernel.stream(request()))
    types = [json.loads(x)["type"] for x in path.read_text().splitlines()]
    assert types == ["inference:start", "inference:complete"] * 2


def test_a_reader_of_a_trace_file_being_written_takes_its_whole_lines_only(tmp_path):
    # A running serve appends as tests and tools read; a line can be seen half written
    # (a write that crosses a page boundary). U+2028 inside a string is not a line end.
    path = tmp_path / "traces.jsonl"
    assert read_jsonl(path) == []
    whole = json.dumps({"type": "acme:note", "text": "a\u2028b"}, ensure_ascii=False) + "\n"
    path.write_text(whole + '{"type": "mcpl:limit", "timestamp": 17', encoding="utf-8")
    assert read_jsonl(path) == [{"type": "acme:note", "text": "a\u2028b"}]
    with path.open("a", encoding="utf-8") as f:
        f.write("96578775}\n")
    assert [t["type"] for t in read_jsonl(path)] == ["acme:note", "mcpl:limit"]


async def test_the_jsonl_sink_keeps_a_trace_that_holds_a_lone_surrogate(make_kernel, tmp_path):
    # A peer can send one as a valid JSON escape: an MCPL request id "\ud800" (found by
    # tests/mcpl/test_fuzz.py). It has no UTF-8 form, so the line is written escaped.
    path = tmp_path / "traces.jsonl"
    kernel = make_kernel(
        plugins={"jsonl-traces": JsonlTraceSink}, env={"AGENTCORE_TRACES__JSONL": str(path)}
    )
    async with kernel:
        await kernel.emit("mcpl:inference_start", requestId="\ud800", featureSet="mémoire")
        await kernel.emit("acme:note", text="mémoire")
    first, second = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(first)["requestId"] == "\ud800"
    assert json.loads(first)["featureSet"] == "mémoire"
    assert '"text": "mémoire"' in second  # readable, not escaped, when it can be


async def test_the_jsonl_sink_keeps_the_traces_of_inferences_failed_by_shutdown(
    make_kernel, scripted, tmp_path
):
    path = tmp_path / "traces.jsonl"
    scripted([server_error()])
    policy = BlockingPolicy()
    kernel = make_kernel(
        plugins={"jsonl-traces": JsonlTraceSink, "policy": policy},
        env={"AGENTCORE_TRACES__JSONL": str(path)},
    )
    await kernel.start()
    call = asyncio.ensure_future(collect(kernel.stream(request())))
    await asyncio.wait_for(policy.waiting.wait(), GUARD_S)
    await kernel.stop()
    await asyncio.wait_for(call, GUARD_S)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["inference:start", "inference:retry", "inference:fail"]
    assert lines[-1]["error"] == "cancelled: The host is shutting down"


# -- providers that break their contract ----------------------------------------------------


class RefusesAtCall:
    """A provider whose stream() is a plain method that raises before any iteration."""

    name, kind = "fake", "scripted"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def stream(self, request, model):
        raise self.error

    async def complete(self, request, model):
        raise self.error

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    "error",
    [InferenceError("invalid_request", "needs a base_url"), KeyError("choices")],
    ids=["inference-error", "bug"],
)
async def test_a_provider_that_raises_at_call_ends_the_stream_with_one_terminal(
    error, make_kernel, scripted, log_lines
):
    from agentcore.testing import ProviderKindsPlugin

    traces = Traces()
    refuses = ProviderKindsPlugin({"scripted": lambda *a: RefusesAtCall(error)})
    kernel = make_kernel(plugins={"traces": traces, "scripted": refuses})
    async with kernel:
        (failed,) = await collect(kernel.stream(request()))
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert isinstance(failed, Failed)
    for message in (str(failed.error), str(caught.value)):
        assert ("needs a base_url" if isinstance(error, InferenceError) else "KeyError") in message
    assert traces.types == ["inference:start", "inference:fail"] * 2


async def test_a_provider_bug_mid_stream_ends_the_stream_with_one_terminal(
    make_kernel, scripted, log_lines
):
    provider = scripted([Token("partial", "text"), ZeroDivisionError("adapter bug")])
    kernel = make_kernel()
    async with kernel:
        events = await collect(kernel.stream(request()))
    final = events[-1]
    assert isinstance(final, Failed)
    assert final.error.kind == "unknown"
    assert "ZeroDivisionError: adapter bug" in str(final.error)
    assert provider.endings == ["finished"]
    assert any("ZeroDivisionError" in line for line in log_lines)


async def test_an_attempt_the_provider_reports_cancelled_is_not_offered_for_retry(
    make_kernel, scripted
):
    aborted = Aborted("cancelled", InferenceError("cancelled", "the upstream cancelled it"))
    provider = scripted([BlockStart(0, "text"), aborted])
    policy = Policy(Retry(0.001))
    kernel = make_kernel(plugins={"policy": policy})
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert events[-1] is aborted
    assert policy.asked == []
    assert len(provider.calls) == 1


async def test_stop_ends_a_stream_in_flight_with_the_shutdown_terminal(make_kernel, scripted):
    provider = scripted([Token("first", "text"), Stall(30)])
    traces = Traces()
    kernel = make_kernel(plugins={"traces": traces})
    await kernel.start()
    consumer = asyncio.ensure_future(collect(kernel.stream(request())))
    await asyncio.wait_for(provider.stalled.wait(), GUARD_S)
    await kernel.stop()
    events = await asyncio.wait_for(consumer, GUARD_S)
    terminal = events[-1]
    assert isinstance(terminal, Aborted) and terminal.reason == "cancelled"
    assert terminal.error.code == SHUTTING_DOWN
    assert provider.endings == ["CancelledError"]  # the provider call was closed
    assert traces.of("inference:fail")[0]["errorKind"] == "cancelled"


async def test_stop_ends_a_whole_call_in_flight_with_the_shutdown_error(make_kernel, scripted):
    provider = scripted([Stall(30)])
    kernel = make_kernel()
    await kernel.start()
    call = asyncio.ensure_future(kernel.complete(request()))
    await asyncio.wait_for(provider.stalled.wait(), GUARD_S)
    await kernel.stop()
    with pytest.raises(InferenceError) as caught:
        await asyncio.wait_for(call, GUARD_S)
    assert caught.value.code == SHUTTING_DOWN
    assert "shutting down" in str(caught.value)
