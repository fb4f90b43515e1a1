"""`agentcore serve` (a real subprocess) re-reading its settings on SIGHUP, over stdio and
WebSocket: a narrowed grant is refused as soon as the `featureSets/update` Request is out
(before the server's receipt), a file that no longer validates changes nothing and the log
says why, a widened grant is allowed once the server's receipt has come, and every change
is traced as `mcpl:policy_change` in the JSONL file."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e_rig import PROVIDERS, settings_sections
from e2e_support import (
    FULL_GRANT,
    TIMEOUT_S,
    Hub,
    finish,
    hold_policy_updates,
    rewrite_settings,
    serve,
    until,
)

from agentcore.testing import LoopbackServer

DENIED = {
    "code": -32002,
    "message": "Capability denied: modelInfo",
    "data": {"capability": "modelInfo"},
}


async def read_stderr_until(process: asyncio.subprocess.Process, text: str) -> str:
    """Read the host's stderr until a line holds `text`; returns what was read."""
    assert process.stderr is not None
    lines: list[str] = []
    async with asyncio.timeout(TIMEOUT_S):
        while not lines or text not in lines[-1]:
            line = await process.stderr.readline()
            assert line, f"stderr ended before {text!r}: {''.join(lines)}"
            lines.append(line.decode())
    return "".join(lines)


def grant(value: list[str]) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["mcpl"]["servers"]["srv"]["grant"] = value

    return change


async def test_serve_applies_a_changed_grant_on_sighup(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    log = tmp_path / "traces.jsonl"
    settings = loopback_settings(
        PROVIDERS,
        sections={
            **settings_sections(hub, {"srv": hub.config("srv")}),
            "traces": {"jsonl": str(log)},
        },
    )
    process = await serve(settings)
    try:
        session = await hub.next_session()
        await session.ready.wait()
        assert (await session.call("model/info", {})).result["id"]
        updates = session.requests_of

        # Narrowing: refused from the Request on, while the receipt is still held.
        release = hold_policy_updates(session)
        rewrite_settings(settings, grant(["inferenceRequest", "inferenceRequest.streaming"]))
        process.send_signal(signal.SIGHUP)
        await until(lambda: len(updates("featureSets/update")) == 2)
        assert (await session.call("model/info", {})).error == DENIED
        release.set()

        # A file that no longer validates: nothing changes, and stderr says why.
        good = settings.read_text()
        settings.write_text(good.replace("grant = [", 'grant = "all"\nx = ['))
        process.send_signal(signal.SIGHUP)
        early = await read_stderr_until(process, "was not applied, nothing changed")
        settings.write_text(good)

        # Widening: refused until the receipt, allowed after it.
        release = hold_policy_updates(session)
        rewrite_settings(settings, grant(FULL_GRANT))
        process.send_signal(signal.SIGHUP)
        await until(lambda: len(updates("featureSets/update")) == 3)
        assert (await session.call("model/info", {})).error == DENIED
        release.set()
        await until(lambda: log.read_text().count("mcpl:policy_change") == 2)
        assert (await session.call("model/info", {})).result["id"]

        process.send_signal(signal.SIGTERM)
        code, stdout, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    assert stdout == ""
    stderr = early + stderr
    assert "SIGHUP: re-reading the settings" in stderr
    why = early.splitlines()[-1]
    assert "mcpl.servers.srv.grant" in why, why
    # Only two featureSets/update after the initial one: the invalid file sent none.
    assert len(session.requests_of("featureSets/update")) == 3
    changes = [
        {k: t[k] for k in ("serverId", "added", "removed", "receipt")}
        for t in map(json.loads, log.read_text().splitlines())
        if t["type"] == "mcpl:policy_change"
    ]
    assert changes == [
        {"serverId": "srv", "added": [], "removed": ["modelInfo"], "receipt": "pending"},
        {"serverId": "srv", "added": ["modelInfo"], "removed": [], "receipt": "accepted"},
    ]
