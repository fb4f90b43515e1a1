"""How the Redis store's scripts reach Redis (`agentcore.fleet.redis_store`).

One Redis (plain or sentinel): the writer holds one connection of the pool for as long as
it lives and pipelines on it: each write is the scripts queued so far, packed
(`redis_connect.pack_evalsha`) and written at once on the connection's stream, and one
reader task takes the replies in the order they were written. A script the caller waits
for (an admission) is written at once when no reply is outstanding; otherwise, and for a
script nobody waits for (a release), the scripts queued in one turn of the event loop go
in one write at its end (`loop.call_soon`). So a release rides with the next admission,
a burst of admissions costs two writes, and no task or pool round trip is made per write
(sequential calls: no task per call, against 3, and 3.1 loop turns, against 5.2).

A connection that fails (unreachable, timed out, dropped by the sentinel follower after a
failover) fails every script still waiting for a reply on it; the next write connects
again (a sentinel's primary is asked again). A cluster: redis-py's cluster pipeline routes
each script to its slot's node, one task per batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeAlias

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from agentcore.fleet.redis_connect import pack_evalsha

_Call: TypeAlias = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]", bytes]
"""A script to run, its keys and arguments, where its reply goes, and its EVALSHA as sent
(empty on a cluster, whose client packs it)."""

AT_ONCE = True
"""Write a waited-for script at once when no reply is outstanding (else at the turn's end)."""


class ScriptWriter:
    """Sends the store's scripts: pipelined on one held connection, or through a cluster."""

    def __init__(self, client: Any, failed: Callable[[BaseException], BaseException]) -> None:
        self._client = client
        self._failed = failed
        """What the callers get for an error that failed their scripts (the store's words)."""
        self._pool: Any = getattr(client, "connection_pool", None)
        """One Redis (plain or sentinel); None for a cluster (its client routes each script)."""
        self.sends = 0
        """Writes made (each one round trip): what the bench counts."""
        self.scripts = 0
        self._batch: list[_Call] = []
        """Queued, not written yet."""
        self._flushing: asyncio.Handle | None = None
        self._connection: Any = None
        """The pool's connection this writer holds (one Redis)."""
        self._opening: asyncio.Task[None] | None = None
        self._unsent: list[_Call] = []
        """Flushed while the connection was being made: written once it is."""
        self._replies: deque[_Call] = deque()
        """Written, in order, each waiting for its reply."""
        self._reader: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[None] | None = None
        """The reader waits on this while no reply is outstanding."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Cluster batches and scripts run again after NOSCRIPT."""

    def send(self, script: AsyncScript, keys: list[str], args: list[Any], *, wait: bool) -> Any:
        """Queue one script; its reply (or error) comes in the returned future. `wait`: a
        caller waits for it (written at once when nothing is outstanding)."""
        # Packed here, so an argument Redis cannot take fails its own caller, not the batch.
        packed = b"" if self._pool is None else pack_evalsha(script.sha, keys, args)
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._batch.append((script, keys, args, reply, packed))
        if wait and AT_ONCE and not self._replies and self._writable():
            self._flush()
        elif self._flushing is None:
            self._flushing = loop.call_soon(self._flush)
        return reply

    def _writable(self) -> bool:
        """Connected, and not closed by Redis while idle (its ``timeout``) or by a failover."""
        connection = self._connection
        if self._opening is not None or connection is None or not connection.is_connected:
            return False
        reader = connection._reader
        return not (
            reader.at_eof()
            or reader.exception() is not None
            or connection._writer.transport.is_closing()
        )

    def _flush(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._pool is None:
            self._spawn(self._cluster(batch))
        elif self._writable():
            self._write(batch)
        else:
            self._unsent.extend(batch)
            if self._opening is None:
                self._opening = asyncio.create_task(self._open(), name="fleet store connection")

    def _write(self, calls: list[_Call]) -> None:
        # Straight onto redis-py's stream: its `send_packed_command` wraps every write in
        # `asyncio.wait_for`, a task and a loop turn per write. The scripts are small; the
        # socket's buffer takes them at once.
        self._connection._writer.write(b"".join(call[4] for call in calls))
        self.sends += 1
        self.scripts += len(calls)
        self._replies.extend(calls)
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="fleet store replies")
        elif self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def _open(self) -> None:
        """Connect (again): the pool's connection the first time, then the same one."""
        try:
            if self._connection is None:
                self._connection = await self._pool.get_connection()
            else:  # `connect`: a sentinel's connection asks the sentinels for the primary
                await self._connection.disconnect(nowait=True)
                await self._connection.connect()
        except Exception as exc:
            unsent, self._unsent = self._unsent, []
            self._fail(unsent, exc)
            return
        finally:
            self._opening = None
        unsent, self._unsent = self._unsent, []
        self._write(unsent)

    async def _read(self) -> None:
        """The replies, in the order the scripts were written; an error of the connection
        fails every script outstanding on it (redis-py has disconnected it)."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._replies:
                self._idle = loop.create_future()
                await self._idle
                continue
            try:
                result = await self._connection.read_response()
            except ResponseError as exc:  # that script's error: the others' replies follow
                result = exc
            except Exception as exc:
                failed, self._replies = list(self._replies), deque()
                self._fail(failed, exc)
                continue
            self._answer(self._replies.popleft(), result)

    def _answer(self, call: _Call, result: Any) -> None:
        reply = call[3]
        if reply.done():
            return  # its caller was cancelled
        if isinstance(result, NoScriptError):  # Redis restarted: load it, run it again
            self._spawn(self._again(call))
        elif isinstance(result, Exception):
            reply.set_exception(result)
        else:
            reply.set_result(result)

    async def _again(self, call: _Call) -> None:
        script, keys, args, reply, _ = call
        try:
            result = await script(keys=keys, args=args)
        except Exception as exc:
            if not reply.done():
                reply.set_exception(self._failed(exc))
            return
        if not reply.done():
            reply.set_result(result)

    def _fail(self, calls: list[_Call], exc: BaseException) -> None:
        error = self._failed(exc)
        for *_, reply, _ in calls:
            if not reply.done():
                reply.set_exception(error)

    async def _cluster(self, batch: list[_Call]) -> None:
        """A cluster's batch, one EVALSHA each, in one pipeline (not a transaction: each
        script is atomic by itself); redis-py's `AsyncScript` loads a script Redis lacks."""
        self.sends += 1
        self.scripts += len(batch)
        try:
            if len(batch) == 1:
                script, keys, args, *_ = batch[0]
                results = [await script(keys=keys, args=args)]
            else:
                pipe = self._client.pipeline(transaction=False)
                for script, keys, args, *_ in batch:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # unreachable (every script failed), or a bug: say so to all
            self._fail(batch, exc)
            return
        for call, result in zip(batch, results, strict=True):
            self._answer(call, result)

    def _spawn(self, step: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(step, name="fleet store round trip")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Wait for the scripts already queued or on their way (a slot's release) to get
        their replies, then stop reading and give the connection back to the pool."""
        self._flush()
        waiting = [call[3] for call in (*self._unsent, *self._replies)]
        if waiting or self._tasks:
            await asyncio.wait([*waiting, *self._tasks])
        if self._opening is not None:
            self._opening.cancel()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._pool.release(connection)


__all__ = ["ScriptWriter"]
