"""Reconnecting to an MCPL server: a backoff that grows across sessions, and crash loops.

A new socket or process is a new MCPL session with its own handshake and grant (SPEC
§5.3, §5.4), so a lost session is replaced by opening a new one (`ServerConnection`).
What this module decides is *when*. The wait before each attempt grows exponentially
(`ReconnectPolicy.delay`, with jitter so a fleet of hosts does not reconnect in step)
up to `max_delay_s`, and it keeps growing across sessions: a server that exits right
after its handshake, or a WebSocket server that drops every session, is not an outage
that ends when a session opens. Only a session that has stayed up `reset_after_s`
starts the schedule over. Once `crash_loop_after` attempts in a row have come without
such a session the server is *crash-looping*: logged, and traced as ``mcpl:server_state``
``reconnecting`` with ``crashLooping: true`` (the console shows it); a session that then
stays up is traced ``ready`` with ``crashLooping: false``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from loguru import logger

from agentcore._constants import RECONNECT_CRASH_LOOP_AFTER as DEFAULT_CRASH_LOOP_AFTER
from agentcore._constants import RECONNECT_INITIAL_DELAY_S as DEFAULT_INITIAL_DELAY_S
from agentcore._constants import RECONNECT_MAX_DELAY_S as DEFAULT_MAX_DELAY_S
from agentcore._constants import RECONNECT_RESET_AFTER_S as DEFAULT_RESET_AFTER_S
from agentcore.mcpl.compat import OFF_STATES, STATE_REASONS, Negotiation

Emit = Callable[..., Awaitable[None]]
"""`emit(type, **fields)`: the kernel's `Kernel.emit`."""


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """Open a new session after a lost one, waiting longer each time.

    Attempt n (from 0, counted since the last session that stayed up `reset_after_s`)
    waits between half and all of ``initial_delay_s * multiplier**n``, capped at
    `max_delay_s` ("equal jitter": each wait is still at least the one before, until
    the cap). `max_attempts` bounds the attempts of one outage, None: keep trying.
    """

    initial_delay_s: float = DEFAULT_INITIAL_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    multiplier: float = 2.0
    max_attempts: int | None = None
    reset_after_s: float = DEFAULT_RESET_AFTER_S
    """A session up this long starts the schedule over."""
    crash_loop_after: int = DEFAULT_CRASH_LOOP_AFTER
    """This many attempts in a row without such a session: the server is crash-looping."""

    def delay(self, attempt: int) -> float:
        """The wait before attempt `attempt` (from 0)."""
        ceiling = self.initial_delay_s
        for _ in range(attempt):  # not `multiplier**attempt`: that overflows a float
            if ceiling >= self.max_delay_s:
                break
            ceiling *= self.multiplier
        ceiling = min(ceiling, self.max_delay_s)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class _Server(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def grant(self) -> frozenset[str]: ...
    @property
    def feature_sets(self) -> Mapping[str, Any]: ...
    @property
    def negotiation(self) -> Negotiation: ...


async def emit_state(emit: Emit, server: _Server, **extra: Any) -> None:
    """``mcpl:server_state`` for a session that is up: what an observer (the console)
    shows of a server."""
    state = server.state
    fields: dict[str, Any] = {} if state == "absent" else server.negotiation.to_fields()
    if state in OFF_STATES:
        fields["reason"] = STATE_REASONS[state]
    await emit(
        "mcpl:server_state",
        serverId=server.name,
        state=state,
        grant=sorted(server.grant),
        featureSets=sorted(fs.name for fs in server.feature_sets.values() if fs.enabled),
        **fields,
        **extra,
    )


class Reconnects:
    """One connection's reconnect schedule, kept across its sessions."""

    def __init__(self, server: _Server, policy: ReconnectPolicy, emit: Emit | None) -> None:
        self._server = server
        self.policy = policy
        self._emit = emit
        self._log = logger.bind(mcpl_server=server.name)
        self.attempts = 0
        """Attempts since a session last stayed up `reset_after_s` (or since the start)."""

    @property
    def crash_looping(self) -> bool:
        return self.attempts >= self.policy.crash_loop_after

    async def watch(self, closed: Awaitable[None]) -> None:
        """Wait for the current session to end; once it has stayed up `reset_after_s`, the
        schedule starts over (and a crash loop is over)."""
        loop = asyncio.get_running_loop()
        opened = loop.time()
        ending = asyncio.ensure_future(closed)
        try:
            done, _ = await asyncio.wait({ending}, timeout=self.policy.reset_after_s)
            if not done or loop.time() - opened >= self.policy.reset_after_s:
                await self._stayed_up()
            await ending
        finally:
            ending.cancel()

    async def _stayed_up(self) -> None:
        was_looping, self.attempts = self.crash_looping, 0
        if was_looping:
            self._log.info(
                "mcpl server {}: up for {} s: no longer crash-looping",
                self._server.name,
                self.policy.reset_after_s,
            )
            await self._trace_ready(crashLooping=False)

    async def wait(self, why: str) -> None:
        """Log and trace the next attempt's wait, then wait it. `why`: what ended the last
        session, or why the last attempt failed."""
        delay = self.policy.delay(self.attempts)
        self.attempts += 1
        name = self._server.name
        if self.attempts == self.policy.crash_loop_after:
            self._log.error(
                "mcpl server {}: crash-looping: {} attempts in a row without a session that "
                "stayed up {} s (the last: {}); reconnecting with a backoff up to {} s",
                name,
                self.attempts,
                self.policy.reset_after_s,
                why,
                self.policy.max_delay_s,
            )
        self._log.warning(
            "mcpl server {}: {}; reconnecting in {:.2f} s (attempt {}{})",
            name,
            why,
            delay,
            self.attempts,
            ", crash-looping" if self.crash_looping else "",
        )
        if self._emit is not None:
            await self._emit(
                "mcpl:server_state",
                serverId=name,
                state="reconnecting",
                error=why,
                attempt=self.attempts,
                delayMs=round(delay * 1000),
                crashLooping=self.crash_looping,
            )
        await asyncio.sleep(delay)

    async def reconnected(self) -> None:
        """A new session is up: traced ``ready``, still crash-looping until it stays up."""
        await self._trace_ready(crashLooping=self.crash_looping)

    async def _trace_ready(self, **extra: Any) -> None:
        if self._emit is not None:
            await emit_state(self._emit, self._server, **extra)


__all__ = [
    "DEFAULT_CRASH_LOOP_AFTER",
    "DEFAULT_INITIAL_DELAY_S",
    "DEFAULT_MAX_DELAY_S",
    "DEFAULT_RESET_AFTER_S",
    "ReconnectPolicy",
    "Reconnects",
    "emit_state",
]
