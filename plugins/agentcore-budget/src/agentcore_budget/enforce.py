"""The budget plugin's enforcement (`agentcore_budget.Budget`): the windows, the claims an
attempt makes, the refusals and the spend report. Imported when a budget is first asked
about, so a host with none configured never loads it (issue 24, idle RSS)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from loguru import logger

from agentcore.api import (
    Attempt,
    AttemptEnd,
    Claim,
    ClaimRefusal,
    FleetStore,
    InferenceError,
    Pricer,
    Request,
    Scalar,
    TextBlock,
)
from agentcore_budget import (
    BUDGET_EXCEEDED,
    PER_BLOCK_TOKENS,
    PER_MESSAGE_TOKENS,
    REFUSED_TRACE,
    Limit,
    Window,
)
from agentcore_budget.kind import BUDGET, NANO, lease_ms, nano_usd, spent

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentcore.api import PluginContext
    from agentcore_budget import Budget, BudgetSettings


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
"""Models' rates kept at once in a window; a model beyond it starts the table afresh."""


def input_bound(request: Request) -> int:
    """An upper bound on the request's input tokens: the UTF-8 bytes of its text (no
    tokenizer makes fewer tokens than bytes), and some per message, block and tool.
    Counted from the strings themselves, not from a serialised copy of the conversation
    on every call: an ASCII string's size is its length."""
    size = _size(request.system) + PER_MESSAGE_TOKENS
    for tool in request.tools:
        size += PER_BLOCK_TOKENS + _size(tool.name) + _size(tool.description)
        size += _size(tool.input_schema)
    for message in request.messages:
        size += PER_MESSAGE_TOKENS
        for block in message.content:
            if type(block) is TextBlock:  # most blocks: its text and its type's name
                text = block.text
                size += PER_BLOCK_TOKENS + 4 + (len(text) if text.isascii() else _size(text))
                continue
            size += PER_BLOCK_TOKENS
            for name in block.__slots__:
                size += _size(getattr(block, name, None))
    return size


def _size(value: object) -> int:
    """UTF-8 bytes of a block's field: a string's own, anything else's as JSON."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode())
    if value is None or isinstance(value, bool | int | float):
        return 8
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


@dataclass(frozen=True, slots=True)
class Scope:
    """One budget a call falls under: ``server:NAME`` or ``provider:NAME``."""

    name: str
    limit: Limit

    def key(self, window: str, window_id: str) -> str:
        return f"{self.name}:{window}:{window_id}"


Scoped = tuple[tuple[Scope, str], ...]
"""The budgets a call falls under, each with its claim key in the current window."""


@dataclass(frozen=True, slots=True)
class _Window:
    """The current UTC window and what every call in it shares, made once per window (not
    on every call): its claim keys per kind of call, its models' per-token rates."""

    id: str
    start_s: float
    end_s: float
    end: datetime
    end_ms: int
    scoped: dict[tuple[str | None, str], Scoped] = field(default_factory=dict)
    """(the call's server when it has a budget, else None; its provider) -> its budgets."""
    rates: dict[tuple[str, str], tuple[float, float] | None] = field(default_factory=dict)
    """(provider, model) -> USD per input token and per output token (None: unpriced)."""

    @classmethod
    def of(cls, window: Window, now: float) -> _Window:
        window_id, start, end = window_of(window, now)
        end_ms = int(end.timestamp() * 1000)
        return cls(window_id, start.timestamp(), end.timestamp(), end, end_ms)


def _money(value: float) -> str:
    return f"${value:.4f}"


