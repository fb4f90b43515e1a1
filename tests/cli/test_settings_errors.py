"""Settings a user gets wrong are refused at load, through the real `agentcore` command: exit
2, one line per problem naming where it came from and the key, a "did you mean" where a
known name is close, never a traceback and never a secret (docs/settings.md, Validation)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.testing import API_KEY_ENV, LoopbackServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MAX_SETTINGS_BYTES = 1024 * 1024  # docs/settings.md
PASSWORD = "hunter2-redis-password"
UNCLOSED = "is not a URL: the bracket of its IPv6 address ([...]) does not close"


def agentcore(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        capture_output=True,
        text=True,
        timeout=timeout,  # a bound, not a measurement: a blocked read fails the test
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def refused(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The problems an exit-2 settings error lists (one per line after the first)."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "agentcore: invalid settings:", done.stderr
    return [line.strip() for line in lines[1:]]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text(text)
    return path


# -- URLs ---------------------------------------------------------------------------------

URL_CASES = [
    (
        '[providers.x]\nkind = "openai-compatible"\nbase_url = "http://[::1/v1"\n',
        f"providers.x.base_url: {UNCLOSED}",
    ),
    (
        '[providers.x]\nkind = "anthropic"\nbase_url = "http://localhost:abc/v1"\n',
        "providers.x.base_url: has a port that is not a number",
    ),
    (
        '[providers.x]\nkind = "gemini"\nbase_url = "https://localhost:70000"\n',
        "providers.x.base_url: has a port outside 0-65535",
    ),
    (
        '[providers.x]\nkind = "openai"\nbase_url = "api.openai.com/v1"\n',
        "providers.x.base_url: has no scheme; expected http:// or https://",
    ),
    (
        f'[fleet]\nredis_url = "redis://:{PASSWORD}@[::1/0"\n',
        f"fleet.redis_url: {UNCLOSED}",
    ),
    (
        f'[fleet]\nredis_url = "redis://:{PASSWORD}@localhost:port/0"\n',
        "fleet.redis_url: has a port that is not a number",
    ),
    (
        '[fleet]\nredis_url = "redis://localhost:6379/zero"\n',
        "fleet.redis_url: names a database (its path) that is not a number",
    ),
    (
        '[mcpl.servers.s]\nurl = "ws://[::1/mcpl"\n',
        f"mcpl.servers.s.url: {UNCLOSED}",
    ),
    (
        '[mcpl.servers.s]\nurl = "wss://mcpl.example.com:x/mcpl"\n',
        "mcpl.servers.s.url: has a port that is not a number",
    ),
    (
        '[mcpl.servers.s]\nurl = "ws:///mcpl"\n',
        "mcpl.servers.s.url: has no host",
    ),
    (
        '[otel]\nendpoint = "http://[::1:4318"\n',
        f"otel.endpoint: {UNCLOSED}",
    ),
]


@pytest.mark.parametrize(("toml", "said"), URL_CASES, ids=[s.split(":")[0] for _, s in URL_CASES])
def test_a_malformed_url_is_a_load_time_error_naming_the_key(
    tmp_path: Path, toml: str, said: str
) -> None:
    path = write(tmp_path, toml)
    for command in (["settings"], ["infer", "--model", "echo:e", "Hi"], ["serve"]):
        done = agentcore(*command, "--settings", str(path))
        assert refused(done) == [f"{path}: {said}"]
        assert PASSWORD not in done.stderr


def test_a_malformed_url_in_the_environment_names_the_variable() -> None:
    done = agentcore("settings", env={"AGENTCORE_FLEET__REDIS_URL": f"redis://:{PASSWORD}@[::1/0"})
    assert refused(done) == [
        "environment AGENTCORE_FLEET__REDIS_URL: fleet.redis_url: is not a URL: the bracket "
        "of its IPv6 address ([...]) does not close"
    ]
    assert PASSWORD not in done.stderr


def test_a_malformed_otlp_endpoint_variable_stops_serve_naming_it() -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` stands in for ``[otel] endpoint``: said at start."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1:4318"}
    done = agentcore("serve", "--settings", str(EXAMPLES / "echo.toml"), env=env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        "OTEL_EXPORTER_OTLP_ENDPOINT (in the environment; [otel] endpoint is unset) is not "
        "a URL" in done.stderr
    )


def test_a_well_formed_url_of_each_kind_is_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[providers.x]\nkind = "openai-compatible"\nbase_url = "http://u:p@[::1]:8000/v1"\n'
        '[fleet]\nredis_url = "unix:///run/redis.sock"\n'
        '[mcpl.servers.s]\nurl = "wss://[2001:db8::1]:9000/mcpl?token=abc"\n'
        '[otel]\nendpoint = "https://collector.example.com:4318"\n',
    )
    done = agentcore("settings", "--settings", str(path))
    assert done.returncode == 0, done.stderr


# -- typos --------------------------------------------------------------------------------


def test_a_misspelt_grant_is_an_error_with_the_name_it_meant(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[mcpl.servers.mem]\ncommand = ["python3", "x.py"]\n'
        'grant = ["inferenceRequests", "modelinfo", "inferenceRequest.streaming"]\n',
    )
    assert refused(agentcore("settings", "--settings", str(path))) == [
        f"{path}: mcpl.servers.mem.grant.0: 'inferenceRequests' is not an MCPL capability "
        "(did you mean 'inferenceRequest'?)",
        f"{path}: mcpl.servers.mem.grant.1: 'modelinfo' is not an MCPL capability "
        "(did you mean 'modelInfo'?)",
    ]


def test_a_grant_of_a_bare_parent_names_the_capabilities_beneath_it(tmp_path: Path) -> None:
    """§5.4: a parent grants nothing beneath it, so `contextHooks` would grant nothing."""
    path = write(
        tmp_path,
        '[mcpl.servers.mem]\ncommand = ["python3", "x.py"]\ngrant = ["contextHooks", "nope"]\n',
    )
    bare, unknown = refused(agentcore("settings", "--settings", str(path)))
    assert bare.startswith(f"{path}: mcpl.servers.mem.grant.0: 'contextHooks' grants nothing")
    assert bare.endswith(
        "contextHooks.beforeInference.inject.afterUser, "
        "contextHooks.beforeInference.inject.beforeUser, "
        "contextHooks.beforeInference.inject.system, contextHooks.beforeInference.observe"
    )
    assert unknown.startswith(
        f"{path}: mcpl.servers.mem.grant.1: 'nope' is not an MCPL capability; the capabilities "
        "are pushEvents, tools, modelInfo"
    )


def test_a_misspelt_disabled_plugin_is_an_error_in_the_file_and_the_environment(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[plugins]\ndisabled = ["retyr"]\n')
    (problem,) = refused(agentcore("plugins", "--settings", str(path)))
    assert problem.startswith(
        f"{path}: plugins.disabled: no plugin is named 'retyr' (did you mean 'retry'?); "
        "the plugins are bedrock, budget, console, jsonl-traces, "
    )
    done = agentcore("settings", env={"AGENTCORE_DISABLE_PLUGINS": "otel,nonexistent"})
    (problem,) = refused(done)
    assert problem.startswith(
        "environment AGENTCORE_DISABLE_PLUGINS: plugins.disabled: no plugin is named "
        "'nonexistent'; the plugins are "
    )
    done = agentcore("settings", env={"AGENTCORE_PLUGINS__DISABLED": '["waiting-trac"]'})
    (problem,) = refused(done)
    assert problem.startswith(
        "environment AGENTCORE_PLUGINS__DISABLED: plugins.disabled: no plugin is named "
        "'waiting-trac' (did you mean 'waiting-trace'?)"
    )


def test_an_unknown_section_in_the_environment_is_an_error_as_in_the_file(
    tmp_path: Path,
) -> None:
    (problem,) = refused(agentcore("settings", env={"AGENTCORE_RETRYY__MAX_ATTEMPTS": "6"}))
    assert problem.startswith(
        "environment AGENTCORE_RETRYY__MAX_ATTEMPTS: names no settings section "
        "(did you mean 'retry'?); the sections are "
    )
    (problem,) = refused(agentcore("settings", "--settings", str(write(tmp_path, "[retryy]\n"))))
    assert "retryy: unknown key (did you mean 'retry'?)" in problem
    # A variable the settings name as where a value is (the README's token_env) is no override.
    path = write(tmp_path, '[console]\ntoken_env = "AGENTCORE_CONSOLE_TOKEN"\n')
    env = {"AGENTCORE_CONSOLE_TOKEN": "a-console-token-4242", "AGENTCORE_RETRY__MAX_ATTEMPTS": "6"}
    done = agentcore("settings", "--settings", str(path), env=env)
    assert done.returncode == 0, done.stderr
    assert "retry.max_attempts = 6    # environment" in done.stdout


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ("[retry]\nmax_attempts = true\n", "retry.max_attempts: expected an integer, got true"),
        ("[inference]\nprogress_timeout_s = false\n", "expected a number, got false"),
        ("[plugins]\nstrict = 1\n", "plugins.strict: expected true or false, got 1"),
        ("[mcpl.servers.m]\nurl = 'ws://h/'\nreconnect = 0\n", "expected true or false, got 0"),
        ("[retry]\nmax_attemps = 3\n", "unknown key (did you mean 'max_attempts'?)"),
        ('[fleet]\nbackend = "reddis"\n', "(got 'reddis') (did you mean 'redis'?)"),
        ('[providers.a]\nkind = "antropic"\n', "kind 'antropic' (did you mean 'anthropic'?)"),
        ('[mcpl.routing]\ndefault = "ecoh:e"\n', "provider 'ecoh', which is not configured (did"),
    ],
)
def test_a_value_of_the_wrong_kind_or_a_misspelt_name_is_refused(
    tmp_path: Path, toml: str, said: str
) -> None:
    (problem,) = refused(agentcore("settings", "--settings", str(write(tmp_path, toml))))
    assert said in problem, problem


def test_the_environment_still_gives_numbers_and_flags_as_text() -> None:
    env = {"AGENTCORE_RETRY__MAX_ATTEMPTS": "6", "AGENTCORE_PLUGINS__STRICT": "false"}
    done = agentcore("settings", env=env)
    assert done.returncode == 0, done.stderr
    assert "retry.max_attempts = 6    # environment" in done.stdout
    assert "plugins.strict = false    # environment" in done.stdout


# -- the settings file itself -------------------------------------------------------------


def test_a_device_is_refused_not_read(tmp_path: Path) -> None:
    """`--settings /dev/zero` once read until the process held gigabytes."""
    done = agentcore("settings", "--settings", "/dev/zero")
    assert refused(done) == ["/dev/zero: is a character device, not a settings file"]


def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "agentcore.toml"
    os.mkfifo(fifo)
    done = agentcore("settings", "--settings", str(fifo), timeout=30)
    assert refused(done) == [f"{fifo}: is a named pipe (FIFO), not a settings file"]


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, "# padding\n" * (MAX_SETTINGS_BYTES // 10 + 1))
    assert refused(agentcore("settings", "--settings", str(path))) == [
        f"{path}: is larger than 1048576 bytes, the most a settings file holds"
    ]
    path.write_text("# padding\n" * (MAX_SETTINGS_BYTES // 10))  # at the limit: read
    assert agentcore("settings", "--settings", str(path)).returncode == 0


async def test_serve_refuses_a_fifo_on_sighup_and_goes_on(tmp_path: Path) -> None:
    """A SIGHUP while the settings file is a FIFO once blocked the host's loop for good."""
    settings = tmp_path / "agentcore.toml"
    server = Path(__file__).resolve().parents[2] / "agentcore" / "examples" / "memory_server.py"
    settings.write_text(
        "[mcpl.servers.memory]\n"
        f"command = [{str(sys.executable)!r}, {str(server)!r}]\n"
        'grant = ["inferenceRequest", "inferenceRequest.streaming", "inferenceLifecycle"]\n'
        '[mcpl.routing]\ndefault = "echo:echo-1"\n'
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentcore",
        "serve",
        "--settings",
        str(settings),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await read_until(process, "staying for the host's next turn")
        settings.unlink()
        os.mkfifo(settings)
        process.send_signal(signal.SIGHUP)
        line = (await read_until(process, "was not applied, nothing changed")).splitlines()[-1]
        assert f"{settings}: is a named pipe (FIFO), not a settings file" in line
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):  # docs/cli.md's bound for SIGTERM
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def read_until(process: asyncio.subprocess.Process, text: str) -> str:
    assert process.stderr is not None
    lines: list[str] = []
    async with asyncio.timeout(30):
        while not lines or text not in lines[-1]:
            line = await process.stderr.readline()
            assert line, f"stderr ended before {text!r}: {''.join(lines)}"
            lines.append(line.decode())
    return "".join(lines)


# -- a provider's key ---------------------------------------------------------------------


def test_a_missing_key_is_said_at_load_and_fails_only_calls_to_its_provider(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    """A host with several providers runs the ones it has keys for (docs/settings.md)."""
    path = loopback_settings({"a": "anthropic"})
    without_key = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    infer = [sys.executable, "-m", "agentcore", "infer", "--settings", str(path), "--model"]
    done = subprocess.run(
        [*infer, "echo:e", "Hello"],
        capture_output=True,
        text=True,
        timeout=60,
        env=without_key,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello\n"
    assert (
        f"provider 'a': the environment variable {API_KEY_ENV} (its api_key_env) is not set; "
        "calls to it will fail until it is"
    ) in done.stderr
    done = subprocess.run(
        [*infer, "a:claude-x", "Hello"],
        capture_output=True,
        text=True,
        timeout=60,
        env=without_key,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert f"provider 'a' needs an API key: environment variable {API_KEY_ENV}" in done.stderr
    assert loopback_provider.calls == []
