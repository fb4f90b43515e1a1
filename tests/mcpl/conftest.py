"""Shared fixtures for the MCPL connection-layer tests."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture
def log_messages() -> Iterator[list[str]]:
    """Every loguru message logged during the test."""
    messages: list[str] = []
    sink_id = logger.add(lambda m: messages.append(m.record["message"]), level="DEBUG")
    try:
        yield messages
    finally:
        logger.remove(sink_id)


@pytest.fixture
def scripted_server() -> Any:
    """Build the command and env for tests/mcpl/servers/scripted_server.py."""

    def build(**config: Any) -> tuple[list[str], dict[str, str]]:
        command = [sys.executable, str(SERVERS / "scripted_server.py")]
        return command, {"MCPL_TEST_CONFIG": json.dumps(config)}

    return build
