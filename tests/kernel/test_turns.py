"""Host turns in the kernel: where context goes, what a terminal means for the turn, the
hooks' pairing on every path (the scripted provider), and what the host knows of a model."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentcore import hookimpl
from agentcore.inference import (
    Aborted,
    Complete,
    Failed,
    HostTurn,
    InferenceError,
    MediaBlock,
    Message,
    Request,
    Response,
    StopInfo,
    TextBlock,
    ToolUseBlock,
    Usage,
)
from agentcore.inference.calls import Inference
from agentcore.inference.errors import shutting_down
from agentcore.inference.turns import Injection, TurnEnding, ending_of, with_injections
from agentcore.kernel import Kernel
from agentcore.model_info import describe_model, known_model
from agentcore.settings import ModelSettings, SettingsError
from agentcore.testing import STALL, Partial, ScriptedProvider, scripted_kind
from agentcore.tracing import TraceEvent

TURN = HostTurn("conv", 0, "question")


def response(stop: StopInfo | None = None) -> Response:
    return Response([TextBlock("a")], stop or StopInfo("end_turn"), Usage(3, 1), "m", "m-1")


# -- with_injections -----------------------------------------------------------------------


def test_injections_go_by_position_in_the_order_given() -> None:
    request = Request(
        "p:m",
        [Message.user("earlier"), Message.assistant("reply"), Message.user("question")],
        system="host",
        turn=TURN,
    )
    out = with_injections(
        request,
        [
            Injection("afterUser", "a1", "s1"),
            Injection("system", "s1", "s1"),
            Injection("beforeUser", "b1", "s1"),
            Injection("system", "s2", "s2"),
            Injection("beforeUser", "b2", "s2"),
        ],
    )
    assert out.system == "host\n\ns1\n\ns2"
    assert out.messages[:2] == request.messages[:2]
    assert out.messages[2].content == [
        TextBlock("b1\n\nb2\n\n"),
        TextBlock("question"),
        TextBlock("\n\na1"),
    ]
    # The caller's request is left as it was.
    assert request.system == "host"
    assert request.messages[2].content == [TextBlock("question")]


def test_injections_without_a_system_prompt_or_a_user_message() -> None:
    request = Request("p:m", [Message.assistant("continue from here")], turn=TURN)
    out = with_injections(request, [Injection("system", "s"), Injection("afterUser", "a")])
    assert out.system == "s"
    assert out.messages[-1] == Message("user", [TextBlock("\n\na")])


def test_media_injections_go_around_the_user_message_in_order() -> None:
    image, audio = MediaBlock("image/PNG", "iVBO"), MediaBlock("audio/mp3", "SUQz")
    request = Request("p:m", [Message.user("question")], system="host", turn=TURN)
    out = with_injections(
        request,
        [
            Injection("beforeUser", (TextBlock("look"), image), "s1"),
            Injection("beforeUser", (TextBlock("and"), TextBlock("listen"), audio), "s2"),
            Injection("afterUser", (image, TextBlock("that was it")), "s2"),
            Injection("system", (TextBlock("sys"), image), "s1"),  # a system prompt is text
        ],
    )
    assert out.system == "host\n\nsys"
    assert out.messages == [
        Message(
            "user",
            [
                TextBlock("look"),
                image,
                TextBlock("and\n\nlisten"),
                audio,
                TextBlock("question"),
                image,
                TextBlock("that was it"),
            ],
        )
    ]
    assert (image.mime_type, audio.mime_type, audio.kind) == ("image/png", "audio/mpeg", "audio")


def test_no_injections_leave_the_request_alone() -> None:
    request = Request("p:m", [Message.user("q")], turn=TURN)
    assert with_injections(request, []) is request
    assert with_injections(request, [Injection("system", "")]) is request


# -- ending_of -------------------------------------------------------------------------------


def test_what_a_terminal_means_for_a_turn() -> None:
    assert ending_of(Complete(response())) == TurnEnding(
        "completed", usage=Usage(3, 1), model="m-1"
    )
    # A provider that ended with an error, or with a stop nothing maps, did not complete.
    assert ending_of(Complete(response(StopInfo("end_turn", raw="error")))).phase == "failed"
    assert ending_of(Complete(response(StopInfo("end_turn", "OTHER", mapped=False)))).phase == (
        "failed"
    )
    assert ending_of(Failed(InferenceError("server", "boom"))).phase == "failed"
    assert ending_of(Aborted("timeout", InferenceError("timeout", "slow"))).phase == "failed"
    assert ending_of(Aborted("cancelled", shutting_down())).phase == "aborted"


def test_a_turn_completed_only_when_infer_would_exit_0() -> None:
    """The phase follows `completion_problem`, infer's rule: a refusal or a paused turn is
    ``failed``, with the reason; a tool call is ``completed`` only when tools were offered."""
    refused = ending_of(Complete(response(StopInfo("refusal", raw="refusal"))))
    assert refused.phase == "failed" and refused.error is not None
    assert refused.error.message == "The model refused to answer (stop reason 'refusal')"
    assert ending_of(Complete(response(StopInfo("pause_turn", raw="pause_turn")))).phase == (
        "failed"
    )
    call = ToolUseBlock("toolu_1", "search", {"q": "x"})
    calls = replace(response(StopInfo("tool_use", raw="tool_use")), content=[call])
    assert ending_of(Complete(calls)).phase == "failed"
    assert ending_of(Complete(calls), tools=True).phase == "completed"


def test_a_host_turn_needs_a_conversation_and_a_turn_from_zero() -> None:
    with pytest.raises(ValueError, match="conversation id"):
        HostTurn("", 0)
    with pytest.raises(ValueError, match="turn index"):
        HostTurn("c", -1)


# -- the kernel's hooks ----------------------------------------------------------------------


class Recorder:
    """A plugin that adds one injection and records the turn hooks' calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @hookimpl
    async def on_host_turn_context(self, inference: Inference) -> list[Injection]:
        self.calls.append(("context", inference.id))
        return [Injection("system", "remembered")]

    @hookimpl
    def on_host_turn_start(self, inference: Inference) -> None:
        self.calls.append(("start", inference.id))

    @hookimpl
    def on_host_turn_end(self, inference: Inference, ending: TurnEnding) -> None:
        self.calls.append(("end", ending.phase))


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text('[providers.fake]\nkind = "scripted"\n')
    return path


