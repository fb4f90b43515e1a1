"""The Redis deployments teams run, started for real (Debian's redis-server), each reached
by `agentcore serve` replicas through ``[fleet]``: TLS with a throwaway CA and a client
certificate (and a wrong CA refused, saying so), an ACL user with a password from the
environment, a primary + replica + three sentinels with a failover forced mid-load (and
password-protected ones, through the store), and a three-node cluster. Each deployment
starts once for the module."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from e2e_support import Hub, make_hub
from fleet_rig import Replica, most_at_once, start_replicas

from agentcore.fleet import FleetUnavailable, open_store
from agentcore.settings import FleetSettings
from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.redis import RedisServer, TlsFiles, make_tls_files
from agentcore.testing.redis_deployments import SERVICE, ClusterDeployment, SentinelDeployment

RETRY = {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0}
ACL_USER = "agentcore-fleet"
ACL_PASSWORD = "acl-pw-5d1e-redis-fleet"
PASSWORD_ENV = "AGENTCORE_TEST_REDIS_PASSWORD"
SENTINEL_PASSWORD = "sentinel-own-pw-41c2"
SENTINEL_PASSWORD_ENV = "AGENTCORE_TEST_SENTINEL_PASSWORD"
SHORT_WAITS = {"provider_hold": {"max_wait_s": 1.0}, "rate_limit": {"max_wait_s": 1.0}}
"""A store that cannot be used fails a call after this wait (``on_store_error = "closed"``)."""


@pytest.fixture
async def hub() -> Iterator[Hub]:  # type: ignore[misc]
    hub = await make_hub("stdio").start()
    try:
        yield hub
    finally:
        await hub.stop()


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
        admin.acl_setuser("default", enabled=False)
        admin.close()
        yield server


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterDeployment]:
    with ClusterDeployment() as deployment:
        yield deployment


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelDeployment]:
    with SentinelDeployment() as deployment:
        yield deployment


def prefix() -> str:
    return f"fleet-{uuid.uuid4().hex[:8]}"


async def answers(replicas: list[Replica]) -> list[dict[str, Any]]:
    """Every request's answer; each request answered exactly once."""
    out = []
    for replica in replicas:
        out += [
            (await replica.session.answer(rid, timeout=30.0)).message for rid in replica.requests
        ]
    for replica in replicas:
        assert replica.session.unanswered_or_twice() == {}, replica.tag
    return out


async def run(
    count: int,
    hub: Hub,
    write_settings: Callable[..., Path],
    tmp_path: Path,
    sections: dict[str, Any],
    asks: int = 2,
) -> tuple[list[Replica], list[dict[str, Any]], str]:
    """`count` replicas, `asks` calls on each: every answer, and what the replicas wrote to
    stdout and stderr (they are stopped after)."""
    replicas = await start_replicas(count, hub, write_settings, tmp_path, sections)
    output = ""
    try:
        for replica in replicas:
            for i in range(asks):
                await replica.ask(f"{replica.tag}-{i}")
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            _, stdout, stderr = await replica.stop()
            output += stdout + stderr
    return replicas, answered, output


def limits(per_minute: int = 1000, in_flight: int | None = None) -> dict[str, Any]:
    provider: dict[str, Any] = {"requests_per_minute": per_minute}
    if in_flight is not None:
        provider["max_in_flight"] = in_flight
    return {"max_wait_s": 20.0, "providers": {"a": provider}}


def window_size(client: Any, key_prefix: str) -> int:
    """How many admissions the rate limit's window in Redis holds (0: no such key)."""
    return int(client.zcard("{" + key_prefix + "}:window:a"))


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


# -- sentinel --------------------------------------------------------------------------


