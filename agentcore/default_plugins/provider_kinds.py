"""The built-in provider kinds, contributed through `agentcore_provider_kinds` like any
plugin's: anthropic, openai (with openrouter and openai-compatible), openai-responses,
gemini and echo.

Each adapter is imported when a provider of its kind is first made, not at load.
"""

from __future__ import annotations

from agentcore.markers import hookimpl
from agentcore.providers import Provider, ProviderFactory
from agentcore.settings import InferenceSettings, ProviderSettings


def echo(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.echo import EchoProvider

    return EchoProvider(name, config)


def anthropic(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    if config.tool_mode == "xml":
        from agentcore.providers.anthropic_xml import AnthropicXmlProvider

        return AnthropicXmlProvider(name, config, inference)
    from agentcore.providers.anthropic import AnthropicProvider

    return AnthropicProvider(name, config, inference)


def openai(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.openai import OpenAIProvider

    return OpenAIProvider(name, config, inference, config.kind)


def responses(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.responses import ResponsesProvider

    return ResponsesProvider(name, config, inference)


def gemini(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    from agentcore.providers.gemini import GeminiProvider

    return GeminiProvider(name, config, inference)


@hookimpl
def agentcore_provider_kinds() -> dict[str, ProviderFactory]:
    return {
        "anthropic": anthropic,
        "openai": openai,
        "openrouter": openai,
        "openai-compatible": openai,
        "openai-responses": responses,
        "gemini": gemini,
        "echo": echo,
    }
