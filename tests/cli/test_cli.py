"""The `agentcore` command as a user runs it: a real subprocess against the loopback provider."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.testing import API_KEY, LoopbackServer, Scenario

_FAST = {"initial_delay_s": 0.01, "max_delay_s": 0.02, "jitter_s": 0.0}
# Retries and provider holds in milliseconds: a test of what infer says never sleeps out a
# default 5 s hold.
FAST_RETRY = {"retry": {**_FAST, "overloaded": _FAST}, "provider_hold": {"default_hold_s": 0.05}}


def agentcore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def one_stream(*args: str) -> subprocess.CompletedProcess[str]:
    """`agentcore ARGS` with stderr and stdout in one pipe (in `.stdout`), as on a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
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


@pytest.mark.parametrize("model", ["a:claude-x", "o:gpt-x"])
def test_an_error_after_streamed_text_starts_a_line_of_its_own(
    loopback_provider: LoopbackServer, settings: Path, model: str
) -> None:
    loopback_provider.script(Scenario.stream_error("Partial text", message="Overloaded"))
    done = one_stream("infer", "--settings", str(settings), "--model", model, "Hi")
    assert done.returncode == 1
    text, error = done.stdout.split("\n", 1)
    assert text == "Partial text"
    assert error.startswith("agentcore: the inference failed: ")
    assert "Overloaded" in error and error.endswith("\n") and "\n\n" not in done.stdout


def test_a_timeout_after_streamed_text_starts_a_line_of_its_own(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    settings = loopback_settings(
        {"a": "anthropic"}, inference={"progress_timeout_s": 1.0}, sections=FAST_RETRY
    )
    # Twice: on a loaded machine the first attempt can time out before its text arrives, and
    # its retry (rightly made, nothing was shown) must meet the same stall, not a 400.
    loopback_provider.script(Scenario.stall("Partial text"), Scenario.stall("Partial text"))
    done = one_stream("infer", "--settings", str(settings), "--model", "a:claude-x", "Hi")
    assert done.returncode == 1
    assert done.stdout.startswith("Partial text\nagentcore: The inference stopped before it "), (
        done.stdout
    )


@pytest.mark.parametrize("unknown_stop", [None, "end_turn"], ids=["default", "end_turn"])
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
@pytest.mark.parametrize("model", ["a:claude-x", "o:gpt-x"])
def test_infer_refuses_a_stop_token_no_adapter_maps(
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    unknown_stop: str | None,
    stream: str,
    model: str,
) -> None:
    settings = loopback_settings(
        {"a": "anthropic", "o": "openai"},
        inference={} if unknown_stop is None else {"unknown_stop": unknown_stop},
        sections=FAST_RETRY,
    )
    loopback_provider.script(Scenario.text("Odd end", raw_stop="weird"))
    done = agentcore("infer", "--settings", str(settings), "--model", model, "--json", stream, "Hi")
    assert done.returncode == 1
    assert done.stdout == ""
    assert (
        "The provider ended the inference with stop token 'weird', "
        "which agentcore has no stop reason for"
    ) in done.stderr
    assert len(loopback_provider.calls) == 1  # not retried


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_infer_takes_a_reply_with_no_finish_reason_as_a_normal_end(
    loopback_provider: LoopbackServer, settings: Path, stream: str
) -> None:
    """A lax OpenAI-compatible server ends with [DONE] (or a whole body) naming no
    finish_reason: the default ``unknown_stop = "error"`` does not refuse that."""
    loopback_provider.script(Scenario.text("Lax but whole", raw_stop=""))
    done = agentcore(
        "infer", "--settings", str(settings), "--model", "o:gpt-x", "--json", stream, "Hi"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["content"], result["finishReason"]) == ("Lax but whole", "end_turn")
    assert len(loopback_provider.calls) == 1


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
    assert rows["otel"][1:] == ["agentcore-otel", "0.1.0", "active"]
    assert rows["console"][1:] == ["agentcore-console", "0.1.0", "active"]
    assert rows["bedrock"][1:] == ["agentcore-bedrock", "0.1.0", "active", "bedrock"]


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


# -- no configured secret in any output --------------------------------------------------

ORG_TOKEN = "tok-org-secret-4242-abcd"
"""A credential configured as a provider header (``x-org-token``), echoed like the key."""

LEAKY_ENDINGS = {
    "401-echo": Scenario.echoes_credentials(),
    "mid-stream-echo": Scenario.echoes_credentials(mid_stream=True),
    "text-echo": Scenario.text(f"your key is {API_KEY} and your token {ORG_TOKEN}"),
    # Each secret echoed in two chunks: each chunk alone holds no whole secret.
    "split-echo": Scenario.text(
        f"your key is {API_KEY} and your token {ORG_TOKEN}",
        chunks=(
            *("your key is ", API_KEY[:9], API_KEY[9:]),
            *(" and your token ", ORG_TOKEN[:5], ORG_TOKEN[5:]),
        ),
    ),
}


@pytest.fixture
def leaky_settings(loopback_settings: Callable[..., Path], tmp_path: Path) -> Path:
    return loopback_settings(
        {"a": "anthropic", "o": "openai"},
        headers={"x-org-token": ORG_TOKEN},
        sections={**FAST_RETRY, "traces": {"jsonl": str(tmp_path / "traces.jsonl")}},
    )


@pytest.mark.parametrize("ending", list(LEAKY_ENDINGS))
@pytest.mark.parametrize("model", ["a:claude-x", "o:gpt-x"])
@pytest.mark.parametrize("flags", [("--stream",), ("--no-stream",), ("--stream", "--json")])
def test_infer_never_prints_a_configured_secret_a_provider_echoes(
    loopback_provider: LoopbackServer,
    leaky_settings: Path,
    tmp_path: Path,
    ending: str,
    model: str,
    flags: tuple[str, ...],
) -> None:
    loopback_provider.script(*[LEAKY_ENDINGS[ending]] * 8)
    done = agentcore("infer", "--settings", str(leaky_settings), "--model", model, *flags, "Hi")
    call = loopback_provider.calls[0]
    assert call.headers["x-org-token"] == ORG_TOKEN  # both were sent, so could be echoed
    assert API_KEY in call.headers.get("authorization", "") + call.headers.get("x-api-key", "")
    output = done.stdout + done.stderr
    assert API_KEY not in output
    assert ORG_TOKEN not in output
    # The echo did come back, masked where it stood.
    if ending in ("text-echo", "split-echo"):
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)["content"] if "--json" in flags else done.stdout
        assert "your key is [REDACTED] and your token [REDACTED]" in shown
    else:
        assert done.returncode == 1
        assert "Incorrect API key provided:" in done.stderr
        assert "x-org-token=[REDACTED]" in done.stderr
    traces = (tmp_path / "traces.jsonl").read_text()
    assert "inference:" in traces
    assert API_KEY not in traces
    assert ORG_TOKEN not in traces


