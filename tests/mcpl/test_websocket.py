"""ServerConnection over a real WebSocket: an aiohttp server on 127.0.0.1, port 0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentcore.mcpl.connection import McplStartError, ServerConnection
from agentcore.mcpl.protocol import PARSE_ERROR, McplRequest
from agentcore.mcpl.transports import ReconnectPolicy, WebSocketTransport, websocket_factory

TIMEOUT = 10.0
MANIFEST = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "featureSets": {"memory.consolidation": {"description": "d", "uses": ["inferenceRequest"]}},
}
INFER = {"featureSet": "memory.consolidation", "messages": [{"role": "user", "content": "hi"}]}


class Session:
    """The server's end of one socket; the test plays the MCPL server through it."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self.ws = ws
        self.request = request
        self.done = asyncio.Event()

    async def receive(self) -> aiohttp.WSMessage:
        return await asyncio.wait_for(self.ws.receive(), TIMEOUT)

    async def receive_json(self) -> Any:
        message = await self.receive()
        assert message.type is aiohttp.WSMsgType.TEXT, message
        return json.loads(message.data)

    async def send(self, message: Any) -> None:
        await self.ws.send_str(json.dumps(message))

    def send_raw_text_frame(self, payload: bytes) -> None:
        """One unmasked, final text frame with these bytes, whatever they are (under 126)."""
        assert len(payload) < 126 and self.request.transport is not None
        self.request.transport.write(bytes([0x81, len(payload)]) + payload)

    async def handshake(self) -> dict[str, Any]:
        """Answer initialize and featureSets/update; returns the policy params."""
        init = await self.receive_json()
        assert init["method"] == "initialize"
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": init["id"],
                "result": {
                    "protocolVersion": init["params"]["protocolVersion"],
                    "capabilities": {"experimental": {"mcpl": MANIFEST}},
                    "serverInfo": {"name": "ws-test", "version": "1"},
                },
            }
        )
        assert (await self.receive_json())["method"] == "notifications/initialized"
        update = await self.receive_json()
        assert update["method"] == "featureSets/update"
        await self.send({"jsonrpc": "2.0", "id": update["id"], "result": {"accepted": True}})
        return dict(update["params"])


