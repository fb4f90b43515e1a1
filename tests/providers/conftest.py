"""The provider tests' shared helpers (`providers_support`), importable with assert rewriting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("providers_support")
