"""The §6.7 policy machine alone: no peer, no server, no loop."""

from __future__ import annotations

from typing import Any

from agentcore.mcpl.policy import PENDING_RECEIPT, Policy

MCPL: dict[str, Any] = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "featureSets": {
        "memory.consolidation": {"uses": ["inferenceRequest"]},
        "memory.model": {"uses": ["modelInfo"]},
    },
}
BOTH = ["inferenceRequest", "modelInfo"]


def ready_policy(configured: list[str]) -> Policy:
    policy = Policy("s", configured, ())
    policy.adopt_manifest(MCPL, "initialize")
    step = policy.narrow("initialize")
    # §5.3: the initial policy is a change from nothing: nothing is in force before its receipt.
    assert policy.grant == frozenset() and policy.state == "pending"
    assert set(step.pending_sets) == {n for n, fs in step.feature_sets.items() if fs.enabled}
    assert policy.hold_back(step, initial=True) is None
    assert policy.receive(step, {"accepted": True}, initial=True) == "accepted"
    assert policy.ready
    return policy


def enabled(policy: Policy) -> set[str]:
    return {name for name, fs in policy.feature_sets.items() if fs.enabled}


def test_a_narrowing_is_in_force_at_once_and_a_widening_only_with_its_receipt() -> None:
    policy = ready_policy(BOTH)
    assert policy.grant == frozenset(BOTH)
    assert enabled(policy) == {"memory.consolidation", "memory.model"}

    policy.configure(["inferenceRequest"], ())
    narrowing = policy.narrow("settings")
    assert policy.grant == frozenset({"inferenceRequest"})  # before anything is sent
    assert narrowing.removed == frozenset({"modelInfo"})
    assert narrowing.degraded == ("memory.model",)
    assert policy.receive(narrowing, {"accepted": True}, initial=False) == "accepted"

    policy.configure(BOTH, ())
    widening = policy.narrow("settings")
    assert policy.grant == frozenset({"inferenceRequest"})  # the addition waits
    assert widening.pending == frozenset({"modelInfo"})
    assert policy.feature_sets["memory.model"].reason == PENDING_RECEIPT
    assert policy.receive(widening, {"accepted": True}, initial=False) == "accepted"
    assert policy.grant == frozenset(BOTH)
    assert enabled(policy) == {"memory.consolidation", "memory.model"}


def test_a_newer_change_supersedes_one_whose_receipt_has_not_come() -> None:
    policy = ready_policy(["inferenceRequest"])
    policy.configure(BOTH, ())
    older = policy.narrow("settings")
    newer = policy.narrow("settings")
    assert policy.hold_back(older, initial=False) == "superseded"
    # The older receipt arrives anyway: it widens nothing.
    assert policy.receive(older, {"accepted": True}, initial=False) == "superseded"
    assert policy.grant == frozenset({"inferenceRequest"})
    assert policy.receive(newer, {"accepted": True}, initial=False) == "accepted"
    assert policy.grant == frozenset(BOTH)
    # Asking again for what is in force and acknowledged needs no Request.
    assert policy.hold_back(policy.narrow("settings"), initial=False) == "unchanged"


def test_a_refusal_or_no_answer_never_widens() -> None:
    policy = ready_policy(["inferenceRequest"])
    policy.configure(BOTH, ())
    step = policy.narrow("settings")
    assert policy.unanswered(initial=False) == "unanswered"
    assert policy.ready and policy.grant == frozenset({"inferenceRequest"})
    refusal = {"accepted": False, "fallback": "close", "reason": "no"}
    assert policy.receive(step, refusal, initial=False) == "close"
    assert policy.state == "refused" and policy.grant == frozenset()
    # MCPL is off: a later change sends nothing until the settings offer a policy again.
    assert policy.hold_back(policy.narrow("settings"), initial=False) == "inactive"


def test_an_initial_policy_without_an_answer_leaves_mcpl_off() -> None:
    policy = Policy("s", BOTH, ())
    policy.adopt_manifest(MCPL, "initialize")
    policy.narrow("initialize")
    assert policy.unanswered(initial=True) == "unanswered"
    assert policy.state == "unacknowledged" and policy.grant == frozenset()


def test_a_manifest_change_revalidates_changed_uses_and_drops_what_is_gone() -> None:
    policy = ready_policy([*BOTH, "inferenceRequest.streaming"])
    changed: dict[str, Any] = {
        "version": "0.5",
        "inferenceRequest": {"streaming": True},
        "featureSets": {
            "memory.consolidation": {"uses": ["inferenceRequest", "inferenceRequest.streaming"]}
        },
    }
    policy.adopt_manifest(changed, "mcpl/manifest")
    step = policy.narrow("manifest")
    assert step.removed == frozenset({"modelInfo"})
    assert policy.grant == frozenset({"inferenceRequest", "inferenceRequest.streaming"})
    assert "memory.model" not in policy.feature_sets
    # Its uses changed (§17.5): off until the receipt, though it was on before.
    assert policy.feature_sets["memory.consolidation"].reason == PENDING_RECEIPT
    assert policy.receive(step, {"accepted": True}, initial=False) == "accepted"
    assert enabled(policy) == {"memory.consolidation"}
