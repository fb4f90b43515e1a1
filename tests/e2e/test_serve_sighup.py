"""`agentcore serve` (a real subprocess) living with change, over stdio and WebSocket.

On SIGHUP it re-reads its settings: a narrowed grant is refused as soon as the
`featureSets/update` Request is out (before the server's receipt), a file that no longer
validates changes nothing and the log says why, a widened grant is allowed once the
server's receipt has come, and every change is traced as `mcpl:policy_change` in the JSONL
file. And it follows a server's manifest change (§17) and answers its push events (§9)
as a host without an event plugin does."""

from __future__ import annotations

import asyncio
import copy
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e_rig import PROVIDERS, settings_sections
from e2e_support import (
    FULL_GRANT,
    MANIFEST,
    TIMEOUT_S,
    Hub,
    ServerScript,
    hold_policy_updates,
    rewrite_settings,
    routed_model_info,
    serving,
    until,
)

from agentcore.mcpl.digest import manifest_digest
from agentcore.testing import LoopbackServer
from agentcore.testing.serve import read_jsonl

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
    async with serving(settings) as served:
        session = await hub.next_session()
        await session.ready.wait()
        assert routed_model_info(await session.call("model/info", {}))
        updates = session.requests_of

        # Narrowing: refused from the Request on, while the receipt is still held.
        release = hold_policy_updates(session)
        rewrite_settings(settings, grant(["inferenceRequest", "inferenceRequest.streaming"]))
        served.process.send_signal(signal.SIGHUP)
        await until(lambda: len(updates("featureSets/update")) == 2)
        assert (await session.call("model/info", {})).error == DENIED
        release.set()

        # A file that no longer validates: nothing changes, and stderr says why.
        good = settings.read_text()
        settings.write_text(good.replace("grant = [", 'grant = "all"\nx = ['))
        served.process.send_signal(signal.SIGHUP)
        early = await read_stderr_until(served.process, "was not applied, nothing changed")
        settings.write_text(good)

        # Widening: refused until the receipt, allowed after it.
        release = hold_policy_updates(session)
        rewrite_settings(settings, grant(FULL_GRANT))
        served.process.send_signal(signal.SIGHUP)
        await until(lambda: len(updates("featureSets/update")) == 3)
        assert (await session.call("model/info", {})).error == DENIED
        release.set()
        await until(lambda: log.read_text().count("mcpl:policy_change") == 2)
        assert routed_model_info(await session.call("model/info", {}))

        code, stdout, stderr = await served.stop()
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
        for t in read_jsonl(log)
        if t["type"] == "mcpl:policy_change"
    ]
    assert changes == [
        {"serverId": "srv", "added": [], "removed": ["modelInfo"], "receipt": "pending"},
        {"serverId": "srv", "added": ["modelInfo"], "removed": [], "receipt": "accepted"},
    ]


async def test_serve_offers_a_refused_policy_again_on_a_later_sighup(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """The server refuses the policy a SIGHUP brings (``fallback: "mcp-only"``): MCPL is
    off. Its operator fixes the server and sends SIGHUP again, the file unchanged: the
    policy is offered again, accepted, and MCPL is on in the same session."""
    log = tmp_path / "traces.jsonl"
    settings = loopback_settings(
        PROVIDERS,
        sections={
            **settings_sections(hub, {"srv": hub.config("srv", ["inferenceRequest"])}),
            "traces": {"jsonl": str(log)},
        },
    )
    async with serving(settings) as served:
        session = await hub.next_session()
        await session.ready.wait()
        accepting = session.script.receipt
        session.script.receipt = {"accepted": False, "fallback": "mcp-only", "reason": "no"}
        rewrite_settings(settings, grant(FULL_GRANT))
        served.process.send_signal(signal.SIGHUP)
        await until(lambda: log.exists() and '"receipt": "refused"' in log.read_text())
        refused = await session.call("model/info", {})
        assert refused.error["data"] == {"capability": "modelInfo", "reason": "policy_refused"}

        session.script.receipt = accepting
        served.process.send_signal(signal.SIGHUP)
        await until(lambda: '"receipt": "accepted"' in log.read_text())
        assert routed_model_info(await session.call("model/info", {}))
        code, _, stderr = await served.stop()
    assert code == 0, stderr
    offers = session.requests_of("featureSets/update")
    assert len(offers) == 3  # the initial one, the refused one, the one offered again
    assert offers[2] == offers[1]
    assert "modelInfo" in offers[2]["effectiveCapabilities"]


async def test_serve_follows_a_manifest_change_and_answers_push_events(
    hub: Hub,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    log = tmp_path / "traces.jsonl"
    manifest = copy.deepcopy(MANIFEST)
    manifest["pushEvents"] = True
    manifest["featureSets"]["fs.push"] = {"description": "events", "uses": ["pushEvents"]}
    hub.scripts["srv"] = ServerScript(manifest=manifest)
    settings = loopback_settings(
        PROVIDERS,
        sections={
            **settings_sections(hub, {"srv": hub.config("srv", [*FULL_GRANT, "pushEvents"])}),
            "traces": {"jsonl": str(log)},
        },
    )
    async with serving(settings) as served:
        session = await hub.next_session()
        await session.ready.wait()
        push = {
            "featureSet": "fs.push",
            "eventId": "evt_1",
            "timestamp": "2026-01-23T10:30:00Z",
            "payload": {"content": [{"type": "text", "text": "hello"}]},
        }
        # serve has no plugin that acts on events: refused, with a reason.
        answer = await session.call("push/event", push)
        assert answer.result == {
            "accepted": False,
            "reason": "no plugin on this host acts on push events",
        }
        changed = copy.deepcopy(manifest)
        del changed["featureSets"]["fs.push"]
        changed["revision"] = manifest_digest(changed)
        session.script.manifest = changed
        await session.notify(
            "mcpl/manifestChanged", {"revision": changed["revision"], "domains": ["featureSets"]}
        )
        await until(lambda: log.exists() and "mcpl:manifest_change" in log.read_text())
        gone = await session.call("push/event", {**push, "eventId": "evt_2"})
        assert gone.error["code"] == -32003
        code, _, stderr = await served.stop()
    assert code == 0, stderr
    [receipt] = [t for t in read_jsonl(log) if t["type"] == "mcpl:manifest_change"]
    assert receipt["impacts"] == [
        {"impact": "feature-degraded", "disposition": "applied", "featureSet": "fs.push"}
    ]
    assert "manifest changed: domains featureSets" in stderr
