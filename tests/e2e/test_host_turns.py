"""The host's own turns with MCPL servers taking part (SPEC §10, §12; plugin `mcpl-context`),
end to end: a real host (`McplHost`, every default plugin discovered), real servers over
stdio and WebSocket, the loopback provider, and assertions on what the provider received
and what each server received."""

from __future__ import annotations

import asyncio
import copy
from contextlib import aclosing
from typing import Any

import pytest
from e2e_rig import MODELS, Rig, RigFactory
from e2e_support import MANIFEST, ServerScript, ServerSession

from agentcore.inference import (
    Complete,
    Failed,
    HostTurn,
    Message,
    Request,
    StreamEvent,
    Token,
)
from agentcore.testing import Scenario

HOOKS = "contextHooks.beforeInference"
OBSERVE = f"{HOOKS}.observe"
SYSTEM = f"{HOOKS}.inject.system"
BEFORE = f"{HOOKS}.inject.beforeUser"
AFTER = f"{HOOKS}.inject.afterUser"
ALL_HOOKS = [OBSERVE, SYSTEM, BEFORE, AFTER]
LIFECYCLE = "inferenceLifecycle"
USER_TEXT = "What did I decide about the mannequins?"
SYSTEM_PROMPT = "You are the host."


def manifest() -> dict[str, Any]:
    """The e2e manifest, plus context hooks, lifecycle and the feature sets that use them."""
    m = copy.deepcopy(MANIFEST)
    m["contextHooks"] = {
        "beforeInference": {
            "observe": True,
            "inject": {"system": True, "beforeUser": True, "afterUser": True},
        }
    }
    m["inferenceLifecycle"] = True
    m["featureSets"]["memory.retrieval"] = {"description": "recall", "uses": ALL_HOOKS}
    m["featureSets"]["memory.extraction"] = {"description": "watch", "uses": [LIFECYCLE]}
    return m


def injecting(*injections: dict[str, Any], delay_s: float = 0.0) -> Any:
    """A hook that answers with these injections (after `delay_s`)."""

    async def hook(session: ServerSession, params: dict[str, Any]) -> dict[str, Any]:
        if delay_s:
            await asyncio.sleep(delay_s)
        return {"result": {"featureSet": "memory.retrieval", "contextInjections": list(injections)}}

    return hook


def inj(position: str, content: Any, namespace: str = "memory") -> dict[str, Any]:
    return {"namespace": namespace, "position": position, "content": content}


def script(hook: Any = None) -> ServerScript:
    return ServerScript(manifest=manifest(), hook=hook)


def turn_request(model: str = "a:claude-e2e", index: int = 3) -> Request:
    return Request(
        model,
        [Message.user(USER_TEXT)],
        system=SYSTEM_PROMPT,
        turn=HostTurn("conv_1", index, USER_TEXT),
    )


async def run_turn(r: Rig, request: Request | None = None) -> list[StreamEvent]:
    async with aclosing(r.kernel.stream(request or turn_request())) as events:
        return [event async for event in events]


def hook_traces(r: Rig) -> dict[str, dict[str, Any]]:
    """The mcpl:context_hook traces by server, without timestamps (one each is the contract)."""
    traces = r.traces.of("mcpl:context_hook")
    by_server = {t["serverId"]: {k: v for k, v in t.items() if k != "timestamp"} for t in traces}
    assert len(by_server) == len(traces), traces
    return by_server


async def lifecycle(session: ServerSession, count: int) -> list[dict[str, Any]]:
    """Wait until the session has received `count` lifecycle notifications; return them."""
    for _ in range(500):
        got = session.notifications("inference/lifecycle")
        if len(got) >= count:
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"{session.tag} got {session.notifications('inference/lifecycle')}")


# -- context/beforeInference -------------------------------------------------------------


