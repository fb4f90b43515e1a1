"""The fleet store: state the policies share with every replica of a host (``[fleet]``).

A plugin reaches it as ``context.fleet``. Two backends keep the same promises
(one contract test suite runs against both): `MemoryFleetStore`, this process
only, the embedded default; and `RedisFleetStore`, one Redis for a fleet, each
operation one Lua script, so it is atomic across replicas without a lock.

It offers three primitives and a wake-up, each keyed by a string the plugin
chooses; policy (when to hold, how long to wait, what to trace) stays in the
plugins:

- a *hold*: closed until a time (the longest hold wins), then one *probe* may
  go; released only once it has ended. A hold disappears by itself a while
  after its end, so a crashed replica leaves nothing stuck.
- *limits*, taken together in one operation (`take`): a *semaphore*, at most N
  slots, each a lease that expires unless renewed, so a slot whose holder died comes
  back; and a *window*, at most N takes in any sliding window of W seconds.
- `changed(key)`: an event set at the next change of `key` that frees a waiter
  (a hold lengthened, a probe dropped, a hold released, a slot released), by any
  replica. Redis delivers it through pub/sub: best effort, so a waiter also
  re-reads on a jittered poll (`poll_s`).

Durations go in and come out; the clock is the store's (Redis's ``TIME``), so
replicas whose clocks disagree still agree on a hold. The Redis backend sends the
operations that concurrent calls start in the same turn of the event loop together,
as one pipeline (one round trip), so a burst of calls costs a few round trips, not one
each.

When Redis cannot be reached, every operation raises `FleetUnavailable`; what a
call does then is ``[fleet] on_store_error`` (`on_store_error`): ``closed``
(wait, announced, then fail with `unavailable_error`) or ``open`` (admit, with a
warning trace `UNAVAILABLE_TRACE`). Nothing needs a restart when Redis comes back.
"""

from __future__ import annotations

from agentcore.fleet.memory import MemoryFleetStore
from agentcore.fleet.store import (
    FLEET_UNAVAILABLE,
    POLL_S,
    UNAVAILABLE_TRACE,
    FleetStore,
    FleetUnavailable,
    Hold,
    Refusal,
    StoreErrorPolicy,
    poll_s,
    unavailable_error,
    unavailable_fields,
    wait_for_change,
)
from agentcore.settings import FleetSettings


def open_store(settings: FleetSettings) -> FleetStore:
    """The store ``[fleet]`` describes. Redis is connected lazily, at the first operation."""
    if settings.backend != "memory":  # redis, redis-sentinel, redis-cluster
        # Imported here: redis-py takes a while to import, and most hosts never need it.
        from agentcore.fleet.redis_connect import connect
        from agentcore.fleet.redis_store import RedisFleetStore

        return RedisFleetStore(
            connect(settings),
            key_prefix=settings.key_prefix,
            timeout_s=settings.timeout_s,
            on_store_error=settings.on_store_error,
        )
    return MemoryFleetStore(on_store_error=settings.on_store_error)


__all__ = [
    "FLEET_UNAVAILABLE",
    "POLL_S",
    "UNAVAILABLE_TRACE",
    "FleetStore",
    "FleetUnavailable",
    "Hold",
    "MemoryFleetStore",
    "Refusal",
    "StoreErrorPolicy",
    "open_store",
    "poll_s",
    "unavailable_error",
    "unavailable_fields",
    "wait_for_change",
]
