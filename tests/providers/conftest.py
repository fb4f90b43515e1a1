"""Fixtures for the provider tests: respx-mocked adapters and the loopback server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("providers_support")
