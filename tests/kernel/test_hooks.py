"""The hook caller (agentcore.hooks): sync and async implementations, first-result
semantics, argument subsets, and how failures of observers and deciders are contained."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kernel_support import (
    attempt,
    collect,
    mcpl_request,
    reply,
    request,
    server_error,
    text_of,
)

from agentcore import hookimpl
from agentcore.inference import (
    BlockStart,
    Complete,
    Failed,
    InferenceError,
    PluginError,
    Retrying,
    Token,
)
from agentcore.inference.calls import GiveUp, Retry
from agentcore.kernel import PluginLoadError
from agentcore.mcpl.protocol import McplError

EVERY_HOOK = {
    "agentcore_start",
    "agentcore_stop",
    "on_admission",
    "on_stream_event",
    "on_inference_error",
    "on_attempt_end",
    "on_wait_start",
    "on_wait_end",
    "on_trace",
    "on_mcpl_request",
}


class SyncAll:
    """Implements every hook the kernel calls, as plain functions."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    @hookimpl
    def agentcore_start(self, context):
        self.calls.append(("agentcore_start", context.name))

    @hookimpl
    def agentcore_stop(self):
        self.calls.append(("agentcore_stop", None))

    @hookimpl
    def on_admission(self, attempt):
        self.calls.append(("on_admission", attempt.number))

    @hookimpl
    def on_stream_event(self, attempt, event):
        self.calls.append(("on_stream_event", type(event).__name__))

    @hookimpl
    def on_inference_error(self, attempt, error):
        self.calls.append(("on_inference_error", error.kind))

    @hookimpl
    def on_attempt_end(self, attempt, error):
        self.calls.append(("on_attempt_end", error and error.kind))

    @hookimpl
    def on_wait_start(self, wait):
        self.calls.append(("on_wait_start", wait.reason))

    @hookimpl
    def on_wait_end(self, wait):
        self.calls.append(("on_wait_end", wait.reason))

    @hookimpl
    def on_trace(self, event):
        self.calls.append(("on_trace", event.type))

    @hookimpl
    def on_mcpl_request(self, request):
        self.calls.append(("on_mcpl_request", request.method))


class AsyncAll(SyncAll):
    """The same, every implementation an `async def` that really suspends."""

    @hookimpl
    async def agentcore_start(self, context):
        await asyncio.sleep(0)
        self.calls.append(("agentcore_start", context.name))

    @hookimpl
    async def agentcore_stop(self):
        await asyncio.sleep(0)
        self.calls.append(("agentcore_stop", None))

    @hookimpl
    async def on_admission(self, attempt):
        await asyncio.sleep(0)
        self.calls.append(("on_admission", attempt.number))

    @hookimpl
    async def on_stream_event(self, attempt, event):
        await asyncio.sleep(0)
        self.calls.append(("on_stream_event", type(event).__name__))

    @hookimpl
    async def on_inference_error(self, attempt, error):
        await asyncio.sleep(0)
        self.calls.append(("on_inference_error", error.kind))

    @hookimpl
    async def on_attempt_end(self, attempt, error):
        await asyncio.sleep(0)
        self.calls.append(("on_attempt_end", error and error.kind))

    @hookimpl
    async def on_wait_start(self, wait):
        await asyncio.sleep(0)
        self.calls.append(("on_wait_start", wait.reason))

    @hookimpl
    async def on_wait_end(self, wait):
        await asyncio.sleep(0)
        self.calls.append(("on_wait_end", wait.reason))

    @hookimpl
    async def on_trace(self, event):
        await asyncio.sleep(0)
        self.calls.append(("on_trace", event.type))

    @hookimpl
    async def on_mcpl_request(self, request):
        await asyncio.sleep(0)
        self.calls.append(("on_mcpl_request", request.method))


class Decider:
    """Retries the first failure at once and answers MCPL requests; called last."""

    @hookimpl(trylast=True)
    def on_inference_error(self, attempt):
        return Retry(0.001) if attempt.number == 1 else GiveUp()

    @hookimpl(trylast=True)
    def on_mcpl_request(self, request):
        return {"answered": request.method}


