"""The one Lua script that decides a call's whole claim set on Redis (`agentcore.fleet.claims`).

The built-in kinds (hold, slots, window) and every plugin kind are Lua tables of four
steps (check, take, release, renew); `compose` puts them in one script, and a call's
claims travel as its KEYS and ARGV, so admitting, releasing and renewing any set of
claims is one EVALSHA. ARGV: wake-channel prefix, op (``admit``, ``release``,
``renew``), holder, then per claim: kind, key count, arg count, settle count, claim key,
the args, the settlement. KEYS: each claim's keys, in order.

``admit`` returns ``{0, take results...}`` or ``{i, retry_ms or -1, detail, info}`` for
the first claim i (1-based) that refused: checks all run before any take, so a refused
call took nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentcore.fleet.claims import HOLD, SLOTS, WINDOW, Claim, ClaimKind, Scalar

HOLD_LUA = """{
  -- args: probe lease ms, remembered remaining ms, remembered reason, linger ms
  check = function(c)
    local v = redis.call('HMGET', c.keys[1], 'until', 'reason', 'probe', 'probe_at')
    local remembered = tonumber(c.args[2] or '0')
    if not v[1] and remembered > 0 then
      -- A hold this replica saw, still in force, is gone: Redis lost it (a restart).
      -- Write it back before deciding, so no call passes inside its stated wait.
      local untl = c.now + remembered
      redis.call('HSET', c.keys[1], 'until', string.format('%d', untl), 'reason', c.args[3],
        'since', string.format('%d', c.now), 'linger', c.args[4])
      redis.call('PEXPIRE', c.keys[1], math.floor(remembered + tonumber(c.args[4])))
      return {remembered, 'held', c.args[3]}
    end
    if not v[1] then return nil end
    local untl = tonumber(v[1])
    if untl > c.now then return {untl - c.now, 'held', v[2]} end
    if v[3] and v[3] ~= c.holder and c.now - tonumber(v[4]) < tonumber(c.args[1]) then
      return {-1, 'probe', v[2]}
    end
    return nil
  end,
  take = function(c)
    local v = redis.call('HMGET', c.keys[1], 'until', 'linger')
    if not v[1] or tonumber(v[1]) > c.now then return 0 end
    redis.call('HSET', c.keys[1], 'probe', c.holder, 'probe_at', string.format('%d', c.now))
    redis.call('PEXPIRE', c.keys[1], math.floor(tonumber(c.args[1]) + tonumber(v[2] or '0')))
    return 1
  end,
  release = function(c)
    if redis.call('HGET', c.keys[1], 'probe') == c.holder then
      redis.call('HDEL', c.keys[1], 'probe', 'probe_at')
      c.wake()
    end
  end,
  renew = function(c)
    local v = redis.call('HMGET', c.keys[1], 'probe', 'linger')
    if v[1] == c.holder then
      redis.call('HSET', c.keys[1], 'probe_at', string.format('%d', c.now))
      redis.call('PEXPIRE', c.keys[1], math.floor(tonumber(c.args[1]) + tonumber(v[2] or '0')))
    end
  end,
}"""

SLOTS_LUA = """{
  -- args: slots, lease ms
  check = function(c)
    redis.call('ZREMRANGEBYSCORE', c.keys[1], '-inf', c.now)
    if redis.call('ZSCORE', c.keys[1], c.holder) then return nil end
    if redis.call('ZCARD', c.keys[1]) >= tonumber(c.args[1]) then return {-1, 'slots'} end
    return nil
  end,
  take = function(c)
    local lease_end = c.now + tonumber(c.args[2])
    redis.call('ZADD', c.keys[1], lease_end, c.holder)
    local last = redis.call('ZRANGE', c.keys[1], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', c.keys[1], math.floor(tonumber(last[2])) + 1)
    return 0
  end,
  release = function(c)
    -- Only a set that was full can have refused a waiter: a release below the limit
    -- publishes nothing (a wake-up costs every replica a message; waiters also poll).
    local full = redis.call('ZCARD', c.keys[1]) >= tonumber(c.args[1])
    if redis.call('ZREM', c.keys[1], c.holder) == 1 and full then c.wake() end
  end,
  renew = function(c)
    local lease_end = c.now + tonumber(c.args[2])
    if redis.call('ZADD', c.keys[1], 'XX', 'CH', lease_end, c.holder) == 1 then
      local last = redis.call('ZRANGE', c.keys[1], -1, -1, 'WITHSCORES')
      redis.call('PEXPIREAT', c.keys[1], math.floor(tonumber(last[2])) + 1)
    end
  end,
}"""

WINDOW_LUA = """{
  -- args: takes per window, window ms
  check = function(c)
    local window = tonumber(c.args[2])
    redis.call('ZREMRANGEBYSCORE', c.keys[1], '-inf', c.now - window)
    c.n = redis.call('ZCARD', c.keys[1])
    if c.n >= tonumber(c.args[1]) then
      local oldest = redis.call('ZRANGE', c.keys[1], 0, 0, 'WITHSCORES')
      return {math.max(1, tonumber(oldest[2]) + window - c.now), 'window'}
    end
    return nil
  end,
  take = function(c)
    -- One member per take, even a holder's second in the same ms: the count the check
    -- saw, and the claim's place in the call (two claims of one call on one key differ).
    redis.call('ZADD', c.keys[1], c.now, c.holder .. '@' .. c.now .. '#' .. c.n .. '.' .. c.i)
    redis.call('PEXPIRE', c.keys[1], tonumber(c.args[2]))
    return 0
  end,
}"""

BUILT_IN: dict[str, tuple[tuple[str, ...], str]] = {
    HOLD: (("hold",), HOLD_LUA),
    SLOTS: (("slots",), SLOTS_LUA),
    WINDOW: (("window",), WINDOW_LUA),
}
"""Each built-in kind's Redis key families and Lua table."""

_HEAD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wake_prefix, op, holder = ARGV[1], ARGV[2], ARGV[3]
local K = {}
"""

_BODY = """
local claims = {}
local a, k = 4, 1
while a <= #ARGV do
  local kind, key = ARGV[a], ARGV[a + 4]
  local nk, na, ns = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local c = {keys = {}, args = {}, settle = {}, holder = holder, now = now, key = key}
  c.step, c.i = K[kind], #claims + 1
  if not c.step then return redis.error_reply('no claim kind ' .. kind) end
  for i = 1, nk do c.keys[i] = KEYS[k]; k = k + 1 end
  a = a + 5
  for i = 1, na do c.args[i] = ARGV[a]; a = a + 1 end
  for i = 1, ns do c.settle[i] = ARGV[a]; a = a + 1 end
  c.wake = function() redis.call('PUBLISH', wake_prefix .. key, kind) end
  claims[#claims + 1] = c
end
if op == 'admit' then
  for i, c in ipairs(claims) do
    if c.step.check then
      local r = c.step.check(c)
      if r then return {i, math.floor(r[1]), r[2], r[3] or false} end
    end
  end
  local out = {0}
  for _, c in ipairs(claims) do
    local r = 0
    if c.step.take then r = c.step.take(c) or 0 end
    out[#out + 1] = r
  end
  return out
end
for _, c in ipairs(claims) do
  if c.step[op] then c.step[op](c) end
end
return {0}
"""


def compose(kinds: Iterable[ClaimKind]) -> str:
    """The script for the built-in kinds and `kinds` (plugin kinds, by name)."""
    parts = [_HEAD]
    for name, (_, lua) in BUILT_IN.items():
        parts.append(f"K[{_lua_string(name)}] = {lua}\n")
    for kind in sorted(kinds, key=lambda k: k.name):
        parts.append(f"K[{_lua_string(kind.name)}] = {kind.lua}\n")
    parts.append(_BODY)
    return "".join(parts)


def _lua_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def families(claim: Claim, kinds: dict[str, ClaimKind]) -> tuple[str, ...]:
    """The Redis key families of `claim`'s kind."""
    built_in = BUILT_IN.get(claim.kind)
    if built_in is not None:
        return built_in[0]
    kind = kinds.get(claim.kind)
    if kind is None:
        raise ValueError(f"no claim kind {claim.kind!r} is registered with the fleet store")
    return kind.redis_keys


def encode(
    claims: Sequence[tuple[Claim, tuple[str, ...], tuple[Scalar, ...]]],
    wake_prefix: str,
    op: str,
    holder: str,
    settles: Sequence[tuple[Scalar, ...]] = (),
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV for one call of the script: each claim with its full key names and
    args (`claims`), and its settlement on release."""
    keys: list[str] = []
    argv: list[Any] = [wake_prefix, op, holder]
    for index, (claim, full_keys, args) in enumerate(claims):
        settle = settles[index] if index < len(settles) else ()
        keys.extend(full_keys)
        argv.extend((claim.kind, len(full_keys), len(args), len(settle), claim.key))
        argv.extend(args)
        argv.extend(settle)
    return keys, argv


__all__ = ["BUILT_IN", "compose", "encode", "families"]
