"""Transports for MCPL: a stdio subprocess, a WebSocket client, and an in-memory pair.

Each carries one JSON-RPC message per `send`/`receive` (see
`agentcore.mcpl.jsonrpc.Transport`). A transport is one session: it never
reconnects by itself, because a new socket or process is a new MCPL session
that has to be initialized again. `ReconnectPolicy` (`agentcore.mcpl.reconnect`) tells
the connection layer (`ServerConnection`) to open a new transport and re-run `initialize`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from loguru import logger

from agentcore._constants import MCPL_CONNECT_TIMEOUT_S as DEFAULT_CONNECT_TIMEOUT_S
from agentcore._constants import MCPL_HEARTBEAT_S as DEFAULT_HEARTBEAT_S
from agentcore._constants import MCPL_MAX_FRAME_BYTES as DEFAULT_MAX_FRAME_BYTES
from agentcore._constants import MCPL_SHUTDOWN_GRACE_S as DEFAULT_SHUTDOWN_GRACE_S
from agentcore._constants import MCPL_TERM_GRACE_S as DEFAULT_TERM_GRACE_S
from agentcore.mcpl.environment import env_hint, server_environment
from agentcore.mcpl.jsonrpc import FrameError, FrameTooLarge, Transport, TransportClosed
from agentcore.mcpl.reconnect import ReconnectPolicy

if TYPE_CHECKING:  # imported where a WebSocket connects: stdio-only hosts save its MBs
    import aiohttp

READ_CHUNK_BYTES = 64 * 1024
STDERR_LINE_MAX = 8 * 1024  # longer child stderr lines are logged truncated
UNREAD_GRACE_S = 1.0  # at close: how long a child may take to read what it was sent

TransportFactory = Callable[[], Awaitable[Transport]]


# -- stdio -------------------------------------------------------------------


class _LineReader:
    """Newline-delimited frames from a byte stream, bounded in memory.

    Never holds more than `limit` + one read chunk: a line that grows past the
    limit is dropped as it arrives, and everything up to its newline is
    discarded unread.
    """

    def __init__(self, stream: asyncio.StreamReader, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._buffer = bytearray()
        self._discarding = False
        self._eof = False

    async def read_line(self) -> bytes | None:
        """The next line without its newline; None at EOF. Raises FrameTooLarge."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._discarding:
                    # The tail of a line already reported as too large.
                    self._discarding = False
                    continue
                if len(line) > self._limit:
                    raise FrameTooLarge(self._limit)
                return line
            if self._discarding:
                self._buffer.clear()
            elif len(self._buffer) > self._limit:
                self._buffer.clear()
                self._discarding = True
                raise FrameTooLarge(self._limit)
            if self._eof:
                if self._buffer and not self._discarding:
                    # A last line without its newline is still a frame.
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            chunk = await self._stream.read(READ_CHUNK_BYTES)
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk


