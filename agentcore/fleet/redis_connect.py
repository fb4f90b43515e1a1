"""How agentcore reaches the Redis a team runs: ``[fleet]`` in, a redis-py asyncio client out.

One client type per deployment, all with the same surface the store uses (scripts,
pipelines, pub/sub, ``aclose``): `redis.asyncio.Redis` on one pool for ``redis``; the
same on a `SentinelConnectionPool` for ``redis-sentinel``, which asks a sentinel for
the primary at each new connection (a connection to a demoted primary fails, and the
next one goes to the new primary); `redis.asyncio.RedisCluster` for ``redis-cluster``,
which routes each script to the node of its keys' slot. TLS, the ACL user and the
password apply to every node alike. redis-py's own retries are off everywhere (the
store's policy decides, ``on_store_error``); a cluster still follows MOVED and ASK.

Pub/sub: a plain PUBLISH reaches every subscriber of a cluster whichever node it was
published on. A sentinel failover needs following (`SentinelFollower`): the old primary
keeps taking writes for seconds after the sentinels promote another (until they demote it),
so connections still open to it would split the fleet in two. On the sentinels'
``+switch-master`` the client drops every connection, in use or not, and the store makes
its subscription again (`RedisConnection.follow`), on the new primary.

Every key of one script must hash to one slot of a cluster: `RedisFleetStore._key` is the
one place that says how (one ``{key_prefix}`` hash tag for every key of a fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import urllib.parse
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from agentcore.settings import FleetSettings
from agentcore.settings_redis import split_address

FOLLOW_RETRY_S = 0.5
"""After a sentinel subscription is lost, the next try comes after this (jittered)."""
POOL_SIZE = 64
"""Connections to one Redis per kernel (``redis``); more calls at once wait for one (each
op is one short script, so a few dozen connections serve hundreds of concurrent calls)."""


@dataclass(frozen=True)
class RedisConnection:
    """A client for the store, and where it points (`description`: never who, or with what)."""

    client: Any
    """`redis.asyncio.Redis` or `redis.asyncio.RedisCluster` (the store's surface of both)."""
    description: str
    follow: Callable[[Callable[[], None]], Coroutine[Any, Any, None]] | None = None
    """Sentinel: run for as long as the client is used, calling its argument after each
    failover, once every connection to the old primary is dropped."""


def describe_url(url: str) -> str:
    """``redis at HOST:PORT/DB`` (or the socket path): where, never who or with what."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return f"redis at {parts.path}"
    host = parts.hostname or "localhost"
    port = parts.port or 6379
    db = parts.path.strip("/") or "0"
    tls = " (TLS)" if parts.scheme == "rediss" else ""
    return f"redis at {host}:{port}/{db}{tls}"


def _common(settings: FleetSettings) -> dict[str, Any]:
    """What every connection gets: timeouts, no retries, decoded replies, credentials."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": settings.timeout_s,
        "socket_connect_timeout": settings.timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.username is not None:
        options["username"] = settings.username
    if (password := settings.password()) is not None:
        options["password"] = password.get_secret_value()
    return options


def _tls(settings: FleetSettings) -> dict[str, Any]:
    """redis-py's TLS options from ``[fleet]``'s (none when TLS is off)."""
    if not settings.tls_on:
        return {}
    options: dict[str, Any] = {"ssl": True, "ssl_cert_reqs": "required"}  # never unchecked
    files = {
        "ssl_ca_certs": settings.tls_ca_file,
        "ssl_certfile": settings.tls_cert_file,
        "ssl_keyfile": settings.tls_key_file,
    }
    options.update({name: str(path) for name, path in files.items() if path is not None})
    return options


def connect(settings: FleetSettings) -> RedisConnection:
    """The client ``[fleet]`` describes (a Redis backend); it connects at its first command."""
    if settings.backend == "redis-sentinel":
        return _sentinel(settings)
    if settings.backend == "redis-cluster":
        return _cluster(settings)
    return connect_url(settings.redis_url, settings)


def connect_url(url: str, settings: FleetSettings) -> RedisConnection:
    """One Redis (``redis``) at `url`, with the rest of ``[fleet]``'s options (``tls = true``
    makes a ``redis://`` URL a ``rediss://`` one)."""
    if settings.tls_on and url.startswith("redis://"):
        url = "rediss://" + url[len("redis://") :]
    options = _common(settings)
    if url.startswith("rediss://"):  # the scheme picks redis-py's TLS connection class
        options.update({k: v for k, v in _tls(settings).items() if k != "ssl"})
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=POOL_SIZE,
        # A busy pool is not an unreachable Redis: a call waits for a free connection
        # (each one's commands are cut at timeout_s, so the wait is bounded by them).
        timeout=None,
        **options,
    )
    return RedisConnection(aioredis.Redis(connection_pool=pool), describe_url(url))


def _sentinel(settings: FleetSettings) -> RedisConnection:
    sentinel_options = {**_common(settings), **_tls(settings)}
    sentinel_options.pop("username", None)
    sentinel_options.pop("password", None)
    if settings.sentinel_username is not None:
        sentinel_options["username"] = settings.sentinel_username
    if (password := settings.password("sentinel_password_env")) is not None:
        sentinel_options["password"] = password.get_secret_value()
    addresses = [split_address(a) for a in settings.sentinels]
    # Sentinel's own connection options (the sentinels') and the primary's differ: the
    # keyword arguments after `sentinel_kwargs` are the primary's.
    manager = Sentinel(addresses, sentinel_kwargs=sentinel_options, **_common(settings))
    service = settings.sentinel_service or ""
    client = manager.master_for(service, redis_class=aioredis.Redis, **_tls(settings))
    where = ", ".join(settings.sentinels)
    tls = " (TLS)" if settings.tls_on else ""
    description = f"redis primary {service!r} of the sentinels at {where}{tls}"
    return RedisConnection(client, description, SentinelFollower(manager, service, client).run)


