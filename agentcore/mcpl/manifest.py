"""What a host derives from a server's manifest change (MCPL SPEC §17.1, §17.5, §17.6).

Pure functions over two manifests (`experimental.mcpl` objects) and the policy the host
had in force before and after: which domains changed, by the host's own diff (never by
the server's `revision` or its announced `domains`, §17.1), and the one change receipt
(§17.6) whose impacts use the closed, host-derived vocabulary. The connection applies the
consequences; this module only describes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentcore.mcpl.digest import DigestRefused, manifest_digest
from agentcore.mcpl.grants import FeatureSet

DOMAINS = ("capabilities", "featureSets", "tagOntology")
METADATA = frozenset({"version", "revision", "featureSets"})


def _canonical(value: object) -> str:
    """A comparison key: JSON text, so `true` and `1` differ (they are equal in Python)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _capabilities(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k not in METADATA}


def _feature_sets(manifest: Mapping[str, Any]) -> object:
    """The `featureSets` domain: the member without any set's `tagOntology`; absence
    differs from `{}` (§17.3)."""
    if "featureSets" not in manifest:
        return ("absent",)
    declared = manifest["featureSets"]
    if not isinstance(declared, Mapping):
        return declared
    return {
        name: {k: v for k, v in fs.items() if k != "tagOntology"} if isinstance(fs, Mapping) else fs
        for name, fs in declared.items()
    }


def _ontologies(manifest: Mapping[str, Any]) -> object:
    if "featureSets" not in manifest:
        return ("absent",)
    declared = manifest["featureSets"]
    if not isinstance(declared, Mapping):
        return ("not an object",)
    return {
        name: fs["tagOntology"]
        for name, fs in declared.items()
        if isinstance(fs, Mapping) and "tagOntology" in fs
    }


def changed_domains(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The §17.1 domains whose content differs, by the host's own diff."""
    changed = []
    for domain, view in (
        ("capabilities", _capabilities),
        ("featureSets", _feature_sets),
        ("tagOntology", _ontologies),
    ):
        if _canonical(view(before)) != _canonical(view(after)):
            changed.append(domain)
    return changed


@dataclass(frozen=True, slots=True)
class RevisionCheck:
    """The server's stated `revision` against the §17.2 digest of what it sent."""

    stated: str | None
    computed: str | None
    refused: str | None = None
    """Why the digest refused the manifest (an identifier outside the charset)."""

    @property
    def matches(self) -> bool | None:
        """None when there is nothing to compare (no revision, or no digest)."""
        if self.stated is None or self.computed is None:
            return None
        return self.stated == self.computed

    def problem(self) -> str | None:
        """A conformance defect to log (§17.2: never grounds to reject the manifest)."""
        if self.refused is not None:
            return f"its manifest has no §17.2 digest ({self.refused})"
        if self.matches is False:
            return (
                f"its stated revision {self.stated} is not the §17.2 digest of what it sent "
                f"({self.computed})"
            )
        return None


def check_revision(manifest: Mapping[str, Any]) -> RevisionCheck:
    stated = manifest.get("revision")
    try:
        computed: str | None = manifest_digest(dict(manifest))
        refused = None
    except DigestRefused as exc:
        computed, refused = None, str(exc)
    return RevisionCheck(stated if isinstance(stated, str) else None, computed, refused)


@dataclass(frozen=True, slots=True)
class Impact:
    """One §17.6 impact: a closed-vocabulary kind, a disposition, and what it is about."""

    impact: str
    disposition: str
    capability: str | None = None
    feature_set: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"impact": self.impact, "disposition": self.disposition}
        if self.capability is not None:
            out["capability"] = self.capability
        if self.feature_set is not None:
            out["featureSet"] = self.feature_set
        return out


@dataclass(frozen=True, slots=True)
class ChangeReceipt:
    """The one normalized receipt per manifest change (§17.5 step 4, §17.6)."""

    server: str
    domains: list[str]
    revision: RevisionCheck
    impacts: list[Impact] = field(default_factory=list)
    policy: str = "unchanged"
    """What became of the featureSets/update Request the change needed: unchanged (none
    was needed), accepted, refused, unanswered, superseded, closed."""

    def to_fields(self) -> dict[str, Any]:
        """The `mcpl:manifest_change` trace's fields."""
        return {
            "serverId": self.server,
            "domains": self.domains,
            "revision": self.revision.stated,
            "digest": self.revision.computed,
            "revisionMatches": self.revision.matches,
            "policy": self.policy,
            "impacts": [impact.to_dict() for impact in self.impacts],
        }

    def describe(self) -> str:
        impacts = ", ".join(
            f"{i.impact} {i.capability or i.feature_set or ''} ({i.disposition})".replace("  ", " ")
            for i in self.impacts
        )
        return (
            f"domains {', '.join(self.domains) or 'none'}; "
            f"impacts: {impacts or 'none'}; policy {self.policy}"
        )


def impacts(
    *,
    advertised_before: frozenset[str],
    advertised_after: frozenset[str],
    grant_before: frozenset[str],
    grant_after: frozenset[str],
    sets_before: Mapping[str, FeatureSet],
    sets_after: Mapping[str, FeatureSet],
    ontology_changed: bool,
) -> list[Impact]:
    """The §17.6 impacts of a manifest change, from the policy in force before and after it.

    A capability newly advertised is an expansion awaiting a decision unless it is now in
    force (policy covered it and the server's receipt came: §17.5, tell → receipt →
    activate); one no longer in force is revoked.
    """
    out: list[Impact] = []
    for capability in sorted(grant_before - grant_after):
        out.append(Impact("capability-revoked", "applied", capability=capability))
    for capability in sorted(advertised_after - advertised_before):
        disposition = "applied" if capability in grant_after else "decision-needed"
        out.append(Impact("capability-expansion-pending", disposition, capability=capability))
    for name in sorted(set(sets_before) | set(sets_after)):
        before, after = sets_before.get(name), sets_after.get(name)
        was = before is not None and before.enabled
        now = after is not None and after.enabled
        if was and not now:
            out.append(Impact("feature-degraded", "applied", feature_set=name))
        elif before is not None and not was and now:
            out.append(Impact("feature-restored", "applied", feature_set=name))
    if ontology_changed:
        # This host accepts no tag ontology (§16.5), so nothing it held is invalidated.
        out.append(Impact("ontology-acceptance-invalidated", "informational"))
    return out


__all__ = [
    "DOMAINS",
    "ChangeReceipt",
    "Impact",
    "RevisionCheck",
    "changed_domains",
    "check_revision",
    "impacts",
]
