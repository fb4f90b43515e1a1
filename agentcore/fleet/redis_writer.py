"""How the Redis store's scripts reach Redis (`agentcore.fleet.redis_store`): the scripts
that concurrent calls start in the same turn of the event loop go together, packed in one
write on one connection (`redis_connect.send_packed`): one round trip for a burst of
admissions, not one each (most of a round trip's cost is the client's and the socket's,
per command and per send, not Redis's). On a cluster, redis-py's pipeline routes each
script to its slot's node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeAlias

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from agentcore.fleet.redis_connect import pack_evalsha, send_packed

_Call: TypeAlias = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]", bytes]
"""A script to run, its keys and arguments, where its reply goes, and its EVALSHA as sent
(empty on a cluster, whose client packs it)."""


class ScriptWriter:
    """Batches the scripts started in one turn of the event loop into one round trip."""

    def __init__(self, client: Any, failed: Callable[[BaseException], BaseException]) -> None:
        self._client = client
        self._failed = failed
        """What the callers get for an error that failed their scripts (the store's words)."""
        self._pool: Any = getattr(client, "connection_pool", None)
        """One Redis (plain or sentinel): batches go straight to a pooled connection; None
        for a cluster (its client routes each script)."""
        self.sends = 0
        """Round trips made (pipelines and single scripts): what the bench counts."""
        self._batch: list[_Call] | None = None
        """The scripts started in this turn of the event loop, sent together at its end."""
        self._sending: set[asyncio.Task[None]] = set()
        self._connections: list[Any] = []
        """Connections this writer took from the pool and keeps between batches, so a batch
        makes no pool get/release (the pool's locks, checks and bookkeeping cost more than
        the batch's own client work). The pool counts them in use, so its `disconnect`
        (a sentinel failover) still reaches them; each is made again at its next batch."""

    def send(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Queue one script, sent with every other started in this turn of the event loop:
        the future of its reply (a release waits for it in no task of its own)."""
        if self._batch is None:
            self._batch = []
            # Its first step runs in the next turn, after every task ready in this one.
            task = asyncio.create_task(self._send(), name="fleet store round trip")
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        # Packed here, so an argument Redis cannot take fails its own caller, not the batch.
        packed = b"" if self._pool is None else pack_evalsha(script.sha, keys, args)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._batch.append((script, keys, args, reply, packed))
        return reply

    async def _send(self) -> None:
        """Send the scripts started in the last turn together, in a task of their own: a
        caller cancelled meanwhile stops waiting for its reply, not the others' round trip."""
        batch, self._batch = self._batch, None
        if batch:
            await self._execute(batch)

    async def _execute(self, batch: list[_Call]) -> None:
        """The batch's scripts, one EVALSHA each, in one round trip (not a transaction: each
        script is atomic by itself). A script Redis does not know yet (it restarted) is
        loaded and run again by redis-py's `AsyncScript`."""
        self.sends += 1
        try:
            if self._pool is not None:
                results = await self._send_packed([call[4] for call in batch])
            elif len(batch) == 1:
                script, keys, args, *_ = batch[0]
                results = [await script(keys=keys, args=args)]
            else:  # a cluster: its pipeline routes each script to its slot's node
                pipe = self._client.pipeline(transaction=False)
                for script, keys, args, *_ in batch:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # unreachable (every script failed), or a bug: say so to all
            error = self._failed(exc)
            for *_, reply, _ in batch:
                if not reply.done():
                    reply.set_exception(error)
            return
        for (script, keys, args, reply, _), result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                try:
                    result = await script(keys=keys, args=args)
                except Exception as exc:
                    result = self._failed(exc)
            if reply.done():
                continue  # its caller was cancelled
            if isinstance(result, Exception):
                reply.set_exception(result)
            else:
                reply.set_result(result)

    async def _send_packed(self, commands: list[bytes]) -> list[Any]:
        """The commands on one of this writer's connections (one taken from the pool when
        every kept one is busy with another batch)."""
        if self._connections:
            connection = self._connections.pop()
        else:
            connection = await self._pool.get_connection()
        try:
            return await send_packed(connection, commands)
        finally:
            self._connections.append(connection)

    async def drain(self) -> None:
        """Wait for the scripts already on their way (a slot's release) to get replies, then
        give the kept connections back to the pool."""
        if self._sending:
            await asyncio.wait(set(self._sending))
        connections, self._connections = self._connections, []
        for connection in connections:
            await self._pool.release(connection)


__all__ = ["ScriptWriter"]
