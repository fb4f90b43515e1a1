"""Every selection of test folders collects, in any order.

Under ``--import-mode=importlib`` each suite's conftest puts its own folder on
`sys.path`; a test module that imports a shared name (``from conftest import``)
gets whichever suite's file came first, so one order of folders works and
another stops collection. This runs pytest's collection as a user would, in a
subprocess, over orders that once failed and over every folder both ways round.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(
    str(folder.relative_to(ROOT))
    for folder in {path.parent for path in ROOT.glob("tests/*/test_*.py")}
    | {path.parent for path in ROOT.glob("plugins/*/tests/test_*.py")}
)

ORDERS = [
    ["tests/e2e", "plugins/agentcore-mcpl-router", "tests/kernel"],  # issue 9, item 16
    ["tests/kernel", "tests/e2e", "tests/providers"],
    ["plugins/agentcore-retry/tests", "tests/kernel", "tests/mcpl", "tests/e2e"],
    FOLDERS,
    FOLDERS[::-1],
]


@pytest.mark.parametrize("order", ORDERS, ids=lambda order: ",".join(order))
def test_folders_collect_in_any_order(order: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *order],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = [line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line]
    for folder in order:  # every folder's tests were collected
        assert any(path.startswith(f"{folder}/") for path in collected), folder
