"""``[providers.NAME]`` keys of ``kind = "bedrock"``, on top of every provider's own."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agentcore.api import ProviderSettings

API_KEY_ENV = "AWS_BEARER_TOKEN_BEDROCK"
"""Where AWS's own SDKs read a Bedrock API key; ``api_key_env`` names another."""


class BedrockSettings(ProviderSettings):
    """A Bedrock provider: where (``region``), as whom (``auth``, ``profile``), which API."""

    xml_tool_mode: ClassVar[bool] = True  # Anthropic models go as Messages bodies

    region: str | None = Field(default=None, min_length=1)
    """The AWS region (``us-east-1``); unset: the standard chain's (``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, the profile's ``region``)."""
    auth: Literal["auto", "sigv4", "api_key"] = "auto"
    """``sigv4``: botocore's credential chain signs each call; ``api_key``: a Bedrock API key
    as a bearer token, from ``api_key_env`` (default ``AWS_BEARER_TOKEN_BEDROCK``);
    ``auto``: ``api_key`` when ``api_key_env`` is set, else ``sigv4``."""
    profile: str | None = Field(default=None, min_length=1)
    """The AWS profile the credential chain starts from; unset: ``AWS_PROFILE``, or none."""
    api: Literal["auto", "invoke", "converse"] = "auto"
    """``auto``: Anthropic models (an id holding ``anthropic.``) over InvokeModel with
    Messages bodies, every other model over Converse."""
    anthropic_beta: list[str] = Field(default_factory=list)
    """Anthropic beta flags, sent in the body (``anthropic_beta``) as Bedrock takes them."""
