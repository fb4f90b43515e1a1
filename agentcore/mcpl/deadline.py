"""A deadline for every request an MCPL server sends the host.

A client may give up on a request without saying so: mcpl-core-ts rejects a request
after 30 s by default and sends no `notifications/cancelled`, so a host that only stops
on a cancel keeps retrying an `inference/request` nobody waits for, and answers it when
it is long too late. Each request therefore has a deadline, ``[mcpl.servers.NAME]
request_deadline_s``, else ``[mcpl] request_deadline_s``. When it passes, the handler's
task is cancelled (which stops retries and waits, and closes the provider call) and the
request is answered -32603 naming the deadline and its setting: still exactly one answer
(§6.6: a request is never left unanswered).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType

from agentcore._constants import MAX_MCPL_REQUEST_DEADLINE_S as MAX_REQUEST_DEADLINE_S
from agentcore._constants import MCPL_REQUEST_DEADLINE_S as DEFAULT_REQUEST_DEADLINE_S
from agentcore.inference.watchdog import TIMER_CONTEXT
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError, McplRequest


@dataclass(frozen=True, slots=True)
class Deadline:
    """How long a server's requests may take, and the setting that said so."""

    seconds: float
    setting: str

    def scope(self, request: McplRequest) -> Scope:
        """The timeout to run a request's handler in; sets `request.deadline` first, so
        that a handler cancelled by it can tell why. When it expired, raise `passed()`.
        (A scope and an error, not a context manager made of an async generator: that
        and its wrapper would be held by every request in flight, ~0.5 KB each.)"""
        request.deadline = asyncio.get_running_loop().time() + self.seconds
        return Scope(request.deadline)

    def passed(self) -> McplError:
        """The answer to a request whose deadline passed: -32603 naming the setting."""
        return McplError(
            INTERNAL_ERROR,
            f"The request's deadline passed: no answer within {self.seconds:g} s "
            f"({self.setting}); the host stopped working on it",
            {"reason": "deadline", "deadlineS": self.seconds},
        )


class Scope:
    """`asyncio.timeout_at(when)` for one request's handler, by its rules (the timer cancels
    the task; leaving, a cancellation that was the timer's alone becomes `TimeoutError`),
    in a third of its memory: every stream holds its scope as long as it streams, and
    asyncio's keeps an instance dict, a bound method for its timer and a copy of the task's
    context (~0.45 KB with the timer). Here: slots, the timer calls the scope itself, in
    the shared `TIMER_CONTEXT`."""

    __slots__ = ("_cancelling", "_expired", "_handle", "_task", "_when")

    def __init__(self, when: float) -> None:
        self._when = when
        self._expired = False
        self._handle: asyncio.Handle | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0

    def expired(self) -> bool:
        """Whether the deadline passed while the handler ran (its cancellation was ours)."""
        return self._expired

    async def __aenter__(self) -> Scope:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline's scope runs inside a task")
        loop = asyncio.get_running_loop()
        self._task, self._cancelling = task, task.cancelling()
        if self._when <= loop.time():
            self._handle = loop.call_soon(self, context=TIMER_CONTEXT)
        else:
            self._handle = loop.call_at(self._when, self, context=TIMER_CONTEXT)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        # Only a cancellation that was the timer's alone ends as a timeout (uncancel first).
        task = self._task
        if (
            self._expired
            and task is not None
            and task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def __call__(self) -> None:
        """The timer: the deadline passed, the handler's task is cancelled."""
        self._handle = None
        self._expired = True
        if self._task is not None:
            self._task.cancel()


__all__ = ["DEFAULT_REQUEST_DEADLINE_S", "MAX_REQUEST_DEADLINE_S", "Deadline", "Scope"]
