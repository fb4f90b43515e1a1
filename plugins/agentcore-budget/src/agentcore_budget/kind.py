"""The ``budget`` claim kind: USD of one scope's window, reserved then settled, each
reservation leased.

A claim's key is the scope and its window (``server:mem:day:2026-12-06``), so a new window
is a new key and starts from nothing. Args: (max USD, the worst case reserved in whole
nano-USD, `nano_usd`, the window's end in ms: Redis keeps the keys a day past it, the
reservation's lease in ms). Each key's books hold what calls that ended have spent
(``spent``, USD) and what calls in flight have reserved (``reserved_nano``: whole
nano-USD, so a reservation is added and taken back as integers, exactly and cheaply).
Beside them, each reservation with its lease end (on Redis a sorted set of its own,
`LEASES`, member ``AMOUNT HOLDER`` scored by the lease end; in memory ``held``, holder
-> [amount, lease end]), and the holders whose lease lapsed (`LAPSED`).

A claim passes only if spent + reserved + its worst case fits the limit; it is refused
at once otherwise (no wait: a budget frees up only when its window ends, or a lapsed
reservation goes). The kernel renews a reservation's lease while its attempt runs (every
third of `lease_s`, only for calls that outlive a sixth of it); a replica that dies stops
renewing, and its reservations lapse: a check that would refuse (and each renewal) first
drops at most `LAPSES_PER_STEP` lapsed ones, taking back exactly what each reserved, so
no step scans every call in flight, and a call that fits does no more than unleased.
Given back, a claim settles: its reservation goes, its real cost (the settlement,
`Enforcer._settle`'s: what the reply cost, or what a call that ended without one was
billed; 0 for an error answer, or a model unpriced under ``on_unpriced = "allow"``) is
added to ``spent``. Given back after its lease lapsed, the reservation is
gone already (nothing is taken back twice) but the real cost is still added, once: the
money was spent. Given back twice, or never granted, it changes nothing. The same steps
twice, in Python (memory store) and Lua (Redis)."""

from __future__ import annotations

import heapq
import math
from collections.abc import MutableMapping
from typing import Any

from agentcore.api import Claim, ClaimCall, FleetStore, Scalar
from agentcore_budget import DEFAULT_LEASE_S

BUDGET = "budget"
LEASES = "budget-lease"
"""The Redis key family of each window's reservations (a sorted set, by lease end): kept
apart from the books, whose hash stays two fields long. (Not ``budget-held``, the set an
unleased release wrote: a fleet mid-deploy runs both without a key of the wrong type.)"""
LAPSED = "budget-lapsed"
"""The Redis key family of each window's holders whose lease lapsed (a set): their late
release still adds the real cost, once."""
NANO = 1_000_000_000
"""Reservations are counted in nano-USD (int64 on Redis: up to 9.2e9 USD in flight)."""
KEEP_AFTER_WINDOW_MS = 86_400_000
"""How long Redis keeps a window's keys after the window ended (`agentcore spend` of a
window just ended still reads it)."""
LAPSES_PER_STEP = 8
"""Lapsed reservations dropped at most per refused check or renewal: bounded work."""
LAPSES_PER_REPORT = 1000
"""Lapsed reservations dropped at most as `spent` reads a window (`agentcore spend`)."""
REPORTER = "agentcore-spend"
"""The holder `spent` sweeps as: it holds nothing, so its renewal extends nothing."""

