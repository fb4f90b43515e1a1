"""`agentcore serve` signalled while it starts, a real subprocess: SIGTERM and SIGINT exit
0 (docs/cli.md) and SIGHUP re-reads the settings, at every moment of start-up: while the
kernel loads its plugins (the slow part: a plugin installed for the test, on PYTHONPATH,
holds its import on a FIFO until the signal has been sent), when serve has written its
first line, and once its server is ready. Each case waits for its moment by what the
process does (opens the FIFO, writes a line), never by time."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
from pathlib import Path

import pytest
from e2e_support import AGENTCORE, REPO, TIMEOUT_S, finish, without_agentcore_env

from agentcore.testing.server import to_toml

LIFESPAN = Path(__file__).parent / "servers" / "lifespan_server.py"
MOMENTS = ["loading", "first-line", "ready"]
READY = "mcpl server s: ready"


def settings(tmp_path: Path) -> Path:
    server = {
        "command": [sys.executable, str(LIFESPAN)],
        "env": {"LIFESPAN_READY": str(tmp_path / "ready"), "LIFESPAN_MARKER": str(tmp_path / "m")},
        "grant": ["inferenceRequest"],
    }
    path = tmp_path / "agentcore.toml"
    path.write_text(to_toml({"mcpl": {"servers": {"s": server}}}))
    return path


def gate_plugin(tmp_path: Path) -> tuple[Path, Path]:
    """A plugin (entry point ``startup-gate``) whose import waits until its FIFO is opened
    for writing and closed again; returns the folder to put on PYTHONPATH and the FIFO."""
    site, fifo = tmp_path / "site", tmp_path / "gate"
    os.mkfifo(fifo)
    info = site / "startup_gate-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: startup-gate\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentcore.plugins]\nstartup-gate = startup_gate\n")
    (site / "startup_gate.py").write_text(f"open({str(fifo)!r}).read()\n")
    return site, fifo


async def open_gate(fifo: Path) -> int:
    """The FIFO's writing end, once the plugin's import has opened it to read: the kernel
    is then loading, and stays so until the end is closed."""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            try:
                return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:  # ENXIO: no reader yet
                if exc.errno != errno.ENXIO:
                    raise
            await asyncio.sleep(0.01)


class Serve:
    """One `agentcore serve`, its stderr read line by line as it comes."""

    def __init__(self, process: asyncio.subprocess.Process, gate: Path) -> None:
        self.process = process
        self.gate = gate
        self.lines: list[str] = []

    async def seen(self, containing: str) -> None:
        """A line holding `containing`, read already or read on for."""
        if not any(containing in line for line in self.lines):
            await self.line(containing)

    async def line(self, containing: str = "") -> str:
        """Read on until a line holding `containing` (any line: the next one)."""
        assert self.process.stderr is not None
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                raw = await self.process.stderr.readline()
                assert raw, f"serve ended before a line with {containing!r}: {self.lines}"
                self.lines.append(raw.decode())
                if containing in self.lines[-1]:
                    return self.lines[-1]

    async def signal_at(self, moment: str, sig: signal.Signals) -> None:
        """Send `sig` at `moment` of the start-up."""
        held = await open_gate(self.gate)
        if moment == "loading":
            self.process.send_signal(sig)
            os.close(held)  # the load goes on only now
            return
        os.close(held)
        await self.line("" if moment == "first-line" else READY)
        self.process.send_signal(sig)

    async def end(self) -> tuple[int, str]:
        code, stdout, stderr = await finish(self.process)
        return code, "".join(self.lines) + stdout + stderr


async def start(tmp_path: Path) -> Serve:
    site, gate = gate_plugin(tmp_path)
    process = await asyncio.create_subprocess_exec(
        AGENTCORE,
        "serve",
        "--settings",
        str(settings(tmp_path)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env={**without_agentcore_env(), "PYTHONPATH": str(site)},
    )
    return Serve(process, gate)


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_while_starting_exits_0(
    tmp_path: Path, moment: str, sig: signal.Signals
) -> None:
    serve = await start(tmp_path)
    try:
        await serve.signal_at(moment, sig)
        code, output = await serve.end()
    finally:
        if serve.process.returncode is None:
            serve.process.kill()
    assert code == 0, output
    assert "Aborted!" not in output and "Traceback" not in output


@pytest.mark.parametrize("moment", MOMENTS)
async def test_a_sighup_while_starting_rereads_the_settings_and_serve_goes_on(
    tmp_path: Path, moment: str
) -> None:
    serve = await start(tmp_path)
    try:
        await serve.signal_at(moment, signal.SIGHUP)
        await serve.seen(READY)
        await serve.seen("SIGHUP: re-reading the settings")
        await serve.seen("reload: applying")
        assert serve.process.returncode is None  # still serving
        serve.process.send_signal(signal.SIGTERM)
        code, output = await serve.end()
    finally:
        if serve.process.returncode is None:
            serve.process.kill()
    assert code == 0, output
    assert "Traceback" not in output
