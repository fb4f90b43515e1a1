"""A TLS Redis (a throwaway CA, a client certificate; a wrong CA refused, saying so), an
ACL user with the least rules and a password from the environment (a wrong one refused,
never shown), and sentinels with passwords of their own: all started for real, reached
by `agentcore serve` replicas (the sentinels: by the store). One deployment per module."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from deploy_rig import (
    ACL_PASSWORD,
    ACL_USER,
    PASSWORD_ENV,
    SENTINEL_PASSWORD,
    SENTINEL_PASSWORD_ENV,
    SHORT_WAITS,
    limits,
    prefix,
    run,
    window_size,
)
from e2e_support import Hub
from loguru import logger

from agentcore.fleet import FleetUnavailable, open_store
from agentcore.fleet.claims import WINDOW, Claim
from agentcore.settings import FleetSettings
from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.redis import RedisServer, TlsFiles, make_tls_files
from agentcore.testing.redis_deployments import SERVICE, SentinelDeployment


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_redis(tls_files: TlsFiles) -> Iterator[RedisServer]:
    with RedisServer(tls=tls_files) as server:
        yield server


ACL_COMMANDS = [
    "+@read",
    "+@write",
    "+@scripting",
    "+@pubsub",
    "+@connection",
    "+time",
    "-@dangerous",
]
"""What the store needs, as README "Running a fleet" gives it (no admin commands)."""
ADMIN_USER, ADMIN_PASSWORD = "test-admin", "admin-pw-3c9a"


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[RedisServer]:
    """A Redis whose default user is off: only `ACL_USER`, with `ACL_COMMANDS`, on the keys
    of fleets whose prefix starts with ``fleet-`` (``{fleet-...}:...``) and their wake
    channels (``fleet-...:wake:...``)."""
    with RedisServer() as server:
        admin = redis.Redis(port=server.port)
        admin.acl_setuser(
            ACL_USER,
            enabled=True,
            passwords=[f"+{ACL_PASSWORD}"],
            keys=["{fleet-*"],
            channels=["fleet-*"],
            commands=ACL_COMMANDS,
        )
        admin.acl_setuser(  # for the tests that change the rules: the default goes off
            ADMIN_USER,
            enabled=True,
            passwords=[f"+{ADMIN_PASSWORD}"],
            keys=["*"],
            channels=["*"],
            commands=["+@all"],
        )
        admin.acl_setuser("default", enabled=False)
        admin.close()
        yield server


# -- TLS -------------------------------------------------------------------------------


async def test_replicas_share_a_tls_redis_checked_against_its_ca_with_a_client_certificate(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tls_redis: RedisServer,
    tls_files: TlsFiles,
    tmp_path: Path,
) -> None:
    loopback_provider.default = Scenario.text("ok")
    key_prefix = prefix()
    fleet = {
        "backend": "redis",
        "redis_url": tls_redis.url,  # rediss://
        "key_prefix": key_prefix,
        "tls_ca_file": str(tls_files.ca),
        "tls_cert_file": str(tls_files.client_cert),
        "tls_key_file": str(tls_files.client_key),
    }
    sections = {"fleet": fleet, "rate_limit": limits()}
    _, answered, _ = await run(2, hub, loopback_settings, tmp_path, sections)
    assert [m["result"]["content"] for m in answered] == ["ok"] * 4
    # The four admissions are in the TLS Redis (read back over TLS with the same files).
    check = redis.Redis(
        port=tls_redis.port,
        ssl=True,
        ssl_ca_certs=str(tls_files.ca),
        ssl_certfile=str(tls_files.client_cert),
        ssl_keyfile=str(tls_files.client_key),
    )
    assert window_size(check, key_prefix) == 4
    check.close()
    await loopback_provider.wait_idle()


async def test_a_tls_redis_whose_certificate_another_ca_signed_is_refused_saying_so(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tls_redis: RedisServer,
    tls_files: TlsFiles,
    tmp_path: Path,
) -> None:
    loopback_provider.default = Scenario.text("never")
    other = make_tls_files(tmp_path)  # a CA that did not sign the server's certificate
    fleet = {
        "backend": "redis",
        "redis_url": tls_redis.url,
        "key_prefix": prefix(),
        "tls_ca_file": str(other.ca),
        "tls_cert_file": str(tls_files.client_cert),
        "tls_key_file": str(tls_files.client_key),
    }
    sections = {"fleet": fleet, **SHORT_WAITS}
    _, answered, output = await run(1, hub, loopback_settings, tmp_path, sections, asks=1)
    [message] = answered
    said = message["error"]["message"]
    assert "TLS: the server's certificate was not accepted" in said, said
    assert "tls_ca_file" in said and "CERTIFICATE_VERIFY_FAILED" in said.upper(), said
    assert loopback_provider.calls_to("a") == []  # closed: nothing went ahead unchecked
    assert "TLS: the server's certificate was not accepted" in output  # the log says it too


# -- an ACL user and a password --------------------------------------------------------


async def test_replicas_log_in_as_an_acl_user_with_a_password_from_the_environment(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    acl_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loopback_provider.default = Scenario.text("ok")
    monkeypatch.setenv(PASSWORD_ENV, ACL_PASSWORD)
    key_prefix = prefix()
    fleet = {
        "backend": "redis",
        "redis_url": acl_redis.url,
        "key_prefix": key_prefix,
        "username": ACL_USER,
        "password_env": PASSWORD_ENV,
    }
    # A slot is given back with a PUBLISH (a wake-up) from its script: the ACL allows it.
    sections = {"fleet": fleet, "rate_limit": limits(in_flight=1)}
    replicas, answered, output = await run(2, hub, loopback_settings, tmp_path, sections)
    assert [m.get("result", {}).get("content") for m in answered] == ["ok"] * 4, answered
    check = redis.Redis(port=acl_redis.port, username=ACL_USER, password=ACL_PASSWORD)
    assert window_size(check, key_prefix) == 4
    check.close()
    for replica in replicas:  # the password never left a replica
        assert ACL_PASSWORD not in replica.traces_path.read_text() + output
    await loopback_provider.wait_idle()


async def test_a_wrong_redis_password_fails_calls_naming_the_login_never_the_password(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    acl_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "not-the-acl-password-77"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    fleet = {
        "backend": "redis",
        "redis_url": acl_redis.url,
        "key_prefix": prefix(),
        "username": ACL_USER,
        "password_env": PASSWORD_ENV,
    }
    sections = {"fleet": fleet, **SHORT_WAITS}
    replicas, answered, output = await run(1, hub, loopback_settings, tmp_path, sections, asks=1)
    [message] = answered
    said = message["error"]["message"]
    assert "Redis refused the login" in said and "password_env" in said, said
    assert wrong not in said + output + replicas[0].traces_path.read_text()
    assert loopback_provider.calls_to("a") == []


# -- sentinels with passwords -----------------------------------------------------------


async def test_a_store_logs_in_to_password_protected_sentinels_and_primary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sentinels' own password and the primary's are two settings, each from its own
    variable; a hold set before a failover is read through the new primary after it."""
    with SentinelDeployment(password=ACL_PASSWORD, sentinel_password=SENTINEL_PASSWORD) as guarded:
        fleet = FleetSettings(
            backend="redis-sentinel",
            sentinels=guarded.sentinels,
            sentinel_service=SERVICE,
            password_env=PASSWORD_ENV,
            sentinel_password_env=SENTINEL_PASSWORD_ENV,
            key_prefix=prefix(),
        )
        monkeypatch.setenv(PASSWORD_ENV, ACL_PASSWORD)
        monkeypatch.setenv(SENTINEL_PASSWORD_ENV, SENTINEL_PASSWORD)
        store = open_store(fleet)
        try:
            await store.set_hold("a:m", 30.0, "rate_limit", 1.0)
            await asyncio.to_thread(guarded.failover)
            hold = None
            for _ in range(200):  # until the pool has left the old primary (bounded)
                with contextlib.suppress(FleetUnavailable):
                    hold = await store.get_hold("a:m")
                    break
                await asyncio.sleep(0.05)
            assert hold is not None and hold.reason == "rate_limit"
            assert "primary" in store.description and SENTINEL_PASSWORD not in store.description
        finally:
            await store.aclose()


