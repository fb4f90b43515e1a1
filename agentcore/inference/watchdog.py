"""The timeouts of one provider call, and the kernel's stop, in one timer.

Why one timer and not `asyncio.timeout` per event: a stream's hot path can afford a
clock read per visible token, not a timer per token. The timer is re-armed only
when it fires early, and it cancels the task only while the task waits on the
provider, never inside the consumer's own code.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Protocol

from agentcore.inference.errors import (
    PROGRESS_TIMEOUT,
    REQUEST_TIMEOUT,
    SHUTTING_DOWN,
    InferenceError,
    request_timeout,
    shutting_down,
)
from agentcore.inference.events import Aborted, Failed, StreamEvent

_BASE_TIME = asyncio.BaseEventLoop.time

TIMER_CONTEXT = contextvars.Context()
"""The context a stream's timers run their callbacks in (this watchdog's, the driver's
`Silence`, an MCPL request's deadline): they read no context variable, and a timer made
without one copies the caller's context, 64 B more for as long as it waits (a stream's
whole life)."""


class Watchdog:
    """The progress and whole-request timeouts of one attempt, at the cost of a clock read
    per visible token: one timer is re-armed only when it fires, and it cancels the task
    only while the task waits on the provider (never inside the consumer's own code)."""

    def __init__(self, progress_s: float, request_s: float) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        # The loop's clock; asyncio's own is `time.monotonic` itself, called here without
        # its Python frame (`progress` reads it once per visible token).
        clock = time.monotonic if type(loop).time is _BASE_TIME else loop.time
        self.clock: Callable[[], float] = clock
        self._progress_s = progress_s
        self._request_s = request_s
        self._started = self._loop.time()
        self.last = self._started
        """When the last visible progress came: `progress`, or ``last = clock()`` written by
        a stream's hot path (`ProviderCalls.stream`), which saves a call per token."""
        self.waiting = False
        self.expired: str | None = None
        self._cancelled_task = False
        self._overdue = False  # expired once already, given one more turn
        # The timer calls this object (`__call__`): no bound method held per timer.
        self._handle: asyncio.Handle = self._loop.call_at(
            self._deadline(), self, context=TIMER_CONTEXT
        )

    def _deadline(self) -> float:
        return min(self.last + self._progress_s, self._started + self._request_s)

    def progress(self) -> None:
        self.last = self.clock()

    def __call__(self) -> None:
        """The timer: re-armed until a deadline passes, then the attempt expires."""
        deadline = self._deadline()
        if self._loop.time() < deadline:
            self._overdue = False
            self._handle = self._loop.call_at(deadline, self, context=TIMER_CONTEXT)
            return
        if self.waiting and not self._overdue:
            # After a stall the loop runs this overdue timer in the same turn as the
            # provider's bytes arrive, before the wake-up of the task that would read
            # them (it is scheduled behind us). One more turn lets it read them first.
            self._overdue = True
            self._handle = self._loop.call_soon(self, context=TIMER_CONTEXT)
            return
        if self.last + self._progress_s <= self._started + self._request_s:
            self.expired = PROGRESS_TIMEOUT
        else:
            self.expired = REQUEST_TIMEOUT
        if self.waiting and self._task is not None:
            self._cancelled_task = True
            self._task.cancel()

    def stop_now(self) -> None:
        """The kernel is stopping: end the attempt as a timeout would, with the shutdown error."""
        if self.expired is None:
            self.expired = SHUTTING_DOWN
        if self.waiting and self._task is not None and not self._cancelled_task:
            self._cancelled_task = True
            self._task.cancel()

    def took_cancel(self) -> bool:
        """True when the cancellation just caught was this watchdog's alone (then undo it)."""
        if not self._cancelled_task or self._task is None:
            return False
        self._cancelled_task = False
        return self._task.uncancel() == 0

    def error(self) -> InferenceError:
        if self.expired == SHUTTING_DOWN:
            return shutting_down()
        if self.expired == PROGRESS_TIMEOUT:
            return InferenceError(
                "timeout",
                f"No visible progress within {self._progress_s:g} s "
                "([inference] progress_timeout_s)",
                code=PROGRESS_TIMEOUT,
            )
        return request_timeout(self._request_s)

    def aborted(self) -> Aborted:
        error = self.error()
        return Aborted("cancelled" if error.code == SHUTTING_DOWN else "timeout", error)

    def cancel(self) -> None:
        self._handle.cancel()


class StreamWatch(Protocol):
    """One attempt's watch, handed to a provider that applies it inside its own stream
    (`HTTPProvider.watched_stream`), so that no generator sits between the provider's
    events and the kernel's attempt loop only to watch them (`ProviderCalls.stream`)."""

    def start(self) -> Watchdog:
        """The attempt's watchdog, made when the stream takes its first step."""
        ...

    def end(self, watchdog: Watchdog) -> None:
        """The stream ended (any way): the watchdog goes."""
        ...

    def failed(self, exc: Exception) -> InferenceError:
        """A provider's bug (not an `InferenceError`) as the attempt's error, logged."""
        ...


class Unwatched:
    """The watch of a stream read without one (`HTTPProvider.stream`, outside an attempt):
    it never expires, and what the driver writes on it is never read."""

    __slots__ = ("last", "waiting")

    expired: str | None = None
    clock = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self.waiting = False
        self.last = 0.0

    def took_cancel(self) -> bool:
        return False

    def aborted(self) -> Aborted:
        raise AssertionError("an unwatched stream never expires")  # pragma: no cover


UNWATCHED = Unwatched()


def ending(watch: StreamWatch | None, dog: Watchdog | Unwatched, exc: BaseException) -> StreamEvent:
    """The terminal an error out of a watched stream ends it with (`ProviderCalls.stream`,
    `HTTPProvider.watched_stream`); raises `exc` again when it is not the attempt's to end
    (no watch: the caller reads the provider itself; a cancellation not the watchdog's)."""
    dog.waiting = False
    if isinstance(exc, asyncio.CancelledError):
        if dog.took_cancel():
            return dog.aborted()
        raise exc
    if watch is None:
        raise exc
    if isinstance(exc, InferenceError):
        return Failed(exc)
    assert isinstance(exc, Exception)
    return Failed(watch.failed(exc))
