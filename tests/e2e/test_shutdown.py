"""Shutdown and going away, end to end: `McplHost.close()` and `agentcore serve` (a real
subprocess, signalled) with a request in flight; `agentcore serve` exiting by itself once
every server has closed; and a server that leaves in the middle of a stream.

What must hold on every one of these paths: the request gets exactly one answer (-32603
"the host is shutting down", the message `ServerConnection` sends), the provider call is
closed (the loopback server is idle), the stdio server process is gone, and the host exits 0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, ROUTING, RigFactory, settings_sections
from e2e_support import (
    RELAY,
    REPO,
    TIMEOUT_S,
    Hub,
    ServerScript,
    ServerSession,
    finish,
    pid_alive,
    serve,
    serving,
    wait_gone,
    without_agentcore_env,
)

from agentcore.kernel import Kernel
from agentcore.mcpl.connection import SHUTDOWN_MESSAGE
from agentcore.mcpl.host import McplHost
from agentcore.testing import API_KEY, LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

LIFESPAN = Path(__file__).parent / "servers" / "lifespan_server.py"
SHUTTING_DOWN = {"code": -32603, "message": SHUTDOWN_MESSAGE}
# Long enough that nothing in flight times out by itself during a test.
PATIENT = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}


def streamed(text: str = "Go on.") -> dict[str, Any]:
    return {
        "featureSet": "fs.a",
        "stream": True,
        "messages": [{"role": "user", "content": text}],
    }


async def first_chunk(session: ServerSession, rid: Any) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not session.chunks(rid):
            await asyncio.sleep(0.005)


async def in_flight(provider: LoopbackServer, count: int = 1) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while provider.in_flight < count:
            await asyncio.sleep(0.005)


@pytest.mark.parametrize(
    "case",
    [
        "streamed-after-a-chunk",
        "whole",
        "in-backoff",
        "held-at-admission",
    ],
)
async def test_host_close_answers_in_flight_requests(rig: RigFactory, case: str) -> None:
    retry = None
    if case == "in-backoff":
        retry = {"max_attempts": 3, "initial_delay_s": 30.0, "max_delay_s": 30.0, "jitter_s": 0}
    hold = {"provider_hold": {"max_wait_s": 60.0}}
    r = await rig(inference=PATIENT, retry=retry, extra=hold)
    held = None
    if case == "streamed-after-a-chunk":
        r.provider.script(Scenario.stall("Partial ", keepalive_s=0.05), provider="a")
        rid = await r.server.request("inference/request", streamed())
        await first_chunk(r.server, rid)
    elif case == "whole":
        r.provider.script(Scenario.stall(), provider="a")
        rid = await r.server.request("inference/request", {**streamed(), "stream": False})
        await in_flight(r.provider)
    else:
        first = (
            Scenario.server_error() if case == "in-backoff" else Scenario.rate_limit(retry_after=30)
        )
        r.provider.script(first, provider="a")
        rid = await r.server.request("inference/request", streamed())
        async with asyncio.timeout(TIMEOUT_S):
            while not r.traces.of("inference:retry"):
                await asyncio.sleep(0.005)
        if case == "held-at-admission":
            # The 429 holds the provider: a second request waits at admission.
            held = await r.server.request("inference/request", streamed())
            async with asyncio.timeout(TIMEOUT_S):
                while (
                    len([w for w in r.traces.of("inference:waiting") if w["reason"] == "hold"]) < 1
                ):
                    await asyncio.sleep(0.005)

    await r.close()

    answer = await r.server.answer(rid)
    assert answer.error == SHUTTING_DOWN
    chunks = [("chunk", 0, "Partial ")] if case == "streamed-after-a-chunk" else []
    assert r.server.transcript(rid) == [*chunks, ("error", SHUTTING_DOWN)]
    await r.server.wait_closed()
    assert r.server.answers(rid) == [answer]
    if held is not None:
        assert r.server.transcript(held) == [("error", SHUTTING_DOWN)]
    # The provider call was closed, not left to run.
    await r.provider.wait_idle()
    assert len(r.provider.calls) == 1
    if case in ("streamed-after-a-chunk", "whole"):
        assert r.provider.calls[0].disconnected
    if r.server.pid is not None:
        await wait_gone(r.server.pid)
    fail = r.traces.mcpl(rid)[-1]
    assert fail["type"] == "mcpl:inference_fail"
    assert fail["error"] == "The host is shutting down"


async def test_many_in_flight_requests_each_get_one_shutdown_answer(rig: RigFactory) -> None:
    r = await rig(inference=PATIENT)
    r.provider.script(*(Scenario.stall("Partial ") for _ in range(10)), provider="a")
    ids = [await r.server.request("inference/request", streamed()) for _ in range(10)]
    for rid in ids:
        await first_chunk(r.server, rid)
    await r.close()
    for rid in ids:
        assert (await r.server.answer(rid)).error == SHUTTING_DOWN
    await r.server.wait_closed()
    for rid in ids:
        assert len(r.server.answers(rid)) == 1
    await r.provider.wait_idle()


async def test_a_server_that_leaves_mid_stream(rig: RigFactory) -> None:
    r = await rig(inference=PATIENT)
    r.provider.script(Scenario.stall("Partial "), provider="a")
    rid = await r.server.request("inference/request", streamed())
    await first_chunk(r.server, rid)
    await r.server.close()  # the server goes away without waiting for its answer
    if r.server.pid is not None:
        await wait_gone(r.server.pid)
    connection = r.host.connections["srv"]
    await asyncio.wait_for(connection.wait_closed(), TIMEOUT_S)
    # Its provider call is closed, and the failure is traced once.
    await r.provider.wait_idle()
    assert r.provider.calls[0].disconnected
    async with asyncio.timeout(TIMEOUT_S):
        while len(r.traces.mcpl(rid)) < 2:
            await asyncio.sleep(0.005)
    fail = r.traces.mcpl(rid)[1:]
    assert [(f["type"], f["streamed"]) for f in fail] == [("mcpl:inference_fail", True)]


# -- agentcore serve, a real subprocess ------------------------------------------------


@pytest.fixture
def serve_settings(
    hub: Hub, loopback_settings: Callable[..., Path], tmp_path: Path
) -> Callable[..., Path]:
    def write(servers: dict[str, dict[str, Any]]) -> Path:
        return loopback_settings(
            PROVIDERS,
            inference={**PATIENT},
            sections={
                **settings_sections(hub, servers),
                "traces": {"jsonl": str(tmp_path / "traces.jsonl")},
            },
        )

    return write


def traces(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_serve_answers_in_flight_requests_when_signalled(
    hub: Hub,
    loopback_provider: LoopbackServer,
    serve_settings: Callable[..., Path],
    tmp_path: Path,
    sig: signal.Signals,
) -> None:
    async with serving(serve_settings({"srv": hub.config("srv")})) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        loopback_provider.script(Scenario.stall("Partial ", keepalive_s=0.05), provider="a")
        rid = await session.request("inference/request", streamed())
        await first_chunk(session, rid)
        code, stdout, stderr = await served.stop(sig)
    assert code == 0, stderr
    assert stdout == ""
    assert (await session.answer(rid)).error == SHUTTING_DOWN
    assert session.transcript(rid) == [("chunk", 0, "Partial "), ("error", SHUTTING_DOWN)]
    await session.wait_closed()
    assert session.unanswered_or_twice() == {}
    await loopback_provider.wait_idle()
    assert loopback_provider.calls[0].disconnected
    if session.pid is not None:
        await wait_gone(session.pid)
    assert API_KEY not in stderr
    assert "signalled: answering in-flight requests" in stderr
    seen = traces(tmp_path / "traces.jsonl")
    assert [t["type"] for t in seen if t["type"].startswith("mcpl:inference")] == [
        "mcpl:inference_start",
        "mcpl:inference_fail",
    ]
    states = [t["state"] for t in seen if t["type"] == "mcpl:server_state"]
    assert states == ["ready", "closed"]
    assert API_KEY not in (tmp_path / "traces.jsonl").read_text()


async def test_serve_exits_once_every_server_has_closed(
    hub: Hub,
    loopback_provider: LoopbackServer,
    serve_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    # Two servers: the example memory server, which exits once it has its summary,
    # and ours, which stays until the test closes it. serve exits only after both.
    memory = {
        "command": [sys.executable, str(REPO / "agentcore" / "examples" / "memory_server.py")],
        "grant": ["inferenceRequest", "inferenceRequest.streaming", "modelInfo"],
        "shutdown_grace_s": 2.0,
    }
    settings = serve_settings({"memory": memory, "srv": hub.config("srv")})
    # The memory server's feature set is not routed by name; the default takes it.
    loopback_provider.script(Scenario.text("Alice likes mornings.", model="served-x"), provider="a")
    async with serving(settings) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        log = tmp_path / "traces.jsonl"
        async with asyncio.timeout(TIMEOUT_S):
            while not (log.exists() and "mcpl:inference_complete" in log.read_text()):
                await asyncio.sleep(0.01)
        # The memory server has its answer and exits; serve keeps serving ours.
        loopback_provider.script(Scenario.text("Still here."), provider="a")
        answer = await session.infer({**streamed(), "stream": False})
        assert answer.result["content"] == "Still here."
        assert served.process.returncode is None
        await session.close()
        code, _, stderr = await served.finish()
    assert code == 0, stderr
    assert (
        "mcpl server memory stderr: summary (end_turn, served-x): Alice likes mornings." in stderr
    )
    assert "mcpl server memory: exited with 0" in stderr
    assert "every MCPL server has closed its connection" in stderr
    complete = [
        t for t in traces(tmp_path / "traces.jsonl") if t["type"] == "mcpl:inference_complete"
    ]
    assert [(t["serverId"], t["streamed"]) for t in complete] == [
        ("memory", True),
        ("srv", False),
    ]
    await loopback_provider.wait_idle()


async def test_serve_with_the_echo_example_exits_by_itself(tmp_path: Path) -> None:
    settings = tmp_path / "echo.toml"
    settings.write_text(
        f"""
