"""The ``budget`` claim kind: USD of one scope's window, reserved then settled.

A claim's key is the scope and its window (``server:mem:day:2026-12-06``), so a new window
is a new key and starts from nothing. Args: (max USD, the worst case reserved, the
window's end in ms: Redis keeps the key a day past it). Each key holds what calls that
ended have spent (``spent``) and what calls in flight have reserved (``reserved``, and
each holder's share). A claim passes only if spent + reserved + its worst case fits the
limit; it is refused at once otherwise (no wait: a budget frees up only when its window
ends). Given back, a claim settles: its reservation goes, its real cost (the settlement,
0 when the attempt failed or its model is unpriced under ``on_unpriced = "allow"``) is
added to ``spent``. The same steps twice, in Python (memory store) and Lua (Redis).
"""

from __future__ import annotations

from agentcore.api import ClaimCall, FleetStore, Scalar

BUDGET = "budget"
KEEP_AFTER_WINDOW_MS = 86_400_000
"""How long Redis keeps a window's key after the window ended (`agentcore spend` of a
window just ended still reads it)."""


class BudgetKind:
    """The ``budget`` claim kind (`agentcore.api.ClaimKind`)."""

    name = BUDGET
    redis_keys = (BUDGET,)
    lease_s = None
    lua = (
        """{
      check = function(c)
        local spent = tonumber(redis.call('HGET', c.keys[1], 'spent') or '0')
        local reserved = tonumber(redis.call('HGET', c.keys[1], 'reserved') or '0')
        if spent + reserved + tonumber(c.args[2]) > tonumber(c.args[1]) then
          return {-1, 'budget', tostring(spent + reserved)}
        end
        return nil
      end,
      take = function(c)
        redis.call('HINCRBYFLOAT', c.keys[1], 'reserved', c.args[2])
        redis.call('HSET', c.keys[1], 'h:' .. c.holder, c.args[2])
        redis.call('PEXPIREAT', c.keys[1], tonumber(c.args[3]) + """
        + str(KEEP_AFTER_WINDOW_MS)
        + """)
        return 0
      end,
      release = function(c)
        local reserved = redis.call('HGET', c.keys[1], 'h:' .. c.holder)
        if not reserved then return end
        redis.call('HDEL', c.keys[1], 'h:' .. c.holder)
        redis.call('HINCRBYFLOAT', c.keys[1], 'reserved', -tonumber(reserved))
        redis.call('HINCRBYFLOAT', c.keys[1], 'spent', tonumber(c.settle[1] or '0'))
        c.wake()
      end,
    }"""
    )

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        state = call.state
        used = float(state.get("spent", 0.0)) + float(state.get("reserved", 0.0))
        if used + float(call.claim.args[1]) > float(call.claim.args[0]):
            return None, BUDGET, repr(used)
        return None

    def take(self, call: ClaimCall) -> Scalar:
        amount = float(call.claim.args[1])
        call.state["reserved"] = float(call.state.get("reserved", 0.0)) + amount
        call.state.setdefault("held", {})[call.holder] = amount
        return 0

    def release(self, call: ClaimCall) -> bool:
        reserved = call.state.get("held", {}).pop(call.holder, None)
        if reserved is None:
            return False
        call.state["reserved"] = float(call.state.get("reserved", 0.0)) - reserved
        real = float(call.settle[0]) if call.settle else 0.0
        call.state["spent"] = float(call.state.get("spent", 0.0)) + real
        return True

    def renew(self, call: ClaimCall) -> None:
        """Nothing leased: a reservation lasts until its attempt ends."""


async def spent(store: FleetStore, key: str) -> tuple[float, float]:
    """(spent, reserved) under `key`, from the store's books (no admission operation):
    what `agentcore spend` reports."""
    spent_usd, reserved_usd = await store.read_books(BUDGET, key, ("spent", "reserved"))
    return float(spent_usd or 0.0), float(reserved_usd or 0.0)
