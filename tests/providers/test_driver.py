"""The streaming driver's HTTP, against a raw asyncio server on loopback that writes exact bytes.

Each test scripts the server's side byte for byte, so what a user meets below the wire
format (a body cut mid-chunk, a stall, a proxy, a pool cap, TLS, compression) is played
for real over TCP, through a provider of the openai-compatible kind.
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import json
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme
from providers_support import collect, request, sse, terminal, visible

from agentcore.inference import Complete, Failed, InferenceError, Token
from agentcore.inference.watchdog import TIMER_CONTEXT
from agentcore.providers.openai import OpenAIProvider
from agentcore.providers.stale import SENDING
from agentcore.redaction import redact
from agentcore.settings import InferenceSettings, ProviderSettings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server running `handler` per connection, counting connections."""

    def __init__(
        self,
        handler: Handler,
        ssl_context: ssl.SSLContext | None = None,
        *,
        receive_buffer: int | None = None,
    ) -> None:
        self.handler = handler
        self.ssl = ssl_context
        self.receive_buffer = receive_buffer  # SO_RCVBUF: a small one stalls a large upload
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

        listener = socket.create_server(("127.0.0.1", 0))
        if self.receive_buffer is not None:  # accepted sockets inherit it
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        self._server = await asyncio.start_server(serve, sock=listener, ssl=self.ssl)
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


@asynccontextmanager
async def provider(base_url: str, **settings: Any) -> AsyncIterator[OpenAIProvider]:
    config = ProviderSettings(kind="openai-compatible", base_url=base_url, **settings)
    made = OpenAIProvider("local", config, InferenceSettings(), "openai-compatible")
    try:
        yield made
    finally:
        await made.aclose()


def chunk(text: str | None = None, finish: str | None = None) -> tuple[None, dict[str, Any]]:
    delta = {"content": text} if text is not None else {}
    return (
        None,
        {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]},
    )


STREAM = sse(chunk("Hello "), chunk("there"), chunk(None, "stop"), (None, "[DONE]"))