_LUA = """(function()
  -- c.keys[1]: the books (spent, reserved_nano); c.keys[2]: the reservations, a sorted
  -- set of 'AMOUNT HOLDER' by lease end (ms); c.keys[3]: the holders whose lease lapsed.
  -- args: max USD, amount (nano-USD), window end (ms), lease (ms)[, lapses to drop].
  local function lapse(c, n)
    local gone = redis.call('ZRANGEBYSCORE', c.keys[2], '-inf', c.now, 'LIMIT', 0, n)
    if #gone == 0 then return false end
    for _, member in ipairs(gone) do
      local amount, holder = string.match(member, '^(%S+) (.*)$')
      if amount ~= '0' then
        redis.call('HINCRBY', c.keys[1], 'reserved_nano', '-' .. amount)
      end
      redis.call('SADD', c.keys[3], holder)
    end
    redis.call('ZREM', c.keys[2], unpack(gone))
    redis.call('PEXPIREAT', c.keys[3], c.args[3] + @KEEP@)
    return true
  end
  local function member(c) return c.args[2] .. ' ' .. c.holder end
  return {
    check = function(c)
      local v = redis.call('HMGET', c.keys[1], 'spent', 'reserved_nano')
      local used = tonumber(v[1] or '0') + tonumber(v[2] or '0') / @NANO@
      local need, limit = tonumber(c.args[2]) / @NANO@, tonumber(c.args[1])
      -- Only a call that does not fit looks for lapsed reservations (a lapsed one only
      -- makes the budget stricter): the common path does no more than it did unleased.
      if used + need > limit and lapse(c, @LAPSES@) then
        v = redis.call('HMGET', c.keys[1], 'spent', 'reserved_nano')
        used = tonumber(v[1] or '0') + tonumber(v[2] or '0') / @NANO@
      end
      if used + need > limit then return {-1, 'budget', tostring(used)} end
      -- Expiries are set only when a take makes a key: the books at the window's first
      -- take, the reservations when nothing is reserved (the set is empty, or holds calls
      -- that reserved 0: setting the same expiry again does no harm).
      c.new, c.idle = not v[2], tonumber(v[2] or '0') == 0
      return nil
    end,
    take = function(c)
      local expires = c.args[3] + @KEEP@
      redis.call('HINCRBY', c.keys[1], 'reserved_nano', c.args[2])
      if c.new then redis.call('PEXPIREAT', c.keys[1], expires) end
      redis.call('ZADD', c.keys[2], c.now + tonumber(c.args[4]), member(c))
      if c.idle then redis.call('PEXPIREAT', c.keys[2], expires) end
      return 0
    end,
    release = function(c)
      -- A holder gives back its reservation (what it reserved is its claim's amount, as
      -- sent, negated as text: exact); one whose lease lapsed has none left to give back,
      -- but what it spent still counts. Anyone else (given back twice, never granted)
      -- changes nothing.
      if redis.call('ZREM', c.keys[2], member(c)) == 1 then
        if c.args[2] ~= '0' then
          redis.call('HINCRBY', c.keys[1], 'reserved_nano', '-' .. c.args[2])
        end
      elseif redis.call('SREM', c.keys[3], c.holder) == 0 then
        return
      end
      local real = c.settle[1]
      if real and tonumber(real) ~= 0 then
        redis.call('HINCRBYFLOAT', c.keys[1], 'spent', real)
      end
      -- No wake-up: no call waits on a budget (a refusal fails at once, and the kernel
      -- watches no key of a claim that cannot wait), so a release frees nobody.
    end,
    renew = function(c)
      lapse(c, tonumber(c.args[5] or @LAPSES@))
      -- XX: a lease that lapsed stays lapsed (renewing it would reserve unchecked).
      redis.call('ZADD', c.keys[2], 'XX', c.now + tonumber(c.args[4]), member(c))
    end,
  }
end)()"""


