"""What an inference cost, in USD: the settings' prices first, else pydantic's genai-prices.

`Usage.input_tokens` is the whole input (cache reads and writes included), which is what
genai-prices' `Usage` means by it too; input, output, cache reads and cache writes are
priced separately. A model with no known price is unpriced: its cost is None (``costUsd:
null``), never 0, and one warning per model says so (the ``inference:unpriced`` trace).
genai-prices (about 30 MB, and 0.4 s to load its table) is imported at its first use, in a
thread, and never when every model called has a price in the settings. The kinds that call
no one (``echo``, and `agentcore.testing`'s ``scripted``) cost nothing unless given a price.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from loguru import logger

from agentcore.inference import Response, Usage

if TYPE_CHECKING:
    from agentcore.settings import PriceSettings, ProviderSettings

__all__ = ["GENAI_PROVIDER_IDS", "UNPRICED_TRACE", "Pricer", "spend_fields"]

GENAI_PROVIDER_IDS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "openai-responses": "openai",
    "gemini": "google",
    "openrouter": "openrouter",
    "bedrock": "aws",
}
"""genai-prices' provider id for each provider kind; other kinds are found by base URL."""

FREE_KINDS = frozenset({"echo", "scripted"})
"""Provider kinds that call no one: agentcore's echo, agentcore.testing's scripted fake."""
MILLION = Decimal(1_000_000)
UNPRICED_TRACE = "inference:unpriced"


def _quiet(type: str, **fields: Any) -> None:
    """No one to tell."""


def _settings_cost(price: PriceSettings, usage: Usage) -> Decimal:
    read = usage.cache_read_tokens or 0
    write = usage.cache_write_tokens or 0
    rate = Decimal(repr(price.input))
    read_rate = rate if price.cache_read is None else Decimal(repr(price.cache_read))
    write_rate = rate if price.cache_write is None else Decimal(repr(price.cache_write))
    total = (
        (usage.input_tokens - read - write) * rate
        + read * read_rate
        + write * write_rate
        + usage.output_tokens * Decimal(repr(price.output))
    )
    return total / MILLION


class Pricer:
    """Prices inferences for one kernel's ``[providers]``."""

    def __init__(
        self, providers: Mapping[str, ProviderSettings], warn: Callable[..., None] = _quiet
    ) -> None:
        self.providers = providers
        self.warn = warn
        """Called as ``warn(UNPRICED_TRACE, **fields)`` once per unpriced model (the kernel's
        `emit_now`: the ``inference:unpriced`` warning trace)."""
        self.warned: set[str] = set()
        self._genai: Any = None
        self._not_in_table: set[tuple[str, str]] = set()
        """(provider, model) pairs the table has no price for: not searched again (a miss
        walks the whole table, ~0.1 ms, on every call of such a model)."""
        self._loading: asyncio.Future[Any] | None = None

    def _override(self, provider: str, model: str) -> PriceSettings | None:
        config = self.providers.get(provider)
        entry = config.models.get(model) if config is not None else None
        return entry.price if entry is not None else None

    def needs_table(self, provider: str, model: str) -> bool:
        """Whether pricing this model needs genai-prices' table (not loaded yet)."""
        config = self.providers.get(provider)
        free = config is not None and config.kind in FREE_KINDS
        return self._genai is None and not free and self._override(provider, model) is None

    async def load(self) -> None:
        """Import genai-prices off the event loop (its first price loads its table), once:
        the calls that end while it loads wait for that one import. (A thousand streams
        ending together each queued a thread job of their own, ~2 KB a call held.)"""
        if self._genai is not None:
            return
        loading = self._loading
        if loading is None:
            loading = self._loading = asyncio.ensure_future(asyncio.to_thread(_import_genai_prices))
            loading.add_done_callback(self._loaded)
        # A waiter cancelled does not cancel the others' import.
        self._genai = await asyncio.shield(loading)

    def _loaded(self, loading: asyncio.Future[Any]) -> None:
        if loading.cancelled() or loading.exception() is not None:
            self._loading = None  # the next call tries again

    def cost_of(
        self, provider: str, models: tuple[str, ...], usage: Usage, when: datetime | None = None
    ) -> Decimal | None:
        """The cost of `usage` on the first of `models` (requested, then served) with a
        price; None when none has one (warned once per model)."""
        for model in models:
            price = self._override(provider, model)
            if price is not None:
                return _settings_cost(price, usage)
        config = self.providers.get(provider)
        if config is not None and config.kind in FREE_KINDS:
            return Decimal(0)
        for model in dict.fromkeys(models):
            if (provider, model) in self._not_in_table:
                continue
            found = self._table_cost(provider, config, model, usage, when)
            if found is not None:
                return found
        key = f"{provider}:{models[0]}"
        if key not in self.warned:
            self.warned.add(key)
            message = (
                f"no price is known for {key}: its costUsd is null; set [providers.{provider}"
                f".models.{models[0]}] price = {{ input = ..., output = ... }} (USD per million"
                " tokens)"
            )
            logger.debug(message)
            self.warn(
                UNPRICED_TRACE, level="warning", provider=provider, model=models[0], message=message
            )
        return None

    def _table_cost(
        self,
        provider: str,
        config: ProviderSettings | None,
        model: str,
        usage: Usage,
        when: datetime | None,
    ) -> Decimal | None:
        if self._genai is None:
            self._genai = _import_genai_prices()
        genai = self._genai
        kind = config.kind if config is not None else ""
        where: dict[str, Any] = {}
        if kind in GENAI_PROVIDER_IDS:
            where["provider_id"] = GENAI_PROVIDER_IDS[kind]
        elif config is not None and config.base_url is not None:
            where["provider_api_url"] = str(config.base_url)
        asked = genai.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens or 0,
            cache_write_tokens=usage.cache_write_tokens or 0,
        )
        try:
            found = genai.calc_price(
                asked, model, genai_request_timestamp=when or datetime.now(UTC), **where
            )
        except LookupError:
            self._not_in_table.add((provider, model))
            return None
        except Exception:  # the table's own trouble never fails an inference: unpriced
            logger.opt(exception=True).debug("genai-prices could not price {}", model)
            return None
        return Decimal(found.total_price)

    async def cost(self, provider: str, response: Response) -> float | None:
        """USD for one completed reply (`Response.cost_usd`), or None: unpriced."""
        models = (response.model_requested, response.model_served)
        try:
            if self.needs_table(provider, response.model_requested):
                await self.load()
            found = self.cost_of(provider, models, response.usage)
        except Exception:  # pricing never fails an inference: the reply is unpriced
            logger.opt(exception=True).warning("pricing {}:{} failed", provider, models[0])
            return None
        return None if found is None else float(found)

    def worst_case(
        self, provider: str, model: str, input_tokens: int, max_tokens: int
    ) -> float | None:
        """The most a call could cost: every input token a cache write or plain input
        (whichever costs more), and `max_tokens` out. None: unpriced."""
        plain = self.cost_of(provider, (model,), Usage(input_tokens, max_tokens))
        if plain is None:
            return None
        written = self.cost_of(provider, (model,), Usage(input_tokens, max_tokens, 0, input_tokens))
        return float(max(plain, written or plain))


def spend_fields(response: Response) -> dict[str, Any]:
    """The usage and cost fields of the ``inference:complete`` and
    ``mcpl:inference_complete`` traces (docs/traces.md)."""
    usage = response.usage
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
        "costUsd": response.cost_usd,
    }


def _import_genai_prices() -> Any:
    import genai_prices

    genai_prices.calc_price(genai_prices.Usage(input_tokens=1), "gpt-4o", provider_id="openai")
    return genai_prices
