"""The dialect a server's announced MCPL version gets, and array-form feature sets
(`agentcore.mcpl.compat`); end to end in tests/e2e/test_ts_core_interop.py."""

from __future__ import annotations

from typing import Any

import pytest

from agentcore.mcpl.compat import keyed_feature_sets, legacy_policy_params, negotiate
from agentcore.mcpl.grants import derive_feature_sets


@pytest.mark.parametrize(
    ("version", "spoken", "warned"),
    [
        ("0.5", "0.5", False),
        ("0.5.1", "0.5", False),
        ("0.4", "0.4", False),
        ("0.3", "0.4", False),
        ("0.2", "0.5", True),
        ("0.6", "0.5", True),
        (None, "0.5", True),
        (4, "0.5", True),
        ("zero.four", "0.5", True),
    ],
)
def test_the_dialect_follows_the_announced_version(
    version: object, spoken: str, warned: bool
) -> None:
    negotiation = negotiate({"version": version} if version is not None else {})
    assert negotiation.spoken == spoken
    assert negotiation.policy_as_request == (spoken == "0.5")
    assert negotiation.refuses_undeclared_use == (spoken == "0.5")
    assert (negotiation.problem() is not None) == warned


def test_an_array_of_declarations_is_keyed_by_name_and_said_so() -> None:
    declared: list[Any] = [
        {"name": "heartbeat", "uses": ["tools"], "rollback": False},
        {"name": "twice", "uses": ["pushEvents"]},
        {"name": "twice", "uses": ["inferenceRequest"]},
        {"uses": ["pushEvents"]},
        "not a declaration",
    ]
    keyed, problem = keyed_feature_sets(declared)
    assert keyed == {"heartbeat": {"uses": ["tools"], "rollback": False}, "twice": None}
    assert problem is not None
    assert problem.startswith("declares featureSets as a JSON array (mcpl-core-ts's form")
    assert "'twice' is declared twice and is disabled" in problem
    assert "entry 3 has no name" in problem and "entry 4 has no name" in problem
    derived = derive_feature_sets(keyed, ["tools", "pushEvents"])
    assert derived["heartbeat"].enabled
    assert (derived["twice"].enabled, derived["twice"].reason) == (False, "invalid_uses")


def test_the_object_form_is_taken_as_it_is() -> None:
    declared = {"memory.proactive": {"uses": ["pushEvents"]}}
    assert keyed_feature_sets(declared) == (declared, None)
    assert negotiate({"version": "0.5", "featureSets": declared}).feature_sets_form == "object"
    assert negotiate({"version": "0.4", "featureSets": []}).feature_sets_form == "array"
    assert negotiate({"version": "0.4"}).feature_sets_form == "absent"


def test_a_0_4_policy_carries_no_grant_fields() -> None:
    params = {
        "effectiveCapabilities": ["pushEvents"],
        "deniedCapabilities": ["tools"],
        "enabled": ["a"],
        "disabled": ["b"],
    }
    assert legacy_policy_params(params) == {"enabled": ["a"], "disabled": ["b"]}
