"""What an `inference/request` or `model/info` is refused with, end to end, and what a
refusal costs: nothing reaches the provider, and only the router's own refusals are traced.

Refusals in the order docs/mcpl-router.md gives them: before the initial `featureSets/update`
exchange is complete; without `inferenceRequest` in the grant (-32002, and `stream:
true` also needs `inferenceRequest.streaming`); an undeclared feature set (-32003);
a declared but disabled one (-32001). Then the router's: no routing rule (-32603),
bad params (-32602). And `model/info`: answered when granted, -32002 when not.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from e2e_rig import MODELS, RigFactory
from e2e_support import MANIFEST, Answer, ServerScript, ServerSession

from agentcore.testing import Scenario

USER = [{"role": "user", "content": "Hello?"}]


def infer(feature_set: str = "fs.a", stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"featureSet": feature_set, "stream": stream, "messages": USER, **extra}


def manifest(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(MANIFEST)
    out.update(changes)
    return out


async def assert_nothing_ran(server: ServerSession, rid: Any, r: Any) -> None:
    assert server.chunks(rid) == []
    assert r.provider.calls == []
    assert r.traces.of("inference:start") == []


@pytest.mark.parametrize("stream", [False, True])
async def test_without_inference_request_in_the_grant(rig: RigFactory, stream: bool) -> None:
    r = await rig(grants={"srv": ["modelInfo"]})
    rid = await r.server.request("inference/request", infer(stream=stream))
    answer = await r.server.answer(rid)
    assert answer.error == {
        "code": -32002,
        "message": "Capability denied: inferenceRequest",
        "data": {"capability": "inferenceRequest"},
    }
    await assert_nothing_ran(r.server, rid, r)
    assert r.traces.mcpl(rid) == []
    assert r.server.policy is not None
    assert r.server.policy["effectiveCapabilities"] == ["modelInfo"]


@pytest.mark.parametrize(
    ("grant", "advertised"),
    [
        # The host's policy leaves streaming out.
        pytest.param(["inferenceRequest", "modelInfo"], {"streaming": True}, id="not-granted"),
        # A parent grants nothing beneath it (SPEC §5.4).
        pytest.param(["inferenceRequest"], {"streaming": True}, id="parent-only"),
        # `*` is exactly one segment: it matches inferenceRequest, not .streaming.
        pytest.param(["*"], {"streaming": True}, id="star-is-one-segment"),
        # Granted, but the server does not advertise it: absence is denial.
        pytest.param(
            ["inferenceRequest", "inferenceRequest.streaming"],
            {"streaming": False},
            id="not-advertised",
        ),
    ],
)
async def test_a_stream_needs_inference_request_streaming(
    rig: RigFactory, grant: list[str], advertised: dict[str, Any]
) -> None:
    script = ServerScript(manifest=manifest(inferenceRequest=advertised))
    r = await rig({"srv": script}, grants={"srv": grant})
    assert r.server.policy is not None
    assert "inferenceRequest" in r.server.policy["effectiveCapabilities"]
    assert "inferenceRequest.streaming" not in r.server.policy["effectiveCapabilities"]
    rid = await r.server.request("inference/request", infer(stream=True))
    assert (await r.server.answer(rid)).error == {
        "code": -32002,
        "message": "Capability denied: inferenceRequest.streaming",
        "data": {"capability": "inferenceRequest.streaming"},
    }
    await assert_nothing_ran(r.server, rid, r)
    # fs.a uses streaming, so it is disabled (§6.4); a set that does not is served.
    assert "fs.a" in r.server.policy["disabled"]
    r.provider.script(Scenario.text("Fine."), provider="a")
    answer = await r.server.infer(infer("fs.plain", stream=False))
    assert answer.result["content"] == "Fine."


@pytest.mark.parametrize(
    "grant",
    [
        pytest.param(["inferenceRequest", "inferenceRequest.streaming"], id="leaves"),
        pytest.param(["inferenceRequest", "inferenceRequest.*"], id="star-below-parent"),
        pytest.param(["*", "*.*"], id="stars"),
    ],
)
async def test_a_stream_is_served_when_streaming_is_granted(
    rig: RigFactory, grant: list[str]
) -> None:
    r = await rig(grants={"srv": grant})
    r.provider.script(Scenario.text("Streamed fine."), provider="a")
    rid = await r.server.request("inference/request", infer(stream=True))
    assert (await r.server.answer(rid)).result["content"] == "Streamed fine."
    assert [c[2] for c in r.server.chunks(rid)] == ["Streamed ", "fine."]


async def test_an_undeclared_feature_set(rig: RigFactory) -> None:
    r = await rig()
    rid = await r.server.request("inference/request", infer("fs.nope"))
    assert (await r.server.answer(rid)).error == {
        "code": -32003,
        "message": "Unknown feature set",
        "data": {"featureSet": "fs.nope"},
    }
    await assert_nothing_ran(r.server, rid, r)


async def test_a_feature_set_disabled_by_the_settings(rig: RigFactory) -> None:
    r = await rig(server_options={"srv": {"disabled_feature_sets": ["fs.off"]}})
    assert r.server.policy is not None
    assert "fs.off" in r.server.policy["disabled"]
    rid = await r.server.request("inference/request", infer("fs.off"))
    assert (await r.server.answer(rid)).error == {
        "code": -32001,
        "message": "Feature set not enabled",
        "data": {"featureSet": "fs.off", "reason": "disabled"},
    }
    await assert_nothing_ran(r.server, rid, r)


async def test_a_feature_set_whose_uses_lacks_streaming(rig: RigFactory) -> None:
    sets = copy.deepcopy(MANIFEST["featureSets"])
    sets["fs.a"]["uses"] = ["inferenceRequest"]
    r = await rig({"srv": ServerScript(manifest=manifest(featureSets=sets))})
    rid = await r.server.request("inference/request", infer("fs.a", stream=True))
    assert (await r.server.answer(rid)).error == {
        "code": -32001,
        "message": "Feature set not enabled for inferenceRequest.streaming: "
        "its uses does not declare it",
        "data": {
            "featureSet": "fs.a",
            "capability": "inferenceRequest.streaming",
            "reason": "declaration_mismatch",
        },
    }
    await assert_nothing_ran(r.server, rid, r)


async def test_a_request_before_the_policy_receipt_is_refused(rig: RigFactory) -> None:
    early: list[Answer] = []

    async def before_receipt(session: ServerSession, policy: dict[str, Any]) -> None:
        # The server already knows its grant, but has not answered featureSets/update.
        assert "inferenceRequest" in policy["effectiveCapabilities"]
        early.append(await session.infer(infer()))
        early.append(await session.call("model/info", {}))

    r = await rig({"srv": ServerScript(before_receipt=before_receipt)})
    pending = "the initial featureSets/update exchange has not completed"
    assert [a.error for a in early] == [
        {
            "code": -32002,
            "message": f"Capability denied: inferenceRequest ({pending})",
            "data": {"capability": "inferenceRequest", "reason": "policy_pending"},
        },
        {
            "code": -32002,
            "message": f"Capability denied: modelInfo ({pending})",
            "data": {"capability": "modelInfo", "reason": "policy_pending"},
        },
    ]
    assert r.provider.calls == []
    # Once the receipt is in, the same request is served.
    r.provider.script(Scenario.text("Now it works."), provider="a")
    assert (await r.server.infer(infer())).result["content"] == "Now it works."


async def test_a_request_no_routing_rule_covers(rig: RigFactory) -> None:
    r = await rig(routing={"by_feature": {"fs.a": MODELS["a"]}})
    rid = await r.server.request("inference/request", infer("fs.unrouted", stream=True))
    message = (
        "No routing rule covers feature set 'fs.unrouted': set [mcpl.routing] default, "
        "by_feature, wildcards or overrides"
    )
    assert (await r.server.answer(rid)).error == {"code": -32603, "message": message}
    await assert_nothing_ran(r.server, rid, r)
    assert r.traces.mcpl(rid) == [
        {
            "type": "mcpl:inference_fail",
            "model": None,
            "error": message,
            "serverId": "srv",
            "requestId": rid,
            "streamed": True,
        }
    ]


async def test_routing_precedence_end_to_end(rig: RigFactory) -> None:
    routing = {
        "default": "a:default-model",
        "by_feature": {"fs.a": "a:feature-model"},
        "wildcards": {"fs.*": "o:wildcard-model"},
        "overrides": {"conv_pinned": "o:pinned-model"},
    }
    r = await rig(routing=routing)
    r.provider.script(*(Scenario.echo() for _ in range(3)), provider="a")
    r.provider.script(*(Scenario.echo() for _ in range(3)), provider="o")
    models = []
    for params in (
        infer("fs.a", conversationId="conv_pinned"),  # the override wins
        infer("fs.a", conversationId="conv_other"),  # then by_feature
        infer("fs.o"),  # then wildcards
    ):
        models.append((await r.server.infer(params)).result["model"])
    assert models == ["pinned-model", "feature-model", "wildcard-model"]
    assert [c.provider for c in r.provider.calls] == ["o", "a", "o"]


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [{"role": "tool", "content": "x"}],
            "params.messages[0].role is 'tool'; expected 'user', 'assistant' or 'system'",
        ),
        ([], "params.messages must be a non-empty array of messages"),
        (
            [{"role": "user", "content": [{"type": "image", "data": "..."}]}],
            "params.messages[0].content holds a block that is not text",
        ),
    ],
)
async def test_bad_messages_are_invalid_params(
    rig: RigFactory, messages: list[Any], message: str
) -> None:
    r = await rig()
    rid = await r.server.request(
        "inference/request", {"featureSet": "fs.a", "stream": True, "messages": messages}
    )
    assert (await r.server.answer(rid)).error == {"code": -32602, "message": message}
    await assert_nothing_ran(r.server, rid, r)


async def test_model_info_is_answered_with_the_routed_default(rig: RigFactory) -> None:
    r = await rig(routing={"default": MODELS["o"]})
    answer = await r.server.call("model/info", {})
    # Nothing is known of this model: an error naming what, never a partial object
    # (§12.2; mcpl-core-ts types vendor, contextWindow and capabilities as required).
    assert answer.error == {
        "code": -32603,
        "message": "model/info: this host does not know the vendor, context_window, "
        "capabilities of o:gpt-e2e (the routed default); set them in "
        '[providers.o.models."gpt-e2e"]',
        "data": {"model": "o:gpt-e2e", "unknown": ["vendor", "context_window", "capabilities"]},
    }


@pytest.mark.parametrize(
    ("grant", "advertised"),
    [
        pytest.param(["inferenceRequest", "inferenceRequest.streaming"], True, id="not-granted"),
        pytest.param(["inferenceRequest", "modelInfo"], None, id="not-advertised"),
    ],
)
async def test_model_info_not_granted_is_refused(
    rig: RigFactory, grant: list[str], advertised: bool | None
) -> None:
    changed = manifest()
    if advertised is None:
        del changed["modelInfo"]
    r = await rig({"srv": ServerScript(manifest=changed)}, grants={"srv": grant})
    answer = await r.server.call("model/info", {})
    assert answer.error == {
        "code": -32002,
        "message": "Capability denied: modelInfo",
        "data": {"capability": "modelInfo"},
    }


async def test_a_method_nothing_answers_is_not_silence(rig: RigFactory) -> None:
    r = await rig()
    answer = await r.server.call("memory/whatever", {})
    assert answer.error == {
        "code": -32601,
        "message": "Method not found: nothing here answers memory/whatever",
    }


async def test_uses_are_checked_per_feature_set(rig: RigFactory) -> None:
    # A feature set that declares only modelInfo cannot be used to request inference.
    sets = copy.deepcopy(MANIFEST["featureSets"])
    sets["fs.info"] = {"description": "model info only", "uses": ["modelInfo"]}
    r = await rig({"srv": ServerScript(manifest=manifest(featureSets=sets))})
    rid = await r.server.request("inference/request", infer("fs.info"))
    error = (await r.server.answer(rid)).error
    assert error["code"] == -32001
    assert error["data"] == {
        "featureSet": "fs.info",
        "capability": "inferenceRequest",
        "reason": "declaration_mismatch",
    }
