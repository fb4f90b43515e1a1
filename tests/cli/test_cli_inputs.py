"""What `agentcore` refuses or survives before and around a provider call, as a user runs
it (a real subprocess, the loopback provider): a prompt that is not UTF-8, a trace file
on a full disk, a trace file in a folder that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.testing import LoopbackServer, Scenario


def agentcore(
    *args: str | bytes, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((b"ab\xffc",), "'PROMPT': is not valid UTF-8: byte 0xff at offset 2"),
        ((b"--conversation", b"c\xe9", b"hi"), "'--conversation': is not valid UTF-8"),
    ],
    ids=["prompt", "conversation"],
)
def test_text_that_is_not_utf8_is_refused_before_any_provider_call(
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    args: tuple[bytes, ...],
    named: str,
) -> None:
    loopback_provider.script(Scenario.text("never played"))
    settings = loopback_settings({"a": "anthropic"})
    done = agentcore("infer", "--settings", str(settings), "--model", "a:m", *args)
    assert done.returncode == 2
    assert named in done.stderr
    assert "mid-reply" not in done.stderr
    assert loopback_provider.calls == []


def test_a_trace_file_that_cannot_be_written_costs_one_warning_and_a_count(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_after_ms=1), Scenario.text("Still here."))
    settings = loopback_settings(
        {"a": "anthropic"},
        sections={"traces": {"jsonl": "/dev/full"}, "retry": {"initial_delay_s": 0.01}},
    )
    done = agentcore("infer", "--settings", str(settings), "--model", "a:m", "Hello?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Still here."
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if "traces:" in line]
    assert len(warnings) == 2, done.stderr
    assert "cannot write to /dev/full: No space left on device" in warnings[0]
    count = int(warnings[1].split("traces: ")[1].split()[0])
    assert count >= 5  # start, retry, hold, waiting..., complete: every one counted
    assert "were not written to /dev/full; stopping" in warnings[1]


def test_a_trace_file_in_a_missing_folder_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "agentcore.toml").write_text('[traces]\njsonl = "logs/today/traces.jsonl"\n')
    done = agentcore(
        "infer", "--settings", str(tmp_path / "agentcore.toml"), "--model", "echo:e", "hi"
    )
    assert done.returncode == 2
    assert f"traces.jsonl: the folder {tmp_path / 'logs' / 'today'} does not exist" in done.stderr
    assert not (tmp_path / "logs").exists()  # nothing made
    from_env = agentcore(
        "settings", env={"AGENTCORE_TRACES__JSONL": str(tmp_path / "gone" / "t.jsonl")}
    )
    assert from_env.returncode == 2
    assert "environment AGENTCORE_TRACES__JSONL: traces.jsonl: the folder" in from_env.stderr
