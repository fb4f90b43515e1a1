"""What the host knows about a model: MCPL's ModelInfo (SPEC §12.2, and `model` in §10.1).

`{id, vendor, contextWindow, capabilities}`, and `maxOutputTokens` (an extension of §12.2:
the most tokens the model writes in one reply, the ceiling an `inference/request`'s
`maxTokens` is held to). `vendor` is the model's maker
("anthropic", "openai", "google"), not the provider kind that serves it (an
OpenRouter or OpenAI-compatible provider serves many makers' models). The
deployment's ``[providers.NAME.models.MODEL]`` says it first, field by field; the
built-in table below knows well-known Anthropic, OpenAI and Gemini models. What
neither knows is left out, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentcore.settings import ModelSettings

VISION_TOOLS = ("vision", "tools")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    vendor: str | None = None
    context_window: int | None = None
    capabilities: tuple[str, ...] | None = None
    max_output_tokens: int | None = None

    def unknown(self) -> list[str]:
        """The settings keys of what is not known (``[providers.NAME.models.MODEL]``):
        §12.2's answer needs every field (mcpl-core-ts types them all as required)."""
        return [
            key
            for key, value in (
                ("vendor", self.vendor),
                ("context_window", self.context_window),
                ("capabilities", self.capabilities),
            )
            if value is None
        ]

    def to_wire(self) -> dict[str, Any]:
        """The §12.2 object; what is unknown is absent (`model/info` answers only a
        complete one; a context hook's `model` says what is known)."""
        wire: dict[str, Any] = {"id": self.id}
        if self.vendor is not None:
            wire["vendor"] = self.vendor
        if self.context_window is not None:
            wire["contextWindow"] = self.context_window
        if self.capabilities is not None:
            wire["capabilities"] = list(self.capabilities)
        if self.max_output_tokens is not None:
            wire["maxOutputTokens"] = self.max_output_tokens
        return wire


@dataclass(frozen=True, slots=True)
class _Known:
    vendor: str
    context_window: int | None
    capabilities: tuple[str, ...] | None
    max_output_tokens: int | None = None
    prefill: bool = True
    """False: the model answers 400 to a request that ends with an assistant turn."""


