"""The kernel renews a granted claim's lease only for a call that outlives a sixth of it:
the common short call is admitted and given back with no renewal (no store operation of
its own), while a long one is renewed, again and again."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from agentcore.api import Attempt, Claim, ClaimCall, PluginContext, Scalar, hookimpl
from agentcore.inference import Message, Request
from agentcore.kernel import Kernel
from agentcore.testing import STALL, ScriptedProvider, Stall, scripted_kind

LEASE_S = 6.0
"""Renewal rounds every second; a short call lasts 0.05 s of them."""


class Leased:
    """A claim kind that admits everything, with a lease, counting each holder's renewals."""

    name = "leased"
    redis_keys = ("leased",)
    lua = "{}"
    lease_s = LEASE_S

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.renewed: Counter[str] = Counter()

    def check(self, call: ClaimCall) -> tuple[float | None, str, str | None] | None:
        return None

    def take(self, call: ClaimCall) -> Scalar:
        self.taken.append(call.holder)
        return 0

    def release(self, call: ClaimCall) -> bool:
        return False

    def renew(self, call: ClaimCall) -> None:
        self.renewed[call.holder] += 1


class LeasedPlugin:
    def __init__(self) -> None:
        self.kind = Leased()

    @hookimpl
    def agentcore_start(self, context: PluginContext[None]) -> None:
        context.add_claim_kind(self.kind)

    @hookimpl
    def on_admission_claims(self, attempt: Attempt) -> list[Claim] | None:
        return [Claim("leased", "k")]


async def test_only_a_call_that_outlives_a_sixth_of_its_lease_is_renewed(
    tmp_path: Path, scripted_provider: ScriptedProvider
) -> None:
    """A long call (stalled) is renewed twice while short calls run back to back: a
    round of renewals always finds one in flight (renewing every grant at each round, as
    the kernel once did, renews some), but none is ever renewed."""
    plugin = LeasedPlugin()
    scripted_provider.script = [STALL] + [Stall(0.05) for _ in range(2000)]
    path = tmp_path / "agentcore.toml"
    path.write_text('[providers.fake]\nkind = "scripted"\n')
    plugins = {"leased": plugin, "scripted": scripted_kind(scripted_provider)}
    async with Kernel.load(path, environ={}, discover_plugins=False, plugins=plugins) as kernel:
        long = asyncio.create_task(kernel.complete(Request("fake:m1", [Message.user("long")])))
        await scripted_provider.stalled.wait()
        [long_holder] = plugin.kind.taken
        async with asyncio.timeout(30):
            while plugin.kind.renewed[long_holder] < 2:
                await kernel.complete(Request("fake:m1", [Message.user("short")]))
        long.cancel()
    assert len(plugin.kind.taken) > 20  # short calls ran all along
    assert set(plugin.kind.renewed) == {long_holder}, plugin.kind.renewed
