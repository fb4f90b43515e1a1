"""A third-party admission claim kind, for tests and as the worked example of one.

`Quota` is what a budget is made of: at most ``limit`` units in use per key; a claim
reserves ``amount`` at admission and, given back, settles to the real amount (the
attempt's `Claim.settle`; nothing settled: 0, the reservation returned). It lives
outside the kernel and says what it means twice, in Python (the memory store) and in
Lua (Redis), as every `agentcore.api.ClaimKind` does. `QuotaPlugin` contributes a quota
claim per provider (``limits``: provider -> (limit, amount, settled)).
"""

from __future__ import annotations

from collections.abc import Mapping

from agentcore.api import (
    Attempt,
    AttemptEnd,
    Claim,
    ClaimCall,
    FleetStore,
    PluginContext,
    Scalar,
    hookimpl,
)

QUOTA = "quota"


class Quota:
    """The ``quota`` claim kind. Args: (limit, amount). Settlement: (real amount,)."""

    name = QUOTA
    redis_keys = ("quota",)
    lease_s = None
    lua = """{
      check = function(c)
        local used = tonumber(redis.call('HGET', c.keys[1], 'used') or '0')
        if used + tonumber(c.args[2]) > tonumber(c.args[1]) then
          return {-1, 'quota', tostring(used)}
        end
        return nil
      end,
      take = function(c)
        redis.call('HINCRBYFLOAT', c.keys[1], 'used', c.args[2])
        redis.call('HSET', c.keys[1], 'h:' .. c.holder, c.args[2])
        return 0
      end,
      release = function(c)
        local reserved = redis.call('HGET', c.keys[1], 'h:' .. c.holder)
        if not reserved then return end
        redis.call('HDEL', c.keys[1], 'h:' .. c.holder)
        local real = tonumber(c.settle[1] or '0')
        redis.call('HINCRBYFLOAT', c.keys[1], 'used', real - tonumber(reserved))
        c.wake()
      end,
    }"""

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        used = float(call.state.get("used", 0.0))
        if used + float(call.claim.args[1]) > float(call.claim.args[0]):
            return None, QUOTA, f"{used:g}"
        return None

    def take(self, call: ClaimCall) -> Scalar:
        amount = float(call.claim.args[1])
        call.state["used"] = float(call.state.get("used", 0.0)) + amount
        call.state.setdefault("held", {})[call.holder] = amount
        return 0

    def release(self, call: ClaimCall) -> bool:
        reserved = call.state.get("held", {}).pop(call.holder, None)
        if reserved is None:
            return False
        real = float(call.settle[0]) if call.settle else 0.0
        call.state["used"] = float(call.state.get("used", 0.0)) + real - reserved
        return True

    def renew(self, call: ClaimCall) -> None:
        """Nothing leased."""


async def used(store: FleetStore, key: str) -> float:
    """The units in use under `key` (memory or Redis store), for assertions."""
    [value] = await store.read_books(QUOTA, key, ("used",))
    return float(value or 0.0)


class QuotaPlugin:
    """Adds the ``quota`` kind at start and a quota claim for every attempt to a provider
    in `limits` (provider -> (limit, amount reserved, amount settled))."""

    def __init__(self, limits: Mapping[str, tuple[float, float, float]]) -> None:
        self.limits = dict(limits)
        self.refusals: list[str] = []

    @hookimpl
    def agentcore_start(self, context: PluginContext[None]) -> None:
        context.add_claim_kind(Quota())

    @hookimpl
    def on_admission_claims(self, attempt: Attempt) -> list[Claim] | None:
        limit = self.limits.get(attempt.provider)
        if limit is None:
            return None
        total, amount, settled = limit

        def settle(end: AttemptEnd) -> tuple[Scalar, ...]:
            return (settled,) if end.response is not None else ()

        return [
            Claim(
                QUOTA,
                f"provider:{attempt.provider}",
                (total, amount),
                max_wait_s=0.0,
                max_wait_setting="[quota] max_wait_s",
                settle=settle,
            )
        ]


__all__ = ["QUOTA", "Quota", "QuotaPlugin", "used"]
