"""Provider adapters, one per wire format, all speaking the normalized model.

`create_provider` maps a `[providers.NAME]` section's `kind` to its adapter.
"""

from __future__ import annotations

from collections.abc import Callable

from agentcore.providers.base import Provider, normalize_stop
from agentcore.settings import InferenceSettings, ProviderSettings

ProviderFactory = Callable[[str, ProviderSettings, InferenceSettings], Provider]


def _echo(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.echo import EchoProvider

    return EchoProvider(name, config)


def _anthropic(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    if config.tool_mode == "xml":
        from agentcore.providers.anthropic_xml import AnthropicXmlProvider

        return AnthropicXmlProvider(name, config, inference)
    from agentcore.providers.anthropic import AnthropicProvider

    return AnthropicProvider(name, config, inference)


def _openai(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.openai import OpenAIProvider

    return OpenAIProvider(name, config, inference, config.kind)


def _responses(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.responses import ResponsesProvider

    return ResponsesProvider(name, config, inference)


def _gemini(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.gemini import GeminiProvider

    return GeminiProvider(name, config, inference)


_FACTORIES: dict[str, ProviderFactory] = {
    "echo": _echo,
    "anthropic": _anthropic,
    "openai": _openai,
    "openrouter": _openai,
    "openai-compatible": _openai,
    "openai-responses": _responses,
    "gemini": _gemini,
}


def register_kind(kind: str, factory: ProviderFactory) -> ProviderFactory | None:
    """Make `kind` a provider kind that `factory` creates; returns the factory it
    replaced, if any (so that a caller can put it back)."""
    previous = _FACTORIES.get(kind)
    _FACTORIES[kind] = factory
    return previous


def unregister_kind(kind: str) -> ProviderFactory | None:
    """Forget `kind`; returns its factory (None if it had none)."""
    return _FACTORIES.pop(kind, None)


def kinds() -> list[str]:
    """Every provider kind this build can create: the built-in ones and any registered."""
    return sorted(_FACTORIES)


def create_provider(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    factory = _FACTORIES.get(config.kind)
    if factory is None:
        from agentcore.inference import InferenceError

        raise InferenceError(
            "invalid_request",
            f"provider {name!r}: kind {config.kind!r} is not available in this build",
            retryable=False,
        )
    return factory(name, config, inference)


__all__ = [
    "Provider",
    "ProviderFactory",
    "create_provider",
    "kinds",
    "normalize_stop",
    "register_kind",
    "unregister_kind",
]