[traces]
jsonl = "{tmp_path / "traces.jsonl"}"

[providers.echo]
kind = "echo"
delay_s = 0.01

[mcpl.servers.memory]
command = ["{sys.executable}", "{REPO / "agentcore" / "examples" / "memory_server.py"}"]
grant = ["inferenceRequest", "inferenceRequest.streaming", "modelInfo"]

[mcpl.routing]
default = "echo:echo-1"
"""
    )
    process = await serve(settings, without_agentcore_env())
    code, stdout, stderr = await finish(process)
    assert code == 0, stderr
    assert stdout == ""
    assert "mcpl server memory: exited with 0" in stderr
    assert "every MCPL server has closed its connection" in stderr
    seen = traces(tmp_path / "traces.jsonl")
    (complete,) = [t for t in seen if t["type"] == "mcpl:inference_complete"]
    assert complete["serverId"] == "memory"
    assert complete["streamed"] is True
    assert complete["finishReason"] == "end_turn"
    chunks = [line for line in stderr.splitlines() if "stderr: chunk " in line]
    assert chunks and "stderr: chunk 0: " in chunks[0]


async def test_serve_signalled_while_a_server_is_stuck_at_start_up(
    hub: Hub,
    loopback_provider: LoopbackServer,
    serve_settings: Callable[..., Path],
) -> None:
    # "stuck" never answers initialize (the handshake would wait 30 s); "ok" is ready.
    # A signal must not wait for the handshake: serve still exits 0 within 10 s.
    hub.scripts["stuck"] = ServerScript(answer_initialize=False)
    async with serving(
        serve_settings({"stuck": hub.config("stuck"), "ok": hub.config("ok")})
    ) as served:
        sessions = {}
        for _ in range(2):
            session = await hub.next_session()
            sessions[session.tag] = session
        await asyncio.wait_for(sessions["ok"].ready.wait(), TIMEOUT_S)
        async with asyncio.timeout(TIMEOUT_S):
            while sessions["stuck"].initialize is None:
                await asyncio.sleep(0.005)
        # The ready server is served while the other one is still starting.
        loopback_provider.script(Scenario.text("Served meanwhile."), provider="a")
        answer = await sessions["ok"].infer({**streamed(), "stream": False})
        assert answer.result["content"] == "Served meanwhile."
        code, _, stderr = await served.stop()
    assert code == 0, stderr
    for session in sessions.values():
        await session.wait_closed()
        if session.pid is not None:
            await wait_gone(session.pid)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed-after-a-chunk", "whole"])
async def test_kernel_stop_alone_ends_in_flight_requests(rig: RigFactory, stream: bool) -> None:
    # An embedding host may stop the kernel without closing the connections first:
    # the inference in flight still ends at once, with the shutdown answer.
    r = await rig(inference=PATIENT)
    r.provider.script(Scenario.stall("Partial ", keepalive_s=0.05), provider="a")
    rid = await r.server.request("inference/request", {**streamed(), "stream": stream})
    if stream:
        await first_chunk(r.server, rid)
    else:
        await in_flight(r.provider)

    await r.kernel.stop()

    answer = await r.server.answer(rid)
    assert answer.error == SHUTTING_DOWN
    chunks = [("chunk", 0, "Partial ")] if stream else []
    assert r.server.transcript(rid) == [*chunks, ("error", SHUTTING_DOWN)]
    await r.provider.wait_idle()
    assert len(r.provider.calls) == 1 and r.provider.calls[0].disconnected
    await r.close()
    assert r.server.answers(rid) == [answer]


async def test_serve_exits_non_zero_when_no_configured_server_can_start(tmp_path: Path) -> None:
    settings = tmp_path / "broken.toml"
    settings.write_text(
        f"""
