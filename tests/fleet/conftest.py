"""The fleet tests: replicas as real `agentcore serve` processes (or kernels) sharing one
real Redis and one loopback provider. The MCPL server side comes from the end-to-end
suite's helpers (`e2e_support`: a scriptable server over a real stdio subprocess)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("e2e_support", "fleet_rig", "deploy_rig")


@pytest.fixture
async def hub() -> AsyncIterator[Any]:
    """The scriptable MCPL server side, over real stdio subprocesses (`e2e_support`)."""
    from e2e_support import make_hub

    hub = await make_hub("stdio").start()
    try:
        yield hub
    finally:
        await hub.stop()