# Model id prefixes, matched longest first on a "-" boundary, so that dated ids
# ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06") and "-latest" aliases match.
# Published context windows and output limits (without beta headers); capabilities only
# where the maker documents them.
BUILTIN_MODELS: Mapping[str, _Known] = {
    # Anthropic. The Claude 4.6 models answer 400 to a prefill (an assistant turn last),
    # per Anthropic's "What's new in Claude 4.6" and its migration guide.
    "claude-opus-4-6": _Known("anthropic", 200_000, VISION_TOOLS, 128_000, prefill=False),
    "claude-sonnet-4-6": _Known("anthropic", 200_000, VISION_TOOLS, 64_000, prefill=False),
    "claude-opus-4-5": _Known("anthropic", 200_000, VISION_TOOLS, 64_000),
    "claude-opus-4-1": _Known("anthropic", 200_000, VISION_TOOLS, 32_000),
    "claude-opus-4": _Known("anthropic", 200_000, VISION_TOOLS, 32_000),
    "claude-sonnet-4-5": _Known("anthropic", 200_000, VISION_TOOLS, 64_000),
    "claude-sonnet-4": _Known("anthropic", 200_000, VISION_TOOLS, 64_000),
    "claude-haiku-4-5": _Known("anthropic", 200_000, VISION_TOOLS, 64_000),
    "claude-3-7-sonnet": _Known("anthropic", 200_000, VISION_TOOLS, 64_000),
    "claude-3-5-sonnet": _Known("anthropic", 200_000, VISION_TOOLS, 8_192),
    "claude-3-5-haiku": _Known("anthropic", 200_000, ("tools",), 8_192),
    "claude-3-opus": _Known("anthropic", 200_000, VISION_TOOLS, 4_096),
    "claude-3-haiku": _Known("anthropic", 200_000, VISION_TOOLS, 4_096),
    # OpenAI
    "gpt-5": _Known("openai", 400_000, VISION_TOOLS, 128_000),
    "gpt-5-mini": _Known("openai", 400_000, VISION_TOOLS, 128_000),
    "gpt-5-nano": _Known("openai", 400_000, VISION_TOOLS, 128_000),
    "gpt-4.1": _Known("openai", 1_047_576, VISION_TOOLS, 32_768),
    "gpt-4.1-mini": _Known("openai", 1_047_576, VISION_TOOLS, 32_768),
    "gpt-4.1-nano": _Known("openai", 1_047_576, VISION_TOOLS, 32_768),
    "gpt-4o": _Known("openai", 128_000, VISION_TOOLS, 16_384),
    "gpt-4o-mini": _Known("openai", 128_000, VISION_TOOLS, 16_384),
    "gpt-4-turbo": _Known("openai", 128_000, VISION_TOOLS, 4_096),
    "gpt-3.5-turbo": _Known("openai", 16_385, ("tools",), 4_096),
    "o1": _Known("openai", 200_000, VISION_TOOLS, 100_000),
    "o1-mini": _Known("openai", 128_000, None, 65_536),
    "o3": _Known("openai", 200_000, VISION_TOOLS, 100_000),
    "o3-mini": _Known("openai", 200_000, ("tools",), 100_000),
    "o4-mini": _Known("openai", 200_000, VISION_TOOLS, 100_000),
    # Google
    "gemini-2.5-pro": _Known("google", 1_048_576, VISION_TOOLS, 65_536),
    "gemini-2.5-flash": _Known("google", 1_048_576, VISION_TOOLS, 65_536),
    "gemini-2.5-flash-lite": _Known("google", 1_048_576, VISION_TOOLS, 65_536),
    "gemini-2.0-flash": _Known("google", 1_048_576, VISION_TOOLS, 8_192),
    "gemini-2.0-flash-lite": _Known("google", 1_048_576, VISION_TOOLS, 8_192),
    "gemini-1.5-pro": _Known("google", 2_097_152, VISION_TOOLS, 8_192),
    "gemini-1.5-flash": _Known("google", 1_048_576, VISION_TOOLS, 8_192),
}
_BY_LENGTH = sorted(BUILTIN_MODELS, key=len, reverse=True)


def known_model(model: str) -> _Known | None:
    """The built-in entry for a model id, or None. A router's ``maker/`` prefix
    ("anthropic/claude-…", OpenRouter's style) and a ``models/`` prefix (Gemini's) are
    ignored for the look-up, and so is a Bedrock id's region and maker (``us.anthropic.``)."""
    name = model.rsplit("/", 1)[-1].lower()
    if "anthropic." in name:  # Bedrock's ids: "us.anthropic.claude-…-v1:0", ARNs
        name = name.split("anthropic.", 1)[1]
    for prefix in _BY_LENGTH:
        if name == prefix or name.startswith(prefix + "-") or name.startswith(prefix + "@"):
            return BUILTIN_MODELS[prefix]
    return None


def describe_model(model: str, configured: ModelSettings | None = None) -> ModelInfo:
    """What is known about `model` (the part after ``NAME:``): the settings' fields first,
    then the built-in table's; whatever neither knows is left out."""
    known = known_model(model)
    vendor = configured.vendor if configured and configured.vendor else None
    window = configured.context_window if configured else None
    capabilities = (
        tuple(configured.capabilities)
        if configured and configured.capabilities is not None
        else None
    )
    max_output = configured.max_output_tokens if configured else None
    if known is not None:
        vendor = vendor or known.vendor
        max_output = max_output if max_output is not None else known.max_output_tokens
        window = window if window is not None else known.context_window
        capabilities = capabilities if capabilities is not None else known.capabilities
    return ModelInfo(model, vendor, window, capabilities, max_output)


def model_prefills(model: str, configured: ModelSettings | None = None) -> bool:
    """Whether `model` takes a prefill: ``[providers.NAME.models.MODEL] prefill`` first,
    then the built-in table; a model neither knows does."""
    if configured is not None and configured.prefill is not None:
        return configured.prefill
    known = known_model(model)
    return known is None or known.prefill


__all__ = ["BUILTIN_MODELS", "ModelInfo", "describe_model", "known_model", "model_prefills"]