def load(settings: Path, recorder: Recorder, **plugins: object) -> Kernel:
    return Kernel.load(settings, discover_plugins=False, plugins={"recorder": recorder, **plugins})


async def test_a_streamed_turn_gets_context_then_start_then_one_end(
    scripted_provider: ScriptedProvider, settings: Path
) -> None:
    recorder = Recorder()
    async with load(settings, recorder, scripted=scripted_kind(scripted_provider)) as kernel:
        request = Request("fake:m", [Message.user("q")], turn=TURN)
        async with aclosing(kernel.stream(request)) as events:
            [event async for event in events]
    inference_id = recorder.calls[0][1]
    assert recorder.calls == [
        ("context", inference_id),
        ("start", inference_id),
        ("end", "completed"),
    ]
    assert scripted_provider.calls[0].request.system == "remembered"


async def test_a_turns_inference_traces_carry_its_conversation_and_turn_index(
    scripted_provider: ScriptedProvider, settings: Path
) -> None:
    """inference:start, :complete and :fail say which conversation and turn they belong to
    (the otel plugin makes the conversation `gen_ai.conversation.id`)."""

    class Traces:
        def __init__(self) -> None:
            self.events: list[TraceEvent] = []

        @hookimpl
        def on_trace(self, event: TraceEvent) -> None:
            if event.type.startswith("inference:"):
                self.events.append(event)

    traces = Traces()
    scripted_provider.script = [response(), InferenceError("invalid_request", "no", status=400)]
    async with load(
        settings, Recorder(), scripted=scripted_kind(scripted_provider), traces=traces
    ) as kernel:
        await kernel.complete(Request("fake:m", [Message.user("q")], turn=HostTurn("conv-9", 4)))
        with pytest.raises(InferenceError):
            await kernel.complete(Request("fake:m", [Message.user("q")], turn=HostTurn("c", 0)))
    seen = [
        (e.type, e.fields.get("conversationId"), e.fields.get("turnIndex")) for e in traces.events
    ]
    assert seen == [
        ("inference:start", "conv-9", 4),
        ("inference:complete", "conv-9", 4),
        ("inference:start", "c", 0),
        ("inference:fail", "c", 0),
    ]


@pytest.mark.parametrize("streamed", [True, False])
async def test_a_failure_after_visible_text_is_failed(
    scripted_provider: ScriptedProvider, settings: Path, streamed: bool
) -> None:
    scripted_provider.script = [Partial(InferenceError("server", "gone", status=500), text="hel")]
    recorder = Recorder()
    async with load(settings, recorder, scripted=scripted_kind(scripted_provider)) as kernel:
        request = Request("fake:m", [Message.user("q")], turn=TURN)
        if streamed:
            async with aclosing(kernel.stream(request)) as events:
                last = [event async for event in events][-1]
            assert isinstance(last, Failed)
        else:
            scripted_provider.script = [InferenceError("server", "gone", status=500)]
            with pytest.raises(InferenceError):
                await kernel.complete(request)
    assert [c[0] for c in recorder.calls] == ["context", "start", "end"]
    assert recorder.calls[-1] == ("end", "failed")


async def test_no_start_no_end_for_a_turn_refused_before_its_first_attempt(
    scripted_provider: ScriptedProvider, settings: Path
) -> None:
    class Refuse:
        @hookimpl
        def on_admission(self) -> None:
            raise InferenceError("quota", "no budget", retryable=False)

    recorder = Recorder()
    async with load(
        settings, recorder, scripted=scripted_kind(scripted_provider), refuse=Refuse()
    ) as kernel:
        with pytest.raises(InferenceError, match="no budget"):
            await kernel.complete(Request("fake:m", [Message.user("q")], turn=TURN))
    assert [c[0] for c in recorder.calls] == ["context"]