class StdioTransport:
    """A server run as a child process: JSON-RPC lines on its stdin and stdout.

    The child's stderr goes to the log line by line, tagged with the server
    name. `close()` follows MCP's stdio shutdown (base protocol, Lifecycle,
    "Shutdown"; MCPL is an extension of MCP, SPEC §3.1): close the child's
    stdin, wait up to `shutdown_grace_s` for it to exit by itself (a server's
    own cleanup runs on that EOF), then SIGTERM, then SIGKILL after
    `term_grace_s` more. The child runs in its own session, so a Ctrl-C at
    the terminal reaches the host, which answers in-flight requests and then
    stops the child in that order; signals go to the child's process group.

    Frames sent in one event-loop iteration go out in one write (see `send`).
    """

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        *,
        name: str,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
        term_grace_s: float = DEFAULT_TERM_GRACE_S,
    ) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.name = name
        self.process = process
        self.shutdown_grace_s = shutdown_grace_s
        self.term_grace_s = term_grace_s
        self._stdin = process.stdin
        self._lines = _LineReader(process.stdout, max_frame_bytes)
        self._loop = asyncio.get_running_loop()
        self._stderr_task: asyncio.Task[None] | None = None
        if process.stderr is not None:
            self._stderr_task = self._loop.create_task(
                _log_stderr(name, process.stderr), name=f"mcpl-stderr:{name}"
            )
        self._pending: list[bytes] = []  # encoded frames not yet written, in order
        self._high_water = self._stdin.transport.get_write_buffer_limits()[1]
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._closed = False
        self._went_away = False  # its stdout ended before we closed it: it exited by itself
        self._close_lock = asyncio.Lock()

    @classmethod
    async def spawn(
        cls,
        command: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        env_passthrough: Sequence[str] = (),
        cwd: str | os.PathLike[str] | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
        term_grace_s: float = DEFAULT_TERM_GRACE_S,
    ) -> StdioTransport:
        """Start `command` with a minimal environment, the `env_passthrough` variables of
        this process's, and `env` (`agentcore.mcpl.environment`): none of the host's
        secrets reaches a server."""
        if not command:
            raise ValueError(f"mcpl server {name!r}: empty command")
        full_env = server_environment(env, env_passthrough)
        # The program only: arguments and environment may carry secrets.
        logger.info("mcpl server {}: starting {}", name, command[0])
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            limit=READ_CHUNK_BYTES,
        )
        return cls(
            process,
            name=name,
            max_frame_bytes=max_frame_bytes,
            shutdown_grace_s=shutdown_grace_s,
            term_grace_s=term_grace_s,
        )

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def send(self, text: str) -> None:
        """Queue one frame; the frames of one loop iteration go out in one write.

        A write per frame costs a syscall and a wake-up of the child per
        frame: at a thousand streams, some ten thousand `inference/chunk`s a
        second. Instead the frame joins a list that one `call_soon` writes
        as one buffer, whole frames in order. The pipe transport buffers
        whatever the child has not read, so once the list and that buffer
        pass the transport's high-water mark the list is written now and we
        wait for `drain()`: a slow reader still holds senders back, memory
        stays bounded, and a child that went away still fails the send.
        """
        frame = self._frame(text)
        if self._queue(frame):
            return
        self._pending.append(frame)
        self._pending_bytes += len(frame)
        self._flush()
        await self._stdin.drain()

    @property
    def queued_bytes(self) -> int:
        """Bytes sent that the child has not read: ours, and the pipe transport's buffer."""
        return self._pending_bytes + self._stdin.transport.get_write_buffer_size()

    def send_nowait(self, text: str) -> bool:
        """`send` without waiting: True once queued; False (nothing queued): await `send`."""
        return self._queue(self._frame(text))

    def _frame(self, text: str) -> bytes:
        if self._closed:
            raise ConnectionResetError(f"mcpl server {self.name}: transport closed")
        if "\n" in text:
            raise ValueError("a stdio frame cannot contain a newline")
        return text.encode("utf-8") + b"\n"

    def _queue(self, frame: bytes) -> bool:
        """Queue `frame` for this iteration's write, unless past high water (read once)."""
        transport = self._stdin.transport
        queued = self._pending_bytes + len(frame) + transport.get_write_buffer_size()
        if queued > self._high_water or transport.is_closing():
            return False
        self._pending.append(frame)
        self._pending_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return True

    def _flush(self) -> None:
        """Write every queued frame, in order, as one buffer."""
        self._flush_scheduled = False
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            self._stdin.write(data)

    async def receive(self) -> str | None:
        while True:
            line = await self._lines.read_line()
            if line is None:
                self._went_away = not self._closed
                return None
            line = line.rstrip(b"\r")
            if not line.strip():
                continue  # blank lines between frames carry nothing
            try:
                return line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FrameError(f"Parse error: frame is not UTF-8 ({exc.reason})") from exc

    async def close(self) -> None:
        async with self._close_lock:
            if self._closed:
                return
            self._closed = True
            by_itself = self._went_away
            # Frames already sent (the in-flight answers above all) are written first.
            # A child that does not take them within a moment is not reading its stdin:
            # it would never see the EOF the grace waits for, so what it left unread is
            # dropped and SIGTERM comes at once.
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                self._flush()
            stalled = not await self._drains_within(UNREAD_GRACE_S)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                if stalled:
                    logger.warning(
                        "mcpl server {}: not reading its stdin ({} bytes unread after {}s); "
                        "dropping them and sending SIGTERM",
                        self.name,
                        self._stdin.transport.get_write_buffer_size(),
                        UNREAD_GRACE_S,
                    )
                    self._stdin.transport.abort()
                else:
                    self._stdin.close()
            await self._stop_process(None if stalled else self.shutdown_grace_s, by_itself)
            if self._stderr_task is not None:
                # The pipe closes with the process; a grandchild holding it
                # open must not hold up shutdown.
                done, _ = await asyncio.wait({self._stderr_task}, timeout=1.0)
                if not done:
                    self._stderr_task.cancel()

    async def _drains_within(self, seconds: float) -> bool:
        """Whether the child reads everything written to it within `seconds`."""
        pipe = self._stdin.transport
        if pipe.is_closing() or not pipe.get_write_buffer_size():
            return True
        pipe.set_write_buffer_limits(high=0)  # drain() now waits for an empty buffer
        try:
            await asyncio.wait_for(self._stdin.drain(), seconds)
        except TimeoutError:
            return False
        except (ConnectionError, OSError, RuntimeError):
            pass  # gone: nothing is left to wait for
        return True

    def _signal(self, sig: signal.Signals) -> None:
        if self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    async def _stop_process(self, grace_s: float | None, by_itself: bool) -> None:
        """Stdin is closed: wait for the exit (None: not at all), then SIGTERM, then SIGKILL
        (MCP's stdio shutdown)."""
        if grace_s is None or not await self._exits_within(grace_s):
            if grace_s is not None:
                logger.warning(
                    "mcpl server {}: still running {}s after its stdin closed; sending SIGTERM",
                    self.name,
                    grace_s,
                )
            self._signal(signal.SIGTERM)
            if not await self._exits_within(self.term_grace_s):
                logger.warning(
                    "mcpl server {}: still running {}s after SIGTERM; sending SIGKILL",
                    self.name,
                    self.term_grace_s,
                )
                self._signal(signal.SIGKILL)
                await self.process.wait()
        if by_itself:  # it may have stopped for want of a variable it no longer inherits
            logger.warning(
                "mcpl server {}: exited with {}, by itself ({})",
                self.name,
                self.process.returncode,
                env_hint(self.name),
            )
        else:
            logger.info("mcpl server {}: exited with {}", self.name, self.process.returncode)

    async def _exits_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self.process.wait(), seconds)
        except TimeoutError:
            return False
        return True