async def test_injections_land_by_position_servers_in_settings_order(rig: RigFactory) -> None:
    # "first" answers last: the order in the request is the settings order, not arrival order.
    first = script(
        injecting(
            inj("afterUser", "first-after"),
            inj("system", [{"type": "text", "text": "first-system"}]),
            inj("beforeUser", "first-before"),
            delay_s=0.2,
        )
    )
    second = script(
        injecting(
            inj("beforeUser", "second-before"),
            inj("system", "second-system"),
            inj("afterUser", "second-after"),
        )
    )
    r = await rig(
        {"first": first, "second": second}, grants={t: ALL_HOOKS for t in ("first", "second")}
    )
    r.provider.script(Scenario.text("Noted."))
    events = await run_turn(r)
    assert isinstance(events[-1], Complete)

    body = r.provider.calls[-1].body
    assert body["system"] == "\n\n".join([SYSTEM_PROMPT, "first-system", "second-system"])
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first-before\n\nsecond-before\n\n"},
                {"type": "text", "text": USER_TEXT},
                {"type": "text", "text": "\n\nfirst-after\n\nsecond-after"},
            ],
        }
    ]
    traces = hook_traces(r)
    for tag in ("first", "second"):
        assert traces[tag]["outcome"] == "ok"
        assert (traces[tag]["injections"], traces[tag]["dropped"]) == (3, 0)
        assert traces[tag]["inferenceId"] == traces["first"]["inferenceId"]


async def test_injections_on_the_openai_wire_stay_apart_from_the_user_text(
    rig: RigFactory,
) -> None:
    r = await rig(
        {"srv": script(injecting(inj("beforeUser", "fact A"), inj("afterUser", "fact B")))},
        grants={"srv": ALL_HOOKS},
    )
    r.provider.script(Scenario.text("ok"))
    await run_turn(r, turn_request("o:gpt-e2e"))
    messages = r.provider.calls[-1].body["messages"]
    assert messages[-1] == {"role": "user", "content": f"fact A\n\n{USER_TEXT}\n\nfact B"}
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}


async def test_user_message_only_with_observe_and_model_info_in_the_hook(
    rig: RigFactory,
) -> None:
    inject_only = [SYSTEM, BEFORE, AFTER]
    r = await rig(
        {"watcher": script(injecting()), "writer": script(injecting())},
        grants={"watcher": ALL_HOOKS, "writer": inject_only},
        provider_models={"a": {"claude-e2e": {"vendor": "acme", "context_window": 4096}}},
    )
    r.provider.script(Scenario.text("ok"))
    await run_turn(r)
    (watched,) = r.sessions["watcher"].requests("context/beforeInference")
    (written,) = r.sessions["writer"].requests("context/beforeInference")
    assert watched["userMessage"] == USER_TEXT
    # §10.1: inject-only still gets the hook, with userMessage null.
    assert written["userMessage"] is None
    for params in (watched, written):
        assert params["conversationId"] == "conv_1"
        assert params["turnIndex"] == 3
        assert params["inferenceId"].startswith("inf_")
        assert params["model"] == {"id": "claude-e2e", "vendor": "acme", "contextWindow": 4096}


async def test_no_hook_for_a_server_granted_no_hook_leaf(rig: RigFactory) -> None:
    # This server is not asked. (A bare parent, `contextHooks`, grants nothing beneath it,
    # §5.4, and is refused at load: tests/cli/test_settings_errors.py.)
    r = await rig({"srv": script(injecting(inj("system", "x")))}, grants={"srv": ["modelInfo"]})
    r.provider.script(Scenario.text("ok"))
    await run_turn(r)
    assert r.sessions["srv"].requests("context/beforeInference") == []
    assert r.provider.calls[-1].body["system"] == SYSTEM_PROMPT
    assert r.traces.of("mcpl:context_hook") == []


async def test_an_injection_at_a_position_not_granted_is_dropped_and_traced(
    rig: RigFactory,
) -> None:
    hook = injecting(
        inj("system", "take over the system prompt"),
        inj("afterUser", "a harmless note"),
        inj("sideways", "nowhere"),
        inj("beforeUser", [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]),
    )
    r = await rig({"srv": script(hook)}, grants={"srv": [OBSERVE, BEFORE, AFTER]})
    r.provider.script(Scenario.text("ok"))
    await run_turn(r)
    body = r.provider.calls[-1].body
    assert body["system"] == SYSTEM_PROMPT
    assert body["messages"][-1]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": USER_TEXT},
        {"type": "text", "text": "\n\na harmless note"},
    ]
    trace = hook_traces(r)["srv"]
    assert trace["outcome"] == "ok"
    assert (trace["injections"], trace["dropped"]) == (2, 2)
    assert any("position system is not granted" in why for why in trace["droppedReasons"])
    assert any("'sideways'" in why for why in trace["droppedReasons"])
    assert "droppedContent" not in trace


# -- media in injections: carried where the provider's wire carries it ----------------------

