"""The host's own diff of two manifests by §17.1 domain, its revision check, and the §17.6
impacts it derives (pure functions; the consequences are tested end to end in tests/e2e)."""

from __future__ import annotations

from typing import Any

import pytest

from agentcore.mcpl.digest import manifest_digest
from agentcore.mcpl.grants import FeatureSet
from agentcore.mcpl.manifest import Impact, changed_domains, check_revision, impacts

BASE: dict[str, Any] = {
    "version": "0.5",
    "modelInfo": True,
    "featureSets": {
        "a": {
            "description": "A",
            "uses": ["modelInfo"],
            "tagOntology": {"coreTags": ["chat:dm"]},
        }
    },
}


def with_(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


@pytest.mark.parametrize(
    ("after", "domains"),
    [
        (BASE, []),
        # Only the revision and the version moved: neither is a domain (§17.1).
        (with_(revision="sha256:x", version="0.6"), []),
        (with_(modelInfo=1), ["capabilities"]),  # true and 1 are different JSON
        (with_(pushEvents=False), ["capabilities"]),  # a member appearing is a change
        (
            with_(featureSets={"a": {**BASE["featureSets"]["a"], "description": "B"}}),
            ["featureSets"],
        ),
        (
            with_(featureSets={"a": {**BASE["featureSets"]["a"], "tagOntology": {}}}),
            ["tagOntology"],
        ),
    ],
)
def test_changed_domains(after: dict[str, Any], domains: list[str]) -> None:
    assert changed_domains(BASE, after) == domains


def test_absent_and_empty_feature_sets_differ() -> None:
    # §17.3: {"version"} to {"version", "featureSets": {}} changes featureSets, and the
    # tagOntology domain whose carrier appeared.
    assert changed_domains({"version": "0.5"}, {"version": "0.5", "featureSets": {}}) == [
        "featureSets",
        "tagOntology",
    ]


def test_revision_check() -> None:
    honest = {**BASE, "revision": manifest_digest(BASE)}
    assert check_revision(honest).matches is True
    assert check_revision(honest).problem() is None
    lying = {**BASE, "revision": "sha256:" + "A" * 43}
    assert check_revision(lying).matches is False
    assert "is not the §17.2 digest" in (check_revision(lying).problem() or "")
    assert check_revision(BASE).matches is None  # no revision: nothing to compare
    refused = check_revision({**BASE, "featureSets": {"a b": {}}, "revision": "sha256:x"})
    assert refused.computed is None
    assert "identifier_charset" in (refused.problem() or "")


def fs(name: str, enabled: bool) -> FeatureSet:
    return FeatureSet(name, ("modelInfo",), enabled, None if enabled else "disabled")


def test_impacts_use_the_closed_vocabulary() -> None:
    found = impacts(
        advertised_before=frozenset({"modelInfo", "tools"}),
        advertised_after=frozenset({"tools", "pushEvents", "inferenceRequest"}),
        grant_before=frozenset({"modelInfo", "tools"}),
        grant_after=frozenset({"tools", "inferenceRequest"}),
        sets_before={"gone": fs("gone", True), "back": fs("back", False)},
        sets_after={"back": fs("back", True), "new": fs("new", True)},
        ontology_changed=True,
    )
    assert found == [
        Impact("capability-revoked", "applied", capability="modelInfo"),
        Impact("capability-expansion-pending", "applied", capability="inferenceRequest"),
        Impact("capability-expansion-pending", "decision-needed", capability="pushEvents"),
        Impact("feature-restored", "applied", feature_set="back"),
        Impact("feature-degraded", "applied", feature_set="gone"),
        Impact("ontology-acceptance-invalidated", "informational"),
    ]
