"""RFC-006 event coalescing and RFC-010's deprecation notice, end to end over stdio and
WebSocket: a real host (`McplHost`, every default plugin, `[mcpl.events] enabled`
on), a scripted server, the loopback provider. Push events wait for the host's next own
turn (plugin `mcpl-context`); what that turn's request carries is asserted."""

from __future__ import annotations

import asyncio
import copy
import signal
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from e2e_rig import PROVIDERS, Rig, RigFactory, settings_sections
from e2e_support import FULL_GRANT, MANIFEST, TIMEOUT_S, Hub, ServerScript, finish, serve

from agentcore import hookimpl
from agentcore.inference import Complete, HostTurn, Message, Request
from agentcore.mcpl.protocol import PushEvent
from agentcore.testing import LoopbackServer, Scenario

INJECT = "contextHooks.beforeInference.inject.beforeUser"
GRANT = [*FULL_GRANT, "pushEvents", INJECT]
EVENTS_ON = {"mcpl": {"events": {"enabled": True}}}


def manifest() -> dict[str, Any]:
    m = copy.deepcopy(MANIFEST)
    m["pushEvents"] = True
    m["contextHooks"] = {"beforeInference": {"inject": {"beforeUser": True}}}
    m["featureSets"]["doc"] = {"description": "a live document", "uses": ["pushEvents"]}
    m["featureSets"]["other"] = {"description": "another subject space", "uses": ["pushEvents"]}
    m["featureSets"]["recall"] = {"description": "injects", "uses": [INJECT]}
    return m


def push(event_id: str, text: str, feature_set: str = "doc", **coalesce: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "featureSet": feature_set,
        "eventId": event_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"content": [{"type": "text", "text": text}] if text else []},
    }
    if coalesce:
        params["coalesce"] = coalesce
    return params


class Seen:
    """An observer of `on_push_event` that answers nothing (the inbox answers after it)."""

    def __init__(self) -> None:
        self.events: list[PushEvent] = []

    @hookimpl(tryfirst=True)
    def on_push_event(self, event: PushEvent) -> None:
        self.events.append(event)


async def start(rig: RigFactory, hook: Any = None, **kwargs: Any) -> Rig:
    handlers = kwargs.pop("handlers", {})
    return await rig(
        {"srv": ServerScript(manifest=manifest(), hook=hook, handlers=handlers)},
        grants={"srv": GRANT},
        extra=kwargs.pop("extra", EVENTS_ON),
        **kwargs,
    )


async def turn(r: Rig, index: int = 0) -> str:
    """Run one host turn; the text of every message the provider received for it."""
    r.provider.script(Scenario.text("ok"))
    request = Request("a:claude-e2e", [Message.user("go")], turn=HostTurn("conv", index, "go"))
    async with aclosing(r.kernel.stream(request)) as events:
        seen = [event async for event in events]
    assert isinstance(seen[-1], Complete), seen[-1]
    return str(r.provider.calls[-1].body["messages"])


async def outcome(r: Rig, params: dict[str, Any]) -> Any:
    answer = await r.server.call("push/event", params)
    assert answer.result["accepted"] is True, answer.result
    return answer.result.get("coalesce", {}).get("outcome")


async def test_the_host_advertises_push_events_and_coalescing(rig: RigFactory) -> None:
    r = await start(rig)
    assert r.server.initialize is not None
    mcpl = r.server.initialize["capabilities"]["experimental"]["mcpl"]
    assert mcpl["pushEvents"] is True
    assert mcpl["eventCoalescing"] == {
        "pushEvents": True,
        "channelsIncoming": False,
        "deferred": True,
        "channelScopedPush": False,
        "retryWindowMs": 3_600_000,
    }


async def test_without_the_setting_nothing_is_advertised_or_accepted(rig: RigFactory) -> None:
    r = await start(rig, extra={})
    assert r.server.initialize is not None
    mcpl = r.server.initialize["capabilities"]["experimental"]["mcpl"]
    assert "pushEvents" not in mcpl and "eventCoalescing" not in mcpl
    answer = await r.server.call("push/event", push("a", "HELLO", key="K"))
    assert answer.result["accepted"] is False and "coalesce" not in answer.result


