"""StreamTransport against a raw asyncio server on loopback that writes exact bytes.

Each test scripts the server's side byte for byte, so framing edge cases (split
chunk lines, trailers, a close mid-body, a stall) are played for real over TCP.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trustme

from agentcore.providers.transport import READ_HIGH_WATER, StreamTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server running `handler` per connection, counting connections."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl = ssl_context
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.ssl)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{port}"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One request, head and body (Content-Length or chunked), recorded whole."""
        head = await reader.readuntil(b"\r\n\r\n")
        lower = head.lower()
        body = b""
        if b"content-length:" in lower:
            length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
        elif b"transfer-encoding: chunked" in lower:
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                body += (await reader.readexactly(size + 2))[:-2]
                if not size:
                    break
        self.requests.append(head + body)
        return head + body


@pytest.fixture
async def transport() -> AsyncIterator[StreamTransport]:
    t = StreamTransport()
    yield t
    await t.aclose()


def client(transport: StreamTransport, url: str, **kw: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=5, **kw)  # type: ignore[arg-type]


async def write_slowly(writer: asyncio.StreamWriter, data: bytes, step: int = 1) -> None:
    """Every `step` bytes in its own TCP write, so the client sees every split."""
    for i in range(0, len(data), step):
        writer.write(data[i : i + step])
        await writer.drain()
        await asyncio.sleep(0)


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n"
    b"7\r\n, world\r\n"
    b"0\r\nX-Trailer: yes\r\n\r\n"
)