class Enforcer:
    """What a `Budget` does once a budget is configured; it reads the plugin's settings,
    clock, pricer and context, and keeps the current window."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._window: _Window | None = None

    @property
    def settings(self) -> BudgetSettings:
        return self.budget.settings

    @property
    def clock(self) -> Callable[[], float]:
        return self.budget.clock

    @property
    def _pricer(self) -> Pricer | None:
        return self.budget.pricer

    @property
    def _context(self) -> PluginContext[BudgetSettings] | None:
        return self.budget.context

    def _current(self) -> _Window:
        """The window the clock is in, made anew only when it leaves the last one."""
        now = self.clock()
        window = self._window
        if window is None or not window.start_s <= now < window.end_s:
            window = self._window = _Window.of(self.settings.window, now)
        return window

    def _scoped(self, attempt: Attempt, window: _Window) -> Scoped:
        """The budgets `attempt` falls under (its server's, its provider's), with their
        claim keys in `window`: made once per window and kind of call."""
        named = attempt.inference.metadata.get("serverId")
        server = None if named is None or str(named) not in self.settings.servers else str(named)
        found = window.scoped.get((server, attempt.provider))
        if found is None:
            scopes = []
            if server is not None:
                scopes.append(Scope(f"server:{server}", self.settings.servers[server]))
            if attempt.provider in self.settings.providers:
                limit = self.settings.providers[attempt.provider]
                scopes.append(Scope(f"provider:{attempt.provider}", limit))
            kind = self.settings.window
            found = tuple((scope, scope.key(kind, window.id)) for scope in scopes)
            window.scoped[server, attempt.provider] = found
        return found

    def scopes(self, attempt: Attempt) -> list[Scope]:
        """The budgets `attempt` falls under: its server's, its provider's."""
        return [scope for scope, _ in self._scoped(attempt, self._current())]

    async def claims(self, attempt: Attempt) -> list[Claim] | None:
        """`on_admission_claims`: a ``budget`` claim per budget `attempt` falls under."""
        window = self._current()
        scoped = self._scoped(attempt, window)
        if not scoped or self._pricer is None:
            return None
        worst = await self._worst_case(self._pricer, attempt, window)
        if worst is None:
            if self.settings.on_unpriced == "allow":
                worst = 0.0
            else:
                raise self._unpriced(attempt, scoped[0][0], window.end)
        reserved, lease = nano_usd(worst), lease_ms(self.settings.reservation_lease_s)
        return [
            Claim(
                BUDGET,
                key,
                (scope.limit.max_usd, reserved, window.end_ms, lease),
                max_wait_s=0.0,
                max_wait_setting="[budget]",
                refused=functools.partial(self._refused, attempt, scope, window.end),
                settle=self._settle,
                plugin=self._context.name if self._context is not None else "",
            )
            for scope, key in scoped
        ]

    async def _worst_case(self, pricer: Pricer, attempt: Attempt, window: _Window) -> float | None:
        """The most `attempt` could cost (None: unpriced), from per-token rates priced once
        per model and window: pricing on every call costs ~0.1 ms each time through
        genai-prices. The rates are taken at `RATE_PROBE` tokens, a tiered price's dearest
        tier, so the product stays an upper bound."""
        key = (attempt.provider, attempt.model)
        if key not in window.rates:
            if pricer.needs_table(attempt.provider, attempt.model):
                await pricer.load()
            if len(window.rates) >= MAX_RATES:
                window.rates.clear()
            top_in = pricer.worst_case(attempt.provider, attempt.model, RATE_PROBE, 0)
            top = pricer.worst_case(attempt.provider, attempt.model, RATE_PROBE, RATE_PROBE)
            rates = None
            if top_in is not None and top is not None:
                rates = (top_in / RATE_PROBE, (top - top_in) / RATE_PROBE)
            window.rates[key] = rates
        rates = window.rates[key]
        if rates is None:
            return None
        request = attempt.inference.request
        return input_bound(request) * rates[0] + request.max_tokens * rates[1]

    def _settle(self, end: AttemptEnd) -> tuple[Scalar, ...]:
        """The real cost: what the reply cost. An attempt that ends without a reply was
        billed all the same once the provider had it (a server that cancels each call
        after its first chunk still spends): what the provider reported it used; else, a
        reply begun or a call cancelled, its input's worst case, and for a whole call
        cancelled its output's too (the provider may write the reply to its end). 0 for
        a failure before any reply (an error answer), or unpriced and allowed."""
        if end.response is not None:
            return (end.response.cost_usd or 0.0,)
        attempt, pricer = end.attempt, self._pricer
        cancelled = end.error is not None and end.error.kind == "cancelled"
        if pricer is None or not (attempt.usage is not None or attempt.replied or cancelled):
            return (0.0,)
        cost: float | None
        try:
            if attempt.usage is not None:
                found = pricer.cost_of(attempt.provider, (attempt.model,), attempt.usage)
                cost = None if found is None else float(found)
            else:
                request = attempt.inference.request
                whole = cancelled and not attempt.inference.streamed
                out = request.max_tokens if whole else 0
                cost = pricer.worst_case(attempt.provider, attempt.model, input_bound(request), out)
        except Exception:  # pricing never fails a release: the attempt counts as unpriced
            logger.opt(exception=True).warning("budget: pricing a cut attempt failed")
            cost = None
        return (cost or 0.0,)

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
            f" {_money(int(refusal.claim.args[1]) / NANO)}; the {window} resets at"
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
        end_ms = int(end.timestamp() * 1000)
        for scope in scopes:
            used, reserved = await spent(store, scope.key(window, window_id), end_ms)
            limit = scope.limit.max_usd
            out["budgets"].append(
                {"scope": scope.name, "spentUsd": used, "reservedUsd": reserved, "maxUsd": limit}
            )
        return out