async def test_a_burst_reaches_the_turn_coalesced(rig: RigFactory) -> None:
    seen = Seen()
    r = await start(rig, plugins={"seen": seen})
    # RFC-006 §14 vectors 1, 6, 9: one subject edited three times, others beside it.
    assert await outcome(r, push("c", "CREATE", key="K", initial=True)) == "first"
    for n in (1, 2, 3):
        assert await outcome(r, push(f"e{n}", f"EDIT_{n}", key="K")) == "replaced"
    assert await outcome(r, push("o", "OTHER_FS", "other", key="K", initial=True)) == "first"
    assert await outcome(r, push("u", "UNTRACKED", key="U")) == "appended"  # vector 1a
    assert await outcome(r, push("plain", "ORDINARY")) is None
    [create, *_] = seen.events
    assert create.coalesce is not None and create.coalesce.initial
    assert [e.coalesce.key if e.coalesce else None for e in seen.events] == [
        *"KKKKKU",
        None,
    ]
    text = await turn(r)
    for kept in ("EDIT_3", "OTHER_FS", "UNTRACKED", "ORDINARY"):
        assert text.count(kept) == 1, (kept, text)
    for gone in ("CREATE", "EDIT_1", "EDIT_2"):
        assert gone not in text
    # Consumed at assembly (vector 3): the next edit appends; the turn after holds it alone.
    assert await outcome(r, push("e4", "EDIT_4", key="K")) == "appended"
    text = await turn(r, 1)
    assert "EDIT_4" in text and "EDIT_3" not in text


