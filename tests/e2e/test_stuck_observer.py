"""A stuck `async def on_trace` plugin, installed by entry point, costs `agentcore infer` and
`agentcore serve` nothing (issue 9, item 2).

The plugin is a real distribution on the subprocess's path (a module and its
``.dist-info`` with an ``agentcore.plugins`` entry point, as pip lays them out). It
writes down the first event it is given and then never returns: an `infer` or an
MCPL answer that waited for it would never come (the subprocess's or the answer's
timeout fails the test). No clock is read here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_support import TIMEOUT_S, Hub

from agentcore.testing import LoopbackServer, Scenario

PLUGIN = "stuck-observer"
CANCELLED = "(it was still busy at shutdown and was cancelled)"

_MODULE = """
import asyncio
import os

from agentcore import hookimpl


@hookimpl
async def on_trace(event):
    with open(os.environ["ACME_STUCK_SEEN"], "a", encoding="utf-8") as seen:
        seen.write(event.type + "\\n")
    await asyncio.Event().wait()  # never set
"""


@pytest.fixture
def stuck_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a subprocess that has the stuck plugin installed, and the file
    where the plugin writes down what it was given."""
    site = tmp_path / "site"
    (site / "acme_stuck_observer-1.0.dist-info").mkdir(parents=True)
    (site / "acme_stuck_observer.py").write_text(textwrap.dedent(_MODULE))
    info = site / "acme_stuck_observer-1.0.dist-info"
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-stuck-observer\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(f"[agentcore.plugins]\n{PLUGIN} = acme_stuck_observer\n")
    (info / "RECORD").write_text("")
    seen = tmp_path / "stuck-seen.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["ACME_STUCK_SEEN"] = str(seen)
    return env, seen


def test_infer_finishes_with_a_stuck_observer(
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    stuck_env: tuple[dict[str, str], Path],
) -> None:
    env, seen = stuck_env
    # Priced: an unpriced model's warning trace would be one more event it cannot take.
    price = {"models": {"claude-x": {"price": {"input": 1.0, "output": 1.0}}}}
    settings = loopback_settings({"a": {"kind": "anthropic", **price}})
    loopback_provider.script(Scenario.text("Still answered."), provider="a")
    command = ["infer", "--settings", str(settings), "--model", "a:claude-x", "Hi"]
    done = subprocess.run(
        [sys.executable, "-m", "agentcore", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Still answered.\n"
    assert seen.read_text() == "inference:start\n"  # it was loaded, and stuck on the first
    # inference:complete is what it could not take.
    assert f"plugin '{PLUGIN}' could not take 1 observer events {CANCELLED}" in done.stderr


async def test_serve_answers_with_a_stuck_observer(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    stuck_env: tuple[dict[str, str], Path],
) -> None:
    env, seen = stuck_env
    settings = loopback_settings(
        {"a": "anthropic"},
        sections={"mcpl": {"servers": {"srv": hub.config("srv")}, "routing": {"default": "a:m"}}},
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentcore",
        "serve",
        "--settings",
        str(settings),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for text in ("First answer.", "Second answer."):
            loopback_provider.script(Scenario.text(text), provider="a")
            answer = await session.infer(
                {"featureSet": "fs.a", "messages": [{"role": "user", "content": "Hi"}]}
            )
            assert answer.result["content"] == text
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    # Stuck on the first (the server's ready state), for good.
    assert seen.read_text() == "mcpl:server_state\n"
    log = stderr.decode()
    assert f"plugin '{PLUGIN}' could not take" in log and CANCELLED in log
