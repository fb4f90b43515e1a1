"""``agentcore serve`` as a real subprocess, its traces, and waiting on processes: the
helpers agentcore's end-to-end tests and its benches share."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentcore.markers import hookimpl
from agentcore.testing.mcpl_server import TIMEOUT_S
from agentcore.tracing import TraceEvent

AGENTCORE = str(Path(sys.executable).with_name("agentcore"))
"""The ``agentcore`` command of the running interpreter's environment."""

# -- agentcore serve, a real subprocess --------------------------------------------


async def serve(
    settings: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    *,
    args: Sequence[str] = (),
) -> asyncio.subprocess.Process:
    """``agentcore serve --settings SETTINGS [ARGS]``, its output piped."""
    return await asyncio.create_subprocess_exec(
        AGENTCORE,
        "serve",
        "--settings",
        str(settings),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )


class Served:
    """A running ``agentcore serve`` (`serving`): its process, and how to stop it."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Signal it (SIGTERM: a graceful stop), unless it has exited, and `finish`: its
        exit code and output."""
        if self.process.returncode is None:
            self.process.send_signal(sig)
        return await finish(self.process)

    async def finish(self) -> tuple[int, str, str]:
        """Wait for it to exit by itself (`finish`): its exit code and output."""
        return await finish(self.process)


@contextlib.asynccontextmanager
async def serving(
    settings: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    *,
    args: Sequence[str] = (),
) -> AsyncIterator[Served]:
    """``agentcore serve`` for the block: stop it inside with ``await served.stop()``;
    whatever way the block leaves, a process still running is killed and reaped."""
    process = await serve(settings, env, cwd, args=args)
    try:
        yield Served(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def without_agentcore_env() -> dict[str, str]:
    """This environment less any AGENTCORE_* overrides, so only the settings file counts."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}


async def finish(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    """Wait for the process to exit (at most 10 s: docs/cli.md's bound) and read its output."""
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 10.0)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError("agentcore serve did not exit within 10 s") from None
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


# -- traces ----------------------------------------------------------------------


class TraceCapture:
    """A plugin that keeps every trace (``Kernel.load(..., plugins={"capture": it})``)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.events.append(event.to_dict())

    def of(self, *types: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] in types]

    def mcpl(self, request_id: Any) -> list[dict[str, Any]]:
        """The mcpl:* traces of one request, without their timestamps."""
        return [
            {k: v for k, v in e.items() if k != "timestamp"}
            for e in self.events
            if e["type"].startswith("mcpl:") and e.get("requestId") == request_id
        ]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects on a JSONL file's whole lines, [] while it does not exist.

    A process may be appending as this reads (``agentcore serve``'s trace sink, a server's
    log): a line is whole once its newline is written, so the text after the last newline
    is left for the next read. Split on "\\n" only: JSON text may hold U+2028 or U+0085,
    which ``str.splitlines`` also splits on.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while we read
        return False


async def wait_gone(pid: int, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still running")
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- live changes ---------------------------------------------------------------------


def rewrite_settings(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a settings file in place, as an operator would before sending SIGHUP."""
    import tomllib

    from agentcore.testing.server import to_toml

    data = tomllib.loads(path.read_text())
    change(data)
    path.write_text(to_toml(data))


async def until(condition: Callable[[], object], timeout: float = TIMEOUT_S) -> None:
    """Wait until `condition()` is true (polled); AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {condition}")
        await asyncio.sleep(0.005)
