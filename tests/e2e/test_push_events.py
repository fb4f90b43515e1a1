"""`push/event` (MCPL SPEC §9), end to end over stdio and WebSocket: answered by the first
plugin that answers `on_push_event`, refused with a reason when none does (never silence),
deduplicated by `eventId` (§9.4), and only after the grant and feature-set checks."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from e2e_rig import RigFactory
from e2e_support import FULL_GRANT, MANIFEST, ServerScript

from agentcore import hookimpl
from agentcore.mcpl.protocol import PushAnswer, PushEvent

GRANT = [*FULL_GRANT, "pushEvents"]


def pushing_manifest() -> dict[str, Any]:
    manifest = copy.deepcopy(MANIFEST)
    manifest["pushEvents"] = True
    manifest["featureSets"]["fs.push"] = {"description": "events", "uses": ["pushEvents"]}
    manifest["featureSets"]["fs.push.off"] = {"description": "off", "uses": ["pushEvents"]}
    return manifest


def event(event_id: str = "evt_1", feature_set: str = "fs.push", **extra: Any) -> dict[str, Any]:
    return {
        "featureSet": feature_set,
        "eventId": event_id,
        "timestamp": "2026-01-23T10:30:00Z",
        "origin": {"webhook": "push"},
        "payload": {"content": [{"type": "text", "text": "New commit on main"}]},
        **extra,
    }


class Reactor:
    """A host plugin that starts an inference per event (here: hands out an id)."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.events: list[PushEvent] = []
        self.gate = gate

    @hookimpl
    async def on_push_event(self, event: PushEvent) -> PushAnswer:
        self.events.append(event)
        if self.gate is not None:
            await self.gate.wait()
        return PushAnswer(accepted=True, inference_id=f"inf_{len(self.events)}")


async def start(rig: RigFactory, **kwargs: Any) -> Any:
    return await rig(
        {"srv": ServerScript(manifest=pushing_manifest())},
        grants={"srv": kwargs.pop("grant", GRANT)},
        server_options={"srv": {"disabled_feature_sets": ["fs.push.off"]}},
        **kwargs,
    )


async def test_an_event_is_answered_by_the_plugin(rig: RigFactory) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    answer = await r.server.call("push/event", event(tags=["chat:dm"]))
    assert answer.result == {"accepted": True, "inferenceId": "inf_1"}
    [seen] = reactor.events
    assert (seen.server.name, seen.feature_set, seen.event_id) == ("srv", "fs.push", "evt_1")
    assert seen.payload["content"][0]["text"] == "New commit on main"
    assert seen.tags == ("chat:dm",)
    assert seen.origin == {"webhook": "push"}


async def test_without_a_plugin_the_event_is_refused_with_a_reason(rig: RigFactory) -> None:
    r = await start(rig)
    answer = await r.server.call("push/event", event())
    assert answer.result == {
        "accepted": False,
        "reason": "no plugin on this host acts on push events",
    }


async def test_a_duplicate_event_id_is_answered_as_the_first_without_asking_again(
    rig: RigFactory,
) -> None:
    gate = asyncio.Event()
    reactor = Reactor(gate)
    r = await start(rig, plugins={"reactor": reactor})
    # A retry while the first is still being decided, and one after it was.
    first = await r.server.request("push/event", event("evt_dup"))
    again = await r.server.request("push/event", event("evt_dup"))
    other = await r.server.request("push/event", event("evt_other"))
    gate.set()
    answers = [(await r.server.answer(rid)).result for rid in (first, again, other)]
    later = await r.server.call("push/event", event("evt_dup"))
    assert answers[0] == answers[1] == later.result
    assert answers[0]["accepted"] is True
    assert answers[2]["inferenceId"] != answers[0]["inferenceId"]
    assert [e.event_id for e in reactor.events] == ["evt_dup", "evt_other"]


async def test_an_undeclared_feature_set_is_refused_32003(rig: RigFactory) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    answer = await r.server.call("push/event", event(feature_set="fs.nope"))
    assert answer.error == {
        "code": -32003,
        "message": "Unknown feature set",
        "data": {"featureSet": "fs.nope"},
    }
    assert reactor.events == []


async def test_a_disabled_feature_set_is_refused_32001(rig: RigFactory) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    answer = await r.server.call("push/event", event(feature_set="fs.push.off"))
    assert answer.error["code"] == -32001
    assert answer.error["data"] == {"featureSet": "fs.push.off", "reason": "disabled"}
    assert reactor.events == []


async def test_without_push_events_in_the_grant_it_is_refused_32002(rig: RigFactory) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor}, grant=FULL_GRANT)
    answer = await r.server.call("push/event", event())
    assert answer.error == {
        "code": -32002,
        "message": "Capability denied: pushEvents",
        "data": {"capability": "pushEvents"},
    }
    assert reactor.events == []


async def test_a_set_that_does_not_declare_push_events_is_a_declaration_mismatch(
    rig: RigFactory,
) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    answer = await r.server.call("push/event", event(feature_set="fs.plain"))
    assert answer.error["code"] == -32001
    assert answer.error["data"]["reason"] == "declaration_mismatch"
    assert reactor.events == []


async def test_an_event_without_its_required_fields_is_refused_naming_the_field(
    rig: RigFactory,
) -> None:
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    no_payload = event()
    del no_payload["payload"]
    answer = await r.server.call("push/event", no_payload)
    assert answer.error["code"] == -32602
    assert answer.error["data"] == {"param": "payload"}
    answer = await r.server.call("push/event", event(eventId=7))
    assert answer.error["data"] == {"param": "eventId"}
    assert reactor.events == []


class Declining:
    @hookimpl
    def on_push_event(self) -> PushAnswer:
        return PushAnswer(accepted=False)


class Broken:
    @hookimpl
    def on_push_event(self) -> dict[str, Any]:
        return {"accepted": True}


async def test_a_plugins_refusal_always_carries_a_reason(rig: RigFactory) -> None:
    r = await start(rig, plugins={"declining": Declining()})
    answer = await r.server.call("push/event", event())
    assert answer.result == {"accepted": False, "reason": "the host declined the event"}


async def test_a_plugin_answering_with_the_wrong_type_gets_an_error_not_silence(
    rig: RigFactory,
) -> None:
    r = await start(rig, plugins={"broken": Broken()})
    answer = await r.server.call("push/event", event())
    assert answer.error["code"] == -32603
    assert "not a PushAnswer" in answer.error["message"]
