"""What a stdio MCPL server's process gets of the host's environment: almost nothing.

An MCPL server is third-party code that the host grants only some capabilities (MCPL
SPEC §5.4: "The host computes the effective grant per connection"); reading the host's
provider keys from its own environment would step around every grant. So a stdio server
starts with only what a process needs to run (`BASE_VARIABLES`, ``LC_*``), then the
names its ``[mcpl.servers.NAME] env_passthrough`` lists, then its ``env`` table.

No configured secret is ever passed through (`passthrough_problems`, checked when the
settings load, and again at each spawn): a variable a ``*_env`` setting names as a
credential (``api_key_env``, ``token_env``), the OpenTelemetry headers, any
``AGENTCORE_*`` variable (they configure the host: a Redis URL with its password), and
any variable whose value holds a registered secret. A secret-named variable that is
passed through (``GITHUB_TOKEN``, for a server that needs it) is registered as a secret
itself, so the host never logs or forwards it.

This module imports nothing of agentcore's but the redaction boundary, so the settings
loader can use it. (At each spawn the check is made again, against the secrets registered
by then: one a provider registered later, such as its proxy's password, is left out with
a warning.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from loguru import logger

from agentcore.redaction import is_secret_name, redact, register_secret

BASE_VARIABLES: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    # Windows: a process cannot start sockets or find its profile without these.
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
)
"""What every stdio server gets of the host's environment, when the host has it set."""
BASE_PREFIXES: tuple[str, ...] = ("LC_",)
"""The locale categories (``LC_ALL``, ``LC_CTYPE``, ...)."""

HOST_PREFIX = "AGENTCORE_"
SECRET_VARIABLES: frozenset[str] = frozenset(
    {
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
    }
)
"""Variables the host's plugins read credentials from without a setting naming them."""

ENV_HINT = (
    "a stdio MCPL server starts with a minimal environment (PATH, HOME, LANG, LC_*, TZ, "
    "TMPDIR, USER, LOGNAME); if it needs another variable of the host's (PYTHONPATH, "
    "VIRTUAL_ENV, NODE_PATH, NODE_OPTIONS, ...), list it in [mcpl.servers.{name}] "
    "env_passthrough, or set it in [mcpl.servers.{name}] env"
)
"""What a log line says when a stdio server fails to start or exits by itself."""

_allowed: set[str] = set()
"""Values of secret-named variables a server may have (checked, then registered, at load)."""


def env_hint(name: str) -> str:
    return ENV_HINT.format(name=name)


def is_base_variable(variable: str) -> bool:
    upper = variable.upper()
    return upper in BASE_VARIABLES or upper.startswith(BASE_PREFIXES)


def credential_variables(settings: Mapping[str, Any]) -> set[str]:
    """The environment variables a settings dump names as holding a credential: the value
    of every secret-named ``*_env`` key (``api_key_env``, ``[console] token_env``), in any
    section, plugins' included (the rule `redaction.settings_secrets` reads them by)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                key = str(key)
                if isinstance(value, str) and key.endswith("_env"):
                    if is_secret_name(key[: -len("_env")]) and value:
                        found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(settings)
    return found


def passthrough_problem(
    variable: str, environ: Mapping[str, str], credentials: set[str]
) -> str | None:
    """Why `variable` may not reach a server's environment, or None."""
    upper = variable.upper()
    if upper.startswith(HOST_PREFIX):
        return f"{variable} configures the host ({HOST_PREFIX}* variables never reach a server)"
    if variable in credentials or upper in SECRET_VARIABLES:
        return f"{variable} holds a credential the host's settings configure"
    value = environ.get(variable)
    if value and value not in _allowed and redact(value) != value:
        return f"{variable}'s value holds a secret of the host's"
    return None


def passthrough_problems(
    settings: Mapping[str, Any], environ: Mapping[str, str]
) -> Iterator[tuple[tuple[str, ...], str]]:
    """(key path, why) for each name an ``env_passthrough`` lists that must not reach a
    server; `settings` is the whole settings dump (``model_dump(mode="json")``). A
    secret-named one that may is registered as a secret from now on."""
    credentials = credential_variables(settings)
    servers = (settings.get("mcpl") or {}).get("servers") or {}
    for name, server in servers.items():
        for variable in server.get("env_passthrough") or ():
            problem = passthrough_problem(variable, environ, credentials)
            if problem is not None:
                yield ("mcpl", "servers", name, "env_passthrough"), problem
            elif is_secret_name(variable) and (value := environ.get(variable)):
                _allowed.add(value)
                register_secret(value)


def server_environment(
    env: Mapping[str, str] | None,
    passthrough: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a stdio server: the base variables the host has set, then
    `passthrough`'s (a refused one is left out: the settings check should have stopped
    it), then `env`."""
    environ = os.environ if environ is None else environ
    out = {k: v for k, v in environ.items() if is_base_variable(k)}
    for variable in passthrough:
        value = environ.get(variable)
        if value is None:
            continue
        problem = passthrough_problem(variable, environ, set())
        if problem is None:
            out[variable] = value
        else:  # a secret registered since the settings loaded (a proxy's password, say)
            logger.warning("env_passthrough: {} is left out: {}", variable, problem)
    out.update(env or {})
    return out


__all__ = [
    "BASE_PREFIXES",
    "BASE_VARIABLES",
    "ENV_HINT",
    "SECRET_VARIABLES",
    "credential_variables",
    "env_hint",
    "is_base_variable",
    "passthrough_problem",
    "passthrough_problems",
    "server_environment",
]
