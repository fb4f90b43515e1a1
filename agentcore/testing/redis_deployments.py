"""The Redis deployments teams run, started for real on loopback from Debian's
``redis-server`` (and ``redis-cli``): for tests of ``[fleet] backend = "redis-cluster"`` and
``"redis-sentinel"`` (TLS is a `RedisServer` given `TlsFiles`). Each uses free ports and
temporary folders, and `close` stops every process and removes them.

- `ClusterDeployment`: three primaries (no replicas), joined by ``redis-cli --cluster
  create``, ready once every node reports ``cluster_state:ok``.
- `SentinelDeployment`: a primary, a replica of it and three sentinels watching them as
  ``SERVICE``; `failover` forces one (``SENTINEL FAILOVER``) and waits until the sentinels
  name the replica as the primary and it accepts writes.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from types import TracebackType
from typing import Any, Self

import redis

from agentcore.testing.redis import START_TIMEOUT_S, RedisServer, RedisServerMissing, free_port

SERVICE = "agentcore-primary"


def _until(check: object, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait (polling) until `check()` is true; a RuntimeError naming `what` past the bound."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


def _redis_cli() -> str:
    found = shutil.which("redis-cli")
    if found is None:
        raise RedisServerMissing(
            "redis-cli is not installed (it creates the test cluster): install Debian's "
            "redis-tools package (`apt-get install redis-tools`; redis-server brings it)"
        )
    return found


def _client(server: RedisServer, password: str | None = None) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, password=password, decode_responses=True)


def _promotable(replicas: list[dict[str, Any]]) -> bool:
    """The sentinel knows one replica, is connected to it, and sees it in sync: what
    ``SENTINEL FAILOVER`` needs (else it answers NOGOODSLAVE)."""
    return (
        len(replicas) == 1
        and not replicas[0].get("is_disconnected", True)
        and not replicas[0].get("is_sdown", True)
        and replicas[0].get("master-link-status") == "ok"
    )


class _Deployment:
    servers: list[RedisServer]

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> Self:
        raise NotImplementedError


class ClusterDeployment(_Deployment):
    """A Redis Cluster of `size` primaries on 127.0.0.1; `nodes` is ``[fleet] cluster_nodes``."""

    def __init__(self, size: int = 3) -> None:
        options = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        self.servers = [RedisServer(free_port(with_bus=True), extra=options) for _ in range(size)]

    @property
    def nodes(self) -> list[str]:
        return [server.address for server in self.servers]

    def start(self) -> Self:
        for server in self.servers:
            server.start()
        create = [
            _redis_cli(),
            "--cluster",
            "create",
            *self.nodes,
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ]
        done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")
        for server in self.servers:
            client = _client(server)
            _until(
                lambda c=client: c.cluster("info")["cluster_state"] == "ok",
                f"cluster node {server.address} ok",
            )
            client.close()
        return self


class SentinelDeployment(_Deployment):
    """A primary, its replica, and three sentinels monitoring them as `SERVICE`;
    `sentinels` is ``[fleet] sentinels``. `password`: the primary's and the replica's
    (``requirepass``); `sentinel_password`: the sentinels' own."""

    def __init__(self, password: str | None = None, sentinel_password: str | None = None) -> None:
        self.password = password
        self.sentinel_password = sentinel_password
        auth = [] if password is None else ["--requirepass", password, "--masterauth", password]
        self.primary = RedisServer(extra=auth)
        self.replica = RedisServer(
            extra=[*auth, "--replicaof", "127.0.0.1", str(self.primary.port)]
        )
        self.watchers = [RedisServer(extra=["--sentinel"], config="") for _ in range(3)]
        self.servers = [self.primary, self.replica, *self.watchers]

    @property
    def sentinels(self) -> list[str]:
        return [watcher.address for watcher in self.watchers]

    def start(self) -> Self:
        self.primary.start()
        self.replica.start()
        replica = _client(self.replica, self.password)
        _until(lambda: replica.info("replication")["master_link_status"] == "up", "replication")
        replica.close()
        for watcher in self.watchers:
            # Failovers here are forced (`failover`); 5 s before a sentinel calls the primary
            # down keeps a stall of a loaded test machine from starting one unasked.
            watcher.config = (
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 5000\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
            )
            if self.password is not None:
                watcher.config += f"sentinel auth-pass {SERVICE} {self.password}\n"
            if self.sentinel_password is not None:
                watcher.config += f"requirepass {self.sentinel_password}\n"
            watcher.start()
        for watcher in self.watchers:  # each could fail over to the replica now
            client = _client(watcher, self.sentinel_password)
            _until(
                lambda c=client: _promotable(c.sentinel_slaves(SERVICE)),
                f"sentinel {watcher.address} connected to the replica, its link to the primary up",
            )
            client.close()
        return self

    def primary_address(self) -> tuple[str, int]:
        client: Any = _client(self.watchers[0], self.sentinel_password)
        try:
            host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            return str(host), int(port)
        finally:
            client.close()

    def failover(self) -> RedisServer:
        """Force a failover to the replica now (``SENTINEL FAILOVER``) and wait until it is
        the primary the sentinels name and takes writes; returns the new primary."""
        old = self.primary_address()
        new = self.replica if old[1] == self.primary.port else self.primary
        client: Any = _client(self.watchers[0], self.sentinel_password)
        try:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            client.close()
        promoted = _client(new, self.password)
        _until(lambda: self.primary_address() == ("127.0.0.1", new.port), "the failover")
        _until(lambda: promoted.info("replication")["role"] == "master", "the promotion")
        promoted.close()
        return new


__all__ = ["SERVICE", "ClusterDeployment", "SentinelDeployment"]
