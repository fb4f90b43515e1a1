"""`agentcore infer --conversation ID [--turn N]`, a real subprocess: it connects to the
configured MCPL servers (stdio and WebSocket), runs one host turn with them taking part,
and closes them; Ctrl-C and SIGTERM abort the turn, and the servers hear ``aborted``."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import (
    AGENTCORE,
    REPO,
    TIMEOUT_S,
    Hub,
    ServerSession,
    finish,
    without_agentcore_env,
)
from test_host_turns import ALL_HOOKS, LIFECYCLE, inj, injecting, lifecycle, script

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

PATIENT = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}


@pytest.fixture
def infer_settings(
    hub: Hub, loopback_settings: Callable[..., Path], tmp_path: Path
) -> Callable[..., Path]:
    def write(servers: dict[str, dict[str, Any]]) -> Path:
        return loopback_settings(
            PROVIDERS,
            inference=PATIENT,
            sections={
                **settings_sections(hub, servers),
                "traces": {"jsonl": str(tmp_path / "traces.jsonl")},
            },
        )

    return write


async def infer(settings: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        AGENTCORE,
        "infer",
        "--settings",
        str(settings),
        "--model",
        "a:claude-e2e",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=without_agentcore_env(),
    )


async def test_infer_conversation_runs_one_turn_with_the_servers(
    hub: Hub,
    loopback_provider: LoopbackServer,
    infer_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    hub.scripts["memory"] = script(injecting(inj("system", "The user likes tea.")))
    settings = infer_settings({"memory": hub.config("memory", [*ALL_HOOKS, LIFECYCLE])})
    loopback_provider.script(Scenario.text("Tea it is.", input_tokens=9, output_tokens=3))
    process = await infer(settings, "--conversation", "conv_9", "--turn", "2", "--json", "Drink?")
    session = await hub.next_session()
    code, stdout, stderr = await finish(process)
    assert code == 0, stderr
    assert json.loads(stdout)["content"] == "Tea it is."
    body = loopback_provider.calls[0].body
    assert body["system"] == "The user likes tea."
    (hook,) = session.requests("context/beforeInference")
    assert (hook["conversationId"], hook["turnIndex"], hook["userMessage"]) == (
        "conv_9",
        2,
        "Drink?",
    )
    await session.wait_closed()  # closed cleanly by infer, every request answered
    assert session.unanswered_or_twice() == {}
    phases = [n["phase"] for n in session.notifications("inference/lifecycle")]
    assert phases == ["started", "completed"]
    seen = read_jsonl(tmp_path / "traces.jsonl")
    (trace,) = [t for t in seen if t["type"] == "mcpl:context_hook"]
    assert (trace["serverId"], trace["outcome"], trace["injections"]) == ("memory", "ok", 1)


# Serial: in two full parallel runs the ctrl-c cases hung past 10 s on one worker after
# whatever that worker ran before (never alone, never in a fresh process); the cause is not
# found yet (closing note of 2026-12-06), so the check runs where it is meaningful.
@pytest.mark.serial
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "SIGTERM"]
)
async def test_a_signalled_infer_aborts_the_turn(
    hub: Hub,
    loopback_provider: LoopbackServer,
    infer_settings: Callable[..., Path],
    sig: signal.Signals,
    code: int,
) -> None:
    hub.scripts["watcher"] = script()
    settings = infer_settings({"watcher": hub.config("watcher", [LIFECYCLE])})
    loopback_provider.script(Scenario.stall("Let me think ", keepalive_s=0.05), provider="a")
    process = await infer(settings, "--conversation", "conv_9", "Think hard.")
    try:
        session: ServerSession = await hub.next_session()
        await lifecycle(session, 1)  # the turn has started
        process.send_signal(sig)
        got, _, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert got == code, stderr
    await session.wait_closed(TIMEOUT_S)
    notes = session.notifications("inference/lifecycle")
    assert [n["phase"] for n in notes] == ["started", "aborted"]
    assert notes[0]["inferenceId"] == notes[1]["inferenceId"]
    await loopback_provider.wait_idle()


async def test_turn_needs_conversation(loopback_settings: Callable[..., Path]) -> None:
    process = await infer(loopback_settings(PROVIDERS), "--turn", "1", "hi")
    code, stdout, stderr = await finish(process)
    assert code == 2
    assert "--turn needs --conversation" in stderr
    assert stdout == ""


@pytest.mark.parametrize(
    ("scenario", "streamed", "says"),
    [
        (Scenario.refusal("I can't help with that."), True, "The model refused to answer"),
        (Scenario.refusal("I can't help with that."), False, "The model refused to answer"),
        (Scenario.tool_use(), True, "The model called a tool (get_weather), and agentcore infer"),
        (Scenario.text("All done."), False, None),
    ],
    ids=["refusal-stream", "refusal-whole", "tool_use", "end_turn"],
)
async def test_the_lifecycle_phase_and_the_exit_code_agree(
    hub: Hub,
    loopback_provider: LoopbackServer,
    infer_settings: Callable[..., Path],
    scenario: Scenario,
    streamed: bool,
    says: str | None,
) -> None:
    """A turn infer exits 1 for is ``failed`` to the servers, never ``completed``: one rule
    (`ending_of`) decides both."""
    hub.scripts["watcher"] = script()
    settings = infer_settings({"watcher": hub.config("watcher", [LIFECYCLE])})
    loopback_provider.script(scenario, provider="a")
    mode = "--stream" if streamed else "--no-stream"
    process = await infer(settings, "--conversation", "conv_9", mode, "Help?")
    session = await hub.next_session()
    code, _, stderr = await finish(process)
    await session.wait_closed()
    phases = [n["phase"] for n in session.notifications("inference/lifecycle")]
    if says is None:
        assert (code, phases) == (0, ["started", "completed"]), stderr
    else:
        assert (code, phases) == (1, ["started", "failed"]), stderr
        assert says in stderr
