"""A server that drops every session right after its handshake is reconnected with a
backoff that grows, and is reported crash-looping (issue 22).

`agentcore serve` (a real subprocess) with ``reconnect = true`` serves the relay server (a
real stdio subprocess, which exits as soon as the test closes its side) or a real
WebSocket server; the test ends each session as soon as it is ready. The waits the host
traces grow until the maximum, each session arrives no sooner than its wait after the
last one ended, and from ``crash_loop_after`` on the server is reported crash-looping:
in the traces, the log and the console's ``/status``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import TIMEOUT_S, Hub, serving

from agentcore.testing import LoopbackServer
from agentcore.testing.serve import read_jsonl

INITIAL_S = 0.1
MAX_S = 1.6
CRASH_LOOP_AFTER = 4
SESSIONS = 7  # the first and six reconnects: the fifth wait reaches the maximum


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def status(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"http://127.0.0.1:{port}/status") as response,
    ):
        assert response.status == 200
        data: dict[str, Any] = await response.json()
        return data


async def test_a_server_that_drops_every_session_is_reconnected_ever_later_and_reported(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    server = hub.config(
        "srv",
        reconnect=True,
        reconnect_initial_delay_s=INITIAL_S,
        reconnect_max_delay_s=MAX_S,
        reconnect_reset_after_s=60.0,
        crash_loop_after=CRASH_LOOP_AFTER,
    )
    traces = tmp_path / "traces.jsonl"
    port = free_port()
    extra = {"traces": {"jsonl": str(traces)}, "console": {"listen": f"127.0.0.1:{port}"}}
    settings = loopback_settings(
        PROVIDERS, sections={**settings_sections(hub, {"srv": server}), **extra}
    )
    async with serving(settings) as served:
        ended: list[float] = []  # when the test closed each session
        arrived: list[float] = []  # when each session reached the test
        for n in range(SESSIONS):
            session = await hub.next_session(timeout=TIMEOUT_S + MAX_S)
            arrived.append(time.monotonic())
            await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
            if n == SESSIONS - 1:
                # Up again, but not yet for reconnect_reset_after_s: still crash-looping.
                async with asyncio.timeout(TIMEOUT_S):
                    while (srv := (await status(port))["servers"][0])["state"] != "ready":
                        await asyncio.sleep(0.05)
                assert srv["crashLooping"] is True
                break
            ended.append(time.monotonic())
            await session.close()
        code, _, stderr = await served.stop()
    assert code == 0, stderr

    states = [t for t in read_jsonl(traces) if t["type"] == "mcpl:server_state"]
    waits = [t for t in states if t["state"] == "reconnecting"]
    assert [t["attempt"] for t in waits] == list(range(1, SESSIONS))
    delays = [t["delayMs"] / 1000 for t in waits]
    # Each wait is between half and all of initial * 2**n, capped: never shorter than the
    # one before until the cap, and the fifth is at least 4 times the first.
    assert all(INITIAL_S / 2 <= d <= MAX_S for d in delays), delays
    uncapped = delays[:5]
    assert uncapped == sorted(uncapped), delays
    assert delays[4] >= 4 * delays[0], delays
    # The waits were waited: each session came no sooner than its wait after the last ended.
    for n, delay in enumerate(delays):
        assert arrived[n + 1] - ended[n] >= delay, (n, arrived, ended, delays)
    # Crash-looping from the crash_loop_after-th reconnect on, and said so.
    looping = [t["crashLooping"] for t in waits]
    assert looping == [n >= CRASH_LOOP_AFTER for n in range(1, SESSIONS)]
    assert all(t["error"].startswith("session lost") for t in waits)
    readies = [t for t in states if t["state"] == "ready"]
    assert len(readies) == SESSIONS  # the first session's, then one per reconnect
    assert [t.get("crashLooping") for t in readies[1:]] == looping
    assert stderr.count("mcpl server srv: crash-looping: 4 attempts in a row") == 1