def test_settings_mask_header_values_url_userinfo_and_key_parameters(tmp_path: Path) -> None:
    path = tmp_path / "secrets.toml"
    path.write_text(
        """
[providers.p]
kind = "openai-compatible"
base_url = "https://me:pw-in-url-9876@llm.example/v1?key=query-key-5555&region=eu"
api_key_env = "P_KEY"
[providers.p.headers]
Authorization = "Bearer hdr-bearer-7777"
x-api-key = "hdr-xkey-8888"
User-Agent = "agentcore-test/1"

[mcpl.servers.s]
url = "wss://mcpl.example/ws?token=ws-token-3333"
[mcpl.servers.s.env]
API_TOKEN = "env-token-2222"
MODE = "verbose"
"""
    )
    done = agentcore("settings", "--settings", str(path), env={"P_KEY": "sk-env-key-1111"})
    assert done.returncode == 0, done.stderr
    for secret in (
        "pw-in-url-9876",
        "query-key-5555",
        "hdr-bearer-7777",
        "hdr-xkey-8888",
        "ws-token-3333",
        "env-token-2222",
        "sk-env-key-1111",
    ):
        assert secret not in done.stdout + done.stderr
    shown = {
        line.split(" = ")[0]: line.split(" = ")[1].split("    #")[0]
        for line in done.stdout.splitlines()
    }
    assert shown["providers.p.base_url"] == (
        '"https://[REDACTED]@llm.example/v1?key=[REDACTED]&region=eu"'
    )
    assert shown["providers.p.headers.Authorization"] == '"[REDACTED]"'
    assert shown["providers.p.headers.x-api-key"] == '"[REDACTED]"'
    assert shown["providers.p.headers.User-Agent"] == '"agentcore-test/1"'
    assert shown["providers.p.api_key_env"] == '"P_KEY"'
    assert shown["providers.p.api_key"] == "[REDACTED]"
    assert shown["mcpl.servers.s.url"] == '"wss://mcpl.example/ws?token=[REDACTED]"'
    assert shown["mcpl.servers.s.env.API_TOKEN"] == '"[REDACTED]"'
    assert shown["mcpl.servers.s.env.MODE"] == '"verbose"'


