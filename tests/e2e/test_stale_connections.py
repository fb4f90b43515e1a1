"""A provider server that closes idle keep-alive connections (uvicorn after 5 s, as the
loopback server does with ``keepalive_timeout_s``): the attempt after a hold goes out on
the pooled connection the server is closing. Through `agentcore infer`, a real process:
that request is sent again on a fresh connection without counting as an attempt, and
when a request fails before any reply, the message says so, not "mid-reply"."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_support import AGENTCORE, REPO, without_agentcore_env

from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

CLOSED = "The provider closed the connection before any reply"
RESENT = (
    "it had been sent again on a fresh connection, as the reused connection it first went "
    "on closed before any reply"
)


def infer(
    loopback_settings: Callable[..., Path], tmp_path: Path, *args: str, max_attempts: int = 4
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    traces = tmp_path / "traces.jsonl"
    settings = loopback_settings(
        {"a": "anthropic"},
        sections={
            "retry": {"max_attempts": max_attempts, "initial_delay_s": 0.01, "jitter_s": 0.0},
            "provider_hold": {"default_hold_s": 0.05},
            "traces": {"jsonl": str(traces)},
        },
    )
    done = subprocess.run(
        [AGENTCORE, "infer", "--settings", str(settings), "--model", "a:m", *args, "Hello?"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**without_agentcore_env(), API_KEY_ENV: API_KEY},
        check=False,
    )
    seen = read_jsonl(traces)
    return done, seen


def of(traces: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [t for t in traces if t["type"] == kind]


@pytest.mark.parametrize("mode", ["--stream", "--no-stream"])
def test_the_attempt_after_a_hold_is_sent_again_on_a_fresh_connection(
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    mode: str,
) -> None:
    loopback_provider.keepalive_timeout_s = 0.0  # every reused connection is being closed
    loopback_provider.script(Scenario.rate_limit(), Scenario.text("Hello after the hold."))
    done, traces = infer(loopback_settings, tmp_path, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello after the hold."
    assert [c.stale for c in loopback_provider.calls] == [False, True, False]
    assert len(of(traces, "provider:hold")) == 1
    assert len(of(traces, "inference:retry")) == 1  # the 429's; the stale request is none
    (complete,) = of(traces, "inference:complete")
    assert complete["attempts"] == 2


def test_when_the_fresh_connection_fails_too_the_message_says_what_happened(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    loopback_provider.keepalive_timeout_s = 0.0
    loopback_provider.script(Scenario.rate_limit(), Scenario.reset())
    done, traces = infer(loopback_settings, tmp_path, max_attempts=2)
    assert done.returncode == 1
    assert f"{CLOSED}; {RESENT}" in done.stderr
    assert "mid-reply" not in done.stderr
    assert [c.stale for c in loopback_provider.calls] == [False, True, False]
    (failed,) = of(traces, "inference:fail")
    assert failed["attempts"] == 2


def test_a_fresh_connection_closed_before_any_reply_is_an_attempt_not_mid_reply(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    loopback_provider.keepalive_timeout_s = 0.0
    loopback_provider.script(Scenario.reset())
    done, traces = infer(loopback_settings, tmp_path, max_attempts=1)
    assert done.returncode == 1
    assert CLOSED in done.stderr and "sent again" not in done.stderr
    assert "mid-reply" not in done.stderr
    assert len(loopback_provider.calls) == 1  # its own connection: not sent again
    (failed,) = of(traces, "inference:fail")
    assert failed["attempts"] == 1
