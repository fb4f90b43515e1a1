"""agentcore.testing's scripted in-process provider, its fixtures, and the kind registry."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from agentcore.inference import Complete, Failed, InferenceError, Message, Request, Token
from agentcore.kernel import Kernel
from agentcore.settings import SettingsError
from agentcore.testing import (
    NO_TERMINAL,
    STALL,
    Partial,
    ScriptedProvider,
    Stall,
    TraceRecorder,
    scripted_kind,
    text_response,
)


def req(tag: object = None) -> Request:
    return Request("fake:m1", [Message.user("hi")], metadata={"tag": tag})


async def events(provider: ScriptedProvider) -> list[object]:
    return [e async for e in provider.stream(req(), "m1")]


async def test_answers_play_in_order_then_the_default() -> None:
    error = InferenceError("server", "boom", status=500)
    provider = ScriptedProvider(error, Partial(error), NO_TERMINAL, text_response("yes"))
    (failed,) = await events(provider)
    assert isinstance(failed, Failed) and failed.error is error
    partial = await events(provider)
    assert [type(e) for e in partial] == [Token, Failed]
    assert [type(e) for e in await events(provider)] == [Token]
    last = await events(provider)
    assert isinstance(last[-1], Complete) and last[-1].response.text == "yes"
    assert (await provider.complete(req(), "m2")).text == "hello"
    assert provider.models == ["m1"] * 4 + ["m2"]
    assert provider.endings == ["finished"] * 4
    assert [c.event for c in provider.log] == ["start", "end"] * 5


async def test_answer_for_picks_by_request_and_leaves_the_rest_to_the_script() -> None:
    error = InferenceError("server", "boom", status=500)
    provider = ScriptedProvider(
        text_response("scripted"),
        answer_for=lambda request: error if request.metadata.get("tag") == "fail" else None,
    )
    with pytest.raises(InferenceError):
        await provider.complete(req("fail"), "m1")
    assert (await provider.complete(req(), "m1")).text == "scripted"
    assert (await provider.complete(req(), "m1")).text == "hello"  # the script ran out
    assert [c.tag for c in provider.calls] == ["fail", None, None]


async def test_complete_raises_and_records_a_cancel() -> None:
    error = InferenceError("rate_limit", "slow down", status=429)
    provider = ScriptedProvider(error, STALL)
    with pytest.raises(InferenceError) as caught:
        await provider.complete(req(), "m1")
    assert caught.value is error
    task = asyncio.create_task(provider.complete(req("b"), "m1"))
    await asyncio.wait_for(provider.stalled.wait(), 5)  # a guard against hanging
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [c.ending for c in provider.calls] == ["finished", "CancelledError"]
    assert provider.starts()[1].tag == "b"


async def test_a_stream_closed_before_its_terminal_ends_with_generator_exit() -> None:
    provider = ScriptedProvider([Token("a", "text"), Stall(30)])
    async with aclosing(provider.stream(req(), "m1")) as stream:
        async for _ in stream:
            break
    assert provider.endings == ["GeneratorExit"]


def test_the_scripted_kind_is_the_loading_kernels_alone(tmp_path) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text('[providers.fake]\nkind = "scripted"\n')
    plugins = {"scripted": scripted_kind(ScriptedProvider())}
    kernel = Kernel.load(path, environ={}, discover_plugins=False, plugins=plugins)
    assert "scripted" in kernel.kinds and kernel.kinds.plugin("scripted") == "scripted"
    with pytest.raises(SettingsError, match="unknown provider kind 'scripted'"):
        Kernel.load(path, environ={}, discover_plugins=False)  # another kernel: no such kind


async def test_the_fixtures_serve_a_kernel(
    scripted_provider: ScriptedProvider, trace_recorder: TraceRecorder, tmp_path
) -> None:
    scripted_provider.script = [InferenceError("server", "boom", status=500)]
    path = tmp_path / "agentcore.toml"
    path.write_text('[providers.fake]\nkind = "scripted"\n')
    plugins = {"traces": trace_recorder, "scripted": scripted_kind(scripted_provider)}
    async with Kernel.load(path, environ={}, discover_plugins=False, plugins=plugins) as kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(req())
        assert (await kernel.complete(req())).text == "hello"
    assert scripted_provider.models == ["m1", "m1"]
    assert trace_recorder.types.count("inference:start") == 2
    assert scripted_provider.closed
