"""The short soak: `bench/soak.py` with a few hundred requests and a fixed seed, every
fault at once, through a real ``agentcore serve`` on the session's real Redis (restarted
once mid-run). A failure prints the seed and the requests that went wrong; the same seed
plays the same plans (``/work/bin/wt python bench/soak.py --requests 300 --seed 16``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentcore.testing.redis import RedisServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak import Config, Soak

SEED = 16
pytestmark = pytest.mark.serial  # its stalls and holds must not be starved by other tests


async def test_the_short_soak_holds(redis_server: RedisServer) -> None:
    config = Config(requests=300, seed=SEED, stdio=2, ws=2, rounds=3, window=8, redis=redis_server)
    report = await Soak(config).run()
    assert report.ok, report.text()