class WsServer:
    def __init__(self, autoping: bool = True) -> None:
        self.sessions: asyncio.Queue[Session] = asyncio.Queue()
        self.all: list[Session] = []
        self.autoping = autoping
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=self.autoping)
        await ws.prepare(request)
        session = Session(ws, request)
        self.all.append(session)
        await self.sessions.put(session)
        await session.done.wait()
        return ws

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_get("/mcpl", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"ws://{host}:{port}/mcpl"

    async def next_session(self) -> Session:
        return await asyncio.wait_for(self.sessions.get(), TIMEOUT)

    async def stop(self) -> None:
        for session in self.all:
            session.done.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[WsServer]:
    srv = WsServer()
    await srv.start()
    yield srv
    await srv.stop()


async def answer(request: McplRequest) -> Any:
    return {"content": "ok", "model": "m", "finishReason": "end_turn", "usage": {}}


def connection(url: str, **kwargs: Any) -> ServerConnection:
    factory_args = {k: kwargs.pop(k) for k in ("max_frame_bytes", "heartbeat_s") if k in kwargs}
    return ServerConnection(
        "ws",
        websocket_factory("ws", url, **factory_args),
        grant=["inferenceRequest", "modelInfo"],
        handler=answer,
        request_timeout_s=TIMEOUT,
        **kwargs,
    )


async def start(conn: ServerConnection, server: WsServer) -> Session:
    starting = asyncio.create_task(conn.start())
    session = await server.next_session()
    await session.handshake()
    await asyncio.wait_for(starting, TIMEOUT)
    return session


async def test_handshake_and_a_request_over_websocket(server: WsServer) -> None:
    conn = connection(server.url)
    starting = asyncio.create_task(conn.start())
    session = await server.next_session()
    params = await session.handshake()
    await asyncio.wait_for(starting, TIMEOUT)
    assert params == {
        "effectiveCapabilities": ["inferenceRequest", "modelInfo"],
        "deniedCapabilities": ["inferenceRequest.streaming"],
        "enabled": ["memory.consolidation"],
        "disabled": [],
    }
    assert conn.ready
    await session.send({"jsonrpc": "2.0", "id": 1, "method": "inference/request", "params": INFER})
    reply = await session.receive_json()
    assert reply["id"] == 1
    assert reply["result"]["finishReason"] == "end_turn"
    # Host→server notifications arrive as one text frame each.
    await conn.notify("notifications/message", {"level": "info"})
    assert (await session.receive_json())["method"] == "notifications/message"
    await conn.close()


async def test_a_binary_frame_is_answered_and_the_socket_survives(server: WsServer) -> None:
    conn = connection(server.url)
    session = await start(conn, server)
    await session.ws.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    refused = await session.receive_json()
    assert (refused["id"], refused["error"]["code"]) == (None, PARSE_ERROR)
    await session.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert (await session.receive_json()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    await conn.close()


async def closed_with(session: Session) -> int:
    """The close code the host's client sent."""
    while (message := await session.receive()).type is not aiohttp.WSMsgType.CLOSE:
        pass
    return int(message.data)


TOO_BIG = "the host refused a frame over 1024 bytes (max_frame_bytes) and closed the connection"
NOT_UTF8 = "the host refused a text frame that is not valid UTF-8 and closed the connection"


async def test_an_oversized_frame_ends_the_session_with_1009_and_the_log_says_so(
    server: WsServer, log_messages: list[str]
) -> None:
    conn = connection(server.url, max_frame_bytes=1024)
    session = await start(conn, server)
    await session.send({"jsonrpc": "2.0", "method": "x", "params": {"pad": "x" * 4096}})
    # aiohttp refuses the frame from its header and closes: WebSocket cannot skip a frame.
    assert await closed_with(session) == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
    assert f"mcpl server ws: {TOO_BIG} with 1009 (message too big)" in log_messages
    assert not any("the other side closed" in m for m in log_messages)


async def test_a_text_frame_that_is_not_utf8_ends_the_session_with_1007_and_the_log_says_so(
    server: WsServer, log_messages: list[str]
) -> None:
    conn = connection(server.url)
    session = await start(conn, server)
    session.send_raw_text_frame(b'{"jsonrpc":"2.0","method":"\xff"}')
    assert await closed_with(session) == aiohttp.WSCloseCode.INVALID_TEXT
    await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
    assert f"mcpl server ws: {NOT_UTF8} with 1007 (invalid frame payload data)" in log_messages
    assert not any("the other side closed" in m for m in log_messages)


@pytest.mark.parametrize("refused", ["too-big", "not-utf8"])
async def test_with_reconnect_a_refused_frame_is_followed_by_a_new_session(
    server: WsServer, log_messages: list[str], refused: str
) -> None:
    policy = ReconnectPolicy(initial_delay_s=0.01, max_attempts=5)
    conn = connection(server.url, max_frame_bytes=1024, reconnect=policy)
    first = await start(conn, server)
    if refused == "too-big":
        await first.send({"jsonrpc": "2.0", "method": "x", "params": {"pad": "x" * 4096}})
    else:
        first.send_raw_text_frame(b'{"jsonrpc":"2.0","method":"\xff"}')
    await closed_with(first)
    second = await server.next_session()
    await second.handshake()
    async with asyncio.timeout(TIMEOUT):
        while not conn.ready:
            await asyncio.sleep(0.01)
    assert conn.sessions == 2
    await second.send({"jsonrpc": "2.0", "id": 3, "method": "inference/request", "params": INFER})
    assert (await second.receive_json())["result"]["finishReason"] == "end_turn"
    why = TOO_BIG if refused == "too-big" else NOT_UTF8
    assert any(m.startswith(f"mcpl server ws: session lost ({why}") for m in log_messages)
    await conn.close()


async def test_reconnect_runs_a_new_handshake(server: WsServer) -> None:
    conn = connection(server.url, reconnect=ReconnectPolicy(initial_delay_s=0.01, max_attempts=5))
    first = await start(conn, server)
    await first.ws.close()
    second = await server.next_session()
    params = await second.handshake()
    assert params["enabled"] == ["memory.consolidation"]
    async with asyncio.timeout(TIMEOUT):
        while not conn.ready:
            await asyncio.sleep(0.01)
    assert conn.sessions == 2
    await second.send({"jsonrpc": "2.0", "id": 9, "method": "inference/request", "params": INFER})
    assert (await second.receive_json())["id"] == 9
    assert not conn.closed.is_set()
    await conn.close()
    assert conn.closed.is_set()


async def test_with_reconnect_a_server_not_up_yet_is_retried_until_it_is() -> None:
    srv = WsServer()
    await srv.start()
    url = srv.url
    await srv.stop()  # nothing listens on the port for now
    conn = connection(url, reconnect=ReconnectPolicy(initial_delay_s=0.05, max_attempts=20))
    starting = asyncio.create_task(conn.start())
    await asyncio.sleep(0.2)
    assert not starting.done()  # still retrying, not failed
    late = WsServer()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    await late.start(port)
    try:
        session = await late.next_session()
        await session.handshake()
        await asyncio.wait_for(starting, TIMEOUT)
        assert conn.ready and conn.sessions == 1
        await conn.close()
    finally:
        await late.stop()


async def test_with_reconnect_the_first_session_fails_once_the_schedule_runs_out() -> None:
    srv = WsServer()
    await srv.start()
    url = srv.url
    await srv.stop()
    conn = connection(url, reconnect=ReconnectPolicy(initial_delay_s=0.01, max_attempts=2))
    with pytest.raises(McplStartError):
        await asyncio.wait_for(conn.start(), TIMEOUT)
    assert conn.closed.is_set()


async def test_without_reconnect_a_server_not_up_fails_the_start_at_once() -> None:
    srv = WsServer()
    await srv.start()
    url = srv.url
    await srv.stop()
    conn = connection(url)
    # A connection that retried would keep trying (no max_attempts) and time out here; 5 s,
    # not 1 s, so a loaded machine's refused connect is not mistaken for one.
    with pytest.raises(McplStartError):
        await asyncio.wait_for(conn.start(), 5.0)


async def test_without_reconnect_a_closed_socket_closes_the_connection(server: WsServer) -> None:
    conn = connection(server.url)
    session = await start(conn, server)
    await session.ws.close()
    await asyncio.wait_for(conn.closed.wait(), TIMEOUT)


async def test_the_client_sends_heartbeat_pings() -> None:
    srv = WsServer(autoping=False)
    await srv.start()
    try:
        transport = await WebSocketTransport.connect(srv.url, name="hb", heartbeat_s=0.05)
        session = await srv.next_session()
        message = await session.receive()
        assert message.type is aiohttp.WSMsgType.PING

        async def drain() -> None:
            # Reading lets the server answer the client's close frame.
            while (await session.receive()).type not in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSED,
            ):
                pass

        await asyncio.gather(transport.close(), drain())
    finally:
        await srv.stop()


async def test_connect_failure_is_reported() -> None:
    conn = connection("ws://127.0.0.1:9/nothing-listens-here")
    with pytest.raises(McplStartError):
        await asyncio.wait_for(conn.start(), TIMEOUT)


def test_the_reconnect_wait_is_exponential_jittered_and_capped() -> None:
    policy = ReconnectPolicy(initial_delay_s=1.0, max_delay_s=8.0)
    for attempt, ceiling in enumerate([1.0, 2.0, 4.0, 8.0, 8.0]):
        waits = [policy.delay(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), (attempt, min(waits), max(waits))
        assert len(set(waits)) > 1  # jittered
    assert 4.0 <= policy.delay(100_000) <= 8.0  # no float overflow however long it fails


async def test_a_session_that_stays_up_starts_the_backoff_over(server: WsServer) -> None:
    """With reconnect_reset_after_s = 0 every session counts as having stayed up, so a
    server that drops each one is retried at the first wait every time, never looping."""
    traces: list[dict[str, Any]] = []

    async def emit(kind: str, **fields: Any) -> None:
        traces.append({"type": kind, **fields})

    policy = ReconnectPolicy(initial_delay_s=0.01, reset_after_s=0.0, crash_loop_after=2)
    conn = connection(server.url, reconnect=policy, emit=emit)
    session = await start(conn, server)
    for _ in range(3):
        await session.ws.close()
        session = await server.next_session()
        await session.handshake()
    await conn.close()
    waits = [t for t in traces if t.get("state") == "reconnecting"]
    assert [(t["attempt"], t["crashLooping"]) for t in waits] == [(1, False)] * 3


async def test_without_a_session_that_stays_up_the_backoff_keeps_growing(
    server: WsServer,
) -> None:
    traces: list[dict[str, Any]] = []

    async def emit(kind: str, **fields: Any) -> None:
        traces.append({"type": kind, **fields})

    policy = ReconnectPolicy(initial_delay_s=0.01, reset_after_s=3600.0, crash_loop_after=2)
    conn = connection(server.url, reconnect=policy, emit=emit)
    session = await start(conn, server)
    for _ in range(3):
        await session.ws.close()
        session = await server.next_session()
        await session.handshake()
    async with asyncio.timeout(TIMEOUT):
        while len([t for t in traces if t.get("state") == "ready"]) < 3:
            await asyncio.sleep(0.01)
    await conn.close()
    waits = [t for t in traces if t.get("state") == "reconnecting"]
    assert [(t["attempt"], t["crashLooping"]) for t in waits] == [(1, False), (2, True), (3, True)]
    ready = [t["crashLooping"] for t in traces if t.get("state") == "ready"]
    assert ready == [False, True, True]
