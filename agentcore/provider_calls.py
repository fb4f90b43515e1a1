"""One provider call as one attempt: cut by its timeouts, ended by a shutdown, and always
ending in exactly one terminal, whatever the provider does (docs/architecture.md).

The kernel's attempt loop consumes these; `ProviderCalls` keeps the watchdog of every
call in flight so that `Kernel.stop()` and `Kernel.end_host_turns()` can end them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from loguru import logger

from agentcore.inference import (
    NO_TERMINAL,
    Aborted,
    Complete,
    Failed,
    InferenceError,
    StreamEvent,
    Terminal,
    Token,
)
from agentcore.inference.calls import Attempt
from agentcore.inference.errors import NO_RESULT_MESSAGE
from agentcore.inference.watchdog import Watchdog, ending
from agentcore.providers import Provider
from agentcore.settings import InferenceSettings


class ProviderCalls:
    """The provider calls in flight, each under its watchdog."""

    def __init__(self, config: InferenceSettings, stopping: asyncio.Event) -> None:
        self._config = config
        self._stopping = stopping
        self._watchdogs: set[Watchdog] = set()
        self._turn_watchdogs: set[Watchdog] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def stop_all(self) -> None:
        """End every call in flight now, with the shutdown error, through its own path (so
        each closes its connection and its consumer gets a terminal)."""
        for watchdog in list(self._watchdogs):
            watchdog.stop_now()

    def stop_host_turns(self) -> None:
        """End the calls of the host's own turns now (``aborted``)."""
        for watchdog in list(self._turn_watchdogs):
            watchdog.stop_now()

    async def ended(self, grace_s: float) -> None:
        """Wait up to `grace_s` for every call in flight to end; say so if some did not."""
        if not self._watchdogs:
            return
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except TimeoutError:
            logger.warning("{} provider calls had not ended at shutdown", len(self._watchdogs))

    def _watch(self, progress_s: float, request_s: float, attempt: Attempt) -> Watchdog:
        """The timeouts of one provider call, which `stop_all()` can also end."""
        watchdog = Watchdog(progress_s, request_s)
        if self._stopping.is_set():
            watchdog.stop_now()
        self._watchdogs.add(watchdog)
        if attempt.inference.request.turn is not None:
            self._turn_watchdogs.add(watchdog)
        self._idle.clear()
        return watchdog

    def _unwatch(self, watchdog: Watchdog) -> None:
        watchdog.cancel()
        self._watchdogs.discard(watchdog)
        self._turn_watchdogs.discard(watchdog)
        if not self._watchdogs:
            self._idle.set()

    async def whole(self, provider: Provider, attempt: Attempt) -> AsyncGenerator[Terminal, None]:
        """One whole provider call as an attempt: its terminal, within the request timeout."""
        watchdog = self._watch(math.inf, self._config.request_timeout_s, attempt)
        watchdog.waiting = True  # a whole call shows no progress
        terminal: Terminal
        try:
            terminal = Complete(await provider.complete(attempt.inference.request, attempt.model))
        except asyncio.CancelledError:
            if not watchdog.took_cancel():
                raise
            terminal = Failed(watchdog.error())
        except InferenceError as error:
            terminal = Failed(error)
        except Exception as exc:  # a provider bug is still an InferenceError
            terminal = Failed(provider_failed(attempt, exc))
        finally:
            self._unwatch(watchdog)
        yield terminal

    def stream(self, provider: Provider, attempt: Attempt) -> AsyncGenerator[StreamEvent, None]:
        """The provider's events for one attempt, cut by the progress and request timeouts,
        always ending in one terminal. The provider's stream is closed however this ends.

        A provider that takes the attempt's watch (`HTTPProvider.watched_stream`, every
        HTTP wire whose `stream` is not overridden) applies it in its own generator, handed
        out as it is: a generator here around it would cost a hop per event (an async
        generator's step, some 1,100 instructions on Python 3.11) only to watch."""
        watched = getattr(provider, "watched_stream", None)
        if watched is not None and getattr(provider, "stream_is_watched", bool)():
            request = attempt.inference.request
            return cast(
                "AsyncGenerator[StreamEvent, None]",
                watched(request, attempt.model, _Watch(self, attempt)),
            )
        return self._stream(provider, attempt)

    async def _stream(
        self, provider: Provider, attempt: Attempt
    ) -> AsyncGenerator[StreamEvent, None]:
        """`stream` for a provider that does not take the watch: this generator applies it."""
        config = self._config
        try:
            events = provider.stream(attempt.inference.request, attempt.model)
        except InferenceError as error:  # refused before streaming anything
            yield Failed(error)
            return
        except Exception as exc:
            yield Failed(provider_failed(attempt, exc))
            return
        watchdog = self._watch(config.progress_timeout_s, config.request_timeout_s, attempt)
        clock = watchdog.clock
        try:
            # `async for`, not `anext()` per event: the pull is a good part of a chunk's
            # cost. Only a pull is waited on (`waiting`: the watchdog may cancel it); a
            # consumer closing this generator at a `yield` throws GeneratorExit, which
            # none of the handlers below takes.
            if watchdog.expired is not None:
                yield watchdog.aborted()
                return
            watchdog.waiting = True
            try:
                async for event in events:
                    watchdog.waiting = False
                    if type(event) is Token:
                        if event.visible:
                            watchdog.last = clock()  # `watchdog.progress()`, inline
                    elif isinstance(event, Complete | Failed | Aborted):
                        yield event
                        return
                    yield event
                    if watchdog.expired is not None:
                        yield watchdog.aborted()
                        return
                    watchdog.waiting = True
            except (Exception, asyncio.CancelledError) as exc:  # a provider bug included
                yield ending(_Watch(self, attempt), watchdog, exc)  # or raises it
                return
            watchdog.waiting = False
            yield Failed(no_terminal(attempt))
        finally:
            self._unwatch(watchdog)
            await _aclose(events)


class _Watch:
    """One attempt's watch as a provider applies it itself (`StreamWatch`)."""

    __slots__ = ("_attempt", "_calls")

    def __init__(self, calls: ProviderCalls, attempt: Attempt) -> None:
        self._calls = calls
        self._attempt = attempt

    def start(self) -> Watchdog:
        config = self._calls._config
        return self._calls._watch(
            config.progress_timeout_s, config.request_timeout_s, self._attempt
        )

    def end(self, watchdog: Watchdog) -> None:
        self._calls._unwatch(watchdog)

    def failed(self, exc: Exception) -> InferenceError:
        return provider_failed(self._attempt, exc)


async def _aclose(events: AsyncIterator[StreamEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


def no_terminal(attempt: Attempt) -> InferenceError:
    return InferenceError(
        "network",
        NO_RESULT_MESSAGE,
        code=NO_TERMINAL,
        provider=attempt.provider,
        model=attempt.model,
    )


def provider_failed(attempt: Attempt, exc: Exception) -> InferenceError:
    """A provider raised something other than `InferenceError`: a bug, logged, not retried."""
    logger.opt(exception=exc).error(
        "provider {!r} raised {} (not an InferenceError)", attempt.provider, type(exc).__name__
    )
    return InferenceError(
        "unknown",
        f"The provider {attempt.provider!r} failed: {type(exc).__name__}: {exc}",
        retryable=False,
        provider=attempt.provider,
        model=attempt.model,
    )