PNG = "iVBORw0KGgo="
WAV = "UklGRiQAAABXQVZF"
PDF = "JVBERi0xLjQ="
REMEMBERED = '<resource uri="memory://notes/1">\nThe user prefers oak.\n</resource>'
MEDIA_INJECTIONS = (
    inj(
        "beforeUser",
        [
            {"type": "text", "text": "Remember this:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
            {
                "type": "resource",
                "resource": {"uri": "memory://notes/1", "text": "The user prefers oak."},
            },
        ],
    ),
    inj(
        "afterUser",
        [
            {
                "type": "resource",
                "resource": {
                    "uri": "memory://plans/plan.pdf",
                    "blob": PDF,
                    "mimeType": "application/pdf",
                },
            }
        ],
    ),
)
NOT_CARRIED = "the turn's provider does not carry it"
AUDIO_DROPPED = f"contextInjections[0].content[2] (audio audio/wav): {NOT_CARRIED}"


def _anthropic_source(mime: str, data: str) -> dict[str, Any]:
    return {"type": "base64", "media_type": mime, "data": data}


WIRES: dict[str, tuple[Any, list[str]]] = {
    # model: (where the user's message is in the body, and its content; what was dropped)
    "a": (
        [
            {"type": "text", "text": "Remember this:"},
            {"type": "image", "source": _anthropic_source("image/png", PNG)},
            {"type": "text", "text": REMEMBERED + "\n\n"},
            {"type": "text", "text": USER_TEXT},
            {"type": "document", "source": _anthropic_source("application/pdf", PDF)},
        ],
        [AUDIO_DROPPED],  # the Messages API has no audio block
    ),
    "o": (
        [
            {"type": "text", "text": "Remember this:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            {"type": "text", "text": f"{REMEMBERED}\n\n{USER_TEXT}"},
            {
                "type": "file",
                "file": {"filename": "plan.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
            },
        ],
        [],
    ),
    "r": (
        [
            {"type": "input_text", "text": "Remember this:"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
            {"type": "input_text", "text": f"{REMEMBERED}\n\n{USER_TEXT}"},
            {
                "type": "input_file",
                "filename": "plan.pdf",
                "file_data": f"data:application/pdf;base64,{PDF}",
            },
        ],
        [AUDIO_DROPPED],  # Responses input has no audio part
    ),
    "g": (
        [
            {"text": "Remember this:"},
            {"inlineData": {"mimeType": "image/png", "data": PNG}},
            {"inlineData": {"mimeType": "audio/wav", "data": WAV}},
            {"text": REMEMBERED + "\n\n"},
            {"text": USER_TEXT},
            {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
        ],
        [],
    ),
}


def user_content(model: str, body: dict[str, Any]) -> Any:
    """The content of the user's message, in the shape each wire gives it."""
    if model == "o":
        return body["messages"][-1]["content"]
    if model == "r":
        return body["input"][-1]["content"]
    if model == "g":
        return body["contents"][-1]["parts"]
    return body["messages"][-1]["content"]


@pytest.mark.parametrize("model", sorted(WIRES))
async def test_media_lands_where_the_wire_carries_it_and_is_traced_where_not(
    rig: RigFactory, model: str
) -> None:
    r = await rig({"srv": script(injecting(*MEDIA_INJECTIONS))}, grants={"srv": ALL_HOOKS})
    r.provider.script(Scenario.text("ok"))
    events = await run_turn(r, turn_request(MODELS[model]))
    assert isinstance(events[-1], Complete)
    content, dropped = WIRES[model]
    assert user_content(model, r.provider.calls[-1].body) == content
    trace = hook_traces(r)["srv"]
    assert (trace["injections"], trace["dropped"]) == (2, 0)
    assert trace.get("droppedContent", []) == dropped


async def test_xml_tool_mode_carries_the_text_and_says_every_media_block_it_dropped(
    rig: RigFactory,
) -> None:
    r = await rig({"srv": script(injecting(*MEDIA_INJECTIONS))}, grants={"srv": ALL_HOOKS})
    r.provider.script(Scenario.text("ok"))
    events = await run_turn(r, turn_request(MODELS["x"]))
    assert isinstance(events[-1], Complete)
    transcript = r.provider.calls[-1].body["messages"][0]["content"][0]["text"]
    assert transcript.startswith(f"User: Remember this:\n\n{REMEMBERED}\n\n")
    assert transcript.endswith(USER_TEXT)
    assert PNG not in transcript and PDF not in transcript
    assert hook_traces(r)["srv"]["droppedContent"] == [
        f"contextInjections[0].content[1] (image image/png): {NOT_CARRIED}",
        AUDIO_DROPPED,
        f"contextInjections[1].content[0] (resource application/pdf): {NOT_CARRIED}",
    ]


async def test_a_silent_server_costs_the_timeout_and_an_erroring_one_nothing(
    rig: RigFactory,
) -> None:
    async def silent(session: ServerSession, params: dict[str, Any]) -> None:
        return None

    async def failing(session: ServerSession, params: dict[str, Any]) -> dict[str, Any]:
        return {"error": {"code": -32603, "message": "memory store down"}}

    r = await rig(
        {
            "silent": script(silent),
            "failing": script(failing),
            "good": script(injecting(inj("system", "remembered"))),
        },
        grants={t: ALL_HOOKS for t in ("silent", "failing", "good")},
        # 1 s, not less: the good server's answer must beat it on a loaded machine too.
        extra={"mcpl": {"context": {"hook_timeout_s": 1.0}}},
    )
    r.provider.script(Scenario.text("ok"))
    events = await run_turn(r)
    assert isinstance(events[-1], Complete)
    assert r.provider.calls[-1].body["system"] == f"{SYSTEM_PROMPT}\n\nremembered"
    traces = hook_traces(r)
    assert traces["silent"]["outcome"] == "timeout"
    assert traces["silent"]["error"] == "no answer within 1 s"
    assert traces["failing"]["outcome"] == "error"
    assert "memory store down" in traces["failing"]["error"]
    assert traces["good"]["outcome"] == "ok"


async def test_inference_request_from_inside_the_hook_is_refused(rig: RigFactory) -> None:
    refused: list[Any] = []

    async def loops(session: ServerSession, params: dict[str, Any]) -> dict[str, Any]:
        answer = await session.infer(
            {"featureSet": "fs.plain", "messages": [{"role": "user", "content": "hi"}]}
        )
        refused.append(answer.error)
        return {"result": {"featureSet": "memory.retrieval", "contextInjections": []}}

    r = await rig({"srv": script(loops)}, grants={"srv": [*ALL_HOOKS, "inferenceRequest"]})
    r.provider.script(Scenario.text("ok"))
    events = await run_turn(r)
    assert isinstance(events[-1], Complete)
    (error,) = refused
    assert error["code"] == -32600  # RFC-006 vector 26's code; §10.7 names none
    assert error["data"] == {"reason": "context_hook"}
    assert "§10.7" in error["message"]
    assert len(r.provider.calls) == 1  # only the turn reached the provider


async def test_a_turn_cancelled_during_the_hook_lets_the_server_infer_again(
    rig: RigFactory,
) -> None:
    """Cancelling a turn while a server has not answered its hook stops the wait for it,
    says nothing of it (no trace: it neither answered nor timed out), and ends the §10.7
    guard: the server's own inference/request afterwards is served."""
    heard = asyncio.Event()

    async def silent(session: ServerSession, params: dict[str, Any]) -> None:
        heard.set()

    r = await rig(
        {"srv": script(silent)},
        grants={"srv": [*ALL_HOOKS, "inferenceRequest"]},
        extra={"mcpl": {"context": {"hook_timeout_s": 30.0}}},
    )
    turn = asyncio.ensure_future(run_turn(r))
    await asyncio.wait_for(heard.wait(), 10)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert r.traces.of("mcpl:context_hook") == []
    assert r.provider.calls == []  # the turn never reached the provider
    r.provider.script(Scenario.text("served"))
    answer = await r.server.infer(
        {"featureSet": "fs.plain", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert answer.result["content"] == "served"


# -- inference/lifecycle -------------------------------------------------------------------


async def test_lifecycle_started_then_completed_with_usage_and_no_content(rig: RigFactory) -> None:
    r = await rig(
        {"full": script(), "bare": script(), "none": script()},
        grants={"full": [LIFECYCLE, "modelInfo"], "bare": [LIFECYCLE], "none": ["modelInfo"]},
    )
    r.provider.script(Scenario.text("The answer.", input_tokens=11, output_tokens=4))
    events = await run_turn(r)
    assert isinstance(events[-1], Complete)
    full = await lifecycle(r.sessions["full"], 2)
    bare = await lifecycle(r.sessions["bare"], 2)
    inference_id = full[0]["inferenceId"]
    ids = {"inferenceId": inference_id, "conversationId": "conv_1", "turnIndex": 3}
    assert full == [
        {**ids, "phase": "started", "model": {"id": "claude-e2e"}},
        {
            **ids,
            "phase": "completed",
            "model": {"id": "claude-e2e"},
            "usage": {"inputTokens": 11, "outputTokens": 4},
        },
    ]
    # Without modelInfo, no model; never any content, whatever the grant.
    assert bare == [
        {**ids, "phase": "started"},
        {**ids, "phase": "completed", "usage": {"inputTokens": 11, "outputTokens": 4}},
    ]
    await r.close()
    assert r.sessions["none"].notifications("inference/lifecycle") == []


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.bad_request(),  # before any text
        Scenario.stream_error("Half an answer "),  # after visible text (AF #358)
        Scenario.cut("Half an answer "),  # the stream ends with no terminal
    ],
    ids=["before-text", "after-text", "cut"],
)
async def test_lifecycle_failed_for_a_failed_stream(rig: RigFactory, scenario: Scenario) -> None:
    r = await rig({"srv": script()}, grants={"srv": [LIFECYCLE]}, retry={"max_attempts": 1})
    r.provider.script(scenario)
    events = await run_turn(r)
    assert isinstance(events[-1], Failed)
    got = await lifecycle(r.sessions["srv"], 2)
    await r.close()
    assert [n["phase"] for n in r.sessions["srv"].notifications("inference/lifecycle")] == [
        "started",
        "failed",
    ]
    assert "usage" not in got[1]


async def test_a_retried_attempt_is_not_a_terminal(rig: RigFactory) -> None:
    r = await rig({"srv": script()}, grants={"srv": [LIFECYCLE]})
    r.provider.script(Scenario.rate_limit(retry_after_ms=10), Scenario.text("ok"))
    events = await run_turn(r)
    assert isinstance(events[-1], Complete)
    assert len(r.provider.calls) == 2
    await lifecycle(r.sessions["srv"], 2)
    await r.close()
    phases = [n["phase"] for n in r.sessions["srv"].notifications("inference/lifecycle")]
    assert phases == ["started", "completed"]


async def test_lifecycle_aborted_when_the_consumer_cancels(rig: RigFactory) -> None:
    r = await rig({"srv": script()}, grants={"srv": [LIFECYCLE]})
    r.provider.script(Scenario.stall("Thinking about it "))
    seen_text = asyncio.Event()

    async def consume() -> None:
        async with aclosing(r.kernel.stream(turn_request())) as events:
            async for event in events:
                if isinstance(event, Token) and event.visible:
                    seen_text.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen_text.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    got = await lifecycle(r.sessions["srv"], 2)
    assert [n["phase"] for n in got] == ["started", "aborted"]


async def test_host_shutdown_mid_turn_is_aborted(rig: RigFactory) -> None:
    r = await rig({"srv": script()}, grants={"srv": [LIFECYCLE]})
    r.provider.script(Scenario.stall("Thinking "))
    turn = asyncio.create_task(run_turn(r))
    await lifecycle(r.sessions["srv"], 1)
    await r.close()  # as serve does: the connections (flushing what is queued), the kernel
    events = await turn
    assert not isinstance(events[-1], Complete)
    phases = [n["phase"] for n in r.sessions["srv"].notifications("inference/lifecycle")]
    assert phases == ["started", "aborted"]


async def test_plain_inferences_get_no_hooks_and_no_lifecycle(rig: RigFactory) -> None:
    r = await rig(
        {"srv": script(injecting(inj("system", "x")))}, grants={"srv": [*ALL_HOOKS, LIFECYCLE]}
    )
    r.provider.script(Scenario.text("ok"))
    request = Request("a:claude-e2e", [Message.user("hi")])
    response = await r.kernel.complete(request)
    assert response.text == "ok"
    await r.close()
    assert r.sessions["srv"].requests("context/beforeInference") == []
    assert r.sessions["srv"].notifications("inference/lifecycle") == []


async def test_whole_host_turn_gets_context_and_lifecycle(rig: RigFactory) -> None:
    r = await rig(
        {"srv": script(injecting(inj("beforeUser", "fact")))},
        grants={"srv": [BEFORE, LIFECYCLE]},
    )
    r.provider.script(Scenario.text("ok", input_tokens=5, output_tokens=1))
    response = await r.kernel.complete(turn_request())
    assert response.text == "ok"
    content = r.provider.calls[-1].body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "fact\n\n"}
    got = await lifecycle(r.sessions["srv"], 2)
    assert [n["phase"] for n in got] == ["started", "completed"]
    assert got[1]["usage"] == {"inputTokens": 5, "outputTokens": 1}


async def test_a_server_that_reconnects_mid_turn_hears_nothing_of_that_turn(
    rig: RigFactory,
) -> None:
    r = await rig(
        {"srv": script()},
        grants={"srv": [LIFECYCLE]},
        server_options={"srv": {"reconnect": True}},
        inference={"progress_timeout_s": 30.0},  # the turn lasts until the test cancels it
    )
    r.provider.script(Scenario.stall("Thinking "))
    first = r.sessions["srv"]
    turn = asyncio.create_task(run_turn(r))
    (started,) = await lifecycle(first, 1)
    await first.close()  # the server goes away mid-turn...
    second = await r.hub.next_session()  # ...and the host opens a new session
    connection = r.host.connections["srv"]
    async with asyncio.timeout(10):
        while not (connection.sessions == 2 and connection.ready):
            await asyncio.sleep(0.01)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    r.provider.script(Scenario.text("ok"))
    await run_turn(r)  # a turn that starts in the new session is told everything
    got = await lifecycle(second, 2)
    assert [n["phase"] for n in got] == ["started", "completed"]
    assert started["inferenceId"] not in {n["inferenceId"] for n in got}


# -- model/info (§12) ----------------------------------------------------------------------


async def test_model_info_from_settings(rig: RigFactory) -> None:
    r = await rig(
        provider_models={
            "o": {"gpt-e2e": {"vendor": "acme", "context_window": 32000, "capabilities": ["tools"]}}
        },
        routing={"default": "o:gpt-e2e"},
    )
    answer = await r.server.call("model/info", {})
    assert answer.result == {
        "id": "gpt-e2e",
        "vendor": "acme",
        "contextWindow": 32000,
        "capabilities": ["tools"],
    }


async def test_model_info_of_a_partly_known_model_is_an_error_naming_the_rest(
    rig: RigFactory,
) -> None:
    # The built-in table knows o1-mini's maker and window, not its capabilities; settings
    # add the vendor of another: neither is answered with a partial object (§12.2).
    for default, models, unknown in (
        ("o:o1-mini", {}, ["capabilities"]),
        ("o:gpt-e2e", {"o": {"gpt-e2e": {"vendor": "acme"}}}, ["context_window", "capabilities"]),
    ):
        r = await rig(provider_models=models or None, routing={"default": default})
        answer = await r.server.call("model/info", {})
        assert answer.error["code"] == -32603
        assert answer.error["data"] == {"model": default, "unknown": unknown}
        assert "[providers.o.models." in answer.error["message"]
        await r.close()


async def test_model_info_from_the_built_in_table(rig: RigFactory) -> None:
    # Served through an openai-wire provider, made by Anthropic: vendor is the maker.
    r = await rig(routing={"default": "o:anthropic/claude-sonnet-4-5-20250929"})
    answer = await r.server.call("model/info", {})
    assert answer.result == {
        "id": "anthropic/claude-sonnet-4-5-20250929",
        "vendor": "anthropic",
        "contextWindow": 200000,
        "capabilities": ["vision", "tools"],
        "maxOutputTokens": 64000,
    }


# -- what the host advertises (§5.2) -------------------------------------------------------


@pytest.mark.parametrize(
    ("disabled", "advertised"),
    [
        (
            [],
            {
                "version": "0.5",
                "featureSets": True,
                "inferenceRequest": {"streaming": True},
                "modelInfo": True,
                "contextHooks": {"beforeInference": True},
                "inferenceLifecycle": True,
            },
        ),
        (
            ["mcpl-context"],
            {
                "version": "0.5",
                "featureSets": True,
                "inferenceRequest": {"streaming": True},
                "modelInfo": True,
            },
        ),
        (["mcpl-context", "mcpl-router"], {"version": "0.5", "featureSets": True}),
    ],
)
async def test_the_host_advertises_only_the_policies_a_plugin_provides(
    rig: RigFactory, disabled: list[str], advertised: dict[str, Any]
) -> None:
    r = await rig({"srv": script()}, extra={"plugins": {"disabled": disabled}})
    assert r.server.initialize is not None
    assert r.server.initialize["capabilities"] == {"experimental": {"mcpl": advertised}}
