"""The wire side of the host's own turns (SPEC §10): each injection authorized on its own by
its position, content shapes, and the lifecycle notification's fields."""

from __future__ import annotations

from typing import Any

from agentcore.mcpl.context import (
    HOOK_LEAVES,
    authorize_injections,
    lifecycle_params,
    may_observe,
    takes_hooks,
)

BEFORE = "contextHooks.beforeInference.inject.beforeUser"
SYSTEM = "contextHooks.beforeInference.inject.system"


def result(*injections: Any) -> dict[str, Any]:
    return {"featureSet": "memory.retrieval", "contextInjections": list(injections)}


def test_each_injection_is_authorized_by_its_own_position() -> None:
    grant = frozenset({BEFORE})
    answer = authorize_injections(
        result(
            {"namespace": "m", "position": "beforeUser", "content": "ok"},
            {"namespace": "m", "position": "system", "content": "not granted"},
            {"namespace": "m", "position": "afterUser", "content": "not granted either"},
        ),
        grant,
    )
    assert answer.outcome == "ok"
    assert [(i.position, i.text) for i in answer.injections] == [("beforeUser", "ok")]
    assert answer.dropped == [
        f"contextInjections[1]: position system is not granted ({SYSTEM})",
        "contextInjections[2]: position afterUser is not granted "
        "(contextHooks.beforeInference.inject.afterUser)",
    ]


def test_the_feature_set_and_namespace_authorize_nothing() -> None:
    # §5.4: a response's featureSet is the server's word; the grant decides.
    answer = authorize_injections(
        {
            "featureSet": "admin.everything",
            "contextInjections": [{"namespace": "system", "position": "system", "content": "x"}],
        },
        frozenset({BEFORE, "contextHooks.*"}),  # one segment: no depth-4 leaf (§5.4)
    )
    assert answer.injections == []
    assert len(answer.dropped) == 1


def test_content_shapes() -> None:
    grant = frozenset({BEFORE})
    answer = authorize_injections(
        result(
            {
                "namespace": "m",
                "position": "beforeUser",
                "content": [
                    {"type": "text", "text": "one"},
                    {"type": "resource", "uri": "memory://facts/1"},
                    {"type": "text", "text": "two"},
                    "not a block",
                ],
            },
            {"namespace": "m", "position": "beforeUser", "content": 42},
            {"position": "beforeUser", "content": "no namespace"},
            "not an object",
        ),
        grant,
    )
    assert [i.text for i in answer.injections] == ["one\n\ntwo"]
    assert answer.dropped_content == [
        "contextInjections[0].content[1]: resource blocks are not carried "
        "(requests hold text only)",
        "contextInjections[0].content[3] is not a content block",
    ]
    assert answer.dropped == [
        "contextInjections[1].content must be a string or an array of blocks",
        "contextInjections[2].namespace (a string) is required",
        "contextInjections[3] is not an object",
    ]


def test_a_malformed_result_is_an_error() -> None:
    assert authorize_injections([], frozenset({BEFORE})).outcome == "error"
    bad = authorize_injections({"contextInjections": {}}, frozenset({BEFORE}))
    assert (bad.outcome, bad.error) == ("error", "contextInjections is not an array")
    empty = authorize_injections({"featureSet": "m"}, frozenset({BEFORE}))
    assert (empty.outcome, empty.injections, empty.dropped) == ("ok", [], [])


def test_who_gets_the_hook_and_who_sees_the_user() -> None:
    assert takes_hooks(frozenset({BEFORE}))
    assert not takes_hooks(frozenset({"contextHooks", "contextHooks.beforeInference"}))
    assert all(takes_hooks(frozenset({leaf})) for leaf in HOOK_LEAVES)
    assert not may_observe(frozenset({BEFORE}))
    assert may_observe(frozenset({"contextHooks.beforeInference.*"}))


def test_lifecycle_params_carry_no_content_and_usage_only_when_completed() -> None:
    usage = {"inputTokens": 1, "outputTokens": 2}
    started = lifecycle_params("inf_1", "c", 0, "started", usage=usage)
    assert started == {
        "inferenceId": "inf_1",
        "conversationId": "c",
        "turnIndex": 0,
        "phase": "started",
    }
    failed = lifecycle_params("inf_1", "c", 0, "failed", model={"id": "m"}, usage=usage)
    assert failed == {**started, "phase": "failed", "model": {"id": "m"}}
    completed = lifecycle_params("inf_1", "c", 0, "completed", usage=usage)
    assert completed == {**started, "phase": "completed", "usage": usage}