[mcpl.servers.missing]
command = ["{tmp_path / "no-such-server"}"]
grant = ["inferenceRequest"]
"""
    )
    process = await serve(settings, without_agentcore_env())
    code, _, stderr = await finish(process)
    assert code == 1
    assert "none of the configured MCPL servers (missing) could start" in stderr


# -- a stdio server's own cleanup (MCP's stdio shutdown) --------------------------------


@pytest.fixture
def lifespan_settings(
    loopback_settings: Callable[..., Path], tmp_path: Path
) -> Callable[..., Path]:
    """Settings serving one `lifespan_server.py`; `**options` go into its server section."""

    def write(**options: Any) -> Path:
        server = {
            "command": [sys.executable, str(LIFESPAN)],
            "env": {
                "LIFESPAN_READY": str(tmp_path / "ready"),
                "LIFESPAN_MARKER": str(tmp_path / "marker"),
            },
            "grant": ["inferenceRequest"],
            **options,
        }
        sections = {
            "mcpl": {"servers": {"lifespan": server}, "routing": ROUTING},
            "traces": {"jsonl": str(tmp_path / "traces.jsonl")},
        }
        return loopback_settings(PROVIDERS, inference={**PATIENT}, sections=sections)

    return write


async def serving_pid(tmp_path: Path) -> int:
    """The lifespan server's pid, once it has answered the policy exchange."""
    ready = tmp_path / "ready"
    async with asyncio.timeout(TIMEOUT_S):
        while not (ready.exists() and ready.read_text()):
            await asyncio.sleep(0.01)
    return int(ready.read_text())