async def _log_stderr(name: str, stream: asyncio.StreamReader) -> None:
    bound = logger.bind(mcpl_server=name)
    lines = _LineReader(stream, STDERR_LINE_MAX)
    while True:
        try:
            line = await lines.read_line()
        except FrameTooLarge:
            bound.info("mcpl server {} stderr: <line over {} bytes dropped>", name, STDERR_LINE_MAX)
            continue
        except (ConnectionError, OSError):
            return
        if line is None:
            return
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        bound.info("mcpl server {} stderr: {}", name, text)


# -- WebSocket ---------------------------------------------------------------


class WebSocketTransport:
    """A WebSocket client: one JSON-RPC message per text frame.

    aiohttp answers pings and sends one every `heartbeat_s`, closing the
    socket when a pong does not come back. A frame over `max_frame_bytes` is
    refused by aiohttp from its header, before the payload is read, and a
    text frame that is not UTF-8 once read; the WebSocket protocol cannot skip
    a frame, so aiohttp closes the socket (1009 message too big, 1007 invalid
    payload; RFC 6455 §7.4.1) and the session ends there: `receive` raises
    `TransportClosed` saying so (with `reconnect`, a new session follows).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        ws: aiohttp.ClientWebSocketResponse,
        *,
        name: str,
        max_frame_bytes: int,
    ) -> None:
        self.name = name
        self._session = session
        self._ws = ws
        self._max_frame_bytes = max_frame_bytes
        self._closed = False

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        name: str,
        headers: Mapping[str, str] | None = None,
        heartbeat_s: float | None = DEFAULT_HEARTBEAT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> WebSocketTransport:
        """Open the socket. Headers (e.g. Authorization) are sent, never logged."""
        import aiohttp

        session = aiohttp.ClientSession()
        try:
            async with asyncio.timeout(connect_timeout_s):
                ws = await session.ws_connect(
                    url,
                    headers=dict(headers or {}),
                    heartbeat=heartbeat_s,
                    max_msg_size=max_frame_bytes,
                    # No receive deadline: a quiet server is not a dead one
                    # (the heartbeat tells those apart).
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                )
        except BaseException:
            await session.close()
            raise
        logger.info("mcpl server {}: connected to {}", name, _redact_url(url))
        return cls(session, ws, name=name, max_frame_bytes=max_frame_bytes)

    async def send(self, text: str) -> None:
        if self._closed or self._ws.closed:
            raise ConnectionResetError(f"mcpl server {self.name}: socket closed")
        await self._ws.send_str(text)

    async def receive(self) -> str | None:
        from aiohttp import WSMsgType  # loaded by `connect`: a lookup in sys.modules

        while True:
            message = await self._ws.receive()
            if message.type is WSMsgType.TEXT:
                return str(message.data)
            if message.type is WSMsgType.BINARY:
                raise FrameError("Parse error: binary frame; MCPL frames are text")
            if message.type is WSMsgType.ERROR:
                # aiohttp has closed the socket already (see the class docstring).
                raise TransportClosed(self._refusal(message.data))
            if message.type in (
                WSMsgType.CLOSE,
                WSMsgType.CLOSING,
                WSMsgType.CLOSED,
            ):
                return None
            # PING/PONG are answered by aiohttp (autoping); anything else is skipped.

    def _refusal(self, error: object) -> str:
        """What the host did when aiohttp refused a frame (or the socket failed)."""
        import aiohttp

        code = getattr(error, "code", None)
        if code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
            return (
                f"the host refused a frame over {self._max_frame_bytes} bytes (max_frame_bytes) "
                f"and closed the connection with {code} (message too big)"
            )
        if code == aiohttp.WSCloseCode.INVALID_TEXT:
            return (
                "the host refused a text frame that is not valid UTF-8 "
                f"and closed the connection with {code} (invalid frame payload data)"
            )
        if code is not None:
            return f"the host closed the connection with {code}: {error}"
        return f"the connection failed: {error}"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._ws.close()
        finally:
            await self._session.close()


def _redact_url(url: str) -> str:
    """The URL without userinfo or query, which may carry credentials."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<url>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