@pytest.mark.parametrize("impl", [SyncAll, AsyncAll], ids=["sync", "async"])
async def test_every_hook_is_called_sync_or_async(impl, make_kernel, scripted):
    recorder = impl()
    scripted([BlockStart(0, "text"), server_error()], reply("hi there"))
    kernel = make_kernel(plugins={"recorder": recorder, "decider": Decider()})
    async with kernel:
        events = await collect(kernel.stream(request()))
        answer = await kernel.hooks.mcpl_request(mcpl_request("acme/echo"))
    assert text_of(events) == "hi there"
    assert answer == {"answered": "acme/echo"}
    calls = recorder.calls
    assert {hook for hook, _ in calls} == EVERY_HOOK
    assert calls[0] == ("agentcore_start", "recorder")
    assert calls[-1] == ("agentcore_stop", None)
    assert [v for h, v in calls if h == "on_admission"] == [1, 2]
    assert [v for h, v in calls if h == "on_attempt_end"] == ["server", None]
    assert [v for h, v in calls if h == "on_inference_error"] == ["server"]
    assert [(h, v) for h, v in calls if h.startswith("on_wait")] == [
        ("on_wait_start", "backoff"),
        ("on_wait_end", "backoff"),
    ]
    traces = [v for h, v in calls if h == "on_trace"]
    assert traces == ["inference:start", "inference:retry", "inference:complete"]
    assert ("on_stream_event", "Complete") in calls
    assert ("on_mcpl_request", "acme/echo") in calls


async def test_sync_and_async_implementations_on_the_path_run_in_order(make_kernel, scripted):
    """Hooks an inference waits for run in pluggy's order, across plugins, sync or async.
    (Observers keep only each plugin's own order: see test_observers.py.)"""
    order: list[str] = []

    class First:
        @hookimpl(tryfirst=True)
        async def on_admission(self, attempt):
            await asyncio.sleep(0.001)
            order.append(f"first:admission:{attempt.number}")

        @hookimpl(tryfirst=True)
        async def on_attempt_end(self, attempt, error):
            await asyncio.sleep(0.001)
            order.append(f"first:end:{error and error.kind}")

    class Second:
        @hookimpl
        def on_admission(self, attempt):
            order.append(f"second:admission:{attempt.number}")

        @hookimpl
        def on_attempt_end(self, attempt, error):
            order.append(f"second:end:{error and error.kind}")

    scripted([server_error()], reply("hi"))
    plugins = {"second": Second(), "first": First(), "decider": Decider()}
    kernel = make_kernel(plugins=plugins)
    async with kernel:
        await collect(kernel.stream(request()))
    assert order == [
        "first:admission:1",
        "second:admission:1",
        "first:end:server",
        "second:end:server",
        "first:admission:2",
        "second:admission:2",
        "first:end:None",
        "second:end:None",
    ]


# -- first result ----------------------------------------------------------------


async def test_firstresult_skips_an_async_none_and_stops_at_the_first_decision(
    make_kernel, scripted
):
    calls: list[str] = []

    class AsyncNone:
        @hookimpl(tryfirst=True)
        async def on_inference_error(self, error):  # a subset of (attempt, error)
            await asyncio.sleep(0)
            calls.append(f"none:{error.kind}")

    class AsyncRetry:
        @hookimpl
        async def on_inference_error(self, attempt, error):
            await asyncio.sleep(0)
            calls.append(f"retry:{attempt.number}")
            return Retry(0.002)

    class SyncGiveUp:
        @hookimpl(trylast=True)
        def on_inference_error(self):
            calls.append("give-up")
            return GiveUp()

    plugins = {"give-up": SyncGiveUp(), "retry": AsyncRetry(), "none": AsyncNone()}
    provider = scripted([server_error()], reply("second time lucky"))
    kernel = make_kernel(plugins=plugins)
    async with kernel:
        # directly through the caller layer
        assert await kernel.hooks.inference_error(attempt(), server_error()) == Retry(0.002)
        assert calls == ["none:server", "retry:1"]
        calls.clear()
        # and in the pipeline: the decision wins, the trylast give-up is never asked
        events = await collect(kernel.stream(request()))
    assert calls == ["none:server", "retry:1"]
    assert len(provider.calls) == 2
    (retrying,) = [e for e in events if isinstance(e, Retrying)]
    assert (retrying.attempt, retrying.delay_s, retrying.error.kind) == (1, 0.002, "server")
    assert isinstance(events[-1], Complete)


async def test_firstresult_mcpl_request_with_async_implementations(make_kernel):
    calls: list[str] = []

    class Pass:
        @hookimpl(tryfirst=True)
        async def on_mcpl_request(self, request):
            calls.append("pass")

    class Answer:
        @hookimpl
        async def on_mcpl_request(self, request):
            await asyncio.sleep(0)
            calls.append("answer")
            return {"echo": request.params}

    class Late:
        @hookimpl(trylast=True)
        def on_mcpl_request(self):
            calls.append("late")
            return "too late"

    kernel = make_kernel(plugins={"late": Late(), "answer": Answer(), "pass": Pass()})
    assert await kernel.hooks.mcpl_request(mcpl_request()) == {"echo": {"x": 1}}
    assert calls == ["pass", "answer"]