@pytest.mark.parametrize("streamed", [True, False])
async def test_a_cancelled_turn_is_aborted_once(
    scripted_provider: ScriptedProvider, settings: Path, streamed: bool
) -> None:
    scripted_provider.script = [STALL]
    recorder = Recorder()
    async with load(settings, recorder, scripted=scripted_kind(scripted_provider)) as kernel:
        request = Request("fake:m", [Message.user("q")], turn=TURN)

        async def run() -> None:
            if streamed:
                async with aclosing(kernel.stream(request)) as events:
                    async for _ in events:
                        pass
            else:
                await kernel.complete(request)

        task = asyncio.create_task(run())
        await asyncio.wait_for(scripted_provider.stalled.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [c[0] for c in recorder.calls] == ["context", "start", "end"]
    assert recorder.calls[-1] == ("end", "aborted")


async def test_end_host_turns_aborts_a_turn_in_flight(
    scripted_provider: ScriptedProvider, settings: Path
) -> None:
    scripted_provider.script = [STALL]
    recorder = Recorder()
    async with load(settings, recorder, scripted=scripted_kind(scripted_provider)) as kernel:
        request = Request("fake:m", [Message.user("q")], turn=TURN)
        task = asyncio.create_task(kernel.complete(request))
        await asyncio.wait_for(scripted_provider.stalled.wait(), 5)
        await kernel.end_host_turns()
        assert recorder.calls[-1] == ("end", "aborted")  # before end_host_turns returned
        with pytest.raises(InferenceError):
            await task


async def test_a_plugin_failing_in_the_context_hook_does_not_stop_the_turn(
    scripted_provider: ScriptedProvider, settings: Path
) -> None:
    class Broken:
        @hookimpl
        def on_host_turn_context(self) -> None:
            raise RuntimeError("broken")

    recorder = Recorder()
    async with load(
        settings, recorder, scripted=scripted_kind(scripted_provider), broken=Broken()
    ) as kernel:
        out = await kernel.complete(Request("fake:m", [Message.user("q")], turn=TURN))
    assert out.text
    assert scripted_provider.calls[0].request.system == "remembered"


# -- model info ------------------------------------------------------------------------------


def test_built_in_knowledge_of_well_known_models() -> None:
    assert describe_model("claude-sonnet-4-5-20250929").to_wire() == {
        "id": "claude-sonnet-4-5-20250929",
        "vendor": "anthropic",
        "contextWindow": 200000,
        "capabilities": ["vision", "tools"],
        "maxOutputTokens": 64000,
    }
    assert describe_model("gpt-4o-2024-08-06").max_output_tokens == 16_384
    # Longest prefix first: a mini is not its big sibling.
    assert known_model("gpt-4o-mini-2024-07-18") is known_model("gpt-4o-mini")
    assert known_model("gpt-4o-mini") is not known_model("gpt-4o")
    assert known_model("o3-mini") is not known_model("o3")
    assert describe_model("models/gemini-2.5-flash").vendor == "google"
    assert describe_model("openai/gpt-4.1").context_window == 1_047_576
    # A prefix that is not a whole segment is no match; unknown metadata is left out.
    assert known_model("gpt-4oops") is None
    assert describe_model("my-finetune").to_wire() == {"id": "my-finetune"}


def test_settings_win_field_by_field() -> None:
    configured = ModelSettings(vendor="acme-labs", context_window=1000, max_output_tokens=500)
    assert describe_model("claude-haiku-4-5", configured).to_wire() == {
        "id": "claude-haiku-4-5",
        "vendor": "acme-labs",
        "contextWindow": 1000,
        "capabilities": ["vision", "tools"],  # from the table: the settings left it out
        "maxOutputTokens": 500,
    }
    assert describe_model("x", ModelSettings(capabilities=[])).to_wire() == {
        "id": "x",
        "capabilities": [],
    }


def test_model_settings_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text(
        '[providers.p]\nkind = "echo"\n\n[providers.p.models."gpt-4.1"]\ncontext_window = 0\n'
    )
    with pytest.raises(SettingsError, match=r"providers\.p\.models\.\"gpt-4\.1\"\.context_window"):
        Kernel.load(path, discover_plugins=False)
    path.write_text('[providers.p]\nkind = "echo"\n\n[providers.p.models.m]\nvendors = "x"\n')
    with pytest.raises(SettingsError, match="vendors"):
        Kernel.load(path, discover_plugins=False)
    path.write_text(
        '[providers.p]\nkind = "echo"\n\n[providers.p.models."gpt-4.1"]\nvendor = "acme"\n'
    )
    kernel = Kernel.load(path, discover_plugins=False)
    assert kernel.model_info("p:gpt-4.1").to_wire()["vendor"] == "acme"
