"""The §6.7 policy machine of one session: pure, no peer, nothing awaited.

It holds what the server advertised and declared (the manifest in force), the policy
the host wants from the settings (`configure`), and the policy in force: the state,
the effective grant and the feature sets that inbound requests are checked against.
A change runs in §6.7's mirrored orderings: `narrow` takes away at once, in one
synchronous step, what the new policy takes away, and returns the step to send as
`featureSets/update`; `receive` reads the server's receipt and only then puts in force
what the step adds. A newer step supersedes an older one whose receipt has not come.
The session (`agentcore.mcpl.session`) does the sending; docs/mcpl.md tells the story.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger

from agentcore.mcpl.compat import OFF_STATES, Negotiation, keyed_feature_sets, negotiate
from agentcore.mcpl.grants import (
    FeatureSet,
    advertised_capabilities,
    check_policy,
    derive_feature_sets,
    effective_grant,
)
from agentcore.mcpl.manifest import check_revision

PENDING_RECEIPT = "pending_receipt"
"""Why a feature set the new policy enables is not enabled yet (§6.7: after the receipt)."""


@dataclass(frozen=True, slots=True)
class PolicyStep:
    """One policy change: the policy wanted (`grant`, `feature_sets`, sent as `params`),
    what it took away at once, and what waits for the server's receipt."""

    generation: int
    cause: str  # initialize, settings, manifest
    grant: frozenset[str]
    feature_sets: dict[str, FeatureSet]
    params: dict[str, Any]
    removed: frozenset[str]
    degraded: tuple[str, ...]
    pending: frozenset[str]
    pending_sets: tuple[str, ...]


def _on(feature_sets: Mapping[str, FeatureSet], name: str) -> bool:
    fs = feature_sets.get(name)
    return fs is not None and fs.enabled