def chunked(body: bytes, *, end: bool = True) -> bytes:
    """An HTTP/1.1 SSE response, the body in one chunk; `end=False` leaves it open."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    out = head + b"\r\n" + b"%x\r\n%b\r\n" % (len(body), body)
    return out + (b"0\r\n\r\n" if end else b"")


def whole(body: bytes, *headers: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(headers)
    return head + b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


WHOLE = json.dumps(
    {"model": "m", "choices": [{"finish_reason": "stop", "message": {"content": "done"}}]}
).encode()


async def test_a_body_cut_mid_stream_is_reported_as_a_broken_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        first = sse(chunk("Part "))
        writer.write(chunked(first, end=False) + b"40\r\ndata: {")  # promises 64 bytes
        await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        events = await collect(local)
    end = terminal(events)
    assert isinstance(end, Failed)
    assert (end.error.kind, end.error.retryable) == ("network", True)
    assert end.error.message == (
        "The connection to the provider broke mid-reply "
        "(the connection closed in the middle of a chunked body)"
    )
    assert visible(events) == "Part "


async def test_a_whole_body_cut_short_is_reported_as_a_broken_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + WHOLE[:10])
        await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        with pytest.raises(InferenceError) as info:
            await local.complete(request(), "m")
    assert info.value.kind == "network"
    assert info.value.message == (
        "The connection to the provider broke mid-reply "
        "(the connection closed before the body's declared length came)"
    )


async def test_a_stream_read_to_its_end_gives_its_connection_back() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3):
            await server.read_request(reader)
            writer.write(chunked(STREAM))
            await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        for _ in range(3):
            end = terminal(await collect(local))
            assert isinstance(end, Complete) and end.response.text == "Hello there"
    assert server.connections == 1
    head = server.requests[0].lower()
    assert head.startswith(b"post /chat/completions http/1.1\r\n")
    assert b"\r\ncontent-type: application/json\r\n" in head


async def test_no_keepalive_when_max_keepalive_connections_is_zero() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(STREAM))
        await writer.drain()
        await reader.read()

    async with (
        RawServer(handler) as server,
        provider(server.url, max_keepalive_connections=0) as local,
    ):
        for _ in range(2):
            assert isinstance(terminal(await collect(local)), Complete)
    assert server.connections == 2


async def test_max_keepalive_connections_caps_the_connections_kept_idle() -> None:
    # Three calls at once take three connections; given back, one is kept and two are
    # closed, so the next three at once make two new ones.
    arrived: list[asyncio.Event] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            gate = arrived[(len(server.requests) - 1) // 3]
            if len(server.requests) % 3 == 0:
                gate.set()  # the round's third request: all three answer
            await gate.wait()
            writer.write(chunked(STREAM))
            await writer.drain()

    async with (
        RawServer(handler) as server,
        provider(server.url, max_keepalive_connections=1) as local,
    ):
        for round_ in range(2):
            arrived.append(asyncio.Event())
            ends = await asyncio.gather(*(collect(local) for _ in range(3)))
            assert all(isinstance(terminal(events), Complete) for events in ends)
            assert server.connections == 3 + 2 * round_
    assert len(server.requests) == 6


async def test_leaving_a_stream_early_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(sse(chunk("Hi ")), end=False))
        await writer.drain()
        assert await reader.read() == b""  # the client hung up
        closed.set()

    async with RawServer(handler) as server, provider(server.url) as local:
        async with aclosing(local.stream(request(), "m")) as events:
            async for event in events:
                if isinstance(event, Token):
                    break
        await asyncio.wait_for(closed.wait(), 5)


async def test_silence_past_the_read_timeout_is_a_timeout() -> None:
    # 0.5 s, not 0.2 s: "Hi " must reach the client before the timer fires, on a loaded
    # machine too; the silence after it is what the timeout cuts.
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(sse(chunk("Hi ")), end=False))
        await writer.drain()
        await stalled.wait()

    async with RawServer(handler) as server, provider(server.url, read_timeout_s=0.5) as local:
        events = await collect(local)
        stalled.set()
    end = terminal(events)
    assert isinstance(end, Failed) and end.error.kind == "timeout"
    assert end.error.message == (
        "Timed out waiting for data (no bytes from the provider for 0.5 s: read_timeout_s)"
    )
    assert visible(events) == "Hi "


async def test_a_heads_read_timeout_begins_once_a_large_body_is_sent() -> None:
    """As with aiohttp's own timer, the head is timed from the request body's end: a
    provider that takes a large body slower than the read timeout, then answers at once,
    is answered (a big image over a slow link)."""
    large = request("x" * (8 << 20))  # more than both kernels' socket buffers hold

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(2.5)  # 2.5 read timeouts before a byte is read: the upload stalls
        await server.read_request(reader)
        writer.write(chunked(STREAM))
        await writer.drain()

    async with (
        RawServer(handler, receive_buffer=16 << 10) as server,
        provider(server.url, read_timeout_s=1.0) as local,  # a loaded machine answers in it
    ):
        events = await collect(local, large)
    assert isinstance(terminal(events), Complete), terminal(events)
    assert visible(events) == "Hello there"
    assert len(server.requests[0]) > 8 << 20


async def test_a_provider_silent_before_its_head_times_out_on_the_read_timeout() -> None:
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await stalled.wait()

    async with RawServer(handler) as server, provider(server.url, read_timeout_s=0.2) as local:
        end = terminal(await collect(local))
        with pytest.raises(InferenceError) as info:
            await local.complete(request(), "m")
        stalled.set()
    assert isinstance(end, Failed) and end.error.kind == "timeout"
    assert "Timed out waiting for data" in end.error.message
    assert info.value.kind == "timeout"


async def test_a_stream_whose_consumer_holds_it_past_the_read_timeout_goes_on() -> None:
    """Time the consumer keeps an event is not the provider's silence: a provider held back
    by a slow consumer (TCP back-pressure, here the server waiting for it) is not cut."""
    consumer_ready = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(sse(chunk("Hello ")), end=False))
        await writer.drain()
        await consumer_ready.wait()
        rest = sse(chunk("there"), chunk(None, "stop"), (None, "[DONE]"))
        writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(rest), rest))
        await writer.drain()

    events: list[Any] = []
    async with (
        RawServer(handler) as server,
        provider(server.url, read_timeout_s=0.5) as local,  # "Hello " comes before it
        aclosing(local.stream(request(), "m")) as stream,
    ):
        async for event in stream:
            events.append(event)
            if isinstance(event, Token):
                await asyncio.sleep(1.0)  # twice the read timeout, holding the stream
                consumer_ready.set()
    end = terminal(events)
    assert isinstance(end, Complete), end
    assert end.response.text == "Hello there"


async def test_a_stream_that_never_ends_its_body_after_the_reply_is_cut_by_the_read_timeout() -> (
    None
):
    """The reply is whole, but the body never ends: draining it stops at the read timeout and
    the reply still completes; the connection is closed, not pooled."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(STREAM, end=False))
        await writer.drain()
        assert await reader.read() == b""  # the client hung up
        closed.set()

    # 0.5 s, not 0.2 s: the whole reply must be read before the timer fires, on a loaded
    # machine too; only the drain after it may be cut.
    async with RawServer(handler) as server, provider(server.url, read_timeout_s=0.5) as local:
        end = terminal(await collect(local))
        await asyncio.wait_for(closed.wait(), 5)
    assert isinstance(end, Complete) and end.response.text == "Hello there"