class SentinelFollower:
    """Follows the failovers of one service: a subscription to ``+switch-master`` on every
    sentinel (any may announce it). The first to announce a new primary is asked first from
    then on (the others may name the old one for a moment, until their next hello), and
    every connection of the client is dropped, so the next command asks for the primary
    again. Lost subscriptions are made again (jittered)."""

    def __init__(self, manager: Sentinel, service: str, client: aioredis.Redis) -> None:
        self._manager = manager
        self._service = service
        self._client = client
        self._primary: tuple[str, int] | None = None

    async def run(self, switched: Callable[[], None]) -> None:
        await asyncio.gather(*(self._watch(s, switched) for s in list(self._manager.sentinels)))

    async def _watch(self, sentinel: aioredis.Redis, switched: Callable[[], None]) -> None:
        while True:
            pubsub = sentinel.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe("+switch-master")
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message.get("type") == "message":
                        await self._announced(sentinel, str(message["data"]), switched)
            except (RedisError, OSError):  # that sentinel is gone for now: try it again later
                pass
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(FOLLOW_RETRY_S * random.uniform(0.5, 1.5))

    async def _announced(
        self, sentinel: aioredis.Redis, data: str, switched: Callable[[], None]
    ) -> None:
        """``SERVICE OLD-HOST OLD-PORT NEW-HOST NEW-PORT``, from `sentinel`."""
        parts = data.split()
        if len(parts) != 5 or parts[0] != self._service or not parts[4].isdigit():
            return
        primary = (parts[3], int(parts[4]))
        if primary == self._primary:
            return  # another sentinel announcing the same switch
        self._primary = primary
        sentinels = self._manager.sentinels
        if sentinel in sentinels:
            sentinels.remove(sentinel)
            sentinels.insert(0, sentinel)
        await self._client.connection_pool.disconnect(inuse_connections=True)
        switched()


def _cluster(settings: FleetSettings) -> RedisConnection:
    if settings.cluster_nodes:
        seeds = [split_address(a) for a in settings.cluster_nodes]
    else:
        url = urllib.parse.urlsplit(settings.redis_url)
        seeds = [(url.hostname or "127.0.0.1", url.port or 6379)]
    options = {**_common(settings), **_tls(settings)}
    if settings.username is None and (user := urllib.parse.urlsplit(settings.redis_url).username):
        options["username"] = urllib.parse.unquote(user)
    if "password" not in options and (secret := urllib.parse.urlsplit(settings.redis_url).password):
        options["password"] = urllib.parse.unquote(secret)
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in seeds], **options)
    where = ", ".join(f"{h}:{p}" for h, p in seeds)
    tls = " (TLS)" if settings.tls_on else ""
    return RedisConnection(client, f"redis cluster seeded by {where}{tls}")


def pack_evalsha(sha: str, keys: list[str], args: list[Any]) -> bytes:
    """One EVALSHA as sent, packed by hiredis in C (the same bytes redis-py's encoder makes
    for str, int and float, a tenth of its CPU); a bool or None is a `TypeError`."""
    packed: bytes = hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))
    return packed


def explain(exc: BaseException) -> str:
    """Why Redis could not be used, in words that point at the setting to look at; the
    error's own text follows (`redact` runs over it where it leaves the process)."""
    said = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    text = f"{said} {cause}" if cause is not None else said
    if isinstance(exc, MasterNotFoundError):
        return _no_primary(exc, text)
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            "TLS: the server's certificate was not accepted (check [fleet] tls_ca_file, and "
            f"that the certificate names the host connected to): {said}"
        )
    if isinstance(exc, ssl.SSLError | ssl.SSLEOFError) or "SSL" in text or "TLS" in text:
        return (
            "TLS: the handshake failed (check [fleet] tls, tls_cert_file and tls_key_file, "
            f"and that the server speaks TLS on that port): {said}"
        )
    if isinstance(exc, AuthenticationError) or "WRONGPASS" in text or "NOAUTH" in text:
        return (
            "Redis refused the login (check [fleet] username and the variable password_env "
            f"names): {said}"
        )
    if isinstance(exc, ResponseError) and "NOPERM" in text:
        return f"the Redis user may not run the store's commands (its ACL): {said}"
    return said


def _no_primary(exc: MasterNotFoundError, text: str) -> str:
    """No sentinel named the primary. redis-py's message holds every sentinel client's
    repr; what matters is the first part, and whether the sentinels refused the login."""
    said = str(exc).split(" : ", 1)[0]
    if "AuthenticationError" in text or "WRONGPASS" in text or "NOAUTH" in text:
        return (
            "the sentinels refused the login (check [fleet] sentinel_username and the "
            f"variable sentinel_password_env names): {said}"
        )
    return f"no sentinel named the primary (check [fleet] sentinels and sentinel_service): {said}"


__all__ = [
    "POOL_SIZE",
    "RedisConnection",
    "connect",
    "connect_url",
    "describe_url",
    "explain",
    "pack_evalsha",
]
