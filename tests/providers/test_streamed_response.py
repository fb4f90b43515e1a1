"""`StreamedResponse.body_only`: a streamed response the driver accepted keeps its body, not its
head nor the request's headers (the key among them), and still reads and pools as before.
Against a raw asyncio server on loopback, over real TCP."""

from __future__ import annotations

import asyncio

import aiohttp

from agentcore.providers.body import StreamedResponse

KEY = "sk-streamed-response-test-key"
BODY = b"data: one\n\ndata: two\n\n"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request on the connection with a keep-alive SSE body of known length."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-request-id: r-1\r\n"
                + b"content-length: %d\r\n\r\n" % len(BODY)
                + BODY
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_body_only_drops_the_head_and_the_request_headers_and_the_body_still_reads() -> None:
    connections = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await _serve(reader, writer)

    server = await asyncio.start_server(counted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/stream"
    try:
        async with aiohttp.ClientSession(
            headers={"authorization": f"Bearer {KEY}"}, response_class=StreamedResponse
        ) as session:
            for _ in range(2):
                response = await session.post(url, data=b"{}")
                assert isinstance(response, StreamedResponse)
                assert response.headers["content-type"] == "text/event-stream"
                assert KEY in response.request_info.headers["authorization"]
                response.body_only()
                assert (response.status, str(response.url)) == (200, url)
                assert not response.headers and not response.raw_headers
                assert not response.request_info.headers
                assert response.request_info.method == "POST"
                assert await response.content.read() == BODY
                response.release()
    finally:
        server.close()
    assert connections == 1  # the second request went on the pooled connection


async def test_a_streamed_response_keeps_what_it_sets_in_slots_not_an_instance_dict() -> None:
    """Everything an open response sets has a slot, starting at the class's default; only a
    name the class makes a function of (``_resolve_charset``) is left to the dict."""
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/stream"
    try:
        async with aiohttp.ClientSession(response_class=StreamedResponse) as session:
            response = await session.post(url, data=b"{}")
            assert set(vars(response)) <= {"_resolve_charset"}
            assert (response.status, response.reason) == (200, "OK")
            assert response.history == ()
            assert await response.text() == BODY.decode()  # the charset: the session's rule
            response.close()
            assert response.closed and set(vars(response)) <= {"_resolve_charset"}
    finally:
        server.close()
