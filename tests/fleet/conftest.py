"""The fleet tests: replicas as real `agentcore serve` processes (or kernels) sharing one
real Redis and one loopback provider. The MCPL server side comes from the end-to-end
suite's helpers (`e2e_support`: a scriptable server over a real stdio subprocess)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("e2e_support", "fleet_rig")