async def test_no_decision_means_none(make_kernel):
    class Undecided:
        @hookimpl
        async def on_inference_error(self, error):
            return None

    kernel = make_kernel(plugins={"undecided": Undecided()})
    assert await kernel.hooks.inference_error(attempt(), server_error()) is None
    assert await kernel.hooks.mcpl_request(mcpl_request()) is None


# -- arguments ----------------------------------------------------------------------


async def test_an_implementation_may_take_any_subset_of_the_arguments_in_any_order(
    make_kernel, scripted
):
    seen: list[object] = []

    class Subsets:
        @hookimpl
        def agentcore_start(self):
            seen.append("started")

        @hookimpl
        def on_stream_event(self, event):
            seen.append(type(event).__name__)

        @hookimpl
        async def on_attempt_end(self, error, attempt):  # the spec says (attempt, error)
            seen.append((attempt.number, error))

        @hookimpl
        def on_trace(self):
            seen.append("trace")

    scripted(reply("hi"))
    kernel = make_kernel(plugins={"subsets": Subsets()})
    async with kernel:
        await collect(kernel.stream(request()))
    assert seen[0] == "started"
    assert "Token" in seen
    assert "Complete" in seen
    assert (1, None) in seen
    assert seen.count("trace") == 2


def test_an_implementation_with_an_argument_not_in_the_spec_stops_a_strict_load(make_kernel):
    class Typo:
        @hookimpl
        def on_trace(self, evnt):
            pass

    with pytest.raises(PluginLoadError) as caught:
        make_kernel(plugins={"typo": Typo()})
    assert "typo" in str(caught.value)
    assert "evnt" in str(caught.value)
    kernel = make_kernel(plugins={"typo": Typo()}, env={"AGENTCORE_PLUGINS__STRICT": "false"})
    (record,) = [r for r in kernel.records if r.name == "typo"]
    assert record.state == "failed"
    assert "typo" not in kernel.hooks.implementers("on_trace")  # jsonl-traces is built in


# -- on_stream_event replacement ----------------------------------------------------------


async def test_on_stream_event_replaces_events_for_the_consumer_and_later_plugins(
    make_kernel, scripted
):
    class Upper:
        @hookimpl(tryfirst=True)
        def on_stream_event(self, event):
            if isinstance(event, Token):
                return Token(event.text.upper(), event.block, event.index, event.visible)
            return None

    class Bang:
        @hookimpl
        async def on_stream_event(self, attempt, event):
            await asyncio.sleep(0)
            if isinstance(event, Token):  # sees Upper's replacement
                return Token(event.text.strip() + "! ", event.block, event.index, event.visible)
            return None

    scripted(reply("hi there"))
    kernel = make_kernel(plugins={"bang": Bang(), "upper": Upper()})
    async with kernel:
        events = await collect(kernel.stream(request()))
        single = await kernel.hooks.stream_event(attempt(), Token("x", "text"))
    assert text_of(events) == "HI! THERE! "
    assert single == Token("X! ", "text")
    assert isinstance(events[-1], Complete)


# -- failures ----------------------------------------------------------------------------


class Exploding:
    """An observer of everything that raises everywhere."""

    @hookimpl
    def on_trace(self, event):
        raise RuntimeError(f"trace sink exploded on {event.type}")

    @hookimpl
    async def on_stream_event(self, event):
        raise ValueError("stream observer exploded")

    @hookimpl
    def on_attempt_end(self):
        raise LookupError("attempt observer exploded")

    @hookimpl
    async def on_wait_start(self):
        raise RuntimeError("wait observer exploded")

    @hookimpl
    def on_wait_end(self):
        raise RuntimeError("wait-end observer exploded")

    @hookimpl
    def agentcore_stop(self):
        raise RuntimeError("stop exploded")


