"""agentcore's spend budgets (entry point ``budget``): USD per MCPL server and per
provider in each hour, day or month (UTC), fleet-wide through the ``[fleet]`` store.

- Enforced at the kernel's admission step: each attempt under a budget claims its worst
  case (a ``budget`` claim per scope, `BudgetKind`): its input's size in bytes (no
  tokenizer counts fewer tokens than bytes) as input tokens, every one at the model's
  dearest input rate, plus ``max_tokens`` of output. The store grants every claim of the
  call at once or none, so concurrent calls on many replicas can never together spend
  past a budget. When the attempt ends the claim settles to the real cost
  (`Response.cost_usd`; 0 for a failed attempt).
- A refused call fails at once, before any provider traffic: an `InferenceError`
  (code ``budget_exceeded``) naming the budget, what was spent (and reserved by calls in
  flight), the limit and when the window resets; its `data` is what an MCPL server gets
  with the -32603: ``{"reason": "budget", "scope", "spentUsd", "maxUsd", "resetsAt"}``.
  Each refusal is a ``budget:refused`` trace.
- A model with no known price under a budget: ``on_unpriced = "refuse"`` (the default)
  refuses it the same way (``data.unpriced`` names the model); ``"allow"`` lets it
  through unreserved, and it costs the budget nothing.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from agentcore.api import (
    Attempt,
    AttemptEnd,
    Claim,
    ClaimRefusal,
    FleetStore,
    InferenceError,
    PluginContext,
    Pricer,
    ProviderName,
    Request,
    Scalar,
    Section,
    SettingsSection,
    hookimpl,
)
from agentcore_budget.kind import BUDGET, BudgetKind, spent

REFUSED_TRACE = "budget:refused"
BUDGET_EXCEEDED = "budget_exceeded"
"""`InferenceError.code` of a call a budget refused."""
PER_MESSAGE_TOKENS = 16
"""Added per message (and once for the request) to the input bound: role and framing."""

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


def window_of(window: Window, now: float) -> tuple[str, datetime, datetime]:
    """(its id, start, end) of the UTC window holding `now` (seconds since the epoch)."""
    at = datetime.fromtimestamp(now, UTC)
    if window == "hour":
        start = at.replace(minute=0, second=0, microsecond=0)
        return start.strftime("%Y-%m-%dT%H"), start, start + timedelta(hours=1)
    if window == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.strftime("%Y-%m-%d"), start, start + timedelta(days=1)
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start.strftime("%Y-%m"), start, end


RATE_PROBE = 1_000_000
"""Tokens at which a model's per-token rates are read (past every published price tier)."""
MAX_RATES = 1024
"""Models' rates kept at once; a new window or model beyond it starts the table afresh."""


def input_bound(request: Request) -> int:
    """An upper bound on the request's input tokens: its bytes, and some per message."""
    size = len((request.system or "").encode()) + PER_MESSAGE_TOKENS
    for tool in request.tools:
        size += len(json.dumps([tool.name, tool.description, tool.input_schema]).encode())
    for message in request.messages:
        size += PER_MESSAGE_TOKENS
        for block in message.content:
            size += len(json.dumps(_fields(block), ensure_ascii=False).encode())
    return size


def _fields(block: object) -> Any:
    slots = getattr(block, "__slots__", ())
    return [str(getattr(block, name, "")) for name in slots]


@dataclass(frozen=True, slots=True)
class Scope:
    """One budget a call falls under: ``server:NAME`` or ``provider:NAME``."""

    name: str
    limit: Limit

    def key(self, window: str, window_id: str) -> str:
        return f"{self.name}:{window}:{window_id}"


def _money(value: float) -> str:
    return f"${value:.4f}"