def test_settings_mask_secrets_in_a_servers_command_line(tmp_path: Path) -> None:
    """The transport never logs a server's arguments; `agentcore settings` does not show
    the secret ones either: values after secret-named flags, and a configured secret."""
    path = tmp_path / "argv.toml"
    path.write_text(
        """
[providers.p]
kind = "openai-compatible"
base_url = "https://llm.example/v1"
api_key_env = "P_KEY"

[mcpl.servers.s]
command = ["node", "server.js", "--api-key", "argv-key-1234567", "--token=argv-token-7654321",
           "--password", "pw1", "--verbose", "--name", "memory", "sk-env-key-1111",
           "--secret=", "--auth", "--debug"]
"""
    )
    done = agentcore("settings", "--settings", str(path), env={"P_KEY": "sk-env-key-1111"})
    assert done.returncode == 0, done.stderr
    for secret in ("argv-key-1234567", "argv-token-7654321", "pw1", "sk-env-key-1111"):
        assert secret not in done.stdout + done.stderr
    [line] = [x for x in done.stdout.splitlines() if x.startswith("mcpl.servers.s.command = ")]
    assert json.loads(line.split(" = ", 1)[1].split("    #")[0]) == [
        "node",
        "server.js",
        "--api-key",
        "[REDACTED]",
        "--token=[REDACTED]",
        "--password",
        "[REDACTED]",
        "--verbose",
        "--name",
        "memory",
        "[REDACTED]",  # the provider's key, passed as an argument
        "--secret=",
        "--auth",
        "--debug",  # a flag, not --auth's value
    ]


def test_a_secret_in_a_servers_command_line_is_masked_everywhere(tmp_path: Path) -> None:
    """Registered at load, like every configured credential: masked in any text that
    leaves the process (a server that echoes its arguments to stderr, say)."""
    path = tmp_path / "argv.toml"
    path.write_text('[mcpl.servers.s]\ncommand = ["srv", "--access-token", "argv-tok-2468"]\n')
    script = (
        "import sys; from pathlib import Path; from agentcore.redaction import redact; "
        "from agentcore.settings import load_settings; "
        "before = redact('started with argv-tok-2468'); load_settings(Path(sys.argv[1])); "
        "print(before); print(redact('started with argv-tok-2468'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == ["started with argv-tok-2468", "started with [REDACTED]"]


UNSET_REDIS_KEYS = {
    **{f"fleet.{key}": "null" for key in ("username", "password_env", "tls")},
    **{f"fleet.tls_{key}_file": "null" for key in ("ca", "cert", "key")},
    "fleet.sentinels": "[]",
    **{f"fleet.sentinel_{key}": "null" for key in ("service", "username", "password_env")},
    "fleet.cluster_nodes": "[]",
}
"""``[fleet]``'s keys for TLS, an ACL user, sentinel and cluster, as shown when unset."""


@pytest.mark.parametrize("where", ["file", "environment"])
def test_settings_show_the_fleet_with_the_redis_password_masked(tmp_path: Path, where: str) -> None:
    url = "redis://:fleet-redis-pw-4242@redis.internal:6380/2"
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[fleet]\nbackend = "redis"\non_store_error = "open"\n'
        + (f'redis_url = "{url}"\n' if where == "file" else "")
    )
    env = {"AGENTCORE_FLEET__REDIS_URL": url} if where == "environment" else {}
    done = agentcore("settings", "--settings", str(path), env=env)
    assert done.returncode == 0, done.stderr
    assert "fleet-redis-pw-4242" not in done.stdout + done.stderr
    shown = {
        line.split(" = ")[0]: line.split(" = ")[1].split("    #")[0].strip()
        for line in done.stdout.splitlines()
        if line.startswith("fleet.")
    }
    assert shown == {
        "fleet.backend": '"redis"',
        "fleet.redis_url": '"redis://[REDACTED]@redis.internal:6380/2"',
        **UNSET_REDIS_KEYS,
        "fleet.on_store_error": '"open"',
        "fleet.key_prefix": '"agentcore"',
        "fleet.timeout_s": "1.0",
    }