# -- an ACL without the wake channels ---------------------------------------------------


async def test_a_user_that_may_not_subscribe_is_told_once_and_admission_still_works(
    acl_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's ACL gives the wake channels (``&PREFIX:wake:*``); a user without them gets
    one error naming what to add, and calls are still admitted (no hold view, no wake-ups:
    waiters poll)."""
    user = "agentcore-no-channels"
    _setuser_without_channels(acl_redis, user)
    monkeypatch.setenv(PASSWORD_ENV, ACL_PASSWORD)
    key_prefix = prefix()
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(m.record["message"]), level="ERROR")
    store = open_store(
        FleetSettings(
            backend="redis",
            redis_url=acl_redis.url,
            key_prefix=key_prefix,
            username=user,
            password_env=PASSWORD_ENV,
        )
    )
    try:
        window = Claim(WINDOW, "p", (10, 60_000))
        assert await store.admit([window], "a") == [0]
        store.changed("p")  # asks for the subscription
        # Until the refusal is told, not a fixed 0.6 s a loaded machine's listener can take.
        async with asyncio.timeout(10):
            while not any("may not subscribe" in e for e in errors):
                await asyncio.sleep(0.01)
        for _ in range(2):
            store.changed("p")  # each asks again: not told again
            await asyncio.sleep(0.2)
        assert await store.admit([window], "b") == [0]
    finally:
        await store.aclose()
        logger.remove(sink)
    told = [e for e in errors if "may not subscribe" in e]
    assert len(told) == 1, errors
    assert f"&{key_prefix}:wake:*" in told[0] and "+@pubsub" in told[0]
    assert "NoPermissionError" in told[0]
    assert ACL_PASSWORD not in " ".join(errors)


def _setuser_without_channels(server: RedisServer, user: str) -> None:
    """`ACL_USER`'s rules on the same keys, but no channel at all."""
    admin = redis.Redis(port=server.port, username=ADMIN_USER, password=ADMIN_PASSWORD)
    try:
        admin.acl_setuser(
            user,
            enabled=True,
            reset=True,
            passwords=[f"+{ACL_PASSWORD}"],
            keys=["{fleet-*"],
            commands=ACL_COMMANDS,
        )
    finally:
        admin.close()