# -- in memory ---------------------------------------------------------------


class MemoryTransport:
    """One end of an in-process pair; for tests and for plugin authors' tests."""

    def __init__(
        self,
        inbox: asyncio.Queue[str | None],
        outbox: asyncio.Queue[str | None],
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._closed = False

    async def send(self, text: str) -> None:
        if self._closed:
            raise ConnectionResetError("memory transport closed")
        await self._outbox.put(text)

    async def receive(self) -> str | None:
        if self._closed:
            return None
        item = await self._inbox.get()
        if item is None:
            self._closed = True
        return item

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            # Tell the other end, and wake our own reader if it is waiting.
            await self._outbox.put(None)
            await self._inbox.put(None)


def memory_pair() -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected transports: what one sends, the other receives."""
    a_to_b: asyncio.Queue[str | None] = asyncio.Queue()
    b_to_a: asyncio.Queue[str | None] = asyncio.Queue()
    return MemoryTransport(b_to_a, a_to_b), MemoryTransport(a_to_b, b_to_a)


# -- factories ---------------------------------------------------------------


def stdio_factory(
    name: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    env_passthrough: Sequence[str] = (),
    cwd: str | os.PathLike[str] | None = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    term_grace_s: float = DEFAULT_TERM_GRACE_S,
) -> TransportFactory:
    """A factory that spawns a fresh child per session."""

    async def open_transport() -> Transport:
        return await StdioTransport.spawn(
            command,
            name=name,
            env=env,
            env_passthrough=env_passthrough,
            cwd=cwd,
            max_frame_bytes=max_frame_bytes,
            shutdown_grace_s=shutdown_grace_s,
            term_grace_s=term_grace_s,
        )

    return open_transport


def websocket_factory(
    name: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    heartbeat_s: float | None = DEFAULT_HEARTBEAT_S,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> TransportFactory:
    """A factory that opens a fresh socket per session."""

    async def open_transport() -> Transport:
        return await WebSocketTransport.connect(
            url,
            name=name,
            headers=headers,
            heartbeat_s=heartbeat_s,
            max_frame_bytes=max_frame_bytes,
            connect_timeout_s=connect_timeout_s,
        )

    return open_transport


__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "DEFAULT_TERM_GRACE_S",
    "MemoryTransport",
    "ReconnectPolicy",
    "StdioTransport",
    "TransportFactory",
    "WebSocketTransport",
    "memory_pair",
    "stdio_factory",
    "websocket_factory",
]
