"""A Bedrock provider against agentcore.testing's loopback server: SigV4 with a test key,
nothing of the machine's AWS set-up read, and no instance-metadata lookup ever tried."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcore_bedrock import BedrockPlugin

from agentcore.testing import Kernel, LoopbackServer

ACCESS_KEY = "AKIDLOOPBACKTEST0001"
SECRET_KEY = "loopback/secret+key/not-real-0000000000"
BEARER = "bedrock-api-key-loopback-not-real-0000"
ANTHROPIC = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
OTHER = "amazon.nova-pro-v1:0"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """botocore reads the process's environment: only the test key is in it."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_BEARER_TOKEN_BEDROCK", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    env = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env


@pytest.fixture
async def bedrock_server() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer(aws_credentials={ACCESS_KEY: SECRET_KEY}) as server:
        yield server


@pytest.fixture
def bedrock_kernel(bedrock_server: LoopbackServer, tmp_path: Path) -> Callable[..., Kernel]:
    def build(inference: dict[str, Any] | None = None, **options: Any) -> Kernel:
        provider = {"kind": "bedrock", "region": "us-east-1", "auth": "sigv4", **options}
        path = bedrock_server.write_settings(
            tmp_path / "agentcore.toml",
            {"br": provider},
            per_provider_urls=False,
            key_env="BEDROCK_KEY",
            inference=inference,
        )
        return Kernel.load(
            path,
            environ={"BEDROCK_KEY": BEARER},
            discover_plugins=False,
            plugins={"bedrock": BedrockPlugin},
        )

    return build