class Policy:
    """One session's policy: wanted, advertised, and in force (see the module docstring).

    `state` is pending, ready, refused (the server refused the policy), unacknowledged
    (its initial policy failed: an error or no answer) or absent (no MCPL). `revision`
    changes whenever what is in force may have changed, for the gate's memo.
    """

    def __init__(self, name: str, configured: Sequence[str], disabled: Sequence[str]) -> None:
        self.name = name
        self.configure(configured, disabled)
        self.state = "pending"
        self.grant: frozenset[str] = frozenset()
        self.advertised: frozenset[str] = frozenset()
        self.declared: object = None  # the manifest's featureSets member, as in force
        self.feature_sets: dict[str, FeatureSet] = {}
        self.acknowledged: dict[str, Any] | None = None  # the last policy the server accepted
        self.generation = 0  # bumped by every policy change; a newer one supersedes
        self.revision = 0
        self.negotiation = Negotiation()  # what was agreed at initialize (compat)
        self.manifest: dict[str, Any] = {}
        """The `initialize` result's `capabilities`, its `experimental.mcpl` as in force."""
        self.receipt: Any = None
        self._log = logger.bind(mcpl_server=name)

    def configure(self, grant: Sequence[str], disabled_feature_sets: Sequence[str]) -> None:
        """What the settings offer; in force only through `narrow` and `receive`."""
        self.configured = tuple(grant)
        self.disabled = tuple(disabled_feature_sets)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    # -- the manifest in force (§17.5: validated as at initialize) --------------------

    def adopt_manifest(self, mcpl: dict[str, Any], source: str) -> None:
        """Hold `mcpl` as the manifest in force, validated as §17.5 asks: as at initialize."""
        if source == "initialize":  # the dialect is the session's: chosen once (compat)
            self.negotiation = negotiate(mcpl)
            if (problem := self.negotiation.problem()) is not None:
                self._log.warning("mcpl server {}: {}", self.name, problem)
        problem = check_revision(mcpl).problem()
        if problem is not None:  # §17.2: a conformance defect, never grounds to reject
            self._log.warning("mcpl server {}: {} ({})", self.name, problem, source)
        experimental = self.manifest.get("experimental")
        self.manifest = {
            **self.manifest,
            "experimental": {
                **(experimental if isinstance(experimental, dict) else {}),
                "mcpl": mcpl,
            },
        }
        self.advertised = frozenset(advertised_capabilities(self.manifest))
        self.declared, problem = keyed_feature_sets(mcpl.get("featureSets"))
        if problem is not None:  # §6.1 says an object: another form is read, never silently
            self._log.warning("mcpl server {}: {}", self.name, problem)

    def current_mcpl(self) -> dict[str, Any]:
        experimental = self.manifest.get("experimental")
        mcpl = experimental.get("mcpl") if isinstance(experimental, dict) else None
        return mcpl if isinstance(mcpl, dict) else {}

    # -- a change, in §6.7's orderings -----------------------------------------------

    def narrow(self, cause: str) -> PolicyStep:
        """Derive the policy wanted now and take away, at once, what it takes away (§6.7).

        Synchronous, so no inbound request is checked against a half-applied policy:
        the grant becomes the old one intersected with the new, and a feature set the
        new policy enables stays disabled unless it was enabled already with the same
        `uses` (a changed `uses` revalidates, §17.5). What the new policy adds waits for
        the receipt (`receive`).
        """
        grant = effective_grant(self.configured, self.advertised)
        feature_sets = derive_feature_sets(self.declared, grant, self.disabled)
        params = self._params(grant, feature_sets)
        before_grant, before_sets = self.grant, self.feature_sets
        if self.state in OFF_STATES:  # nothing was on: everything waits for the receipt
            before_sets = {}
        interim: dict[str, FeatureSet] = {}
        for name, fs in feature_sets.items():
            old = before_sets.get(name)
            kept = old is not None and old.enabled and frozenset(old.uses) == frozenset(fs.uses)
            interim[name] = (
                fs if kept or not fs.enabled else replace(fs, enabled=False, reason=PENDING_RECEIPT)
            )
        self._in_force(before_grant & grant, interim)
        self.generation += 1
        return PolicyStep(
            generation=self.generation,
            cause=cause,
            grant=grant,
            feature_sets=feature_sets,
            params=params,
            removed=before_grant - grant,
            degraded=tuple(
                sorted(n for n, fs in before_sets.items() if fs.enabled and not _on(interim, n))
            ),
            pending=grant - before_grant,
            pending_sets=tuple(
                sorted(n for n, fs in interim.items() if fs.reason == PENDING_RECEIPT)
            ),
        )

    def _params(
        self, grant: frozenset[str], feature_sets: Mapping[str, FeatureSet]
    ) -> dict[str, Any]:
        effective = sorted(grant)
        denied = sorted(self.advertised - grant)
        check_policy(effective, denied)
        return {
            "effectiveCapabilities": effective,
            "deniedCapabilities": denied,
            "enabled": sorted(n for n, fs in feature_sets.items() if fs.enabled),
            "disabled": sorted(n for n, fs in feature_sets.items() if not fs.enabled),
        }

    def hold_back(self, step: PolicyStep, *, initial: bool) -> str | None:
        """Why `step` needs no Request (inactive, superseded, unchanged), or None: send it."""
        if not initial and self.state != "ready":
            return "inactive"
        if step.generation != self.generation:
            return "superseded"
        in_force = self.grant == step.grant and self.feature_sets == step.feature_sets
        if not initial and in_force and step.params == self.acknowledged:
            return "unchanged"
        return None

    def activate(self, step: PolicyStep) -> None:
        """Put `step` in force as sent: a 0.3/0.4 server's Notification has no receipt."""
        self.state = "ready"
        self.acknowledged = step.params
        self._in_force(step.grant, step.feature_sets)

    def unanswered(self, *, initial: bool) -> str:
        """§6.7: an unanswered expansion does not activate; the narrowing stands."""
        if initial:  # it refused nothing (§6.7 `accepted: false` is a refusal)
            self.state = "unacknowledged"
        return "unanswered"

    def receive(self, step: PolicyStep, receipt: Any, *, initial: bool) -> str:
        """Read the receipt of `step`'s Request; returns refused, close, superseded or
        accepted. One synchronous step: a request the server writes after its receipt is
        checked against what this leaves."""
        self.receipt = receipt
        fallback = self._refusal(receipt)
        if fallback is not None:
            # §6.7 and §3.2: MCPL is off for this session; nothing is widened.
            self.state = "refused"
            self._in_force(frozenset(), self.feature_sets)
            return "close" if fallback == "close" else "refused"
        self.acknowledged = step.params
        if initial:
            self.state = "ready"
        if step.generation != self.generation:
            return "superseded"
        self._in_force(step.grant, step.feature_sets)
        return "accepted"

    def _in_force(self, grant: frozenset[str], feature_sets: dict[str, FeatureSet]) -> None:
        self.grant, self.feature_sets = grant, feature_sets
        self.revision += 1

    def _refusal(self, receipt: Any) -> str | None:
        """Log the degradation receipt; its `fallback` when it refuses (testimony only,
        §6.7: it never changes the grant). A refusal without one is read as mcp-only."""
        if isinstance(receipt, dict) and receipt.get("accepted") is False:
            fallback = receipt.get("fallback")
            self._log.error(
                "mcpl server {}: refused the policy (fallback {!r}, missing {}): {}",
                self.name,
                fallback,
                receipt.get("missingCapabilities"),
                receipt.get("reason"),
            )
            return fallback if fallback in ("mcp-only", "close") else "mcp-only"
        if not isinstance(receipt, dict) or "accepted" not in receipt:
            self._log.warning(
                "mcpl server {}: featureSets/update receipt is not a §6.7 receipt: {!r}",
                self.name,
                receipt,
            )
            return None
        self._log.info(
            "mcpl server {}: policy accepted (mode {!r}, unavailable {})",
            self.name,
            receipt.get("mode"),
            receipt.get("unavailableFeatures"),
        )
        return None


__all__ = ["PENDING_RECEIPT", "Policy", "PolicyStep"]