def test_a_fleet_url_that_is_not_redis_is_refused_without_repeating_it(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('[fleet]\nbackend = "redis"\nredis_url = "http://u:pw-9999-http@host/0"\n')
    done = agentcore("settings", "--settings", str(path))
    assert done.returncode == 2
    assert "fleet.redis_url: has the scheme 'http'; expected redis://, rediss:// or unix://" in (
        done.stderr
    )
    assert "pw-9999-http" not in done.stdout + done.stderr


def test_demo_runs_by_itself_and_exits_zero() -> None:
    done = agentcore("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    for event in (
        "inference:retry",
        "provider:hold",
        "inference:waiting",
        "mcpl:inference_complete",
        "mcpl:context_hook",
    ):
        assert event in done.stdout
    assert "chunk 0:" in done.stderr
    # The other direction: the memory server's fact reached the host's own turn (the
    # loopback provider echoes the user message it got), and the server watched it end.
    assert "<memories>Alice prefers morning meetings" in done.stdout
    assert "not shown (observe not granted)" in done.stderr
    assert "lifecycle: started" in done.stderr
    assert "lifecycle: completed" in done.stderr
    # How to watch a host live: the console, and where to open it.
    suggested = "agentcore serve --settings examples/memory.toml --console 127.0.0.1:8765"
    assert suggested in done.stdout
    assert Path(__file__).parents[2].joinpath("examples", "memory.toml").is_file()
    assert "http://127.0.0.1:8765/" in done.stdout


def test_the_status_line_follows_the_waiting_traces() -> None:
    import io

    from rich.console import Console

    from agentcore.cli import InferStatus
    from agentcore.tracing import TraceEvent

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


def on_a_terminal(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run `agentcore ARGS` with stderr on a real pseudo-terminal; the run and all it drew there."""
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentcore", *args],
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
    return done, shown.decode(errors="replace")


def test_infer_shows_the_wait_on_a_terminal(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    settings = loopback_settings(
        {"a": "anthropic"}, sections={**FAST_RETRY, "waiting_trace": {"interval_s": 0.2}}
    )
    _rate_limited_then_ok(loopback_provider)
    done, shown = on_a_terminal("infer", "--settings", str(settings), "--model", "a:claude-x", "Hi")
    assert done.returncode == 0
    assert done.stdout == "after the wait\n"
    assert "waiting for a:claude-x" in shown


def test_the_status_line_counts_down_every_second_between_traces(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    # One trace when the 4 s wait starts, the next (60 s on) never comes before its end.
    settings = loopback_settings(
        {"a": "anthropic"}, sections={**FAST_RETRY, "waiting_trace": {"interval_s": 60}}
    )
    loopback_provider.script(Scenario.rate_limit(retry_after=4), Scenario.text("after the wait"))
    done, shown = on_a_terminal("infer", "--settings", str(settings), "--model", "a:claude-x", "Hi")
    assert done.returncode == 0
    assert done.stdout == "after the wait\n"
    # The backoff's countdown; the provider hold's release jitter (up to a tenth of the
    # 4 s) may add a short hold wait after it.
    seconds = [
        int(left) for left in re.findall(r"waiting for a:claude-x, backoff, (\d+) s left", shown)
    ]
    counted = [left for i, left in enumerate(seconds) if i == 0 or seconds[i - 1] != left]
    # From the start down with no trace between, a last redraw maybe as the wait ends. A
    # stall of a loaded machine may swallow one second's redraw, never more.
    assert counted[0] == 4 and counted == sorted(set(counted), reverse=True), shown
    assert len({4, 3, 2, 1} - set(counted)) <= 1 and set(counted) <= {4, 3, 2, 1, 0}, shown


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


def test_one_off_commands_beside_a_running_serve_leave_its_console_port_alone(
    tmp_path: Path,
) -> None:
    """`infer` and `spend` with the deployment's settings, while its `serve` holds the
    console's port: the page is the host's, so neither tries to take the port."""
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the running serve's console
        port = taken.getsockname()[1]
        path = tmp_path / "settings.toml"
        path.write_text(f'[console]\nlisten = "127.0.0.1:{port}"\n')
        spend = agentcore("spend", "--settings", str(path))
        infer = agentcore("infer", "--settings", str(path), "--model", "echo:x", "Hi")
    assert (spend.returncode, spend.stdout.strip()) == (
        0,
        "no budgets: the budget plugin is disabled, or [budget] names none",
    ), spend.stderr
    assert (infer.returncode, infer.stdout.strip()) == (0, "Hi"), infer.stderr


def test_spend_with_a_plugin_that_cannot_start_says_why_without_a_traceback(
    tmp_path: Path,
) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("")
    done = agentcore(
        "spend", "--settings", str(path), env={"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x"}
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("agentcore: these plugins failed")
    assert "otel" in done.stderr and "OTEL_EXPORTER_OTLP_ENDPOINT" in done.stderr