async def test_sentinel_replicas_follow_a_failover_forced_mid_load_during_a_hold(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    sentinel: SentinelDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.script(Scenario.rate_limit(retry_after=3), provider="a")
    loopback_provider.default = Scenario.text("ok", delay_s=0.1)
    fleet = {
        "backend": "redis-sentinel",
        "sentinels": sentinel.sentinels,
        "sentinel_service": SERVICE,
        "key_prefix": prefix(),
    }
    sections = {
        "fleet": fleet,
        "retry": RETRY,
        "provider_hold": {"max_wait_s": 20.0},
        "rate_limit": limits(),
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await replicas[0].ask("limited")
        hold = await replicas[0].wait_trace("provider:hold")
        for replica in replicas:  # load during the hold, on both replicas
            for i in range(3):
                await replica.ask(f"{replica.tag}-before-{i}")
        primary = redis.Redis(port=sentinel.primary_address()[1])
        primary.execute_command("WAIT", 1, 2000)  # the hold is on the replica too
        primary.close()
        await asyncio.to_thread(sentinel.failover)  # mid-load: calls are waiting on the hold
        for replica in replicas:
            for i in range(3):
                await replica.ask(f"{replica.tag}-after-{i}")
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert [m.get("result", {}).get("content") for m in answered] == ["ok"] * 13, answered
    calls = sorted(loopback_provider.calls_to("a"), key=lambda c: c.started_at)
    assert len(calls) == 1 + 13  # the 429, then each call once
    # No call reached the provider during the hold, failover or not...
    assert all(c.started_at * 1000 >= hold["untilMs"] - 5 for c in calls[1:])
    # ...and the one-probe-first release held across it: the rest came after the probe.
    probe = calls[1]
    assert probe.ended_at is not None and all(c.started_at >= probe.ended_at for c in calls[2:])
    await loopback_provider.wait_idle()


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


# -- cluster ---------------------------------------------------------------------------


async def test_cluster_replicas_share_one_hold(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    cluster: ClusterDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=2), Scenario.text("first", delay_s=0.3), provider="a"
    )
    loopback_provider.default = Scenario.text("ok")
    fleet = {"backend": "redis-cluster", "cluster_nodes": cluster.nodes, "key_prefix": prefix()}
    sections = {
        "fleet": fleet,
        "retry": RETRY,
        "provider_hold": {"max_wait_s": 10.0},
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await replicas[0].ask("limited")
        hold = await replicas[0].wait_trace("provider:hold")
        for replica in replicas:
            await replica.ask()
            await replica.ask()
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert all("result" in m for m in answered), answered
    calls = sorted(loopback_provider.calls_to("a"), key=lambda c: c.started_at)
    assert len(calls) == 1 + 5
    assert all(c.started_at * 1000 >= hold["untilMs"] - 5 for c in calls[1:])
    probe = calls[1]
    assert probe.ended_at is not None and all(c.started_at >= probe.ended_at for c in calls[2:])
    for replica in replicas:  # each replica saw the one hold and waited for it
        assert "hold" in {t["reason"] for t in replica.traces("inference:waiting")}, replica.tag
    await loopback_provider.wait_idle()


async def test_cluster_replicas_share_one_rate_limit(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    cluster: ClusterDeployment,
    tmp_path: Path,
) -> None:
    loopback_provider.default = Scenario.text("ok", delay_s=0.3)
    key_prefix = prefix()
    fleet = {"backend": "redis-cluster", "cluster_nodes": cluster.nodes, "key_prefix": key_prefix}
    sections = {
        "fleet": fleet,
        "rate_limit": limits(in_flight=2),
        "waiting_trace": {"interval_s": 0.5},
    }
    replicas = await start_replicas(2, hub, loopback_settings, tmp_path, sections)
    try:
        await asyncio.gather(*(r.ask(f"{r.tag}-{i}") for r in replicas for i in range(3)))
        answered = await answers(replicas)
    finally:
        for replica in replicas:
            await replica.stop()
    assert [m["result"]["content"] for m in answered] == ["ok"] * 6
    assert most_at_once(loopback_provider.calls_to("a")) <= 2
    waited = [t for r in replicas for t in r.traces("inference:waiting") if t["reason"] == "limit"]
    assert waited  # six calls, two slots, two replicas: some waited for the other's slot
    check = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port)
    assert window_size(check, key_prefix) == 6  # one window for both replicas
    check.close()
    await loopback_provider.wait_idle()