async def test_host_close_lets_a_stdio_server_run_its_cleanup(
    lifespan_settings: Callable[..., Path], tmp_path: Path
) -> None:
    kernel = Kernel.load(lifespan_settings(shutdown_grace_s=TIMEOUT_S))
    await kernel.start()
    host = McplHost(kernel)
    try:
        await host.start()
        assert list(host.connections) == ["lifespan"]
        await serving_pid(tmp_path)
    finally:
        await host.close()
        await kernel.stop()
    # Its stdin was closed and it was given the time to clean up: no SIGTERM cut it short.
    assert (tmp_path / "marker").read_text() == "cleaned up"


async def test_serve_lets_a_stdio_server_run_its_cleanup_when_signalled(
    lifespan_settings: Callable[..., Path], tmp_path: Path
) -> None:
    async with serving(lifespan_settings()) as served:
        await serving_pid(tmp_path)
        code, _, stderr = await served.stop()
    assert code == 0, stderr
    assert (tmp_path / "marker").read_text() == "cleaned up"
    assert "mcpl server lifespan: exited with 0" in stderr


@pytest.mark.serial  # 7 s of the server's own waits inside serve's 10 s
async def test_serve_still_exits_in_time_when_a_server_ignores_eof_and_sigterm(
    lifespan_settings: Callable[..., Path], tmp_path: Path
) -> None:
    # The default grace: closing stdin, SIGTERM and SIGKILL all fit in serve's 10 s.
    settings = lifespan_settings(
        env={
            "LIFESPAN_READY": str(tmp_path / "ready"),
            "LIFESPAN_MARKER": str(tmp_path / "marker"),
            "LIFESPAN_STUBBORN": "1",
        }
    )
    async with serving(settings) as served:
        pid = await serving_pid(tmp_path)
        code, _, stderr = await served.stop()
    assert code == 0, stderr
    assert "after its stdin closed; sending SIGTERM" in stderr
    assert "after SIGTERM; sending SIGKILL" in stderr
    assert f"mcpl server lifespan: exited with {-signal.SIGKILL}" in stderr
    assert not pid_alive(pid)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("transport", ["stdio"])