async def test_an_observer_that_raises_is_logged_by_name_and_inference_goes_on(
    make_kernel, scripted, log_lines
):
    scripted([server_error()], reply("still fine"))
    kernel = make_kernel(plugins={"exploding": Exploding(), "decider": Decider()})
    async with kernel:
        events = await collect(kernel.stream(request()))
        response = await kernel.complete(request())
    assert text_of(events) == "still fine"
    assert isinstance(events[-1], Complete)
    assert response.text == "still fine"
    log = "\n".join(log_lines)
    for hook, message in [
        ("on_trace", "trace sink exploded on inference:start"),
        ("on_stream_event", "stream observer exploded"),
        ("on_attempt_end", "attempt observer exploded"),
        ("on_wait_start", "wait observer exploded"),
        ("on_wait_end", "wait-end observer exploded"),
        ("agentcore_stop", "stop exploded"),
    ]:
        assert f"plugin 'exploding' failed in {hook}" in log
        assert message in log


class PickyDecider:
    @hookimpl
    def on_inference_error(self, error):
        raise KeyError("no policy for this")


async def test_a_decision_hook_that_raises_fails_the_stream_naming_the_plugin(
    make_kernel, scripted
):
    provider = scripted([server_error()])
    kernel = make_kernel(plugins={"picky": PickyDecider()})
    async with kernel:
        events = await collect(kernel.stream(request()))
    (failed,) = events
    assert isinstance(failed, Failed)
    assert "plugin 'picky'" in str(failed.error)
    assert "on_inference_error raised KeyError" in str(failed.error)
    assert len(provider.calls) == 1


async def test_a_decision_hook_that_raises_fails_complete_naming_the_plugin(make_kernel, scripted):
    scripted([server_error()])
    kernel = make_kernel(plugins={"picky": PickyDecider()})
    async with kernel:
        with pytest.raises(InferenceError, match=r"plugin 'picky'.*on_inference_error"):
            await kernel.complete(request())


class BrokenGate:
    @hookimpl
    async def on_admission(self, attempt):
        raise RuntimeError("gate jammed")


class RefusingGate:
    @hookimpl
    def on_admission(self, attempt):
        raise InferenceError("rate_limit", "held for 900 s, more than max_wait_s", retryable=True)


class RetryEverything:
    def __init__(self) -> None:
        self.asked = 0

    @hookimpl
    def on_inference_error(self):
        self.asked += 1
        return Retry(0.001)


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_an_admission_hook_that_raises_fails_naming_the_plugin(
    streamed, make_kernel, scripted
):
    provider = scripted(reply("never sent"))
    kernel = make_kernel(plugins={"gate": BrokenGate()})
    async with kernel:
        if streamed:
            (failed,) = await collect(kernel.stream(request()))
            assert isinstance(failed, Failed)
            message = str(failed.error)
        else:
            with pytest.raises(InferenceError) as caught:
                await kernel.complete(request())
            message = str(caught.value)
    assert "plugin 'gate'" in message
    assert "gate jammed" in message
    assert len(provider.calls) == 0


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_an_admission_refusal_is_the_answer_and_is_not_retried(
    streamed, make_kernel, scripted
):
    provider = scripted(reply("never sent"))
    retry = RetryEverything()
    kernel = make_kernel(plugins={"gate": RefusingGate(), "retry": retry})
    async with kernel:
        if streamed:
            (failed,) = await collect(kernel.stream(request()))
            assert isinstance(failed, Failed)
            error = failed.error
        else:
            with pytest.raises(InferenceError) as caught:
                await asyncio.wait_for(kernel.complete(request()), 5)  # a guard: held 900 s
            error = caught.value
    assert str(error) == "held for 900 s, more than max_wait_s"
    assert retry.asked == 0
    assert len(provider.calls) == 0


async def test_mcpl_request_errors(make_kernel):
    class Typed:
        @hookimpl
        def on_mcpl_request(self, request):
            if request.method == "typed":
                raise McplError(-32001, "feature set not enabled")
            raise ZeroDivisionError("oops")

    kernel = make_kernel(plugins={"router": Typed()})
    with pytest.raises(McplError) as typed:
        await kernel.hooks.mcpl_request(mcpl_request("typed"))
    assert typed.value.code == -32001
    with pytest.raises(PluginError) as other:
        await kernel.hooks.mcpl_request(mcpl_request("other"))
    assert other.value.plugin == "router"
    assert "on_mcpl_request raised ZeroDivisionError: oops" in str(other.value)


