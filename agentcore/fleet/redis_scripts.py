"""The Redis store's own Lua scripts (`agentcore.fleet.redis_store`), beside the composed
admission script (`agentcore.fleet.admit_script`): the hold, probe and limit primitives of
`FleetStore`, and the books read. Each is one atomic script; `ScriptSet` registers them all
on a client (their SHA1s are what the store sends).
"""

from __future__ import annotations

from typing import Any

from redis.commands.core import AsyncScript

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# Each returns {now, until, reason, since, probe} (a missing hold: {now}) after a flag
# where the operation has a verdict.
HOLD_GET = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'until', 'reason', 'since', 'probe')
return {now, v[1], v[2], v[3], v[4]}
"""
)

HOLD_SET = (
    _NOW
    + """
local untl = now + tonumber(ARGV[1])
local v = redis.call('HMGET', KEYS[1], 'until', 'reason', 'since', 'probe')
if v[1] and tonumber(v[1]) >= untl then
  return {0, now, v[1], v[2], v[3], v[4]}
end
local since = v[3] or string.format('%d', now)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'until', string.format('%d', untl), 'reason', ARGV[2],
  'since', since, 'linger', ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.floor(untl - now + tonumber(ARGV[3])))
redis.call('PUBLISH', ARGV[4], 'hold')
return {1, now, string.format('%d', untl), ARGV[2], since, false}
"""
)

PROBE_CLAIM = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'until', 'probe', 'probe_at', 'linger')
if not v[1] or tonumber(v[1]) > now then return 0 end
local lease = tonumber(ARGV[2])
if v[2] and v[2] ~= ARGV[1] and now - tonumber(v[3]) < lease then return 0 end
redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_at', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], math.floor(lease + tonumber(v[4] or 0)))
return 1
"""
)

PROBE_DROP = """
if redis.call('HGET', KEYS[1], 'probe') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'probe', 'probe_at')
redis.call('PUBLISH', ARGV[2], 'probe')
return 1
"""

HOLD_RELEASE = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'until', 'reason', 'since', 'probe')
if not v[1] or tonumber(v[1]) > now then return {now} end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'release')
return {now, v[1], v[2], v[3], v[4]}
"""
)


_EXPIRE_AT_LAST_LEASE = """
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])) + 1) end
"""

# KEYS: slots, window. ARGV: holder, slots, lease ms, per window, window ms (a limit of 0 is
# not checked). Returns {0} (taken), {1} (no slot) or {2, ms until the window has room}.
TAKE = (
    _NOW
    + """
local slots, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local per_window, window = tonumber(ARGV[4]), tonumber(ARGV[5])
local taken = 0
if per_window > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  taken = redis.call('ZCARD', KEYS[2])
  if taken >= per_window then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {2, math.max(1, tonumber(oldest[2]) + window - now)}
  end
end
if slots > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= slots then
    return {1}
  end
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
"""
    + _EXPIRE_AT_LAST_LEASE
    + """
end
if per_window > 0 then
  -- One member per take, even a holder's second in the same ms (the memory store counts
  -- each take too).
  redis.call('ZADD', KEYS[2], now, ARGV[1] .. '@' .. now .. '#' .. taken)
  redis.call('PEXPIRE', KEYS[2], window)
end
return {0}
"""
)

SLOT_RENEW = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease_end = now + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', lease_end, ARGV[i]) end
"""
    + _EXPIRE_AT_LAST_LEASE
    + """
return 1
"""
)

SLOT_RELEASE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[2], 'slot')
return 1
"""

BOOKS_READ = """
return redis.call('HMGET', KEYS[1], unpack(ARGV))
"""


class ScriptSet:
    """The primitives' scripts, registered on one client (redis-py's `AsyncScript`: loaded
    again by itself when Redis answers NOSCRIPT)."""

    def __init__(self, client: Any) -> None:
        register = client.register_script
        self.hold_get: AsyncScript = register(HOLD_GET)
        self.hold_set: AsyncScript = register(HOLD_SET)
        self.probe_claim: AsyncScript = register(PROBE_CLAIM)
        self.probe_drop: AsyncScript = register(PROBE_DROP)
        self.hold_release: AsyncScript = register(HOLD_RELEASE)
        self.take: AsyncScript = register(TAKE)
        self.slot_renew: AsyncScript = register(SLOT_RENEW)
        self.slot_release: AsyncScript = register(SLOT_RELEASE)
        self.books_read: AsyncScript = register(BOOKS_READ)


__all__ = ["ScriptSet"]