async def test_serve_from_another_directory_takes_relative_paths_from_the_settings_folder(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """A relative server script, the folder a stdio server starts in, and the traces file
    are the settings file's, whatever directory `agentcore serve` runs from."""
    deploy = tmp_path / "deploy"
    (deploy / "servers").mkdir(parents=True)
    shutil.copy(RELAY, deploy / "relay.py")
    shutil.copy(RELAY, deploy / "servers" / "relay.py")
    relative = [sys.executable, "relay.py"]
    servers = {
        "here": {**hub.config("here"), "command": relative},
        "sub": {**hub.config("sub"), "command": relative, "cwd": "servers"},
    }
    settings = loopback_settings(
        PROVIDERS,
        inference=PATIENT,
        sections={**settings_sections(hub, servers), "traces": {"jsonl": "traces.jsonl"}},
        name="deploy/agentcore.toml",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with serving(Path("..") / "deploy" / settings.name, cwd=elsewhere) as served:
        sessions = {}
        for _ in servers:
            session = await hub.next_session()
            await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
            sessions[session.tag] = session
        assert sessions["here"].pid is not None and sessions["sub"].pid is not None
        assert Path(os.readlink(f"/proc/{sessions['here'].pid}/cwd")) == deploy
        assert Path(os.readlink(f"/proc/{sessions['sub'].pid}/cwd")) == deploy / "servers"
        loopback_provider.script(Scenario.text("Found it."), provider="a")
        answer = await sessions["here"].infer({**streamed(), "stream": False})
        assert answer.result["content"] == "Found it."
        for session in sessions.values():
            await session.close()
        code, _, stderr = await served.finish()
    assert code == 0, stderr
    assert "mcpl:inference_complete" in (deploy / "traces.jsonl").read_text()
    assert list(elsewhere.iterdir()) == []
