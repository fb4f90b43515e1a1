"""Capability matching, advertisement and feature-set derivation (SPEC §5.1, §5.4, §6)."""

from __future__ import annotations

import pytest

from agentcore.mcpl.grants import (
    VOCABULARY,
    advertised_capabilities,
    check_policy,
    derive_feature_sets,
    effective_grant,
    flatten_capabilities,
    is_granted,
    matches,
)

# -- flattening (§5.1) -------------------------------------------------------


def test_object_advertises_itself_and_true_leaves() -> None:
    assert flatten_capabilities({"inferenceRequest": {"streaming": True}}) == {
        "inferenceRequest",
        "inferenceRequest.streaming",
    }


def test_false_or_absent_leaf_is_not_advertised() -> None:
    assert flatten_capabilities({"inferenceRequest": {"streaming": False}}) == {"inferenceRequest"}
    assert flatten_capabilities({"modelInfo": False}) == set()
    assert flatten_capabilities({"inferenceRequest": {}}) == {"inferenceRequest"}


def test_true_is_shorthand_for_every_leaf_beneath() -> None:
    # §5.1: "beforeInference": true means observe plus all three injection positions.
    assert flatten_capabilities({"contextHooks": {"beforeInference": True}}) == {
        "contextHooks",
        "contextHooks.beforeInference",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject",
        "contextHooks.beforeInference.inject.system",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    }
    assert flatten_capabilities({"inferenceRequest": True}) == {
        "inferenceRequest",
        "inferenceRequest.streaming",
    }


def test_partial_injection_advertisement_walks_every_depth() -> None:
    tree = {
        "contextHooks": {
            "beforeInference": {
                "observe": True,
                "inject": {"system": False, "beforeUser": True, "afterUser": True},
            }
        }
    }
    assert flatten_capabilities(tree) == {
        "contextHooks",
        "contextHooks.beforeInference",
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    }


def test_generic_walk_handles_unknown_deeper_paths() -> None:
    # §5.4: no hardcoded list of nestable keys; depth 4 and unknown names work.
    tree = {"future": {"a": {"b": {"c": True}}}}
    assert flatten_capabilities(tree) == {"future", "future.a", "future.a.b", "future.a.b.c"}


def test_non_boolean_values_advertise_nothing() -> None:
    assert flatten_capabilities({"x": "yes", "y": 1, "z": None, "w": ["a"]}) == set()


def test_keys_that_are_not_segments_are_skipped() -> None:
    tree = {"*": True, "a.b": True, "": True, "ok": {"*": True, "x.y": True}}
    assert flatten_capabilities(tree) == {"ok"}


def test_advertised_capabilities_reads_the_mcpl_tree_and_mcp_tools() -> None:
    caps = {
        "tools": {},
        "resources": {"subscribe": True},
        "experimental": {
            "mcpl": {
                "version": "0.5",
                "modelInfo": True,
                "featureSets": {"a.b": {"description": "", "uses": ["modelInfo"]}},
            }
        },
    }
    assert advertised_capabilities(caps) == {"tools", "modelInfo"}
    assert advertised_capabilities({}) == set()
    assert advertised_capabilities({"experimental": {"mcpl": "nope"}}) == set()


# -- matching (§5.4) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "capability", "expected"),
    [
        ("inferenceRequest", "inferenceRequest", True),
        # a bare parent grants nothing beneath it
        ("inferenceRequest", "inferenceRequest.streaming", False),
        ("contextHooks", "contextHooks.beforeInference.observe", False),
        # nor does a child grant its parent
        ("inferenceRequest.streaming", "inferenceRequest", False),
        # * matches exactly one segment
        ("channels.*", "channels.publish", True),
        ("channels.*", "channels", False),
        ("channels.*", "channels.publish.extra", False),
        ("*", "modelInfo", True),
        ("*", "inferenceRequest.streaming", False),
        (
            "contextHooks.beforeInference.inject.*",
            "contextHooks.beforeInference.inject.system",
            True,
        ),
        ("contextHooks.*.inject.system", "contextHooks.beforeInference.inject.system", True),
        ("contextHooks.*.system", "contextHooks.beforeInference.inject.system", False),
        ("contextHooks.beforeInference.*", "contextHooks.beforeInference.inject.system", False),
        # * is a whole segment, not a glob inside one
        ("channels.pub*", "channels.publish", False),
        # segment counts must be equal
        ("a.b", "a.b.c", False),
        ("a.b.c", "a.b", False),
        # malformed paths never match
        ("", "", False),
        ("a..b", "a..b", False),
        (".a", ".a", False),
        ("a.", "a.", False),
        # a concrete capability with * in it is never granted
        ("*", "*", False),
        ("channels.*", "channels.*", False),
        # case matters
        ("modelinfo", "modelInfo", False),
    ],
)
def test_matches(pattern: str, capability: str, expected: bool) -> None:
    assert matches(pattern, capability) is expected