async def test_max_connections_queues_calls_and_the_connect_timeout_bounds_the_wait() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            await release.wait()
            writer.write(whole(WHOLE))
            await writer.drain()

    async with (
        RawServer(handler) as server,
        provider(server.url, max_connections=1, connect_timeout_s=0.2) as local,
    ):
        first = asyncio.create_task(local.complete(request(), "m"))
        await asyncio.sleep(0.05)
        with pytest.raises(InferenceError) as info:  # no free connection in time
            await local.complete(request(), "m")
        assert info.value.kind == "timeout"
        second = asyncio.create_task(local.complete(request(), "m"))
        await asyncio.sleep(0.02)
        release.set()
        assert (await first).text == (await second).text == "done"
    assert server.connections == 1


async def test_an_http_proxy_from_the_environment_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))
        await writer.drain()

    async with RawServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url)
        for name in ("NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        async with provider("http://api.invalid/v1") as local:
            assert (await local.complete(request(), "m")).text == "done"
    assert server.requests[0].startswith(b"POST http://api.invalid/v1/chat/completions HTTP/1.1")


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def proxy_environment(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Exactly `values` as the proxy variables (upper-case names), none other in either case."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


async def proxy_answering(answer: bytes) -> RawServer:
    """A proxy for http:// targets: it reads the absolute-form request and answers it."""

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(answer)
        await writer.drain()

    server = RawServer(proxy)
    return server


@pytest.mark.parametrize("variable", ["ALL_PROXY", "all_proxy"])
async def test_all_proxy_applies_when_no_proxy_names_the_scheme(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    async with await proxy_answering(whole(WHOLE)) as server:
        proxy_environment(monkeypatch)
        monkeypatch.setenv(variable, server.url)
        async with provider("http://api.invalid/v1") as local:
            assert (await local.complete(request(), "m")).text == "done"
    assert server.requests[0].startswith(b"POST http://api.invalid/v1/chat/completions HTTP/1.1")


async def test_a_proxy_without_a_scheme_is_an_http_proxy_with_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with await proxy_answering(whole(WHOLE)) as server:
        bare = server.url.removeprefix("http://")
        proxy_environment(monkeypatch, HTTP_PROXY=f"proxyuser:proxy-pass-6262@{bare}")
        async with provider("http://api.invalid/v1") as local:
            assert (await local.complete(request(), "m")).text == "done"
    head = server.requests[0].lower()
    assert head.startswith(b"post http://api.invalid/v1/chat/completions http/1.1")
    assert b"proxy-authorization: basic " in head  # user:password, as the proxy asks
    assert redact("proxy-pass-6262") == "[REDACTED]"  # and the password is a secret


async def test_an_https_targets_connect_carries_the_proxy_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async with RawServer(proxy) as server:
        bare = server.url.removeprefix("http://")
        proxy_environment(monkeypatch, ALL_PROXY=f"http://proxyuser:proxy-pass-8484@{bare}")
        async with provider("https://api.invalid/v1") as local:
            with pytest.raises(InferenceError):  # the proxy refuses the tunnel
                await local.complete(request(), "m")
    head = server.requests[0].lower()
    assert head.startswith(b"connect api.invalid:443 http/1.1")
    assert b"proxy-authorization: basic " in head


@pytest.mark.parametrize("variable", ["ALL_PROXY", "HTTPS_PROXY"])
async def test_a_proxy_aiohttp_cannot_speak_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    proxy_environment(monkeypatch, **{variable: "socks5://me:sock-pass-7373@127.0.0.1:1080"})
    with pytest.raises(InferenceError) as info:
        async with provider("https://api.invalid/v1"):
            pass
    assert (info.value.kind, info.value.retryable) == ("invalid_request", False)
    message = info.value.message
    assert f"the proxy {variable} = 'socks5://[REDACTED]@127.0.0.1:1080' cannot be used" in message
    assert "sock-pass-7373" not in message


async def test_an_https_proxy_is_reached_over_tls(tmp_path: Path) -> None:
    """``HTTP_PROXY=https://...``: TLS to the proxy, verified against SSL_CERT_FILE (read
    when aiohttp loads, so in a process of its own: `agentcore infer`)."""
    ca = trustme.CA()
    proxy_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(proxy_context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))
        await writer.drain()

    settings = tmp_path / "agentcore.toml"
    settings.write_text(
        '[providers.lan]\nkind = "openai-compatible"\nbase_url = "http://api.invalid/v1"\n'
    )
    async with RawServer(proxy, proxy_context) as server:
        assert server.url.startswith("https://")
        env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_LOWER}
        env |= {"HTTP_PROXY": server.url, "SSL_CERT_FILE": str(tmp_path / "ca.pem")}
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "agentcore", "infer", "--settings", str(settings)),
            *("--model", "lan:m", "--no-stream", "Hi"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            env=env,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode() == "done\n"
    assert server.requests[0].startswith(b"POST http://api.invalid/v1/chat/completions HTTP/1.1")


PROXY_LOWER = {name.lower() for name in PROXY_VARIABLES}


async def test_no_proxy_hosts_are_reached_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    async def direct(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))
        await writer.drain()

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    async with RawServer(direct) as server, provider(server.url) as local:
        assert (await local.complete(request(), "m")).text == "done"
    async with provider("http://provider.invalid/v1") as proxied:  # to the dead proxy
        with pytest.raises(InferenceError) as info:
            await proxied.complete(request(), "m")
    assert info.value.kind == "network"
    assert len(server.requests) == 1


