"""Notifications to one server, sent in order by a task of their own: the sender never waits.

For what must not hold an inference up (`inference/lifecycle`, SPEC §10.5: a
notification, best-effort by design) yet must keep its order (a turn's `started`
before its terminal). A server that does not read holds up only its own outbox;
past `OUTBOX_LIMIT` waiting notifications, more are dropped and logged. The
connection flushes the outbox, briefly, before it closes, so a turn's terminal
sent just before a shutdown still goes out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from loguru import logger

from agentcore.mcpl.jsonrpc import ConnectionClosed, JsonRpcPeer

OUTBOX_LIMIT = 1000
FLUSH_TIMEOUT_S = 1.0


class Outbox:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: deque[tuple[JsonRpcPeer, str, dict[str, Any] | None]] = deque()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def put(self, peer: JsonRpcPeer, method: str, params: dict[str, Any] | None) -> None:
        if len(self._queue) >= OUTBOX_LIMIT:
            self.dropped += 1
            logger.warning(
                "mcpl server {}: not reading; {} dropped ({} dropped so far)",
                self._name,
                method,
                self.dropped,
            )
            return
        self._queue.append((peer, method, params))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._deliver(), name=f"mcpl-outbox:{self._name}"
            )

    async def _deliver(self) -> None:
        try:
            while self._queue:
                peer, method, params = self._queue.popleft()
                try:
                    await peer.notify(method, params)
                except ConnectionClosed as exc:
                    logger.debug("mcpl server {}: {} not sent: {}", self._name, method, exc)
        finally:
            self._task = None

    async def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait (at most `timeout_s`) until everything queued was handed to the transport."""
        task = self._task
        if task is not None:
            await asyncio.wait({task}, timeout=timeout_s)
            if not task.done():
                task.cancel()
