"""``[fleet]``'s keys for reaching the Redis a team runs: one server (``redis``, plain or
TLS), a primary watched by sentinels (``redis-sentinel``), or a cluster (``redis-cluster``);
TLS files; an ACL user and a password read from the environment. Checked at load, each
mistake an error naming its keys (docs/settings.md, ``[fleet]``); the client is built
from them by `agentcore.fleet.redis_connect`.

A password never goes in the file: `password_env` and `sentinel_password_env` name the
variables that hold them, and their values are secrets from load on (the loader's
`settings_secrets` registers every secret-named ``*_env`` key's value).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, PrivateAttr, SecretStr, model_validator

from agentcore.redaction import register_secret
from agentcore.settings_checks import invalid
from agentcore.settings_fields import Section
from agentcore.urls import RedisUrl

REDIS_BACKENDS = ("redis", "redis-sentinel", "redis-cluster")


def _host_port(address: str) -> str:
    host, colon, port = address.rpartition(":")
    if not (colon and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536):
        raise invalid(f"{address!r} is not HOST:PORT (a port in 1-65535)")
    if any(c.isspace() or c in "/@" for c in host):
        raise invalid(f"{address!r} is not HOST:PORT: its host holds a space, / or @")
    return address


Address = Annotated[str, AfterValidator(_host_port)]
"""``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:26379``)."""


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` as (host, port); an IPv6 host loses its brackets."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class RedisDeploymentSettings(Section):
    """The Redis half of ``[fleet]`` (`FleetSettings` adds what every backend shares)."""

    backend: Literal["memory", "redis", "redis-sentinel", "redis-cluster"] = "memory"
    """``memory``: this process only (the embedded default); ``redis``: every replica that
    names the same Redis and `key_prefix` shares one hold and one limit; ``redis-sentinel``:
    the same, on the primary the `sentinels` name (a failover is followed);
    ``redis-cluster``: the same, on a Redis Cluster (`cluster_nodes`)."""
    redis_url: RedisUrl = "redis://127.0.0.1:6379/0"
    """redis-py's URL form (``redis://[[user]:password@]host:port/db``, ``rediss://``,
    ``unix://``); a password in it is masked wherever the URL is shown. ``redis-cluster``:
    the seed node when `cluster_nodes` is empty. Not used by ``redis-sentinel``."""
    username: str | None = Field(default=None, min_length=1)
    """The ACL user (Redis 6+); unset: ``default``, or the user in `redis_url`."""
    password_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the password (of `username`); never the password."""
    tls: bool | None = None
    """TLS to every Redis (and sentinel) node. Unset: on when `redis_url` is ``rediss://``."""
    tls_ca_file: Path | None = None
    """The CA bundle (PEM) the servers' certificates are checked against; unset: the
    system's. The certificate must name the host connected to."""
    tls_cert_file: Path | None = None
    """The client certificate (PEM), for a server that asks for one (``tls-auth-clients``)."""
    tls_key_file: Path | None = None
    """The client certificate's private key (PEM); unset: it is in `tls_cert_file`."""
    sentinels: list[Address] = Field(default_factory=list)
    """``redis-sentinel``: the sentinels' ``HOST:PORT`` (any one that answers will do)."""
    sentinel_service: str | None = Field(default=None, min_length=1)
    """``redis-sentinel``: the name the sentinels monitor the primary under (``mymaster``)."""
    sentinel_username: str | None = Field(default=None, min_length=1)
    """``redis-sentinel``: the ACL user the sentinels themselves ask for, if any."""
    sentinel_password_env: str | None = Field(default=None, min_length=1)
    """``redis-sentinel``: the variable holding the sentinels' own password, if any."""
    cluster_nodes: list[Address] = Field(default_factory=list)
    """``redis-cluster``: seed nodes' ``HOST:PORT``; the rest of the cluster is discovered."""

    _environ: Mapping[str, str] | None = PrivateAttr(default=None)
    """The environment these settings were loaded from, where the passwords are read."""

    @property
    def tls_on(self) -> bool:
        return self.tls if self.tls is not None else self.redis_url.startswith("rediss://")

    def password(self, env_key: str = "password_env") -> SecretStr | None:
        """The password the variable named by `env_key` holds (None: none configured)."""
        name = getattr(self, env_key)
        if name is None:
            return None
        environ = os.environ if self._environ is None else self._environ
        value = environ.get(name) or None
        register_secret(value)
        return None if value is None else SecretStr(value)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if problems := _deployment_problems(self):
            raise invalid("; ".join(problems))
        return self