def test_absence_is_denial() -> None:
    assert not is_granted(frozenset(), "modelInfo")
    assert not is_granted(["inferenceRequest"], "modelInfo")
    assert is_granted(["inferenceRequest", "modelInfo"], "modelInfo")


def test_effective_grant_is_configured_intersect_advertised() -> None:
    advertised = {"inferenceRequest", "inferenceRequest.streaming", "modelInfo", "pushEvents"}
    configured = ["inferenceRequest", "modelInfo", "channels.publish"]
    # channels.publish is configured but not advertised: advertisement is an input
    # that never authorizes, and the host's policy never exceeds it.
    assert effective_grant(configured, advertised) == {"inferenceRequest", "modelInfo"}


def test_effective_grant_parent_does_not_bring_children() -> None:
    advertised = {"inferenceRequest", "inferenceRequest.streaming"}
    assert effective_grant(["inferenceRequest"], advertised) == {"inferenceRequest"}


def test_effective_grant_wildcard_grants_each_matching_advertised_path() -> None:
    advertised = flatten_capabilities(
        {"channels": {"publish": True, "incoming": True}, "contextHooks": {"beforeInference": True}}
    )
    assert effective_grant(["channels.*"], advertised) == {"channels.publish", "channels.incoming"}
    assert effective_grant(["contextHooks.beforeInference.inject.*"], advertised) == {
        "contextHooks.beforeInference.inject.system",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    }
    assert effective_grant(["*"], advertised) == {"channels", "contextHooks"}


def test_effective_grant_of_nothing_configured_is_empty() -> None:
    assert effective_grant([], {"modelInfo"}) == frozenset()


def test_check_policy_fails_closed_on_overlap() -> None:
    check_policy(["a"], ["b"])
    with pytest.raises(ValueError, match="modelInfo"):
        check_policy(["modelInfo"], ["modelInfo"])


# -- feature sets (§6.2-6.4) -------------------------------------------------


def test_feature_set_enabled_when_grant_covers_its_uses() -> None:
    declared = {
        "memory.consolidation": {"description": "d", "uses": ["inferenceRequest"]},
        "memory.streamed": {
            "description": "d",
            "uses": ["inferenceRequest", "inferenceRequest.streaming"],
        },
        "memory.extraction": {"description": "d", "uses": ["inferenceLifecycle"]},
    }
    sets = derive_feature_sets(declared, {"inferenceRequest"})
    assert sets["memory.consolidation"].enabled
    assert not sets["memory.streamed"].enabled
    assert sets["memory.streamed"].reason == "missing_capabilities"
    assert sets["memory.streamed"].missing == ("inferenceRequest.streaming",)
    assert sets["memory.extraction"].missing == ("inferenceLifecycle",)


@pytest.mark.parametrize(
    "declaration",
    [
        {"description": "no uses"},
        {"description": "empty", "uses": []},
        {"description": "unknown", "uses": ["inferenceRequest", "teleport"]},
        {"description": "parent only", "uses": ["contextHooks.beforeInference"]},
        {"description": "not a list", "uses": "inferenceRequest"},
        {"description": "not strings", "uses": [1]},
        "not an object",
    ],
)
def test_invalid_uses_disables_the_set(declaration: object) -> None:
    sets = derive_feature_sets({"x.y": declaration}, set(VOCABULARY))
    assert not sets["x.y"].enabled
    assert sets["x.y"].reason == "invalid_uses"


def test_configured_disabled_sets_stay_off_with_wildcards() -> None:
    declared = {
        name: {"description": "d", "uses": ["inferenceRequest"]}
        for name in ("memory.extraction", "memory.consolidation", "notes.edit")
    }
    sets = derive_feature_sets(declared, {"inferenceRequest"}, ["memory.extraction"])
    assert [n for n, fs in sets.items() if fs.enabled] == ["memory.consolidation", "notes.edit"]
    assert sets["memory.extraction"].reason == "disabled"
    sets = derive_feature_sets(declared, {"inferenceRequest"}, ["memory.*"])
    assert [n for n, fs in sets.items() if fs.enabled] == ["notes.edit"]


def test_feature_sets_not_an_object_declares_nothing() -> None:
    assert derive_feature_sets(True, {"inferenceRequest"}) == {}
    assert derive_feature_sets(None, {"inferenceRequest"}) == {}


def test_entries_that_are_not_strings_grant_nothing_and_raise_nothing() -> None:
    hostile: list[object] = [["inferenceRequest"], {"inferenceRequest": True}, None, 7]
    assert not is_granted(hostile, "inferenceRequest")  # type: ignore[arg-type]
    assert is_granted([*hostile, "inferenceRequest"], "inferenceRequest")  # type: ignore[arg-type]
    assert not matches("inferenceRequest", ["inferenceRequest"])  # type: ignore[arg-type]
