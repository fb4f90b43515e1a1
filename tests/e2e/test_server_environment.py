"""A stdio MCPL server sees none of the host's secrets in its environment (issue 22).

`agentcore serve` (a real subprocess) runs with a provider key, a Redis URL holding a
password in ``AGENTCORE_FLEET__REDIS_URL``, a console token, OpenTelemetry headers and
the Python/Node variables in its environment, and spawns the relay server (a real
subprocess), which reports the whole environment it started with. It has only the
minimal variables, its own ``env`` table and what its ``env_passthrough`` lists. A
passthrough that lists a configured secret is refused at load (exit 2), naming the key.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import TIMEOUT_S, Hub, finish, serve, serving, without_agentcore_env

from agentcore.mcpl.environment import is_base_variable
from agentcore.testing import API_KEY, LoopbackServer
from agentcore.testing.server import API_KEY_ENV

REDIS_PASSWORD = "redis-pass-7755-e2e"
CONSOLE_TOKEN = "console-token-8080-e2e"
OTEL_SECRET = "otel-team-secret-3131"
PASSED_TOKEN = "passed-through-token-6262"
HOST_ENV = {
    API_KEY_ENV: API_KEY,
    "AGENTCORE_FLEET__REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0",
    "CONSOLE_TOKEN": CONSOLE_TOKEN,
    "OTEL_EXPORTER_OTLP_HEADERS": f"x-honeycomb-team={OTEL_SECRET}",
    "PYTHONPATH": "/opt/host-python-path",
    "VIRTUAL_ENV": "/opt/host-venv",
    "NODE_PATH": "/opt/host-node-path",
    "NODE_OPTIONS": "--max-old-space-size=64",
    "PASSED_VAR": "passed-through",
    "SERVER_API_TOKEN": PASSED_TOKEN,
    "KEY_COPY": f"copy of {API_KEY}",
}
SECRETS = (API_KEY, REDIS_PASSWORD, CONSOLE_TOKEN, OTEL_SECRET)


@pytest.fixture
def transport() -> str:
    return "stdio"


def write_settings(
    hub: Hub, loopback_settings: Callable[..., Path], passthrough: list[str]
) -> Path:
    server = hub.config("srv")
    server["env"] = {**server["env"], "OWN_VAR": "its own"}
    server["env_passthrough"] = passthrough
    console = {"listen": "127.0.0.1:0", "token_env": "CONSOLE_TOKEN"}
    sections = settings_sections(hub, {"srv": server}, extra={"console": console})
    path: Path = loopback_settings(PROVIDERS, sections=sections)
    return path


def host_environment() -> dict[str, str]:
    return {**without_agentcore_env(), **HOST_ENV}


async def test_a_stdio_server_sees_only_its_minimal_environment(
    hub: Hub, loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    passthrough = ["PASSED_VAR", "VIRTUAL_ENV", "SERVER_API_TOKEN", "NOT_SET_ANYWHERE"]
    settings = write_settings(hub, loopback_settings, passthrough)
    async with serving(settings, env=host_environment()) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        code, stdout, stderr = await served.stop()
    assert code == 0, stderr
    seen = session.environ
    assert seen is not None

    # Its own env table and what it asked for are there...
    assert seen["OWN_VAR"] == "its own"
    assert seen["PASSED_VAR"] == "passed-through"
    assert seen["VIRTUAL_ENV"] == "/opt/host-venv"
    assert seen["SERVER_API_TOKEN"] == PASSED_TOKEN
    assert "NOT_SET_ANYWHERE" not in seen
    assert seen["PATH"] == os.environ["PATH"]
    # ...and nothing else of the host's: no secret, no AGENTCORE_*, no unrequested
    # Python or Node variable.
    own = {"OWN_VAR", "MCPL_E2E_RELAY", "MCPL_E2E_TAG", *passthrough}
    extra = {k for k in seen if not is_base_variable(k) and k not in own}
    # Python itself may add to its own environment at start (macOS framework builds).
    assert extra <= {"__PYVENV_LAUNCHER__", "LC_CTYPE"}, extra
    assert not [k for k in seen if k.startswith("AGENTCORE_")]
    for absent in ("PYTHONPATH", "NODE_PATH", "NODE_OPTIONS", "KEY_COPY", API_KEY_ENV):
        assert absent not in seen
    everything = repr(seen)
    assert [s for s in SECRETS if s in everything] == []
    # A passed-through credential is the server's, never the host's to show.
    assert PASSED_TOKEN not in stdout + stderr


@pytest.mark.parametrize(
    ("variable", "why"),
    [
        (API_KEY_ENV, "holds a credential the host's settings configure"),
        ("CONSOLE_TOKEN", "holds a credential the host's settings configure"),
        ("AGENTCORE_FLEET__REDIS_URL", "configures the host"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "holds a credential the host's settings configure"),
        ("KEY_COPY", "value holds a secret of the host's"),
    ],
)
async def test_a_passthrough_of_a_configured_secret_is_refused_at_load(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    variable: str,
    why: str,
) -> None:
    settings = write_settings(hub, loopback_settings, ["PASSED_VAR", variable])
    process = await serve(settings, env=host_environment())
    code, stdout, stderr = await finish(process)
    assert code == 2, stderr
    assert f"mcpl.servers.srv.env_passthrough: {variable}" in stderr
    assert why in stderr
    assert hub.sessions == []  # no server was started
    assert [s for s in SECRETS if s in stdout + stderr] == []


def test_the_refused_key_names_its_source(tmp_path: Path) -> None:
    """Set from the environment, the refusal names the environment variable."""
    from agentcore.settings import SettingsError, load_settings

    environ: dict[str, Any] = {
        API_KEY_ENV: API_KEY,
        "AGENTCORE_MCPL__SERVERS__S__COMMAND": '["true"]',
        "AGENTCORE_MCPL__SERVERS__S__ENV_PASSTHROUGH": f'["{API_KEY_ENV}"]',
    }
    settings = tmp_path / "a.toml"
    settings.write_text(f'[providers.a]\nkind = "anthropic"\napi_key_env = "{API_KEY_ENV}"\n')
    with pytest.raises(SettingsError) as raised:
        load_settings(settings, environ=environ)
    [problem] = raised.value.problems
    assert problem.startswith("environment AGENTCORE_MCPL__SERVERS__S__ENV_PASSTHROUGH: ")
    assert API_KEY_ENV in problem and API_KEY not in problem
