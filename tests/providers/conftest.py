"""Fixtures for the provider tests: respx-mocked adapters and the loopback server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("providers_support")


@pytest.fixture
def httpx_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adapters on httpx's own transport, which respx intercepts.

    respx mocks below httpx at httpcore, so the respx tests swap `StreamTransport`
    for httpx's default; the loopback tests and `test_transport.py` run the real one.
    """
    import httpx

    import agentcore.providers.http

    monkeypatch.setattr(
        agentcore.providers.http, "open_transport", lambda config: httpx.AsyncHTTPTransport()
    )