class BudgetKind:
    """The ``budget`` claim kind (`agentcore.api.ClaimKind`); `lease_s` is how long a
    reservation lasts unrenewed (``[budget] reservation_lease_s``: the kernel renews it
    every third of that)."""

    name = BUDGET
    redis_keys = (BUDGET, LEASES, LAPSED)
    lua = (
        _LUA.replace("@KEEP@", str(KEEP_AFTER_WINDOW_MS))
        .replace("@LAPSES@", str(LAPSES_PER_STEP))
        .replace("@NANO@", str(NANO))
    )

    def __init__(self, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.lease_s = lease_s

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        need, limit = int(call.claim.args[1]) / NANO, float(call.claim.args[0])
        used = _used(call.state)
        if used + need > limit and _lapse(call, LAPSES_PER_STEP):  # as in Lua: see `lua`
            used = _used(call.state)
        if used + need > limit:
            return None, BUDGET, repr(used)
        return None

    def take(self, call: ClaimCall) -> Scalar:
        amount = int(call.claim.args[1])
        end = call.now_ms + int(call.claim.args[3])
        call.state["reserved_nano"] = int(call.state.get("reserved_nano", 0)) + amount
        call.state.setdefault("held", {})[call.holder] = [amount, end]
        _push(call.state, end, call.holder)
        return 0

    def release(self, call: ClaimCall) -> bool:
        held = call.state.get("held", {})
        reserved = held.pop(call.holder, None)
        if reserved is not None:
            call.state["reserved_nano"] = int(call.state.get("reserved_nano", 0)) - reserved[0]
        elif call.holder in call.state.get("lapsed", ()):
            call.state["lapsed"].discard(call.holder)
        else:
            return False
        real = float(call.settle[0]) if call.settle else 0.0
        call.state["spent"] = float(call.state.get("spent", 0.0)) + real
        return False  # as in Lua: no call waits on a budget (see `lua`)

    def renew(self, call: ClaimCall) -> None:
        args = call.claim.args
        _lapse(call, int(args[4]) if len(args) > 4 else LAPSES_PER_STEP)
        reserved = call.state.get("held", {}).get(call.holder)
        if reserved is not None:  # as ZADD XX: a lapsed lease stays lapsed
            reserved[1] = call.now_ms + int(args[3])
            _push(call.state, reserved[1], call.holder)


def _used(state: MutableMapping[str, Any]) -> float:
    return float(state.get("spent", 0.0)) + int(state.get("reserved_nano", 0)) / NANO


def _push(state: MutableMapping[str, Any], end: int, holder: str) -> None:
    """Note `holder`'s lease end in ``ends``, a heap of (lease end, holder) with an entry
    per take and renewal (the memory store's sorted set). An entry that is no longer its
    holder's lease end (renewed since, or given back) stays until it comes up; once they
    outnumber the reservations, the heap is made again from ``held`` (amortised: O(1) a
    step)."""
    ends: list[tuple[int, str]] = state.setdefault("ends", [])
    heapq.heappush(ends, (end, holder))
    held: dict[str, list[int]] = state["held"]
    if len(ends) > 2 * len(held) + 64:
        ends[:] = [(reserved[1], h) for h, reserved in held.items()]
        heapq.heapify(ends)


def _lapse(call: ClaimCall, n: int) -> bool:
    """Drop at most `n` reservations whose lease ended (as Lua's ``lapse``), oldest first;
    True when there were any. An entry of ``ends`` no longer its holder's lease end is
    dropped as it comes up, and counts in `n`, so the work stays bounded."""
    ends: list[tuple[int, str]] | None = call.state.get("ends")
    held: dict[str, list[int]] = call.state.get("held", {})
    dropped = False
    while ends and n > 0 and ends[0][0] <= call.now_ms:
        n -= 1
        end, holder = heapq.heappop(ends)
        reserved = held.get(holder)
        if reserved is None or reserved[1] != end:
            continue
        del held[holder]
        call.state["reserved_nano"] = int(call.state.get("reserved_nano", 0)) - reserved[0]
        call.state.setdefault("lapsed", set()).add(holder)
        dropped = True
    return dropped


def nano_usd(usd: float) -> int:
    """`usd` in whole nano-USD, rounded up: a reservation is never less than its worst case."""
    return math.ceil(usd * NANO)


def lease_ms(lease_s: float) -> int:
    """A lease in whole ms, at least 1 (a claim's last arg)."""
    return max(1, round(lease_s * 1000))


async def spent(store: FleetStore, key: str, window_end_ms: int) -> tuple[float, float]:
    """(spent, reserved) USD under `key`, from the store's books, after dropping (up to
    `LAPSES_PER_REPORT`) lapsed reservations so they are not reported as reserved: what
    `agentcore spend` reports. Admits nothing: a renewal of a holder that holds nothing.
    The store must know the budget kind (the kernel's `context.fleet` does)."""
    sweep = Claim(BUDGET, key, (0.0, 0, window_end_ms, 1, LAPSES_PER_REPORT))
    await store.renew([sweep], REPORTER)
    books = await store.read_books(BUDGET, key, ("spent", "reserved_nano"))
    return float(books[0] or 0.0), int(books[1] or 0) / NANO
