"""agentcore's spend budgets (entry point ``budget``): USD per MCPL server and per
provider in each hour, day or month (UTC), fleet-wide through the ``[fleet]`` store.

- Enforced at the kernel's admission step: each attempt under a budget claims its worst
  case (a ``budget`` claim per scope, `BudgetKind`): its input's size in bytes (no
  tokenizer counts fewer tokens than bytes) as input tokens, every one at the model's
  dearest input rate, plus ``max_tokens`` of output. The store grants every claim of the
  call at once or none, so concurrent calls on many replicas can never together spend
  past a budget. When the attempt ends the claim settles to the real cost
  (`Response.cost_usd`; for a call cancelled or cut, what the provider billed: its
  reported usage, else its worst case; 0 for an error answer).
- A refused call fails at once, before any provider traffic: an `InferenceError`
  (code ``budget_exceeded``) naming the budget, what was spent (and reserved by calls in
  flight), the limit and when the window resets; its `data` is what an MCPL server gets
  with the -32603: ``{"reason": "budget", "scope", "spentUsd", "maxUsd", "resetsAt"}``.
  Each refusal is a ``budget:refused`` trace.
- A model with no known price under a budget: ``on_unpriced = "refuse"`` (the default)
  refuses it the same way (``data.unpriced`` names the model); ``"allow"`` lets it
  through unreserved, and it costs the budget nothing.
- Each reservation is leased (``reservation_lease_s``) and renewed while its attempt
  runs: a replica that dies mid-call stops renewing, and its reservations lapse for the
  rest of the fleet to use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentcore.api import (
    Attempt,
    Claim,
    FleetStore,
    PluginContext,
    Pricer,
    ProviderName,
    Section,
    SettingsSection,
    hookimpl,
)

if TYPE_CHECKING:
    from agentcore_budget.enforce import Enforcer, Scope, input_bound, window_of
    from agentcore_budget.kind import BUDGET, BudgetKind

# The enforcement (`agentcore_budget.enforce`) and the claim kind (`.kind`) load when a
# budget is configured (at start) or first asked about: a host with none never needs them.
_LAZY = {
    "BUDGET": ("agentcore_budget.kind", "BUDGET"),
    "BudgetKind": ("agentcore_budget.kind", "BudgetKind"),
    "Scope": ("agentcore_budget.enforce", "Scope"),
    "input_bound": ("agentcore_budget.enforce", "input_bound"),
    "window_of": ("agentcore_budget.enforce", "window_of"),
}

REFUSED_TRACE = "budget:refused"
BUDGET_EXCEEDED = "budget_exceeded"
"""`InferenceError.code` of a call a budget refused."""
PER_MESSAGE_TOKENS = 16
"""Added per message (and once for the request) to the input bound: role and framing."""
PER_BLOCK_TOKENS = 8
"""Added per content block and per tool to the input bound: its framing."""

DEFAULT_LEASE_S = 60.0
"""``reservation_lease_s``'s default (`BudgetKind`'s too)."""

Window = Literal["hour", "day", "month"]


class Limit(Section):
    """``[budget.servers.NAME]`` / ``[budget.providers.NAME]``."""

    max_usd: float = Field(gt=0)
    """USD this scope may spend in one window, across the fleet."""


class BudgetSettings(Section):
    """``[budget]``."""

    window: Window = "day"
    """``hour``, ``day`` or ``month``, on UTC boundaries."""
    on_unpriced: Literal["refuse", "allow"] = "refuse"
    """A call under a budget to a model with no known price: refused, or let through."""
    servers: dict[str, Limit] = Field(default_factory=dict)
    """An MCPL server's ``inference/request`` spend, by server name."""
    providers: dict[ProviderName, Limit] = Field(default_factory=dict)
    """Everything a provider serves (the host's own turns too), by provider name."""
    reservation_lease_s: float = Field(default=DEFAULT_LEASE_S, gt=0)
    """How long a call's reservation lasts unrenewed: renewed every third of it while the
    call runs, so a dead replica's reservations lapse this long after its last renewal."""


class Budget:
    """The plugin object; the kernel makes one per kernel. `clock` (seconds since the
    epoch) decides the window: a test moves it to the next window without sleeping."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.settings = BudgetSettings.model_construct()
        self.context: PluginContext[BudgetSettings] | None = None
        self.pricer: Pricer | None = None
        self._enforcer: Enforcer | None = None

    @property
    def _budgets(self) -> bool:
        return bool(self.settings.servers or self.settings.providers)

    def _enforce(self) -> Enforcer:
        if self._enforcer is None:
            from agentcore_budget.enforce import Enforcer

            self._enforcer = Enforcer(self)
        return self._enforcer

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("budget", BudgetSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[BudgetSettings]) -> None:
        self.context = context
        self.settings = context.settings
        self.pricer = context.pricer or Pricer({})
        if self._budgets:
            from agentcore_budget.kind import BudgetKind

            context.add_claim_kind(BudgetKind(self.settings.reservation_lease_s))

    def scopes(self, attempt: Attempt) -> list[Scope]:
        """The budgets `attempt` falls under: its server's, its provider's."""
        return self._enforce().scopes(attempt) if self._budgets else []

    @hookimpl
    async def on_admission_claims(self, attempt: Attempt) -> list[Claim] | None:
        if not self._budgets:
            return None  # no budget: nothing to claim
        return await self._enforce().claims(attempt)

    @hookimpl
    async def on_spend_report(self) -> dict[str, Any] | None:
        """`agentcore spend`: this window's spend of every budget, from the fleet store."""
        if self.context is None or not self._budgets:
            return None
        return await self.report(self.context.fleet)

    async def report(self, store: FleetStore) -> dict[str, Any]:
        """Spend in the current window of every configured budget, read from `store`."""
        return await self._enforce().report(store)


def __getattr__(name: str) -> Any:
    """The names of `_LAZY`, imported on first use."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


__all__ = [
    "BUDGET",
    "BUDGET_EXCEEDED",
    "REFUSED_TRACE",
    "Budget",
    "BudgetKind",
    "BudgetSettings",
    "Limit",
    "input_bound",
    "window_of",
]
