"""The Bedrock provider on the kernel's streaming driver: imported when the first
``kind = "bedrock"`` provider is made (it brings aiohttp and botocore)."""

from __future__ import annotations

from agentcore.api import HTTPProvider, InferenceSettings, ProviderSettings
from agentcore_bedrock.settings import BedrockSettings
from agentcore_bedrock.wire import BedrockWire


class BedrockProvider(HTTPProvider):
    kind = "bedrock"
    settings_model = BedrockSettings
    """The kind's own keys (``region``, ``auth``, ...): the kernel validates its sections."""

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        if not isinstance(config, BedrockSettings):  # a kernel loaded without this plugin's kind
            config = BedrockSettings.model_validate(config.model_dump())
        super().__init__(name, config, BedrockWire(name, config, inference))
