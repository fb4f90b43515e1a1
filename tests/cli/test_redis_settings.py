"""``[fleet]``'s keys for the Redis a team runs (TLS, an ACL user and password, sentinel,
cluster) are checked at load: each mistake refused naming its keys and where it was set,
never the password; `agentcore settings` shows them with no password in sight."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentcore.redaction import redact
from agentcore.settings import SettingsError, load_settings

PASSWORD = "redis-fleet-pw-0c1d2e3f"
SENTINEL_PASSWORD = "sentinel-pw-9a8b7c6d"

REFUSED = [
    (
        'backend = "redis-sentinel"',
        'backend = "redis-sentinel" needs sentinels = ["HOST:PORT", ...]; backend = '
        '"redis-sentinel" needs sentinel_service: the name the sentinels monitor the primary '
        "under",
    ),
    (
        'backend = "redis"\nsentinels = ["10.0.0.1:26379"]',
        "sentinels is for backend = \"redis-sentinel\"; backend is 'redis'",
    ),
    (
        'backend = "redis-sentinel"\nsentinels = ["10.0.0.1"]\nsentinel_service = "m"',
        "fleet.sentinels.0: '10.0.0.1' is not HOST:PORT (a port in 1-65535)",
    ),
    (
        'backend = "redis"\ncluster_nodes = ["10.0.0.1:7000"]',
        "cluster_nodes is for backend = \"redis-cluster\"; backend is 'redis'",
    ),
    (
        'backend = "redis-cluster"\nredis_url = "redis://10.0.0.1:7000/3"',
        "a Redis Cluster has database 0 only: redis_url names another",
    ),
    (
        'backend = "redis"\ntls_ca_file = "ca.pem"',
        "tls_ca_file is set but TLS is off: use rediss:// or tls = true",
    ),
    (
        'backend = "redis"\nredis_url = "rediss://r:6380/0"\ntls_ca_file = "missing.pem"',
        "tls_ca_file: {folder}/missing.pem is not a file",
    ),
    (
        'backend = "redis"\ntls = true\ntls_key_file = "ca.pem"',
        "tls_key_file is set without tls_cert_file (the certificate it keys)",
    ),
    (
        'backend = "redis"\ntls = false\nredis_url = "rediss://r:6380/0"',
        "tls = false contradicts redis_url's rediss:// (TLS): keep one",
    ),
    (
        f'backend = "redis"\nredis_url = "redis://:{PASSWORD}@r/0"\npassword_env = "REDIS_PW"',
        "password_env is set and redis_url holds a password too: keep one",
    ),
]


@pytest.mark.parametrize(("toml", "said"), REFUSED, ids=[s[:30] for _, s in REFUSED])
def test_contradicting_redis_keys_are_refused_at_load_naming_them(
    tmp_path: Path, toml: str, said: str
) -> None:
    (tmp_path / "ca.pem").write_text("a CA")
    path = tmp_path / "fleet.toml"
    path.write_text(f"[fleet]\n{toml}\n")
    with pytest.raises(SettingsError) as refused:
        load_settings(path, environ={"REDIS_PW": PASSWORD})
    [problem] = refused.value.problems
    assert problem.startswith(f"{path}: fleet")
    assert problem.endswith(said.format(folder=tmp_path)), problem
    assert PASSWORD not in redact(str(refused.value))


def test_a_password_variable_that_is_not_set_is_refused_for_a_redis_backend(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('[fleet]\nbackend = "redis"\npassword_env = "FLEET_REDIS_PASSWORD"\n')
    with pytest.raises(SettingsError) as refused:
        load_settings(path, environ={})
    assert refused.value.problems == [
        f"{path}: fleet.password_env: names the variable FLEET_REDIS_PASSWORD, which is not "
        "set or empty"
    ]
    path.write_text('[fleet]\nbackend = "memory"\npassword_env = "FLEET_REDIS_PASSWORD"\n')
    assert load_settings(path, environ={}).settings.fleet.password() is None  # not read


def test_the_password_is_read_from_the_environment_the_settings_came_from(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[fleet]\nbackend = "redis-sentinel"\nsentinels = ["127.0.0.1:26379", "[::1]:26380"]\n'
        'sentinel_service = "primary"\npassword_env = "PW"\nsentinel_password_env = "SPW"\n'
    )
    fleet = load_settings(path, environ={"PW": PASSWORD, "SPW": SENTINEL_PASSWORD}).settings.fleet
    password, sentinel_password = fleet.password(), fleet.password("sentinel_password_env")
    assert password is not None and password.get_secret_value() == PASSWORD
    assert sentinel_password is not None
    assert sentinel_password.get_secret_value() == SENTINEL_PASSWORD
    said = f"logged in with {PASSWORD}, sentinels with {SENTINEL_PASSWORD}"
    assert redact(said) == "logged in with [REDACTED], sentinels with [REDACTED]"


def test_agentcore_settings_shows_the_redis_keys_and_never_a_password(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("a CA")
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[fleet]\nbackend = "redis"\nredis_url = "rediss://redis.internal:6380/0"\n'
        'username = "fleet"\npassword_env = "FLEET_REDIS_PASSWORD"\ntls_ca_file = "ca.pem"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentcore", "settings", "--settings", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FLEET_REDIS_PASSWORD": PASSWORD},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    shown = {
        line.split(" = ")[0]: line.split(" = ")[1].split("    #")[0]
        for line in done.stdout.splitlines()
        if line.startswith("fleet.")
    }
    assert shown["fleet.username"] == '"fleet"'
    assert shown["fleet.password_env"] == '"FLEET_REDIS_PASSWORD"'
    assert shown["fleet.tls_ca_file"] == f'"{tmp_path / "ca.pem"}"'  # from the file's folder