async def test_chunked_body_split_at_every_byte_and_connection_reused(
    transport: StreamTransport,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.read_request(reader)
            await write_slowly(writer, CHUNKED)

    async with RawServer(handler) as server, client(transport, server.url) as c:
        for _ in range(2):
            async with c.stream("POST", "/v1/messages", json={"a": 1}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                assert b"".join([p async for p in response.aiter_raw()]) == b"hello, world"
    assert server.connections == 1  # the second call rode the first call's connection
    head = server.requests[0]
    assert head.startswith(b"POST /v1/messages HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in head.lower()
    assert head.endswith(b'\r\n\r\n{"a":1}') or head.endswith(b'\r\n\r\n{"a": 1}')


async def test_content_length_body_and_interim_100_response(transport: StreamTransport) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await write_slowly(
            writer,
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 201 Created\r\nContent-Length: 11\r\n\r\nhello world",
            step=3,
        )

    async with RawServer(handler) as server, client(transport, server.url) as c:
        response = await c.post("/x", content=b"abc")
    assert response.status_code == 201
    assert response.reason_phrase == "Created"
    assert response.content == b"hello world"


async def test_body_to_close_and_connection_close_are_not_reused(
    transport: StreamTransport,
) -> None:
    replies = [
        b"HTTP/1.1 200 OK\r\n\r\nuntil the end",  # no length: the close ends it
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(replies[server.connections - 1])
        await writer.drain()

    async with RawServer(handler) as server, client(transport, server.url) as c:
        assert (await c.get("/a")).content == b"until the end"
        assert (await c.get("/b")).content == b"ok"
    assert server.connections == 2


async def test_http_1_0_keeps_a_connection_only_when_it_says_keep_alive(
    transport: StreamTransport,
) -> None:
    replies = [
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",  # then closes, or may
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    ]
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while served < len(replies):
            await server.read_request(reader)
            writer.write(replies[served])
            served += 1
            await writer.drain()
        await reader.read()

    async with RawServer(handler) as server, client(transport, server.url) as c:
        for _ in replies:
            assert (await c.get("/")).content == b"ok"
    assert server.connections == 2  # a new one after the first; the third rode the second


async def test_a_close_mid_body_is_a_remote_protocol_error(transport: StreamTransport) -> None:
    bodies = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n",  # not even the whole head
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(bodies[server.connections - 1])
        await writer.drain()

    cut = "peer closed connection without sending complete message body"
    async with RawServer(handler) as server, client(transport, server.url) as c:
        with pytest.raises(httpx.RemoteProtocolError, match=rf"{cut} \(incomplete chunked"):
            await c.get("/")
        with pytest.raises(httpx.RemoteProtocolError, match=r"received 3 bytes, expected 10\)$"):
            await c.get("/")
        with pytest.raises(
            httpx.RemoteProtocolError, match="Server disconnected in the middle of the headers"
        ):
            await c.get("/")
    assert server.connections == 3


async def test_a_server_that_closes_an_idle_connection_costs_no_error(
    transport: StreamTransport,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # then close: the client holds the connection idle, and must notice

    async with RawServer(handler) as server, client(transport, server.url) as c:
        assert (await c.get("/")).content == b"ok"
        await asyncio.sleep(0.05)  # the close reaches the client while it is idle
        assert (await c.get("/")).content == b"ok"
    assert server.connections == 2


async def test_silence_past_the_read_timeout_is_a_read_timeout() -> None:
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await writer.drain()
        await stalled.wait()

    transport = StreamTransport()
    async with RawServer(handler) as server:
        timeout = httpx.Timeout(5, read=0.2)
        c = httpx.AsyncClient(transport=transport, timeout=timeout)
        async with c, c.stream("GET", server.url) as response:
            chunks = response.aiter_raw()
            assert await anext(chunks) == b"hi"
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                await anext(chunks)
            assert loop.time() - started >= 0.19
        stalled.set()


async def test_trickling_bytes_never_time_out_a_read() -> None:
    """The read timeout is silence, not the length of the whole body."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
        for byte in b"trickled":
            await asyncio.sleep(0.05)
            writer.write(bytes([byte]))
            await writer.drain()

    async with RawServer(handler) as server:
        timeout = httpx.Timeout(5, read=0.15)
        async with httpx.AsyncClient(transport=StreamTransport(), timeout=timeout) as c:
            assert (await c.get(server.url)).content == b"trickled"  # 0.4 s in all


async def test_malformed_replies_are_remote_protocol_errors(transport: StreamTransport) -> None:
    replies = [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhiXX",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(replies[server.connections - 1])
        await writer.drain()
        await asyncio.sleep(1)

    async with RawServer(handler) as server, client(transport, server.url) as c:
        for _ in replies:
            with pytest.raises(httpx.RemoteProtocolError):
                await c.get("/")
    assert server.connections == len(replies)


async def test_connect_refused_is_a_connect_error(transport: StreamTransport) -> None:
    async with RawServer(lambda r, w: asyncio.sleep(0)) as server:
        url = server.url
    async with client(transport, url) as c:  # the server is gone: its port refuses
        with pytest.raises(httpx.ConnectError):
            await c.get("/")


async def test_max_connections_queues_calls_and_the_pool_timeout_bounds_the_wait() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            await release.wait()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    transport = StreamTransport(max_connections=1)
    async with RawServer(handler) as server:
        timeout = httpx.Timeout(5, pool=0.1)
        async with httpx.AsyncClient(transport=transport, timeout=timeout) as c:
            first = asyncio.create_task(c.get(server.url))
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.PoolTimeout):
                await c.get(server.url)
            second = asyncio.create_task(c.get(server.url))
            await asyncio.sleep(0.02)
            release.set()
            assert (await first).content == (await second).content == b"ok"
    assert server.connections == 1


async def test_leaving_a_body_early_closes_its_connection(transport: StreamTransport) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        await writer.drain()
        assert await reader.read() == b""  # the client hung up
        closed.set()

    closed = asyncio.Event()
    async with RawServer(handler) as server, client(transport, server.url) as c:
        async with c.stream("GET", "/") as response:
            assert await anext(response.aiter_raw()) == b"hi"
        await asyncio.wait_for(closed.wait(), 2)


async def test_a_large_body_read_slowly_stays_within_the_high_water_mark() -> None:
    size = 8 * 1024 * 1024
    transport = StreamTransport()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size // 65536):
            writer.write(b"x" * 65536)
            await writer.drain()

    buffered = 0
    got = 0
    async with RawServer(handler) as server:
        c = client(transport, server.url)
        async with c, c.stream("GET", "/") as response:
            async for part in response.aiter_raw():
                got += len(part)
                await asyncio.sleep(0.001)  # a slow reader
                buffered = max([buffered, *(len(k.buffer) for k in transport._active)])
    assert got == size
    # Paused at the mark: at most one more socket read (256 KiB in asyncio) lands on top.
    assert buffered <= READ_HIGH_WATER + 256 * 1024 < size


async def test_a_chunked_request_body_from_an_async_iterator(transport: StreamTransport) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()

    async def parts() -> AsyncIterator[bytes]:
        yield b"one "
        yield b""
        yield b"two"

    async with RawServer(handler) as server, client(transport, server.url) as c:
        response = await c.post("/", content=parts())
    assert response.status_code == 204
    assert response.content == b""
    assert server.requests[0].endswith(b"\r\n\r\none two")
    assert b"transfer-encoding: chunked" in server.requests[0].lower()


async def test_gzip_is_decoded_by_httpx_above_the_transport(transport: StreamTransport) -> None:
    body = gzip.compress(b'{"ok": true}')

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b"
            % (len(body), body)
        )
        await writer.drain()

    async with RawServer(handler) as server, client(transport, server.url) as c:
        assert (await c.get("/")).json() == {"ok": True}


async def test_https_with_a_verified_certificate() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    server_context.set_alpn_protocols(["h2", "http/1.1"])  # h2 offered: we must not take it
    alpn: list[str | None] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        alpn.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
        await writer.drain()

    async with RawServer(handler, server_context) as server:
        trusting = StreamTransport(ssl_context=client_context)
        async with client(trusting, server.url) as c:
            assert (await c.get("/")).content == b"secret"
        untrusting = StreamTransport()  # the system's CAs do not know ours
        async with client(untrusting, server.url) as c:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await c.get("/")
    assert alpn == ["http/1.1"]


async def test_an_http_proxy_from_the_environment_still_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """For a proxied URL the provider's client uses httpx's proxy transport."""
    from agentcore.providers.http import build_client
    from agentcore.settings import ProviderSettings

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nvia proxy")
        await writer.drain()
        assert request.startswith(b"GET http://provider.invalid/v1 HTTP/1.1")

    async with RawServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        provider = build_client(ProviderSettings(kind="anthropic"), "http://x.invalid", {})
        async with provider.client as c:
            assert (await c.get("http://provider.invalid/v1")).text == "via proxy"
    assert server.requests[0].startswith(b"GET http://provider.invalid/v1 HTTP/1.1")


async def test_no_proxy_hosts_use_our_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentcore.providers.http import build_client
    from agentcore.settings import ProviderSettings

    async def direct(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\ndirect")
        await writer.drain()

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    async with RawServer(direct) as server:
        provider = build_client(ProviderSettings(kind="anthropic"), server.url, {})
        async with provider.client as c:
            assert (await c.get("/")).text == "direct"
            with pytest.raises(httpx.ConnectError):  # proxied, to a dead proxy
                await c.get("http://provider.invalid/")
    assert len(server.requests) == 1


async def test_a_provider_post_sends_the_clients_headers_and_json() -> None:
    from agentcore.providers.http import build_client
    from agentcore.settings import ProviderSettings

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    config = ProviderSettings(kind="anthropic", headers={"x-extra": "1"})
    async with RawServer(handler) as server:
        url = server.url
        provider = build_client(config, url + "/p/lb/", {"x-api-key": "k"})
        try:
            whole = await provider.post("/v1/messages", {"text": "é"}, stream=False)
            streamed = await provider.post("v1/messages", {"n": 2}, stream=True)
            assert await streamed.aread() == b"{}"
            await streamed.aclose()
        finally:
            await provider.aclose()
    assert whole.json() == {}
    assert whole.request.url == httpx.URL(url + "/p/lb/v1/messages")
    first, second = server.requests
    head, _, body = first.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /p/lb/v1/messages http/1.1"
    for header in (b"x-api-key: k", b"x-extra: 1", b"content-type: application/json"):
        assert header in lines
    assert f"content-length: {len(body)}".encode() in lines
    assert body == '{"text":"é"}'.encode()
    assert second.startswith(b"POST /p/lb/v1/messages HTTP/1.1\r\n")
    assert server.connections == 1


async def test_a_provider_post_goes_through_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcore.providers.http import build_client
    from agentcore.settings import ProviderSettings

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    async with RawServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        provider = build_client(ProviderSettings(kind="anthropic"), "http://api.invalid", {})
        try:
            assert (await provider.post("/v1/messages", {}, stream=False)).json() == {}
        finally:
            await provider.aclose()
    assert server.requests[0].startswith(b"POST http://api.invalid/v1/messages HTTP/1.1")


async def test_body_chunks_decode_a_compressed_stream_and_pass_a_plain_one(
    transport: StreamTransport,
) -> None:
    from agentcore.providers.http import body_chunks

    event = b"event: ping\ndata: {}\n\n"
    packed = gzip.compress(event)
    replies = [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(event), event),
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b"
        % (len(packed), packed),
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            await server.read_request(reader)
            writer.write(reply)
            await writer.drain()

    async with RawServer(handler) as server, client(transport, server.url) as c:
        for _ in replies:
            async with c.stream("GET", "/") as response:
                assert b"".join([part async for part in body_chunks(response)]) == event


def test_the_transport_runs_on_uvloop() -> None:
    """Hosts embed the kernel in uvloop apps (uvicorn): its transports are not asyncio's."""
    import uvloop

    async def main() -> bytes:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await server.read_request(reader)
            await write_slowly(writer, CHUNKED, step=7)

        async with RawServer(handler) as server:
            c = client(StreamTransport(), server.url)
            async with c, c.stream("GET", "/") as response:
                return b"".join([part async for part in response.aiter_raw()])

    assert uvloop.run(main()) == b"hello, world"