def _deployment_problems(fleet: RedisDeploymentSettings) -> list[str]:
    """What makes these keys contradict each other or the backend, in words naming them."""
    problems = [*_backend_problems(fleet), *_tls_problems(fleet)]
    url = urllib.parse.urlsplit(fleet.redis_url)
    if fleet.password_env and url.password:
        problems.append("password_env is set and redis_url holds a password too: keep one")
    if fleet.username and url.username:
        problems.append("username is set and redis_url names a user too: keep one")
    return problems


def _backend_problems(fleet: RedisDeploymentSettings) -> list[str]:
    problems: list[str] = []
    backend = fleet.backend
    if backend == "redis-sentinel":
        if not fleet.sentinels:
            problems.append('backend = "redis-sentinel" needs sentinels = ["HOST:PORT", ...]')
        if fleet.sentinel_service is None:
            problems.append(
                'backend = "redis-sentinel" needs sentinel_service: the name the sentinels '
                "monitor the primary under"
            )
    else:
        for key in ("sentinels", "sentinel_service", "sentinel_username", "sentinel_password_env"):
            if getattr(fleet, key):
                problems.append(f'{key} is for backend = "redis-sentinel"; backend is {backend!r}')
    if backend == "redis-cluster":
        url = urllib.parse.urlsplit(fleet.redis_url)
        if not fleet.cluster_nodes and url.scheme == "unix":
            problems.append('backend = "redis-cluster" needs cluster_nodes, or a host in redis_url')
        if url.path.strip("/") not in ("", "0"):
            problems.append("a Redis Cluster has database 0 only: redis_url names another")
    elif fleet.cluster_nodes:
        problems.append(f'cluster_nodes is for backend = "redis-cluster"; backend is {backend!r}')
    return problems


def _tls_problems(fleet: RedisDeploymentSettings) -> list[str]:
    problems: list[str] = []
    if fleet.tls is False and fleet.redis_url.startswith("rediss://"):
        problems.append("tls = false contradicts redis_url's rediss:// (TLS): keep one")
    if fleet.tls and fleet.redis_url.startswith("unix://") and fleet.backend == "redis":
        problems.append("tls = true needs a host to connect to: redis_url is a unix:// socket")
    files = {
        "tls_ca_file": fleet.tls_ca_file,
        "tls_cert_file": fleet.tls_cert_file,
        "tls_key_file": fleet.tls_key_file,
    }
    for key, path in files.items():
        if path is None:
            continue
        if not fleet.tls_on:
            problems.append(f"{key} is set but TLS is off: use rediss:// or tls = true")
        elif not path.is_file():
            problems.append(f"{key}: {path} is not a file")
    if fleet.tls_key_file is not None and fleet.tls_cert_file is None:
        problems.append("tls_key_file is set without tls_cert_file (the certificate it keys)")
    return problems


def redis_env_problems(
    fleet: RedisDeploymentSettings, environ: Mapping[str, str]
) -> list[tuple[tuple[str, ...], str]]:
    """Each password variable a Redis backend names that the environment does not set, as
    (key path, why): a fleet that cannot log in is a mistake to report at load, not at the
    first call."""
    if fleet.backend not in REDIS_BACKENDS:
        return []
    out: list[tuple[tuple[str, ...], str]] = []
    for key in ("password_env", "sentinel_password_env"):
        name = getattr(fleet, key)
        if name is not None and not environ.get(name):
            out.append((("fleet", key), f"names the variable {name}, which is not set or empty"))
    return out


__all__ = [
    "REDIS_BACKENDS",
    "RedisDeploymentSettings",
    "redis_env_problems",
    "split_address",
]
