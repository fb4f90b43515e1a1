"""The fleet store on Redis (``[fleet] backend = "redis"``): redis-py's asyncio client, one
connection pool per kernel, each operation one Lua script (atomic; the primitives' texts in
`agentcore.fleet.redis_scripts`, the admission script in `agentcore.fleet.admit_script`).
The scripts that concurrent calls start in the same turn of the event loop go to Redis
together, in one round trip (`agentcore.fleet.redis_writer`).

Keys, under ``[fleet] key_prefix`` as a hash tag (P = ``{PREFIX}``, `_key`, so one
script's keys share one Redis Cluster slot): ``P:hold:KEY`` (a hash: until, since, reason,
linger, probe, probe_at, in ms of Redis's clock), ``P:slots:KEY`` (a sorted set: holder by lease
end), ``P:window:KEY`` (a sorted set: take by time). Every key carries a TTL, so what a
dead replica left behind goes by itself. A change that frees waiters is published on
``PREFIX:wake:KEY`` (no tag: a channel is in no slot) by the script that made it; one
pattern subscription per store wakes the local waiters, and a lost subscription is made
again (waking everyone to re-read).

redis-py's own retries are off: an unreachable Redis is `FleetUnavailable` at once, and
the policy decides (``on_store_error``). The pool reconnects at the next command, so a
Redis that comes back is used again with no restart. Which Redis (one, TLS, sentinel,
cluster) and how the client is made: `agentcore.fleet.redis_connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence
from typing import Any

from loguru import logger
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentcore.fleet import admit_script
from agentcore.fleet.claims import (
    BUILT_IN_KINDS,
    HOLD,
    WINDOW,
    Claim,
    ClaimKind,
    ClaimRefusal,
    Scalar,
)
from agentcore.fleet.hold_view import HoldView
from agentcore.fleet.redis_connect import RedisConnection, connect_url, explain
from agentcore.fleet.redis_scripts import ScriptSet
from agentcore.fleet.redis_writer import ScriptWriter
from agentcore.fleet.store import (
    FleetUnavailable,
    Hold,
    Refusal,
    StoreErrorPolicy,
    given_back,
)
from agentcore.redaction import redact
from agentcore.settings import FleetSettings

DEFAULT_LINGER_MS = 600_000
"""How long an ended hold written back waits for its probe, when its claim names none."""
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
RESUBSCRIBE_S = 0.5
"""After the subscription is lost, the next try comes after this (jittered)."""


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _hold(reply: Sequence[Any]) -> Hold | None:
    """A hold from a script's {now, until, reason, since, probe}; None for {now}."""
    if len(reply) < 2 or reply[1] is None:
        return None
    now, until, reason, since = int(reply[0]), int(reply[1]), str(reply[2]), int(reply[3])
    probe = reply[4] if len(reply) > 4 and reply[4] else None
    return Hold(reason, max(0, until - now) / 1000, max(0, now - since) / 1000, probe)


