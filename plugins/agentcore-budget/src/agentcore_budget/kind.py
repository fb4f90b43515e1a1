"""The ``budget`` claim kind: USD of one scope's window, reserved then settled.

A claim's key is the scope and its window (``server:mem:day:2026-12-06``), so a new window
is a new key and starts from nothing. Args: (max USD, the worst case reserved in whole
nano-USD, `nano_usd`, the window's end in ms: Redis keeps the key a day past it). Each
key's books hold what calls that ended have spent (``spent``, USD) and what calls in
flight have reserved (``reserved_nano``: whole nano-USD, so a reservation is added and
taken back as integers, exactly and cheaply); beside them, who holds a reservation (on
Redis a set of its own, `HELD`; in memory ``held``, holder -> amount). A claim passes
only if spent + reserved + its worst case fits the limit; it is refused at once otherwise
(no wait: a budget frees up only when its window ends). Given back, a claim settles: its
reservation goes, its real cost (the settlement, 0 when the attempt failed or its model
is unpriced under ``on_unpriced = "allow"``) is added to ``spent``. The same steps twice,
in Python (memory store) and Lua (Redis)."""

from __future__ import annotations

import math

from agentcore.api import ClaimCall, FleetStore, Scalar

BUDGET = "budget"
HELD = "budget-held"
"""The Redis key family of each window's holders (a set): kept apart from the books,
whose hash stays two fields long, so no step scans one entry per call in flight."""
NANO = 1_000_000_000
"""Reservations are counted in nano-USD (int64 on Redis: up to 9.2e9 USD in flight)."""
KEEP_AFTER_WINDOW_MS = 86_400_000
"""How long Redis keeps a window's key after the window ended (`agentcore spend` of a
window just ended still reads it)."""


class BudgetKind:
    """The ``budget`` claim kind (`agentcore.api.ClaimKind`)."""

    name = BUDGET
    redis_keys = (BUDGET, HELD)
    lease_s = None
    lua = (
        """{
      -- c.keys[1]: the books (spent, reserved_nano), c.keys[2]: the holders' set.
      check = function(c)
        local v = redis.call('HMGET', c.keys[1], 'spent', 'reserved_nano')
        local used = tonumber(v[1] or '0') + tonumber(v[2] or '0') / """
        + str(NANO)
        + """
        if used + tonumber(c.args[2]) / """
        + str(NANO)
        + """ > tonumber(c.args[1]) then
          return {-1, 'budget', tostring(used)}
        end
        -- Expiries are set only when a take makes a key: the books at the window's first
        -- take, the holders' set when nothing is reserved (it is empty, or holds calls
        -- that reserved 0: setting the same expiry again does no harm).
        c.new, c.idle = not v[2], tonumber(v[2] or '0') == 0
        return nil
      end,
      take = function(c)
        local expires = c.args[3] + """
        + str(KEEP_AFTER_WINDOW_MS)
        + """
        redis.call('HINCRBY', c.keys[1], 'reserved_nano', c.args[2])
        if c.new then redis.call('PEXPIREAT', c.keys[1], expires) end
        redis.call('SADD', c.keys[2], c.holder)
        if c.idle then redis.call('PEXPIREAT', c.keys[2], expires) end
        return 0
      end,
      release = function(c)
        -- Only a holder gives back (a grant given back twice, or never granted, takes
        -- nothing); what it reserved is its claim's amount, as sent (negated as text).
        if redis.call('SREM', c.keys[2], c.holder) == 0 then return end
        redis.call('HINCRBY', c.keys[1], 'reserved_nano', '-' .. c.args[2])
        local real = c.settle[1]
        if real and tonumber(real) ~= 0 then
          redis.call('HINCRBYFLOAT', c.keys[1], 'spent', real)
        end
        -- No wake-up: no call waits on a budget (a refusal fails at once, and the kernel
        -- watches no key of a claim that cannot wait), so a release frees nobody.
      end,
    }"""
    )

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        state = call.state
        used = float(state.get("spent", 0.0)) + int(state.get("reserved_nano", 0)) / NANO
        if used + int(call.claim.args[1]) / NANO > float(call.claim.args[0]):
            return None, BUDGET, repr(used)
        return None

    def take(self, call: ClaimCall) -> Scalar:
        amount = int(call.claim.args[1])
        call.state["reserved_nano"] = int(call.state.get("reserved_nano", 0)) + amount
        call.state.setdefault("held", {})[call.holder] = amount
        return 0

    def release(self, call: ClaimCall) -> bool:
        held = call.state.get("held", {})
        reserved = held.pop(call.holder, None)
        if reserved is None:
            return False
        call.state["reserved_nano"] = int(call.state.get("reserved_nano", 0)) - reserved
        real = float(call.settle[0]) if call.settle else 0.0
        call.state["spent"] = float(call.state.get("spent", 0.0)) + real
        return False  # as in Lua: no call waits on a budget (see `lua`)

    def renew(self, call: ClaimCall) -> None:
        """Nothing leased: a reservation lasts until its attempt ends."""


def nano_usd(usd: float) -> int:
    """`usd` in whole nano-USD, rounded up: a reservation is never less than its worst case."""
    return math.ceil(usd * NANO)


async def spent(store: FleetStore, key: str) -> tuple[float, float]:
    """(spent, reserved) USD under `key`, from the store's books (no admission operation):
    what `agentcore spend` reports."""
    books = await store.read_books(BUDGET, key, ("spent", "reserved_nano"))
    return float(books[0] or 0.0), int(books[1] or 0) / NANO
