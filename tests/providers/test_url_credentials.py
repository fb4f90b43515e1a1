"""Credentials in a provider's base URL (``http://user:password@host/v1``, README "Secrets")
work for every kind, against the loopback server: they go as HTTP Basic auth, and where a
kind sends its key in that same header (the openai family, openai-responses) they take
its place, said in the log; a key in a header of its own (anthropic, gemini) goes too."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from agentcore.inference import Message, Request
from agentcore.kernel import Kernel
from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario

USER, PASSWORD = "gateway-user", "pass:w@rd-0123"
WRITTEN = "gateway-user:pass%3Aw%40rd-0123"  # the password percent-encoded in the URL
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
KEY_HEADERS = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}
"""The kinds whose key has a header of its own; the others send it as a bearer token."""
KINDS = ["anthropic", "openai", "openrouter", "openai-compatible", "openai-responses", "gemini"]


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="DEBUG")
    yield lines
    logger.remove(sink)


def settings(server: LoopbackServer, tmp_path: Path, kind: str) -> Path:
    url = server.base_url(kind, "p").replace("http://", f"http://{WRITTEN}@", 1)
    path = tmp_path / "agentcore.toml"
    path.write_text(server.settings_toml({"p": {"kind": kind, "base_url": url}}))
    return path


async def call(path: Path, environ: dict[str, str]) -> str:
    async with Kernel.load(path, environ=environ, discover_plugins=False) as kernel:
        reply = await kernel.complete(Request("p:m", [Message.user("hi")], max_tokens=8))
    return reply.text


@pytest.mark.parametrize("kind", KINDS)
async def test_credentials_in_base_url_are_sent_as_basic_auth(
    loopback_provider: LoopbackServer, tmp_path: Path, kind: str, log_lines: list[str]
) -> None:
    loopback_provider.script(Scenario.text("Through the gateway."))
    text = await call(settings(loopback_provider, tmp_path, kind), {API_KEY_ENV: API_KEY})
    assert text == "Through the gateway."
    (sent,) = loopback_provider.calls
    assert sent.path.startswith("/p/")  # the URL without its userinfo
    assert sent.headers["authorization"] == BASIC
    own = KEY_HEADERS.get(kind)
    if own is not None:
        assert sent.headers[own] == API_KEY
        assert not any("not sent" in line for line in log_lines)
    else:
        assert API_KEY not in str(sent.headers)
        (warning,) = [line for line in log_lines if "the key is not sent" in line]
        assert "provider 'p'" in warning
    assert not any(PASSWORD in line for line in log_lines)


@pytest.mark.parametrize("kind", ["openai", "openai-responses"])
async def test_a_bearer_kind_needs_no_key_when_the_url_carries_credentials(
    loopback_provider: LoopbackServer, tmp_path: Path, kind: str
) -> None:
    loopback_provider.script(Scenario.text("No key needed."))
    assert await call(settings(loopback_provider, tmp_path, kind), {}) == "No key needed."
    assert loopback_provider.calls[0].headers["authorization"] == BASIC


async def test_an_authorization_header_in_settings_wins_over_url_credentials(
    loopback_provider: LoopbackServer, tmp_path: Path, log_lines: list[str]
) -> None:
    loopback_provider.script(Scenario.text("Explicit."))
    url = loopback_provider.base_url("openai", "p").replace("http://", f"http://{WRITTEN}@")
    path = tmp_path / "agentcore.toml"
    options = {"kind": "openai", "base_url": url, "headers": {"Authorization": "Token tk-1234567"}}
    path.write_text(loopback_provider.settings_toml({"p": options}))
    assert await call(path, {API_KEY_ENV: API_KEY}) == "Explicit."
    assert loopback_provider.calls[0].headers["authorization"] == "Token tk-1234567"
    assert any("the credentials in base_url are not sent" in line for line in log_lines)