async def test_a_compressed_body_is_decoded() -> None:
    packed = gzip.compress(WHOLE)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(packed, b"Content-Encoding: gzip\r\n"))
        await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        assert (await local.complete(request(), "m")).text == "done"


async def test_tls_is_verified_by_default() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))
        await writer.drain()

    async with RawServer(handler, server_context) as server, provider(server.url) as local:
        with pytest.raises(InferenceError) as info:  # the system's CAs do not know ours
            await local.complete(request(), "m")
    assert info.value.kind == "network"
    assert "CERTIFICATE_VERIFY_FAILED" in info.value.message
    assert server.requests == []


async def test_a_refused_connection_is_a_network_error() -> None:
    async with RawServer(lambda r, w: asyncio.sleep(0)) as server:
        url = server.url
    async with provider(url) as local:  # the server is gone: its port refuses
        end = terminal(await collect(local))
    assert isinstance(end, Failed) and end.error.kind == "network"
    assert end.error.message.startswith("Could not connect to the provider")


def test_the_driver_runs_on_uvloop() -> None:
    """Hosts embed the kernel in uvloop apps (uvicorn): its transports are not asyncio's."""
    import uvloop

    async def main() -> str:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await server.read_request(reader)
            data = chunked(STREAM)
            for i in range(0, len(data), 7):  # in small TCP writes: awkward splits
                writer.write(data[i : i + 7])
                await writer.drain()
                await asyncio.sleep(0)

        async with RawServer(handler) as server, provider(server.url) as local:
            end = terminal(await collect(local))
            assert isinstance(end, Complete)
            return end.response.text

    assert uvloop.run(main()) == "Hello there"


async def test_a_json_body_cut_where_a_stream_was_asked_fails_typed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + WHOLE[:10])
        await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        end = terminal(await collect(local))
    assert isinstance(end, Failed) and end.error.kind == "network"
    assert "broke mid-reply" in end.error.message


async def test_a_whole_reply_of_an_odd_shape_fails_typed() -> None:
    odd = json.dumps({"choices": [{"message": {"tool_calls": [7]}}]}).encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.read_request(reader)
            writer.write(whole(odd))
            await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        with pytest.raises(InferenceError) as info:
            await local.complete(request(), "m")
        end = terminal(await collect(local))  # the same body where a stream was asked
    assert info.value.kind == "server"
    assert info.value.message.startswith("The provider sent a reply agentcore cannot read")
    assert isinstance(end, Failed) and end.error.message == info.value.message


