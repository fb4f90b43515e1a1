"""Signals that come while `agentcore serve` starts, before its event loop handles them.

Loading the kernel (plugin discovery and imports, the settings) takes a good part of a
second. Until `run_host` has its own handlers in, a SIGHUP would kill the process (its
default action), a SIGTERM end it with 143, and a SIGINT raise KeyboardInterrupt
("Aborted!", exit 1), where serve promises exit 0 on SIGTERM or SIGINT and a re-read of
the settings on SIGHUP (docs/cli.md). `StartupSignals.install` is the first thing serve
does, before anything slow is imported: it notes each of these signals, and `run_host`
acts on them as soon as its own handlers take over (`hand_over`): a stop stops the host
before it serves, a SIGHUP is a reload once the servers have started, as a later one is.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

__all__ = ["SIGNALS", "StartupSignals"]

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StartupSignals:
    """The signals `serve` received before its event loop's handlers were in."""

    def __init__(self) -> None:
        self.received: list[signal.Signals] = []

    @classmethod
    def install(cls) -> StartupSignals:
        """Note SIGTERM, SIGINT and SIGHUP from now on (the process's handlers for them)."""
        noted = cls()
        for sig in SIGNALS:
            signal.signal(sig, noted._note)
        return noted

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum))

    @property
    def stopping(self) -> bool:
        """A SIGTERM or SIGINT came: the host is to stop."""
        return any(sig != signal.SIGHUP for sig in self.received)

    def hand_over(self, stop: Callable[[], None], reload: Callable[[], None]) -> None:
        """Act on the signals noted so far; call once the loop's own handlers are in."""
        received, self.received = self.received, []
        for sig in received:
            (reload if sig == signal.SIGHUP else stop)()
