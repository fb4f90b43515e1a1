"""The `agentcore` command as a user runs it: a real subprocess against the loopback provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.testing import API_KEY, LoopbackServer, Scenario

_FAST = {"initial_delay_s": 0.01, "max_delay_s": 0.02, "jitter_s": 0.0}
FAST_RETRY = {"retry": {**_FAST, "overloaded": _FAST}}


def agentcore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def settings(loopback_settings: Callable[..., Path]) -> Path:
    return loopback_settings({"a": "anthropic", "o": "openai"}, sections=FAST_RETRY)


@pytest.mark.parametrize("model", ["a:claude-x", "o:gpt-x"])
def test_infer_json_prints_only_the_result(
    loopback_provider: LoopbackServer, settings: Path, model: str
) -> None:
    loopback_provider.script(
        Scenario.text("Hello there", model="served-1", input_tokens=7, output_tokens=2)
    )
    done = agentcore("infer", "--settings", str(settings), "--model", model, "--json", "Hi")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "content": "Hello there",
        "model": "served-1",
        "finishReason": "end_turn",
        "usage": {"inputTokens": 7, "outputTokens": 2},
    }
    assert API_KEY not in done.stdout + done.stderr


def test_infer_streams_visible_text_only(loopback_provider: LoopbackServer, settings: Path) -> None:
    loopback_provider.script(Scenario.thinking("secret musing", "The answer"))
    done = agentcore("infer", "--settings", str(settings), "--model", "a:claude-x", "Hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The answer\n"
    assert loopback_provider.calls[0].body["stream"] is True


def test_infer_no_stream_makes_a_whole_call(
    loopback_provider: LoopbackServer, settings: Path
) -> None:
    loopback_provider.script(Scenario.text("Whole reply"))
    done = agentcore(
        "infer", "--settings", str(settings), "--model", "o:gpt-x", "--no-stream", "Hi"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Whole reply\n"
    assert not loopback_provider.calls[0].body.get("stream")


def test_infer_max_tokens_is_a_success(loopback_provider: LoopbackServer, settings: Path) -> None:
    loopback_provider.script(Scenario.max_tokens())
    done = agentcore(
        "infer",
        "--settings",
        str(settings),
        "--model",
        "a:claude-x",
        "--json",
        "--max-tokens",
        "5",
        "Hi",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finishReason"] == "max_tokens"
    assert loopback_provider.calls[0].body["max_tokens"] == 5


@pytest.mark.parametrize(
    ("scenario", "cause"),
    [
        (Scenario.refusal(), "refused"),
        (Scenario.tool_use("get_weather", {"city": "Oslo"}), "get_weather"),
        (Scenario.unauthorized(), "auth 401"),
        (Scenario.stream_error(error_type="overloaded_error"), "overloaded"),
    ],
    ids=["refusal", "tool_use", "unauthorized", "stream-error"],
)
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_infer_any_other_ending_exits_non_zero_with_no_result(
    loopback_provider: LoopbackServer, settings: Path, scenario: Scenario, cause: str, stream: str
) -> None:
    loopback_provider.script(*[scenario] * 8)  # retried endings get the same answer each time
    done = agentcore(
        "infer", "--settings", str(settings), "--model", "a:claude-x", "--json", stream, "Hi"
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert cause in done.stderr
    assert API_KEY not in done.stderr


def test_infer_with_no_settings_uses_echo() -> None:
    done = agentcore("infer", "--model", "echo:any", "--json", "say it back")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content"] == "say it back"


def test_bad_settings_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[inference]\nprogress_timeout = 3\n")
    done = agentcore("infer", "--settings", str(path), "--model", "echo:x", "Hi")
    assert done.returncode == 2
    assert f"{path}: inference.progress_timeout: unknown key" in done.stderr


@pytest.mark.parametrize("case", ["a directory", "not UTF-8"])
def test_a_settings_file_that_cannot_be_read_is_exit_2_naming_it(tmp_path: Path, case: str) -> None:
    path = tmp_path / "agentcore.toml"
    if case == "a directory":
        path.mkdir()
    else:
        path.write_bytes(b"[inference]\nrequest_timeout_s = 5 # \xe9t\xe9\n")
    done = agentcore("settings", env={"AGENTCORE_SETTINGS": str(path)})
    assert done.returncode == 2
    assert done.stderr.startswith(f"agentcore: invalid settings:\n  {path}: ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ("[inference]\nprogress_timeout_s = -5\n", "inference.progress_timeout_s: Input should be"),
        ("[inference]\nrequest_timeout_s = 0\n", "inference.request_timeout_s: Input should be"),
        (
            '[mcpl.routing]\ndefault = "nope:m"\n',
            "mcpl.routing.default: names provider 'nope', which is not configured "
            "(configured: echo)",
        ),
        (
            "[retry.providers.nope]\nmax_attempts = 2\n",
            "retry.providers.nope: names provider 'nope', which is not configured "
            "(configured: echo)",
        ),
        (
            '[mcpl.servers.mem]\nurl = "http://127.0.0.1:9/mcpl"\n',
            "mcpl.servers.mem.url: has the scheme 'http'; an MCPL server is reached over ws://",
        ),
    ],
)
def test_settings_that_can_never_work_are_refused_before_anything_runs(
    tmp_path: Path, toml: str, problem: str
) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text(toml)
    done = agentcore("infer", "--settings", str(path), "--model", "echo:x", "Hi")
    assert done.returncode == 2
    assert f"{path}: {problem}" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("nope:x", "names provider 'nope', which is not configured (configured: a, echo, o)"),
        ("a-claude", "'a-claude' is not of the form NAME:MODEL"),
    ],
)
def test_infer_model_naming_no_configured_provider_is_exit_2(
    loopback_provider: LoopbackServer, settings: Path, model: str, problem: str
) -> None:
    done = agentcore("infer", "--settings", str(settings), "--model", model, "Hi")
    assert done.returncode == 2
    assert done.stderr == f"agentcore: --model: {problem}\n"
    assert done.stdout == ""
    assert loopback_provider.calls == []


def test_settings_show_the_effective_overload_schedule(tmp_path: Path) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text("[retry]\nmax_attempts = 2\n\n[retry.overloaded]\ninitial_delay_s = 0.5\n")
    done = agentcore("settings", "--settings", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"retry.max_attempts = 2    # file {path}" in lines
    assert f"retry.overloaded.initial_delay_s = 0.5    # file {path}" in lines
    # 529s keep their own, longer schedule: the general max_attempts does not cap them.
    assert "retry.overloaded.max_attempts = 6    # default" in lines
    assert "retry.overloaded.max_delay_s = 60.0    # default" in lines
    assert "retry.overloaded.jitter_s = 2.0    # default" in lines


def test_plugins_lists_every_default_with_its_state() -> None:
    done = agentcore("plugins", env={"AGENTCORE_DISABLE_PLUGINS": "waiting-trace"})
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert rows["retry"][1:] == ["agentcore-retry", "0.1.0", "active"]
    assert rows["provider-hold"][1:] == ["agentcore-provider-hold", "0.1.0", "active"]
    assert rows["mcpl-router"][1:] == ["agentcore-mcpl-router", "0.1.0", "active"]
    assert rows["waiting-trace"][1:] == ["agentcore-waiting-trace", "0.1.0", "disabled"]


def test_settings_show_sources_and_never_a_key(settings: Path) -> None:
    done = agentcore(
        "settings", "--settings", str(settings), env={"AGENTCORE_RETRY__MAX_ATTEMPTS": "6"}
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "retry.max_attempts = 6    # environment" in lines
    assert f"retry.initial_delay_s = 0.01    # file {settings}" in lines
    assert "inference.request_timeout_s = 600.0    # default" in lines
    assert any(line.startswith("providers.a.api_key = [REDACTED]") for line in lines)
    assert API_KEY not in done.stdout + done.stderr
    assert "ignored" not in done.stderr  # AGENTCORE_RETRY__* is applied, so not called ignored


def test_demo_runs_by_itself_and_exits_zero() -> None:
    done = agentcore("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    for event in (
        "inference:retry",
        "provider:hold",
        "inference:waiting",
        "mcpl:inference_complete",
    ):
        assert event in done.stdout
    assert "chunk 0:" in done.stderr


def test_the_status_line_follows_the_waiting_traces() -> None:
    import io

    from rich.console import Console

    from agentcore.cli import InferStatus
    from agentcore.traces import TraceEvent

    status = InferStatus(Console(file=io.StringIO(), force_terminal=True))
    fields = {"reason": "hold", "provider": "a", "model": "claude-x"}
    status.on_trace(TraceEvent("inference:waiting", {**fields, "remainingMs": 12_000}))
    assert status.text == "waiting for a:claude-x, hold, 12 s left"
    status.on_trace(TraceEvent("inference:waiting", {**fields, "remainingMs": 11_000}))
    assert status.text == "waiting for a:claude-x, hold, 11 s left"
    status.on_trace(TraceEvent("inference:complete", {}))
    assert status.text is not None  # other traces leave it alone
    status.on_trace(TraceEvent("inference:waiting", {**fields, "remainingMs": 0, "ended": True}))
    assert status.text is None


def _rate_limited_then_ok(loopback_provider: LoopbackServer) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_after=1), Scenario.text("after the wait"))


def test_infer_shows_the_wait_on_a_terminal(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    import pty

    settings = loopback_settings(
        {"a": "anthropic"}, sections={**FAST_RETRY, "waiting_trace": {"interval_s": 0.2}}
    )
    _rate_limited_then_ok(loopback_provider)
    leader, follower = pty.openpty()
    try:
        command = ["infer", "--settings", str(settings), "--model", "a:claude-x", "Hi"]
        done = subprocess.run(
            [sys.executable, "-m", "agentcore", *command],
            stdout=subprocess.PIPE,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=60,
        )
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert done.returncode == 0
    assert done.stdout == "after the wait\n"
    assert b"waiting for a:claude-x" in shown


def test_infer_shows_no_status_when_stderr_is_not_a_terminal(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    settings = loopback_settings(
        {"a": "anthropic"}, sections={**FAST_RETRY, "waiting_trace": {"interval_s": 0.2}}
    )
    _rate_limited_then_ok(loopback_provider)
    done = agentcore("infer", "--settings", str(settings), "--model", "a:claude-x", "Hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "after the wait\n"
    assert len(loopback_provider.calls) == 2  # it did wait for the retry
    assert "waiting for" not in done.stderr
