"""The stdio subprocess transport, on real child processes."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from agentcore.mcpl.environment import server_environment
from agentcore.mcpl.jsonrpc import FrameError, FrameTooLarge
from agentcore.mcpl.transports import StdioTransport
from agentcore.redaction import register_secret

TOOL = [sys.executable, str(Path(__file__).parent / "servers" / "line_tool.py")]
TIMEOUT = 10.0


async def spawn(*args: str, **kwargs: object) -> StdioTransport:
    kwargs.setdefault("shutdown_grace_s", 0.5)
    kwargs.setdefault("term_grace_s", 0.5)
    return await StdioTransport.spawn([*TOOL, *args], name="probe", **kwargs)  # type: ignore[arg-type]


async def test_env_is_merged_cwd_is_used_and_stderr_is_logged(
    tmp_path: Path, log_messages: list[str]
) -> None:
    transport = await spawn("env", env={"PROBE_VAR": "merged"}, cwd=tmp_path)
    try:
        first = await asyncio.wait_for(transport.receive(), TIMEOUT)
        assert first is not None
        info = json.loads(first)
        assert info == {"probe": "merged", "path": True, "cwd": str(tmp_path)}
        await transport.send('{"echo":1}')
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == '{"echo":1}'
    finally:
        await transport.close()
    assert "mcpl server probe stderr: hello from stderr" in log_messages


async def test_a_passed_through_variable_reaches_the_child_and_the_hosts_others_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROBE_VAR", "passed")
    monkeypatch.setenv("NOT_PASSED", "host only")
    transport = await spawn("env", env_passthrough=["PROBE_VAR"])
    try:
        first = await asyncio.wait_for(transport.receive(), TIMEOUT)
        assert first is not None and json.loads(first)["probe"] == "passed"
    finally:
        await transport.close()
    assert "NOT_PASSED" not in server_environment(None, ["PROBE_VAR"])


def test_a_passthrough_holding_a_secret_registered_later_is_left_out_with_a_warning(
    log_messages: list[str],
) -> None:
    environ = {
        "PATH": "/bin",
        "LC_ALL": "C",
        "HTTPS_PROXY": "http://me:proxy-pw-5151@proxy:3128",
        "AGENTCORE_X": "y",
        "MINE": "m",
    }
    register_secret("proxy-pw-5151")  # as the provider driver does for its proxy
    seen = server_environment({"MINE": "own"}, ["HTTPS_PROXY", "AGENTCORE_X", "MINE"], environ)
    assert seen == {"PATH": "/bin", "LC_ALL": "C", "MINE": "own"}
    assert any("HTTPS_PROXY is left out" in m for m in log_messages)
    assert any("AGENTCORE_X is left out" in m for m in log_messages)


async def test_send_refuses_a_frame_with_a_newline() -> None:
    transport = await spawn("env")
    try:
        with pytest.raises(ValueError):
            await transport.send('{"a":\n1}')
    finally:
        await transport.close()


@pytest.mark.parametrize(("limit", "size"), [(1024, 5000), (64 * 1024, 8 * 1024 * 1024)])
async def test_an_oversized_line_is_refused_and_reading_goes_on(limit: int, size: int) -> None:
    transport = await spawn("big", str(size), max_frame_bytes=limit)
    try:
        with pytest.raises(FrameTooLarge) as caught:
            await asyncio.wait_for(transport.receive(), TIMEOUT)
        assert caught.value.limit == limit
        # The rest of the big line was discarded; the next frame is intact.
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == '{"after":"big"}'
        await transport.send('{"still":"alive"}')
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == '{"still":"alive"}'
    finally:
        await transport.close()


async def test_a_line_at_the_limit_is_accepted() -> None:
    transport = await spawn("big", "1000", max_frame_bytes=1000)
    try:
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "x" * 1000
    finally:
        await transport.close()


async def test_last_line_without_newline_then_eof() -> None:
    transport = await spawn("tail")
    try:
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == '{"no":"newline"}'
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) is None
    finally:
        await transport.close()


async def test_a_line_that_is_not_utf8_is_a_frame_error() -> None:
    transport = await spawn("latin1")
    try:
        with pytest.raises(FrameError):
            await asyncio.wait_for(transport.receive(), TIMEOUT)
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == '{"ok":1}'
    finally:
        await transport.close()


async def test_close_lets_the_child_run_its_cleanup_on_stdin_eof(tmp_path: Path) -> None:
    # MCP's stdio shutdown: stdin closed first, and time to exit before any signal.
    marker = tmp_path / "marker"
    transport = await spawn("cleanup", str(marker), shutdown_grace_s=TIMEOUT)
    assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "ready"
    await asyncio.wait_for(transport.close(), TIMEOUT)
    assert marker.read_text() == "cleaned up"
    assert transport.returncode == 0


async def test_close_sends_sigterm_then_sigkill_after_the_grace_periods(
    log_messages: list[str],
) -> None:
    transport = await spawn("stubborn", shutdown_grace_s=0.2, term_grace_s=0.2)
    # It prints "ready" only after it has started ignoring SIGTERM; it never reads stdin.
    assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "ready"
    await asyncio.wait_for(transport.close(), TIMEOUT)
    assert transport.returncode == -signal.SIGKILL
    warnings = [m for m in log_messages if m.startswith("mcpl server probe: still running")]
    assert warnings == [
        "mcpl server probe: still running 0.2s after its stdin closed; sending SIGTERM",
        "mcpl server probe: still running 0.2s after SIGTERM; sending SIGKILL",
    ]


async def test_close_stops_a_cooperative_child_without_a_signal() -> None:
    transport = await spawn("env", shutdown_grace_s=TIMEOUT)
    await asyncio.wait_for(transport.receive(), TIMEOUT)
    await asyncio.wait_for(transport.close(), TIMEOUT)
    assert transport.returncode == 0  # ended by stdin EOF: no SIGTERM, no SIGKILL
    with pytest.raises(ConnectionError):
        await transport.send("{}")
    await transport.close()  # idempotent


async def test_an_empty_command_is_refused() -> None:
    with pytest.raises(ValueError):
        await StdioTransport.spawn([], name="empty")


# -- coalesced writes --------------------------------------------------------


def frames(count: int, pad: int = 0) -> list[str]:
    return [json.dumps({"i": i, "pad": "x" * pad}) for i in range(count)]


def wire(sent: list[str]) -> bytes:
    return "".join(f"{text}\n" for text in sent).encode()


async def test_frames_sent_in_one_iteration_reach_the_child_in_one_write(tmp_path: Path) -> None:
    record = tmp_path / "record"
    transport = await spawn("record", str(record))
    try:
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "ready"
        await asyncio.sleep(0.1)  # the child is blocked in read(): a write wakes it at once
        sent = frames(50)
        for text in sent:  # no send waits (nothing is over the high-water mark)
            await transport.send(text)
        expected = wire(sent)
        assert len(expected) < 4096  # PIPE_BUF: one write is atomic, so one read takes it
        read = await asyncio.wait_for(transport.receive(), TIMEOUT)
        assert read is not None and json.loads(read) == {"read": len(expected)}
        assert record.read_bytes() == expected  # whole frames, in order
    finally:
        await transport.close()


@pytest.mark.parametrize(("count", "pad"), [(3, 0), (2000, 100)])
async def test_close_delivers_every_frame_sent_before_it(
    tmp_path: Path, count: int, pad: int
) -> None:
    # 2000 frames of ~110 bytes pass the high-water mark many times over, so some
    # sends write at once and wait for drain(); the last ones are still queued.
    record = tmp_path / "record"
    transport = await spawn("record", str(record), shutdown_grace_s=TIMEOUT)
    assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "ready"
    sent = frames(count, pad)
    for text in sent:
        await transport.send(text)
    await asyncio.wait_for(transport.close(), TIMEOUT)
    assert transport.returncode == 0  # it read to EOF (it ignores SIGTERM)
    assert record.read_bytes() == wire(sent)
    with pytest.raises(ConnectionResetError):
        await transport.send("{}")


async def test_a_child_that_stops_reading_holds_the_sender_back() -> None:
    transport = await spawn("stubborn", shutdown_grace_s=0.2)
    try:
        assert await asyncio.wait_for(transport.receive(), TIMEOUT) == "ready"
        frame = frames(1, pad=1000)[0]
        sent = 0
        while sent < 1000:  # 1 MB, far more than the pipe and the transport's buffer hold
            try:
                await asyncio.wait_for(transport.send(frame), 0.5)
            except TimeoutError:
                break
            sent += 1
        assert sent < 1000
    finally:
        await asyncio.wait_for(transport.close(), TIMEOUT)


def test_the_stdio_transport_runs_on_uvloop() -> None:
    """Hosts embed the kernel in uvloop apps (uvicorn): coalesced writes and reads there."""
    import uvloop

    async def main() -> list[str | None]:
        transport = await spawn("env")
        try:
            await asyncio.wait_for(transport.receive(), TIMEOUT)  # the env line
            for n in range(50):  # one loop iteration: one write
                await transport.send(json.dumps({"n": n}))
            return [await asyncio.wait_for(transport.receive(), TIMEOUT) for _ in range(50)]
        finally:
            await transport.close()

    assert uvloop.run(main()) == [json.dumps({"n": n}) for n in range(50)]