class RedisFleetStore:
    """`agentcore.fleet.FleetStore` over one Redis, for every replica that names it."""

    def __init__(
        self,
        url: str | RedisConnection,
        *,
        key_prefix: str = "agentcore",
        timeout_s: float = 1.0,
        on_store_error: StoreErrorPolicy = "closed",
    ) -> None:
        if isinstance(url, str):  # one Redis at a URL, the rest of [fleet] as defaults
            defaults = FleetSettings(backend="redis", redis_url=url, timeout_s=timeout_s)
            url = connect_url(url, defaults)
        self.description = url.description
        self.on_store_error: StoreErrorPolicy = on_store_error
        self._prefix = key_prefix
        self._client = url.client
        self._follow = url.follow
        self._follower: asyncio.Task[None] | None = None
        """Sentinel: follows failovers (`redis_connect.SentinelFollower`), from the first op."""
        self._scripts = ScriptSet(self._client)
        self._writer = ScriptWriter(self._client, self._failed)
        self._kinds: dict[str, ClaimKind] = {}
        self._admit = self._client.register_script(admit_script.compose(()))
        self.holds = HoldView()
        """This replica's view of holds (kept by pub/sub) and the holds it remembers."""
        self._probes: set[tuple[str, str]] = set()
        """(hold key, holder) of this replica's probes: the only hold claims with something
        to give back or renew."""
        self._changed: dict[str, asyncio.Event] = {}
        self._listener: asyncio.Task[None] | None = None
        self._pubsub: Any = None
        """The listener's subscription, while it holds one."""
        self._closed = False
        self._reachable = True

    def _key(self, kind: str, key: str) -> str:
        """Every key carries the hash tag ``{PREFIX}``: one call's claim set (a budget's
        server and provider scopes included) is one slot on Redis Cluster, so each script
        stays single-slot (docs/architecture.md, "The admission step")."""
        return f"{{{self._prefix}}}:{kind}:{key}"

    def _wake_channel(self, key: str) -> str:
        return f"{self._prefix}:wake:{key}"

    def _send(
        self, script: AsyncScript, keys: list[str], args: list[Any], wait: bool = True
    ) -> Any:
        """One script, queued with every other started in this turn of the event loop
        (`ScriptWriter`): the future of its reply."""
        if self._follow is not None and self._follower is None and not self._closed:
            self._follower = asyncio.create_task(self._follow(self._switched), name="failovers")
        return self._writer.send(script, keys, args, wait=wait)

    async def _run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run one script; an unreachable Redis is `FleetUnavailable` (`_failed`)."""
        result = await self._send(script, keys, args)
        if not self._reachable:
            self._reachable = True
            logger.info("the fleet store ({}) is reachable again", self.description)
        return result

    def _failed(self, exc: BaseException) -> BaseException:
        """What the callers of scripts an error failed get: `FleetUnavailable` for an
        unreachable Redis (logged once per outage), any other error as it is."""
        if not isinstance(exc, UNREACHABLE):
            return exc
        if self._reachable:
            self._reachable = False
            why = explain(exc)
            logger.warning("the fleet store ({}) is unreachable: {}", self.description, why)
        error = FleetUnavailable(redact(explain(exc)))
        error.__cause__ = exc
        return error

    @property
    def sends(self) -> int:
        """Round trips made (pipelines and single scripts): what the bench counts."""
        return self._writer.sends

    # -- holds -----------------------------------------------------------------

    async def get_hold(self, key: str) -> Hold | None:
        return _hold(await self._run(self._scripts.hold_get, [self._key("hold", key)], []))

    async def set_hold(
        self, key: str, duration_s: float, reason: str, linger_s: float
    ) -> tuple[Hold, bool]:
        args = [_ms(duration_s), reason, max(1, _ms(linger_s)), self._wake_channel(key)]
        reply = await self._run(self._scripts.hold_set, [self._key("hold", key)], args)
        hold = _hold(reply[1:])
        assert hold is not None, "the hold script returns the hold in force"
        self.holds.remember(key, hold.remaining_s, hold.reason, linger_s)
        return hold, bool(reply[0])

    async def claim_probe(self, key: str, owner: str, lease_s: float) -> bool:
        args = [owner, max(1, _ms(lease_s))]
        return bool(await self._run(self._scripts.probe_claim, [self._key("hold", key)], args))

    async def drop_probe(self, key: str, owner: str) -> bool:
        args = [owner, self._wake_channel(key)]
        return bool(await self._run(self._scripts.probe_drop, [self._key("hold", key)], args))

    async def release_hold(self, key: str) -> Hold | None:
        args = [self._wake_channel(key)]
        reply = await self._run(self._scripts.hold_release, [self._key("hold", key)], args)
        released = _hold(reply)
        if released is not None:
            self.holds.forget(key)
        return released

    # -- limits: semaphores and windows ------------------------------------------------

    async def take(
        self,
        key: str,
        holder: str,
        *,
        slots: int | None,
        lease_s: float,
        per_window: int | None,
        window_s: float,
    ) -> Refusal | None:
        keys = [self._key("slots", key), self._key("window", key)]
        args = [holder, slots or 0, max(1, _ms(lease_s)), per_window or 0, max(1, _ms(window_s))]
        reply = await self._run(self._scripts.take, keys, args)
        if reply[0] == 0:
            return None
        if reply[0] == 1:
            return Refusal("slots")
        return Refusal("window", int(reply[1]) / 1000)

    async def renew_slots(self, key: str, holders: list[str], lease_s: float) -> None:
        if holders:
            args = [max(1, _ms(lease_s)), *holders]
            await self._run(self._scripts.slot_renew, [self._key("slots", key)], args)

    async def release_slot(self, key: str, holder: str) -> bool:
        args = [holder, self._wake_channel(key)]
        return bool(await self._run(self._scripts.slot_release, [self._key("slots", key)], args))

    # -- admission: claim sets -----------------------------------------------------------

    def register_kinds(self, kinds: Sequence[ClaimKind]) -> None:
        self._kinds = {kind.name: kind for kind in kinds}
        self._admit = self._client.register_script(admit_script.compose(kinds))

    def _hold_args(self, claim: Claim) -> tuple[Scalar, ...]:
        """A hold claim's args as the script takes them: the remembered hold, written back
        when Redis lost it. The claim gives (probe lease ms, linger ms)."""
        remaining, reason = self.holds.remembered_args(claim.key)
        linger = claim.args[1] if len(claim.args) > 1 else DEFAULT_LINGER_MS
        return claim.args[0], remaining, reason, linger

    def _prepared(
        self, claims: Sequence[Claim], holder: str, op: str
    ) -> list[tuple[int, tuple[Claim, tuple[str, ...], tuple[Scalar, ...]]]]:
        """The claims that need Redis for `op`, with their full keys and args, by index."""
        sent = []
        for index, claim in enumerate(claims):
            if claim.kind == HOLD:
                if op == "admit" and self.holds.unheld(claim.key):
                    continue  # the common case: no hold, known without asking
                if op != "admit" and (claim.key, holder) not in self._probes:
                    continue  # only a probe has something to give back or renew
                args = self._hold_args(claim)
            elif claim.kind == WINDOW and op != "admit":
                continue
            else:
                args = claim.args
            families = admit_script.families(claim, self._kinds)
            keys = tuple(self._key(family, claim.key) for family in families)
            sent.append((index, (claim, keys, args)))
        return sent

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        self._ensure_listener()  # the hold view lives while the subscription does
        results: list[Scalar] = [0] * len(claims)
        sent = self._prepared(claims, holder, "admit")
        if not sent:
            return results
        generations = {
            claim.key: self.holds.generation(claim.key)
            for _, (claim, _, _) in sent
            if claim.kind == HOLD
        }
        keys, argv = admit_script.encode(
            [c for _, c in sent], self._wake_channel(""), "admit", holder
        )
        reply = await self._run(self._admit, keys, argv)
        if int(reply[0]) != 0:
            index = sent[int(reply[0]) - 1][0]
            claim = claims[index]
            retry_s = None if int(reply[1]) < 0 else int(reply[1]) / 1000
            info = None if reply[3] is None else str(reply[3])
            if claim.kind == HOLD and retry_s is not None and info is not None:
                linger_s = float(self._hold_args(claim)[3]) / 1000
                self.holds.remember(claim.key, retry_s, info, linger_s)
            return ClaimRefusal(index, claim, str(reply[2]), retry_s, info)
        for (index, (claim, _, _)), result in zip(sent, reply[1:], strict=True):
            results[index] = result
            if claim.kind == HOLD:
                if int(result) == 1:
                    self._probes.add((claim.key, holder))
                else:
                    self.holds.saw_no_hold(claim.key, generations[claim.key])
        return results

    def release(
        self, claims: Sequence[Claim], holder: str, settles: Sequence[tuple[Scalar, ...]] = ()
    ) -> asyncio.Future[Any]:
        """Queued at once with the scripts of this turn of the event loop, with no task of its
        own: it rides with the admissions started in the same turn."""
        sent = self._prepared(claims, holder, "release")
        for claim in claims:
            self._probes.discard((claim.key, holder))
        if not sent:
            return given_back()
        settled = [settles[i] if i < len(settles) else () for i, _ in sent]
        keys, argv = admit_script.encode(
            [c for _, c in sent], self._wake_channel(""), "release", holder, settled
        )
        released: asyncio.Future[Any] = self._send(self._admit, keys, argv, wait=False)
        return released

    async def renew(self, claims: Sequence[Claim], holder: str) -> None:
        sent = [
            (i, c)
            for i, c in self._prepared(claims, holder, "renew")
            if c[0].kind in BUILT_IN_KINDS or self._kinds[c[0].kind].lease_s is not None
        ]
        if sent:
            keys, argv = admit_script.encode(
                [c for _, c in sent], self._wake_channel(""), "renew", holder
            )
            await self._run(self._admit, keys, argv)

    async def _write_back(self) -> None:
        """Redis is back after the subscription was lost: set again every hold this replica
        remembers that has not ended (the longest wins), in case Redis restarted empty."""
        for key, remaining, known in self.holds.in_force():
            try:
                await self.set_hold(key, remaining, known.reason, known.linger_s)
            except FleetUnavailable:
                return

    # -- wake-ups ---------------------------------------------------------------------

    def _ensure_listener(self) -> None:
        if self._listener is None and not self._closed:
            self._listener = asyncio.create_task(self._listen(), name="fleet store wake-ups")

    async def read_books(self, kind: str, key: str, fields: Sequence[str]) -> list[str | None]:
        if not fields:
            return []
        reply = await self._run(self._scripts.books_read, [self._key(kind, key)], list(fields))
        return [
            None if v is None else v.decode() if isinstance(v, bytes) else str(v) for v in reply
        ]

    def changed(self, key: str) -> asyncio.Event:
        self._ensure_listener()
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = asyncio.Event()
        return event

    def _wake(self, key: str) -> None:
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        events, self._changed = self._changed, {}
        for event in events.values():
            event.set()

    def _switched(self) -> None:
        """The primary changed: subscribe again, on the new one (the old subscription may
        live on, on a primary nobody publishes to any more), and wake every waiter."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            self._listener = asyncio.create_task(
                self._listen(lost=True), name="fleet store wake-ups"
            )
        self._wake_all()

    async def _listen(self, lost: bool = False) -> None:
        """Hold one pattern subscription to every wake channel, making it again when lost;
        losing it and making it again wake every waiter, since messages may have been missed.
        `lost`: start as after a loss (a new primary: the remembered holds are written back).
        The hold view lives only while this runs (`HoldView`)."""
        try:
            await self._subscribed(lost)
        finally:
            self.holds.lost()

    async def _subscribed(self, lost: bool) -> None:
        prefix = self._wake_channel("")
        while not self._closed:
            pubsub = self._pubsub = self._client.pubsub()
            try:
                await pubsub.psubscribe(prefix + "*")
                # Believe no reply before Redis confirmed the subscription: a hold set
                # before then was published to nobody here.
                while (confirmed := await pubsub.get_message(timeout=None)) is None or (
                    confirmed.get("type") != "psubscribe"
                ):
                    pass
                if self._closed:  # closed meanwhile (its cancellation may not reach here)
                    return
                self.holds.subscribed()
                if lost:
                    await self._write_back()
                    self._wake_all()
                lost = False
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None and message.get("type") == "pmessage":
                        key = str(message["channel"])[len(prefix) :]
                        self.holds.changed(key, str(message.get("data")))
                        self._wake(key)
            except NoPermissionError as exc:  # the ACL refuses the channels: retrying won't help
                logger.error(
                    "the fleet store ({}) may not subscribe to its wake channels {}*: {}. The "
                    "Redis user needs &{}* and +@pubsub (README, 'Running a fleet'); until "
                    "then a waiting call polls instead of being woken, and every admission "
                    "asks Redis about holds",
                    self.description,
                    prefix,
                    redact(explain(exc)),
                    prefix,
                )
                return
            except UNREACHABLE:
                if self._closed:  # `aclose` closed the subscription's connection
                    return
                lost = True
                self.holds.lost()
                self._wake_all()
            finally:
                self._pubsub = None
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(RESUBSCRIBE_S * random.uniform(0.5, 1.5))

    # -- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        self._closed = True
        pubsub = self._pubsub
        if pubsub is not None and pubsub.connection is not None:
            # Ends the listener's read even where its cancellation is lost on the way
            # (seen in redis-py while a subscription is being made).
            await pubsub.connection.disconnect(nowait=True)
        for task in (self._listener, self._follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._follower = None
        self._wake_all()
        await self._writer.aclose()  # scripts already on their way (a slot's release)
        await self._client.aclose()
