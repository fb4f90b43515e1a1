"""Amazon Bedrock for agentcore: the plugin ``bedrock``, contributing ``kind = "bedrock"``.

Built as a third party would build a provider: it imports `agentcore.api` only, runs on
the kernel's streaming driver (`HTTPProvider`), and declares its own settings keys
(`BedrockSettings`) with the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcore.api import HTTPProvider, InferenceSettings, ProviderSettings, hookimpl
from agentcore_bedrock.settings import BedrockSettings
from agentcore_bedrock.wire import BedrockWire

__all__ = ["BedrockPlugin", "BedrockProvider", "BedrockSettings"]


class BedrockProvider(HTTPProvider):
    kind = "bedrock"
    settings_model = BedrockSettings
    """The kind's own keys (``region``, ``auth``, ...): the kernel validates its sections."""

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        if not isinstance(config, BedrockSettings):  # a kernel loaded without this plugin's kind
            config = BedrockSettings.model_validate(config.model_dump())
        super().__init__(name, config, BedrockWire(name, config, inference))


class BedrockPlugin:
    @hookimpl
    def agentcore_provider_kinds(self) -> Mapping[str, Any]:
        return {"bedrock": BedrockProvider}