async def test_a_start_hook_sees_its_own_validated_settings(make_kernel):
    from pydantic import BaseModel, ConfigDict

    from agentcore.plugins import SettingsSection

    class AcmeSettings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        level: int = 1

    seen: list[object] = []

    class Acme:
        @hookimpl
        def agentcore_settings(self):
            return SettingsSection("acme", AcmeSettings)

        @hookimpl
        async def agentcore_start(self, context):
            seen.append(context.settings)

    kernel = make_kernel(plugins={"acme": Acme()}, env={"AGENTCORE_ACME__LEVEL": "3"})
    async with kernel:
        pass
    assert seen == [AcmeSettings(level=3)]


async def test_a_terminal_replaced_by_a_non_terminal_still_ends_the_stream(make_kernel, scripted):
    class Swallow:
        @hookimpl
        def on_stream_event(self, event):
            if isinstance(event, Complete):
                return Token("swallowed", "text")
            return None

    scripted(reply("hi"))
    kernel = make_kernel(plugins={"swallow": Swallow()})
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert text_of(events) == "hiswallowed"
    assert isinstance(events[-1], Failed)
    assert events[-1].error.code == "no_terminal"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_stream_observer_that_raises_leaves_the_event_as_it_was(
    is_async, make_kernel, scripted, log_lines
):
    """Both paths of the caller: all-sync implementations (no coroutine per event) and
    any async one."""

    class Raises:
        if is_async:

            @hookimpl
            async def on_stream_event(self, event):
                raise ValueError(f"cannot look at {type(event).__name__}")

        else:

            @hookimpl
            def on_stream_event(self, event):
                raise ValueError(f"cannot look at {type(event).__name__}")

    class Upper:
        @hookimpl(trylast=True)
        def on_stream_event(self, event):
            if isinstance(event, Token):
                return Token(event.text.upper(), event.block)
            return None

    scripted(reply("hi there"))
    kernel = make_kernel(plugins={"upper": Upper(), "raises": Raises()})
    assert kernel.hooks.stream_sync is not is_async
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert text_of(events) == "HI THERE"
    assert isinstance(events[-1], Complete)
    log = "\n".join(log_lines)
    assert "plugin 'raises' failed in on_stream_event" in log
    assert "cannot look at Token" in log


def test_a_misspelled_hook_fails_the_plugin_by_name(make_kernel):
    class Typo:
        @hookimpl
        def on_trac(self, event):  # no such hook: on_trace was meant
            pass

    with pytest.raises(PluginLoadError) as caught:
        make_kernel(plugins={"typo": Typo})
    assert "typo" in str(caught.value) and "on_trac" in str(caught.value)


def test_a_hook_wrapper_fails_its_plugin_by_name(make_kernel):
    class Wrapper:
        @hookimpl(wrapper=True)
        def on_trace(self, event):
            return (yield)

    with pytest.raises(PluginLoadError) as caught:
        make_kernel(plugins={"wrapping": Wrapper})
    assert "wrapping" in str(caught.value) and "hook wrappers are not supported" in str(
        caught.value
    )


def test_an_async_settings_hook_fails_its_plugin_saying_why(make_kernel):
    class AsyncSettings:
        @hookimpl
        async def agentcore_settings(self):
            return None

    with pytest.raises(PluginLoadError) as caught:
        make_kernel(plugins={"eager": AsyncSettings})
    assert "eager" in str(caught.value) and "must be a plain function" in str(caught.value)


class ContextUser:
    """Starts with the narrow context, and runs an inference through it."""

    def __init__(self) -> None:
        self.context: Any = None

    @hookimpl
    def agentcore_start(self, context: Any) -> None:
        self.context = context


async def test_a_plugin_sees_the_kernel_through_a_narrow_context(make_kernel, scripted):
    scripted(reply("through the context"))
    user = ContextUser()
    kernel = make_kernel(
        plugins={"user": user},
        toml='[inference]\nmax_stated_wait_s = 42\n[providers.loud]\nkind = "echo"\n',
    )
    async with kernel:
        context = user.context
        assert not hasattr(context, "kernel")
        assert context.name == "user" and context.settings is None
        assert context.inference.max_stated_wait_s == 42
        assert {n: p.kind for n, p in context.providers.items()} == {
            "echo": "echo",
            "fake": "scripted",
            "loud": "echo",
        }
        with pytest.raises(TypeError):
            context.providers["new"] = context.providers["echo"]  # read-only
        context.inference.max_stated_wait_s = 0  # its own copy: the kernel's stays
        assert kernel.settings.inference.max_stated_wait_s == 42
        assert (await context.complete(request())).text == "through the context"
        events = await collect(context.stream(request()))
        assert isinstance(events[-1], Complete)
        assert not context.stopping.is_set()
    assert context.stopping.is_set()