async def test_a_reused_connection_closed_after_part_of_a_reply_is_not_sent_again() -> None:
    """Only a reused connection that ended before any response byte was a server closing
    it as idle: one that had begun to answer did the request, which is not sent again."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))  # the first request, answered; the connection kept
        await writer.drain()
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: appl")  # then cut inside the head
        await writer.drain()

    async with RawServer(handler) as server, provider(server.url) as local:
        assert (await local.complete(request(), "m")).text == "done"
        with pytest.raises(InferenceError) as info:
            await local.complete(request(), "m")
    assert (server.connections, len(server.requests)) == (1, 2)
    assert info.value.kind == "network"
    assert info.value.message == (
        "The connection to the provider broke mid-reply "
        "(the server closed the connection inside the response head)"
    )


async def test_a_reused_connection_closed_before_any_byte_is_sent_again_on_a_fresh_one() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(whole(WHOLE))
        await writer.drain()
        if server.connections == 1:
            await server.read_request(reader)  # and closed unanswered, as if idle

    async with RawServer(handler) as server, provider(server.url) as local:
        assert (await local.complete(request(), "m")).text == "done"
        assert (await local.complete(request(), "m")).text == "done"
    assert (server.connections, len(server.requests)) == (2, 3)


# -- a streamed call's head: its read timeout is the driver's (`Silence`), from the send --


def timers(loop: asyncio.AbstractEventLoop) -> tuple[int, int]:
    """The loop's cancelled timers, and its live ones with a context of their own or a
    bound method to call (a stream holds its timer for its whole life)."""
    handles = loop._scheduled  # type: ignore[attr-defined]
    cancelled = sum(h.cancelled() for h in handles)
    live = [h for h in handles if not h.cancelled()]
    own = sum(h._context is not TIMER_CONTEXT or inspect.ismethod(h._callback) for h in live)
    return cancelled, own


async def test_a_streamed_call_leaves_no_cancelled_timer_in_the_loop() -> None:
    """One timer for the read timeout, head and body: aiohttp's, made at the send and again
    at the head and cancelled, stayed in the loop's heap until their time (300 s). The
    live one holds no copy of the caller's context (`TIMER_CONTEXT`) and no bound method."""
    loop = asyncio.get_running_loop()
    stalled, before = asyncio.Event(), (0, 0)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(chunked(sse(chunk("Hi ")), end=False))
        await writer.drain()
        await stalled.wait()

    async with RawServer(handler) as server, provider(server.url) as local:
        before = timers(loop)
        async with aclosing(local.stream(request(), "m")) as events:
            async for event in events:
                if isinstance(event, Token):
                    break
            during = timers(loop), len(loop._scheduled)  # type: ignore[attr-defined]
        stalled.set()
    assert during == (before, before[0] + before[1] + 1)  # and one live timer more: Silence


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 100\r\n\r\n{", id="error"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + WHOLE[:10], id="json-not-stream"
        ),
    ],
)
async def test_a_streamed_calls_body_read_whole_that_stalls_after_its_head_times_out(
    reply: bytes,
) -> None:
    """An error reply, or a JSON reply where a stream was asked, is read whole with
    aiohttp's read timeout back: a stall after its head still ends the call."""
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(reply)
        await writer.drain()
        await stalled.wait()

    async with RawServer(handler) as server, provider(server.url, read_timeout_s=0.2) as local:
        end = terminal(await asyncio.wait_for(collect(local), 10))  # a hang fails, not waits
        stalled.set()
    assert isinstance(end, Failed) and end.error.kind == "timeout"
    assert end.error.message.startswith("Timed out waiting for data")


async def test_a_streamed_call_sent_again_times_out_on_the_fresh_connections_head() -> None:
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if server.connections == 1:
            writer.write(whole(WHOLE))
            await writer.drain()
            await server.read_request(reader)  # and closed unanswered, as if idle
        else:
            await stalled.wait()  # the fresh connection: no head

    async with RawServer(handler) as server, provider(server.url, read_timeout_s=0.2) as local:
        assert (await local.complete(request(), "m")).text == "done"
        end = terminal(await asyncio.wait_for(collect(local), 10))
        stalled.set()
    assert (server.connections, len(server.requests)) == (2, 3)
    assert isinstance(end, Failed) and end.error.kind == "timeout"
    assert end.error.message.startswith("Timed out waiting for data")
    assert "sent again on a fresh connection" in end.error.message
    assert not SENDING  # each send's entry goes with it, whatever the ending
