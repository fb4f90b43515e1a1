"""The small decisions, with no kernel (the hold's store is `agentcore.fleet`, whose
contract suite runs in tests/fleet)."""

from __future__ import annotations

from typing import Any

from agentcore_provider_hold import HOLD_TOO_LONG, HoldKey, hold_duration_s

from agentcore.api import InferenceError


def err(kind: Any, **kw: Any) -> InferenceError:
    return InferenceError(kind, f"scripted {kind}", **kw)


def test_a_hold_key_names_the_provider_and_model_or_the_provider() -> None:
    assert str(HoldKey("anthropic", "claude")) == "anthropic:claude"
    assert str(HoldKey("anthropic")) == "anthropic"


def test_which_errors_hold_and_for_how_long() -> None:
    assert hold_duration_s(err("rate_limit", retry_after_s=12.5), 5.0) == 12.5
    assert hold_duration_s(err("overloaded"), 5.0) == 5.0
    assert hold_duration_s(err("rate_limit", retry_after_s=-1), 5.0) == 0.0
    for kind in ["server", "network", "timeout", "auth", "quota", "cancelled", "invalid_request"]:
        assert hold_duration_s(err(kind, retry_after_s=3), 5.0) is None
    # the hold's own "held too long" error never starts another hold
    assert hold_duration_s(err("rate_limit", code=HOLD_TOO_LONG, retry_after_s=100), 5.0) is None


def test_a_hold_lasts_its_wait_made_up_to_release_jitter_longer() -> None:
    stated = InferenceError("rate_limit", "slow down", status=429, retry_after_s=5.0)
    unstated = InferenceError("overloaded", "busy", status=529)
    held = [hold_duration_s(stated, 1.0, 0.1) for _ in range(200)]
    assert all(5.0 <= h <= 5.5 for h in held if h is not None)
    assert len(set(held)) > 100  # spread out, not one instant for every release
    assert hold_duration_s(stated, 1.0) == 5.0  # no jitter asked: exactly the wait
    assert hold_duration_s(unstated, 2.0, 0.0) == 2.0
    assert hold_duration_s(InferenceError("server", "boom", status=500), 2.0, 0.1) is None
