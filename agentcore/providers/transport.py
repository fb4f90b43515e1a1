"""A lean HTTP/1.1 transport for httpx, on asyncio protocols.

Why our own: at a thousand concurrent streams, httpcore, h11 and anyio spent about
half of the host's CPU per streamed chunk (`bench/mcpl_router.py`), and httpcore's
pool walks every connection on each request's start and end. Here each connection
is one `asyncio.Protocol` that frames the body in place, and the pool is a stack of
idle connections per origin, so a chunk costs one wake-up and a slice.

It carries what the adapters need, no more: HTTP/1.1 over TCP or TLS; a request
body of known length or chunked; a response framed by Content-Length, chunked
encoding, or the connection's close. httpx keeps everything above it: headers,
content decoding, what the timeouts mean, and proxies (for a proxied URL httpx
mounts its own transport, so ``HTTPS_PROXY`` works as it always did).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx

__all__ = ["StreamTransport"]

MAX_HEAD_BYTES = 64 * 1024
"""A status line and headers longer than this are a protocol error, not a memory sink."""

READ_HIGH_WATER = 256 * 1024
"""Unconsumed body bytes at which the socket stops being read until the reader catches up."""

_Origin = tuple[str, str, int]


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: bytes in a buffer, a reader woken when more arrive.

    A read waits with one lazily re-armed timer rather than a timer per read: the
    timer only fires if no byte arrived for the whole read timeout.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: _Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._paused_writing = False
        self._last_data = 0.0
        self._timeout = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though not always a subclass of asyncio's (uvloop's is not).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._last_data = self.loop.time()
        if len(self.buffer) > READ_HIGH_WATER and not self._paused_reading:
            self._paused_reading = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        _settle(self._drained)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        _settle(self._drained)

    # -- reading ---------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        """Idle, open and quiet: nothing arrived since the last response ended."""
        transport = self.transport
        return (
            not self.eof
            and not self.buffer
            and transport is not None
            and not (transport.is_closing())
        )

    def consumed(self, n: int) -> None:
        """Drop the first `n` buffered bytes, reading the socket again if it was paused."""
        del self.buffer[:n]
        if self._paused_reading and len(self.buffer) <= READ_HIGH_WATER // 2:
            self._paused_reading = False
            assert self.transport is not None
            self.transport.resume_reading()

    async def more(self, timeout: float | None) -> None:
        """Wait for bytes beyond those buffered; `httpx.ReadTimeout` after `timeout` of
        silence, `httpx.RemoteProtocolError` if the peer closed first."""
        if self.eof:
            raise _cut(self.error)
        waiter = self.loop.create_future()
        self._waiter = waiter
        if timeout is not None:
            self._timeout = timeout
            self._last_data = self.loop.time()
            if self._timer is None:
                self._timer = self.loop.call_at(self._last_data + timeout, self._check_timeout)
        try:
            await waiter
        finally:
            self._waiter = None
        if not self.buffer and self.eof:
            raise _cut(self.error)

    def _wake(self) -> None:
        _settle(self._waiter)

    def _check_timeout(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        due = self._last_data + self._timeout
        if self.loop.time() >= due:
            waiter.set_exception(httpx.ReadTimeout(f"no data for {self._timeout:g} s"))
        else:
            self._timer = self.loop.call_at(due, self._check_timeout)

    # -- writing ---------------------------------------------------------------------

    async def write(self, data: bytes, timeout: float | None) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise httpx.WriteError("the connection closed before the request was sent")
        transport.write(data)
        if self._paused_writing:
            self._drained = self.loop.create_future()
            try:
                await asyncio.wait_for(self._drained, timeout)
            except TimeoutError:
                raise httpx.WriteTimeout(f"the request took over {timeout:g} s to send") from None
            finally:
                self._drained = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.eof = True
        self._wake()
        if self.transport is not None:
            self.transport.close()


def _settle(future: asyncio.Future[None] | None) -> None:
    """Wake whoever waits on `future`, if anyone still does."""
    if future is not None and not future.done():
        future.set_result(None)


def _cut(reason: object = None) -> httpx.RemoteProtocolError:
    """The peer closed before the body was whole; `reason` says what was missing."""
    said = f" ({reason})" if reason else ""
    return httpx.RemoteProtocolError(
        f"peer closed connection without sending complete message body{said}"
    )


class StreamTransport(httpx.AsyncBaseTransport):
    """httpx's transport for a provider: pooled HTTP/1.1 connections, O(1) per call.

    `max_connections` caps connections in use at once (a call waits for one up to
    the pool timeout); `max_keepalive_connections` caps idle ones kept per origin.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int | None = None,
        max_keepalive_connections: int = 20,
    ) -> None:
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["http/1.1"])  # the only protocol spoken here
        self._ssl = ssl_context
        self._idle: dict[_Origin, collections.deque[_Connection]] = {}
        self._active: set[_Connection] = set()
        self._max_keepalive = max_keepalive_connections
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        if self._closed:
            raise RuntimeError("the transport is closed")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        if self._slots is not None:
            try:
                await asyncio.wait_for(self._slots.acquire(), timeouts.get("pool"))
            except TimeoutError:
                raise httpx.PoolTimeout("no free connection to the provider") from None
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        connection: _Connection | None = None
        try:
            connection = await self._connection(origin, timeouts.get("connect"))
            self._active.add(connection)
            await self._send(connection, request, timeouts.get("write"))
            return await self._receive(connection, request, timeouts.get("read"))
        except BaseException:
            if connection is not None:
                self._release(connection, keep=False)
            elif self._slots is not None:
                self._slots.release()
            raise

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        for connection in list(self._active):
            connection.close()

    # -- connections -----------------------------------------------------------------

    async def _connection(self, origin: _Origin, timeout: float | None) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()  # the most recent: the least likely to have timed out
            if connection.reusable:
                return connection
            connection.close()
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
                self._ssl.set_alpn_protocols(["http/1.1"])
            tls = {"ssl": self._ssl, "server_hostname": host}
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop, origin), host, port, **tls),
                timeout,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {host}:{port} took over {timeout:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"{host}:{port}: {exc}") from exc
        return protocol

    def _release(self, connection: _Connection, keep: bool) -> None:
        """A call is done with its connection: keep it for the next call if asked and it
        can carry one, else close it. Its slot under `max_connections` is freed once."""
        if connection in self._active:
            self._active.discard(connection)
            if self._slots is not None:
                self._slots.release()
            idle = self._idle.setdefault(connection.origin, collections.deque())
            room = len(idle) < self._max_keepalive
            if keep and room and not self._closed and connection.reusable:
                idle.append(connection)
                return
        connection.close()

    # -- one exchange ----------------------------------------------------------------

    async def _send(
        self, connection: _Connection, request: httpx.Request, timeout: float | None
    ) -> None:
        head = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
        chunked = False
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
            if name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        head.append(b"\r\n")
        body = request.stream
        if isinstance(body, httpx.ByteStream):  # the usual case: JSON already encoded
            await connection.write(b"".join(head) + b"".join(body), timeout)
            return
        await connection.write(b"".join(head), timeout)
        assert isinstance(body, httpx.AsyncByteStream)
        async for part in body:
            if part:
                await connection.write(
                    b"%x\r\n%b\r\n" % (len(part), part) if chunked else part, timeout
                )
        if chunked:
            await connection.write(b"0\r\n\r\n", timeout)

    async def _receive(
        self, connection: _Connection, request: httpx.Request, timeout: float | None
    ) -> httpx.Response:
        while True:
            status, reason, headers, version = await _read_head(connection, timeout)
            if not 100 <= status < 200:
                break  # 1xx answers are interim: the real one follows
        names = {name.lower(): value for name, value in headers}
        # HTTP/1.0 closes after each response unless it says otherwise.
        persistent = b"keep-alive" if version == b"HTTP/1.0" else None
        said = names.get(b"connection", b"").lower()
        keep = persistent in said if persistent else b"close" not in said
        length: int | None = None
        if request.method == "HEAD" or status in (204, 304):
            length = 0
        elif b"chunked" in names.get(b"transfer-encoding", b"").lower():
            length = None
        elif b"content-length" in names:
            try:
                length = int(names[b"content-length"])
            except ValueError:
                raise httpx.RemoteProtocolError(
                    "the response's Content-Length is not a number"
                ) from None
            if length < 0:
                raise httpx.RemoteProtocolError("the response's Content-Length is negative")
        else:
            length = -1  # the body runs to the connection's close
            keep = False
        body = _Body(self, connection, length, keep, timeout)
        return httpx.Response(
            status,
            headers=headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )


async def _read_head(
    connection: _Connection, timeout: float | None
) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
    """The status line and headers of one response, consumed from the buffer."""
    while True:
        end = connection.buffer.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(connection.buffer) > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError("the response's headers are too long")
        try:
            await connection.more(timeout)
        except httpx.RemoteProtocolError:
            part = "in the middle of the headers" if connection.buffer else "without a response"
            raise httpx.RemoteProtocolError(f"Server disconnected {part}") from None
    lines = bytes(connection.buffer[:end]).split(b"\r\n")
    connection.consumed(end + 4)
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not code.isdigit() or len(code) != 3:
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:100]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed response header: {line[:100]!r}")
        headers.append((name, value.strip()))
    return int(code), reason, headers, version


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # pragma: no cover  (makes this an async generator)


def _trailers_end(buffer: bytearray, start: int) -> int:
    """Where the trailer section that begins at `start` ends (after its blank line), or -1
    while it is incomplete. Trailer fields are skipped: the adapters read none."""
    while True:
        line_end = buffer.find(b"\r\n", start)
        if line_end < 0:
            return -1
        if line_end == start:
            return start + 2
        start = line_end + 2


class _Body(httpx.AsyncByteStream):
    """A response body read off its connection: Content-Length (`length` >= 0), chunked
    (`length` None) or to the close (-1). The connection goes back to the pool only
    when the body was read to its end."""

    def __init__(
        self,
        pool: StreamTransport,
        connection: _Connection,
        length: int | None,
        keep: bool,
        timeout: float | None,
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._length = length
        self._keep = keep
        self._timeout = timeout
        self._complete = length == 0
        self._released = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The reader itself, not a generator around it: one step per chunk, not two.
        if self._complete:
            return _nothing()
        if self._length is None:
            return self._chunked()
        if self._length > 0:
            return self._sized(self._length)
        return self._to_close()

    def _done(self) -> None:
        """The body was read to its end: free the connection before the caller closes."""
        self._complete = True
        if self._keep:
            self._finish(keep=True)

    async def _sized(self, length: int) -> AsyncIterator[bytes]:
        connection = self._connection
        buffer = connection.buffer
        left = length
        while left:
            if not buffer:
                try:
                    await connection.more(self._timeout)
                except httpx.RemoteProtocolError:
                    raise _cut(f"received {length - left} bytes, expected {length}") from None
            take = min(left, len(buffer))
            data = bytes(buffer[:take])
            connection.consumed(take)
            left -= take
            if not left:
                self._done()
            yield data

    async def _to_close(self) -> AsyncIterator[bytes]:
        connection = self._connection
        buffer = connection.buffer
        while True:
            if not buffer:
                if connection.eof:
                    self._done()
                    return
                try:
                    await connection.more(self._timeout)
                except httpx.RemoteProtocolError:
                    self._done()  # the close is this body's end
                    return
            data = bytes(buffer)
            connection.consumed(len(data))
            yield data

    async def _chunked(self) -> AsyncIterator[bytes]:
        """Chunked transfer coding: every complete piece in the buffer, joined, per read."""
        connection = self._connection
        buffer = connection.buffer
        left = 0  # data bytes of the current chunk still to come
        after = False  # the CRLF after a chunk's data is due
        while True:
            pos = 0
            out: list[bytes] = []
            end = len(buffer)
            while True:
                if left:
                    take = min(left, end - pos)
                    if not take:
                        break
                    out.append(bytes(buffer[pos : pos + take]))
                    pos += take
                    left -= take
                    if left:
                        break
                    after = True
                if after:
                    if end - pos < 2:
                        break
                    if buffer[pos : pos + 2] != b"\r\n":
                        raise httpx.RemoteProtocolError("a chunk's data is not followed by CRLF")
                    pos += 2
                    after = False
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    if end - pos > 1024:
                        raise httpx.RemoteProtocolError("a chunk-size line is too long")
                    break
                size_text = bytes(buffer[pos:line_end]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size {size_text[:20]!r}") from None
                if size == 0:
                    done = _trailers_end(buffer, line_end + 2)
                    if done < 0:
                        break  # the last chunk's trailers have not all arrived
                    connection.consumed(done)
                    self._done()
                    if out:
                        yield b"".join(out)
                    return
                pos = line_end + 2
                left = size
            if pos:
                connection.consumed(pos)
            unparsed = end - pos
            if out:
                yield out[0] if len(out) == 1 else b"".join(out)
            if len(buffer) == unparsed:  # nothing new came while the reader had the data
                try:
                    await connection.more(self._timeout)
                except httpx.RemoteProtocolError:
                    raise _cut("incomplete chunked read") from None

    def _finish(self, keep: bool) -> None:
        """Hand the connection back, once: to the idle pool, or closed."""
        if self._released:
            return
        self._released = True
        self._pool._release(self._connection, keep)

    async def aclose(self) -> None:
        self._finish(self._complete and self._keep)
