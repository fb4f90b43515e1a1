"""A replica's view of the fleet's holds, so the common case (no hold) costs no round trip,
and its memory of the holds it set or saw, so a hold outlives a Redis that restarts empty.

The view only ever says "no hold on KEY", learnt from a script's reply, and only while
the wake subscription is up: every hold change is published on the key's wake channel
(the scripts that set a hold publish ``hold``), which forgets the key's entry; losing
the subscription forgets every entry (then calls ask Redis again). A reply that was on
its way while a change arrived is not believed: each key has a generation, bumped by
every change, read before the script is sent and compared when its reply arrives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

NOT_HOLD_CHANGES = frozenset({"slot", "slots", "window"})
"""Wake payloads that cannot start a hold (a slot given back...): they keep the view."""


@dataclass(frozen=True, slots=True)
class Remembered:
    """A hold this replica set or saw: until when (its monotonic clock), why, its linger."""

    until: float
    reason: str
    linger_s: float

    def remaining_s(self, now: float) -> float:
        return max(0.0, self.until - now)


class HoldView:
    """See the module's docstring; one per `RedisFleetStore`."""

    def __init__(self) -> None:
        self.live = False
        """The wake subscription is up: a change of any hold reaches `changed`."""
        self._unheld: set[str] = set()
        self._generations: dict[str, int] = {}
        self._epoch = 0
        """Bumped when the subscription is lost: replies sent before then are not believed."""
        self.remembered: dict[str, Remembered] = {}

    def generation(self, key: str) -> tuple[int, int]:
        return self._epoch, self._generations.get(key, 0)

    def unheld(self, key: str) -> bool:
        """True when `key` is known to have no hold, and this replica remembers none."""
        if not self.live or key not in self._unheld:
            return False
        return self.remembered_args(key)[0] == 0

    def saw_no_hold(self, key: str, generation: tuple[int, int]) -> None:
        if self.live and generation == self.generation(key):
            self._unheld.add(key)

    def changed(self, key: str, payload: str) -> None:
        if payload in NOT_HOLD_CHANGES:
            return
        self._generations[key] = self._generations.get(key, 0) + 1
        self._unheld.discard(key)

    def subscribed(self) -> None:
        """Redis confirmed the subscription: replies to scripts sent before are not believed
        (a hold set between such a script and the subscription was published to nobody)."""
        self.live = True
        self._epoch += 1

    def lost(self) -> None:
        self.live = False
        self._epoch += 1
        self._unheld.clear()

    # -- memory of holds -------------------------------------------------------------

    def remember(self, key: str, remaining_s: float, reason: str, linger_s: float) -> None:
        """Keep a hold until it ends; a shorter one never shortens it (the longest wins)."""
        until = time.monotonic() + remaining_s
        known = self.remembered.get(key)
        if known is None or known.until < until:
            self.remembered[key] = Remembered(until, reason, linger_s)

    def forget(self, key: str) -> None:
        self.remembered.pop(key, None)

    def remembered_args(self, key: str) -> tuple[int, str]:
        """(ms the remembered hold has left, its reason); (0, "") when none is in force."""
        known = self.remembered.get(key)
        if known is None:
            return 0, ""
        remaining = known.remaining_s(time.monotonic())
        if remaining <= 0:
            del self.remembered[key]
            return 0, ""
        return max(1, round(remaining * 1000)), known.reason

    def in_force(self) -> list[tuple[str, float, Remembered]]:
        """The remembered holds that have not ended: (key, seconds left, the hold)."""
        now = time.monotonic()
        return [
            (key, known.remaining_s(now), known)
            for key, known in list(self.remembered.items())
            if known.remaining_s(now) > 0
        ]