async def test_a_burst_through_agentcore_serve_is_coalesced(
    hub: Hub, loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    """The real `agentcore serve` process: what its `mcpl-events` answers (`on_push_event`)
    to a burst, as RFC-006 §7 reports it. (A host turn is run by an embedding application
    or `agentcore infer`, never by `serve` alone: the other tests here run them.)"""
    hub.scripts["srv"] = ServerScript(manifest=manifest())
    sections = settings_sections(hub, {"srv": hub.config("srv", GRANT)}, extra=EVENTS_ON)
    process = await serve(loopback_settings(PROVIDERS, sections=sections))
    try:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        assert session.initialize is not None
        assert "eventCoalescing" in session.initialize["capabilities"]["experimental"]["mcpl"]
        burst = [
            push("c", "CREATE", key="K", initial=True),
            *(push(f"e{n}", f"EDIT_{n}", key="K") for n in (1, 2, 3)),
            push("n1", "FALLBACK", key="D", deferred=True),
            push("n2", "FALLBACK", key="D", deferred=True),
            push("z", "GONE", key="K", retract=True),
            push("c", "CREATE", key="K", initial=True),  # a retry: its first answer
        ]
        answers = [(await session.call("push/event", params)).result for params in burst]
        process.send_signal(signal.SIGTERM)
        code, _, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    assert [a["coalesce"]["outcome"] for a in answers] == [
        *["first", "replaced", "replaced", "replaced"],
        *["first", "replaced"],
        "retracted",  # K's unread edit withdrawn: it was never consumed (history none)
        "first",
    ]
    assert all(a["accepted"] for a in answers)


async def test_a_bulk_reference_in_an_event_reaches_the_turn_as_its_stub(rig: RigFactory) -> None:
    r = await start(rig)  # §19 applies to push events and to what a render returns
    uri = "https://files.example/s3cret-token/plan.txt"
    reference = {"type": "resource", "uri": uri, "mimeType": "text/plain", "sizeBytes": 9000}
    params = push("b", "", key="B") | {"payload": {"content": [reference]}}
    assert (await r.server.call("push/event", params)).result["accepted"] is True
    text = await turn(r)
    assert "9000" in text and "s3cret" not in text and uri not in text


async def test_retraction_decides_on_the_subjects_history(rig: RigFactory) -> None:
    r = await start(rig)
    # Vector 28: never consumed → retracted, nothing reaches the model.
    await outcome(r, push("a1", "UNREAD", key="A", initial=True))
    assert await outcome(r, push("a2", "A_DELETED", key="A", retract=True)) == "retracted"
    # Vector 29: read original → unread edit → delete: the notice lands, the edit does not.
    await outcome(r, push("b1", "READ_ORIGINAL", key="B", initial=True))
    await turn(r)
    assert await outcome(r, push("b2", "UNREAD_EDIT", key="B")) == "appended"
    assert await outcome(r, push("b3", "B_DELETED", key="B", retract=True)) == "noted"
    # Vector 30: consumed, pure withdrawal → consumed, nothing appended.
    await outcome(r, push("c1", "C_ORIGINAL", key="C", initial=True))
    # Vector 32: a subject never seen → noted.
    assert await outcome(r, push("d1", "D_DELETED", key="D", retract=True)) == "noted"
    text = await turn(r, 1)
    assert await outcome(r, push("c2", "", key="C", retract=True)) == "consumed"
    assert "B_DELETED" in text and "D_DELETED" in text and "C_ORIGINAL" in text
    for gone in ("UNREAD", "A_DELETED", "UNREAD_EDIT"):
        assert gone not in text
    assert "C_ORIGINAL" not in await turn(r, 2)


async def test_a_retry_gets_the_first_answer_and_one_effect(rig: RigFactory) -> None:
    r = await start(rig)  # vector 35
    first = await r.server.call("push/event", push("x", "ONCE", key="K", initial=True))
    again = await r.server.call("push/event", push("x", "ONCE", key="K", initial=True))
    assert again.result == first.result == {"accepted": True, "coalesce": {"outcome": "first"}}
    assert (await turn(r)).count("ONCE") == 1


async def test_malformed_coalesce_is_refused_and_touches_nothing(rig: RigFactory) -> None:
    r = await start(rig)
    await outcome(r, push("a", "KEPT", key="K", initial=True))
    cases = [
        ({"key": "k" * 257}, "coalesce.key"),  # vector 38
        ({"key": "K", "channelId": "chat"}, "coalesce.channelId"),  # vector 15
        ({"key": "K", "data": "x" * 5000, "deferred": True}, "coalesce.data"),  # over 4 KiB
        ({"key": "K", "retract": True, "initial": True}, "coalesce.retract"),
        ({"key": "K", "data": {"x": 1}}, "coalesce.data"),
        ({"key": "K", "initial": "yes"}, "coalesce.initial"),
    ]
    for n, (coalesce, field) in enumerate(cases):
        params = push(f"bad{n}", "REFUSED") | {"coalesce": coalesce}
        error = (await r.server.call("push/event", params)).error
        assert error["code"] == -32602 and error["data"]["field"] == field, error
    text = await turn(r)
    assert "KEPT" in text and "REFUSED" not in text


async def test_a_burst_of_notices_is_rendered_once_and_its_data_stays_private(
    rig: RigFactory,
) -> None:
    renders: list[dict[str, Any]] = []

    async def render(session: Any, params: dict[str, Any]) -> dict[str, Any]:
        renders.append(params)
        folded = ", ".join(n["data"]["typed"] for n in params["notices"])
        return {"result": {"content": [{"type": "text", "text": f"TYPED {folded}"}]}}

    r = await start(rig, handlers={"push/render": render})
    outcomes = [
        await outcome(r, push(f"n{i}", "FALLBACK", key="D", deferred=True, data={"typed": w}))
        for i, w in enumerate(["cat", "cater", "caterpillar"])
    ]
    assert outcomes == ["first", "replaced", "replaced"]  # RFC-006 §5.1: one batch
    text = await turn(r)
    [params] = renders  # vectors 16, 17: one push/render, notices oldest first
    assert params["eventId"] == "n2" and params["dropped"] == 0
    assert [n["eventId"] for n in params["notices"]] == ["n0", "n1", "n2"]
    assert "TYPED cat, cater, caterpillar" in text and "FALLBACK" not in text
    assert '"typed"' not in text  # notice data is never shown to a model
    [trace] = r.traces.of("mcpl:push_render")
    assert (trace["outcome"], trace["notices"], trace["key"]) == ("rendered", 3, "D")
    # Vector 18: rendered content is history; the next turn renders nothing new.
    assert await outcome(r, push("n3", "FALLBACK_2", key="D", deferred=True)) == "first"


async def test_a_failed_render_puts_the_fallback_in_and_render_may_not_infer(
    rig: RigFactory,
) -> None:
    refused: list[dict[str, Any]] = []

    async def render(session: Any, params: dict[str, Any]) -> dict[str, Any]:
        answer = await session.infer(
            {"featureSet": "fs.plain", "messages": [{"role": "user", "content": "hi"}]}
        )
        refused.append(answer.error)
        return {"error": {"code": -32603, "message": "cannot render"}}

    r = await start(rig, handlers={"push/render": render})
    await outcome(r, push("n0", "SEE_THE_DOC", key="D", deferred=True))
    assert "SEE_THE_DOC" in await turn(r)  # RFC-006 §5.3
    [error] = refused  # §10.7 applied to push/render (RFC-006 §5.3, vector 26)
    assert error["code"] == -32600 and error["data"] == {"reason": "context_hook"}
    [trace] = r.traces.of("mcpl:push_render")
    assert trace["outcome"] == "fallback" and "-32603" in trace["error"]


def injecting(session: Any, params: dict[str, Any]) -> Any:
    async def answer() -> dict[str, Any]:
        return {
            "result": {
                "featureSet": "recall",
                "contextInjections": [
                    {"namespace": "m", "position": "beforeUser", "content": "RECALLED"}
                ],
            }
        }

    return answer()


async def test_injections_still_apply_with_one_deprecation_notice_per_connection(
    rig: RigFactory, log_lines: list[str]
) -> None:
    r = await start(rig, hook=injecting, extra={})
    for index in range(3):
        assert "RECALLED" in await turn(r, index)  # RFC-010 §4.1: still applied
    [trace] = r.traces.of("mcpl:deprecated")
    assert {k: v for k, v in trace.items() if k != "timestamp"} == {
        "type": "mcpl:deprecated",
        "serverId": "srv",
        "mechanism": "contextInjections",
        "rfc": "RFC-010",
    }
    warnings = [line for line in log_lines if "RFC-010" in line]
    assert len(warnings) == 1 and "srv" in warnings[0], warnings
