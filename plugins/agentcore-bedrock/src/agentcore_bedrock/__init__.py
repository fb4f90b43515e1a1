"""Amazon Bedrock for agentcore: the plugin ``bedrock``, contributing ``kind = "bedrock"``.

Built as a third party would build a provider: it imports `agentcore.api` only, runs on
the kernel's streaming driver (`HTTPProvider`), and declares its own settings keys
(`BedrockSettings`) with the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentcore.api import InferenceSettings, ProviderSettings, hookimpl
from agentcore_bedrock.settings import BedrockSettings

# The provider (aiohttp's driver, botocore's signer and decoder) is imported when the first
# Bedrock provider is made: loading the plugin for a deployment that has none costs nothing.
if TYPE_CHECKING:
    from agentcore_bedrock.provider import BedrockProvider

__all__ = ["BedrockPlugin", "BedrockProvider", "BedrockSettings"]


class BedrockKind:
    """The factory of ``kind = "bedrock"``: declares the kind's settings model now, and
    imports the provider when it first makes one."""

    kind = "bedrock"
    settings_model = BedrockSettings

    def __call__(
        self, name: str, config: ProviderSettings, inference: InferenceSettings
    ) -> BedrockProvider:
        from agentcore_bedrock.provider import BedrockProvider

        return BedrockProvider(name, config, inference)


class BedrockPlugin:
    @hookimpl
    def agentcore_provider_kinds(self) -> Mapping[str, Any]:
        return {"bedrock": BedrockKind()}


def __getattr__(name: str) -> Any:
    """`BedrockProvider`, still importable from here, loaded on first use."""
    if name == "BedrockProvider":
        from agentcore_bedrock import provider

        return provider.BedrockProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