class Budget:
    """The plugin object; the kernel makes one per kernel. `clock` (seconds since the
    epoch) decides the window: a test moves it to the next window without sleeping."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.settings = BudgetSettings()
        self._context: PluginContext[BudgetSettings] | None = None
        self._pricer: Pricer | None = None
        self._rates: dict[tuple[str, str, str], tuple[float, float] | None] = {}
        """(provider, model, window id) -> USD per input token and per output token."""

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("budget", BudgetSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[BudgetSettings]) -> None:
        self._context = context
        self.settings = context.settings
        self._pricer = context.pricer or Pricer({})
        if self.settings.servers or self.settings.providers:
            context.add_claim_kind(BudgetKind())

    def scopes(self, attempt: Attempt) -> list[Scope]:
        """The budgets `attempt` falls under: its server's, its provider's."""
        found: list[Scope] = []
        server = attempt.inference.metadata.get("serverId")
        if server is not None and str(server) in self.settings.servers:
            found.append(Scope(f"server:{server}", self.settings.servers[str(server)]))
        if attempt.provider in self.settings.providers:
            limit = self.settings.providers[attempt.provider]
            found.append(Scope(f"provider:{attempt.provider}", limit))
        return found

    @hookimpl
    async def on_admission_claims(self, attempt: Attempt) -> list[Claim] | None:
        scopes = self.scopes(attempt)
        if not scopes or self._pricer is None:
            return None
        pricer = self._pricer
        if pricer.needs_table(attempt.provider, attempt.model):
            await pricer.load()
        window_id, _, end = window_of(self.settings.window, self.clock())
        worst = self._worst_case(pricer, attempt, window_id)
        if worst is None:
            if self.settings.on_unpriced == "allow":
                worst = 0.0
            else:
                raise self._unpriced(attempt, scopes[0], end)
        claims = []
        for scope in scopes:
            claims.append(
                Claim(
                    BUDGET,
                    scope.key(self.settings.window, window_id),
                    (scope.limit.max_usd, worst, int(end.timestamp() * 1000)),
                    max_wait_s=0.0,
                    max_wait_setting="[budget]",
                    refused=functools.partial(self._refused, attempt, scope, end),
                    settle=_settle,
                )
            )
        return claims

    def _worst_case(self, pricer: Pricer, attempt: Attempt, window_id: str) -> float | None:
        """The most `attempt` could cost (None: unpriced), from per-token rates priced once
        per model and window: pricing on every call costs ~0.1 ms each time through
        genai-prices. The rates are taken at `RATE_PROBE` tokens, a tiered price's dearest
        tier, so the product stays an upper bound."""
        key = (attempt.provider, attempt.model, window_id)
        if key not in self._rates:
            if len(self._rates) >= MAX_RATES:
                self._rates.clear()
            top_in = pricer.worst_case(attempt.provider, attempt.model, RATE_PROBE, 0)
            top = pricer.worst_case(attempt.provider, attempt.model, RATE_PROBE, RATE_PROBE)
            rates = None
            if top_in is not None and top is not None:
                rates = (top_in / RATE_PROBE, (top - top_in) / RATE_PROBE)
            self._rates[key] = rates
        rates = self._rates[key]
        if rates is None:
            return None
        request = attempt.inference.request
        return input_bound(request) * rates[0] + request.max_tokens * rates[1]

    def _refused(
        self, attempt: Attempt, scope: Scope, end: datetime, refusal: ClaimRefusal, _waited: float
    ) -> InferenceError:
        """A budget frees up only when its window ends: fail now, saying so."""
        used = float(refusal.info or 0.0)
        window = self.settings.window
        message = (
            f"Budget {scope.name} ([budget.{scope.name.replace(':', 's.', 1)}] max_usd) has no"
            f" room for this call: {_money(used)} of {_money(scope.limit.max_usd)} spent this"
            f" {window} (calls in flight included), and it may cost up to"
            f" {_money(float(refusal.claim.args[1]))}; the {window} resets at"
            f" {end.isoformat().replace('+00:00', 'Z')}"
        )
        data = {
            "reason": "budget",
            "scope": scope.name,
            "spentUsd": used,
            "maxUsd": scope.limit.max_usd,
            "resetsAt": end.isoformat().replace("+00:00", "Z"),
        }
        return self._refusal(attempt, message, data)

    def _unpriced(self, attempt: Attempt, scope: Scope, end: datetime) -> InferenceError:
        model = f"{attempt.provider}:{attempt.model}"
        message = (
            f"Budget {scope.name} refuses {model}: no price is known for it, so its cost"
            f' cannot be bounded ([budget] on_unpriced = "refuse"; give it a price in'
            f" [providers.{attempt.provider}.models.{attempt.model}] price)"
        )
        data = {
            "reason": "budget",
            "scope": scope.name,
            "maxUsd": scope.limit.max_usd,
            "resetsAt": end.isoformat().replace("+00:00", "Z"),
            "unpriced": model,
        }
        return self._refusal(attempt, message, data)

    def _refusal(self, attempt: Attempt, message: str, data: dict[str, Any]) -> InferenceError:
        if self._context is not None:
            self._context.emit_now(
                REFUSED_TRACE,
                inferenceId=attempt.inference.id,
                provider=attempt.provider,
                model=attempt.model,
                message=message,
                **data,
            )
        return InferenceError(
            "invalid_request",
            message,
            retryable=False,
            code=BUDGET_EXCEEDED,
            provider=attempt.provider,
            model=attempt.model,
            data=data,
        )

    @hookimpl
    async def on_spend_report(self) -> dict[str, Any] | None:
        """`agentcore spend`: this window's spend of every budget, from the fleet store."""
        if self._context is None or not (self.settings.servers or self.settings.providers):
            return None
        return await self.report(self._context.fleet)

    async def report(self, store: FleetStore) -> dict[str, Any]:
        """Spend in the current window of every configured budget, read from `store`."""
        window = self.settings.window
        window_id, start, end = window_of(window, self.clock())
        out: dict[str, Any] = {
            "window": window,
            "start": start.isoformat().replace("+00:00", "Z"),
            "resetsAt": end.isoformat().replace("+00:00", "Z"),
            "budgets": [],
        }
        scopes = [Scope(f"server:{n}", limit) for n, limit in self.settings.servers.items()]
        scopes += [Scope(f"provider:{n}", limit) for n, limit in self.settings.providers.items()]
        for scope in scopes:
            used, reserved = await spent(store, scope.key(window, window_id))
            limit = scope.limit.max_usd
            out["budgets"].append(
                {"scope": scope.name, "spentUsd": used, "reservedUsd": reserved, "maxUsd": limit}
            )
        return out


def _settle(end: AttemptEnd) -> tuple[Scalar, ...]:
    """The real cost: what the reply cost, or 0 (failed, or unpriced and allowed)."""
    cost = end.response.cost_usd if end.response is not None else None
    return (cost or 0.0,)


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
