"""A scriptable MCPL server, for stdio and WebSocket alike: what agentcore's end-to-end
tests and its benches (``bench/soak.py``) play the server with.

`ServerSession` is a scriptable MCPL server: it answers `initialize` with its
manifest and `featureSets/update` with a receipt (optionally after running a
step of the test first, e.g. sending a request before the receipt), sends
`inference/request`s when the test asks, and records every message it
receives, in order. It runs in the test process and talks to the host over a
`Channel`:

- stdio: the host spawns ``relay_server.py`` (beside this module, stdlib only), a real
  subprocess that passes the host's stdin to a TCP socket back to the test and
  the test's lines to its stdout (`StdioHub`);
- WebSocket: an aiohttp server on 127.0.0.1 that the host connects to as a
  client (`WsHub`).

So every test runs the same server logic over both transports, and a test can
play the server even when the host is an ``agentcore serve`` subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import WSMsgType, web

TIMEOUT_S = 10.0
RELAY = Path(__file__).with_name("relay_server.py")
"""The stdio relay a `StdioHub` has the host spawn (stdlib only: runs under any Python)."""
HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")
"""A stdio MCPL server that tries to exhaust the host (issue 22's probes; stdlib only)."""

STREAMING_USES = ["inferenceRequest", "inferenceRequest.streaming"]
MANIFEST: dict[str, Any] = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "featureSets": {
        "fs.a": {"description": "routed to the anthropic wire", "uses": STREAMING_USES},
        "fs.o": {"description": "routed to the openai wire", "uses": STREAMING_USES},
        "fs.r": {"description": "routed to the openai-responses wire", "uses": STREAMING_USES},
        "fs.g": {"description": "routed to the gemini wire", "uses": STREAMING_USES},
        "fs.x": {
            "description": "routed to the anthropic wire, XML tool mode",
            "uses": STREAMING_USES,
        },
        "fs.off": {"description": "disabled by the host's settings", "uses": STREAMING_USES},
        "fs.unrouted": {"description": "no routing rule names it", "uses": STREAMING_USES},
        "fs.plain": {"description": "whole requests only", "uses": ["inferenceRequest"]},
    },
}
RECEIPT: dict[str, Any] = {"accepted": True, "mode": "full", "unavailableFeatures": []}

PolicyStep = Callable[["ServerSession", dict[str, Any]], Awaitable[None]]
HookStep = Callable[["ServerSession", dict[str, Any]], Awaitable[dict[str, Any] | None]]


class Channel(Protocol):
    async def send(self, text: str) -> None: ...

    async def receive(self) -> str | None: ...

    async def close(self) -> None: ...


@dataclass
class ServerScript:
    """How a session plays the server."""

    manifest: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(MANIFEST)))
    receipt: dict[str, Any] = field(default_factory=lambda: dict(RECEIPT))
    before_receipt: PolicyStep | None = None
    """Run on `featureSets/update` (every one, live policy changes too), before the receipt
    is sent."""
    receipt_error: dict[str, Any] | None = None
    """Answer `featureSets/update` with this error object instead of the receipt."""
    answer_initialize: bool = True
    """False: never answer `initialize` (a server stuck at start-up)."""
    manifest_result: Any = None
    """What `mcpl/manifest` returns (§17.4); None: the current `manifest`."""
    before_manifest: Callable[[ServerSession], Awaitable[None]] | None = None
    """Run on `mcpl/manifest`, before it is answered."""
    handlers: dict[str, HookStep] = field(default_factory=dict)
    """Answer other host→server requests by method (``push/render``), as `hook` does."""
    hook: HookStep | None = None
    """Answers `context/beforeInference`: returns the response's ``{"result": ...}`` or
    ``{"error": ...}``, or None to never answer. Unset: answered -32601 like any method."""


@dataclass
class Received:
    seq: int
    at: float
    """`time.time()` when the line reached the test."""
    message: dict[str, Any]


@dataclass
class Answer:
    """The host's response to one of the server's requests."""

    message: dict[str, Any]

    @property
    def result(self) -> Any:
        assert "result" in self.message, f"expected a result, got {self.message}"
        return self.message["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.message, f"expected an error, got {self.message}"
        error: dict[str, Any] = self.message["error"]
        return error


class ServerSession:
    """One MCPL session, played by the test. See the module docstring."""

    def __init__(self, channel: Channel, script: ServerScript, *, tag: str, pid: int | None):
        self.channel = channel
        self.script = script
        self.tag = tag
        self.pid = pid
        self.environ: dict[str, str] | None = None
        """stdio: the environment the server process started with (the relay reports it)."""
        self.received: list[Received] = []
        self.initialize: dict[str, Any] | None = None
        self.policy: dict[str, Any] | None = None
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self.left = False
        """The test closed this session (the server left) before the host did."""
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self._waiting: dict[Any, asyncio.Future[Answer]] = {}
        self._answers: dict[Any, list[Answer]] = {}
        self._cancelled: set[Any] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.on_message: Callable[[Received], None] | None = None
        """Called with every message as it arrives, before it is handled (the soak's index)."""
        self._reader = asyncio.get_running_loop().create_task(self._read())

    # -- the test's side ------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        await self.channel.send(json.dumps(message))

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, id: Any = None
    ) -> Any:
        """Send a request; returns its id (await `answer(id)` for the response)."""
        request_id = next(self._ids) if id is None else id
        loop = asyncio.get_running_loop()
        self._waiting[request_id] = loop.create_future()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return request_id

    async def cancel(self, request_id: Any, reason: str | None = None) -> None:
        """Send `notifications/cancelled` for a request; from now on it expects no answer."""
        params: dict[str, Any] = {"requestId": request_id}
        if reason is not None:
            params["reason"] = reason
        if request_id in self._waiting:
            self._cancelled.add(request_id)
        await self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

    async def answer(self, request_id: Any, timeout: float = TIMEOUT_S) -> Answer:
        return await asyncio.wait_for(asyncio.shield(self._waiting[request_id]), timeout)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Answer:
        return await self.answer(await self.request(method, params))

    async def infer(self, params: dict[str, Any]) -> Answer:
        return await self.call("inference/request", params)

    def answers(self, request_id: Any) -> list[Answer]:
        """Every response with this id (exactly one is the contract)."""
        return list(self._answers.get(request_id, []))

    def transcript(self, request_id: Any) -> list[tuple[Any, ...]]:
        """What reached the server for one request, in arrival order:
        ``("chunk", index, delta)`` and ``("result", result)`` / ``("error", error)``."""
        out: list[tuple[Any, ...]] = []
        for item in self.received:
            message = item.message
            if message.get("method") == "inference/chunk":
                params = message.get("params") or {}
                if params.get("requestId") == request_id:
                    out.append(("chunk", params.get("index"), params.get("delta")))
            elif "method" not in message and message.get("id") == request_id:
                if "result" in message:
                    out.append(("result", message["result"]))
                else:
                    out.append(("error", message.get("error")))
        return out

    def chunks(self, request_id: Any) -> list[tuple[Any, ...]]:
        return [t for t in self.transcript(request_id) if t[0] == "chunk"]

    def unanswered_or_twice(self) -> dict[Any, int]:
        """Ids of requests this session sent that did not get exactly one answer
        (for a request it cancelled: that got any answer at all)."""
        return {
            rid: len(self._answers.get(rid, []))
            for rid in self._waiting
            if len(self._answers.get(rid, [])) != (0 if rid in self._cancelled else 1)
        }

    async def wait_closed(self, timeout: float = TIMEOUT_S) -> None:
        await asyncio.wait_for(self.closed.wait(), timeout)

    async def close(self) -> None:
        """The server goes away (whatever it has not been answered stays unanswered)."""
        self.left = True
        self._reader.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.channel.close()
        self.closed.set()

    # -- the server's own side ------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                text = await self.channel.receive()
                if text is None:
                    break
                message = json.loads(text)
                item = Received(next(self._seq), time.time(), message)
                self.received.append(item)
                if self.on_message is not None:
                    self.on_message(item)
                self._dispatch(message)
        finally:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"session {self.tag} closed"))
                    future.exception()  # retrieved: a test need not await every answer
            self.closed.set()
            with contextlib.suppress(Exception):
                await self.channel.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            answer = Answer(message)
            self._answers.setdefault(message.get("id"), []).append(answer)
            future = self._waiting.get(message.get("id"))
            if future is not None and not future.done():
                future.set_result(answer)
            return
        if "id" not in message:
            return  # notifications are only recorded
        rid, params = message["id"], message.get("params") or {}
        if method == "initialize":
            self.initialize = params
            if not self.script.answer_initialize:
                return
            self._spawn(
                self._respond(
                    rid,
                    {
                        "protocolVersion": params.get("protocolVersion"),
                        "capabilities": {"experimental": {"mcpl": self.script.manifest}},
                        "serverInfo": {"name": "e2e", "version": "1"},
                    },
                )
            )
        elif method == "featureSets/update":
            self.policy = params
            self._spawn(self._receipt(rid, params))
        elif method == "mcpl/manifest":
            self._spawn(self._manifest(rid))
        elif method == "ping":
            self._spawn(self._respond(rid, {}))
        elif method == "context/beforeInference" and self.script.hook is not None:
            self._spawn(self._hook(self.script.hook, rid, params))
        elif method in self.script.handlers:
            self._spawn(self._hook(self.script.handlers[method], rid, params))
        else:
            error = {"code": -32601, "message": f"e2e server: no method {method}"}
            self._spawn(self.send({"jsonrpc": "2.0", "id": rid, "error": error}))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hook(self, hook: HookStep, rid: Any, params: dict[str, Any]) -> None:
        response = await hook(self, params)
        if response is not None:
            await self.send({"jsonrpc": "2.0", "id": rid, **response})

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The params of every notification of `method` this session received, in order."""
        return [
            item.message.get("params") or {}
            for item in self.received
            if item.message.get("method") == method and "id" not in item.message
        ]

    def requests(self, method: str) -> list[dict[str, Any]]:
        """The params of every request of `method` the host sent this session, in order."""
        return [
            item.message.get("params") or {}
            for item in self.received
            if item.message.get("method") == method and "id" in item.message
        ]

    async def _respond(self, rid: Any, result: Any) -> None:
        await self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    async def _receipt(self, rid: Any, params: dict[str, Any]) -> None:
        if self.script.before_receipt is not None:
            await self.script.before_receipt(self, params)
        if self.script.receipt_error is not None:
            await self.send({"jsonrpc": "2.0", "id": rid, "error": self.script.receipt_error})
            return
        await self._respond(rid, self.script.receipt)
        self.ready.set()

    async def _manifest(self, rid: Any) -> None:
        if self.script.before_manifest is not None:
            await self.script.before_manifest(self)
        result = self.script.manifest_result
        await self._respond(rid, self.script.manifest if result is None else result)

    def requests_of(self, method: str) -> list[dict[str, Any]]:
        """The params of every request the host sent with this method, in order."""
        return [
            r.message.get("params") or {}
            for r in self.received
            if r.message.get("method") == method and "id" in r.message
        ]

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)


# -- channels and hubs ---------------------------------------------------------


class TcpChannel:
    """The test's end of a relay's socket: one JSON-RPC message per line."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def send(self, text: str) -> None:
        self._writer.write(text.encode() + b"\n")
        await self._writer.drain()

    async def receive(self) -> str | None:
        while True:
            line = await self._reader.readline()
            if not line:
                return None
            if line.strip():
                return line.decode()

    async def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


class WsChannel:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    async def send(self, text: str) -> None:
        await self._ws.send_str(text)

    async def receive(self) -> str | None:
        while True:
            message = await self._ws.receive()
            if message.type is WSMsgType.TEXT:
                return str(message.data)
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                return None
            if message.type is WSMsgType.ERROR:
                return None

    async def close(self) -> None:
        await self._ws.close()


class Hub:
    """Where the host's sessions arrive: `config(tag)` is a ``[mcpl.servers.NAME]`` section."""

    kind: str

    def __init__(self) -> None:
        self.scripts: dict[str, ServerScript] = {}
        self.sessions: list[ServerSession] = []
        self._arrived: asyncio.Queue[ServerSession] = asyncio.Queue()
        self._handlers: set[asyncio.Task[Any]] = set()

    def config(self, tag: str, grant: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def start(self) -> Hub:
        raise NotImplementedError

    async def stop(self) -> None:
        for session in self.sessions:
            await session.close()

    def _session(self, channel: Channel, tag: str, pid: int | None) -> ServerSession:
        session = ServerSession(channel, self.scripts.get(tag) or ServerScript(), tag=tag, pid=pid)
        self.sessions.append(session)
        self._arrived.put_nowait(session)
        return session

    async def next_session(self, timeout: float = TIMEOUT_S) -> ServerSession:
        return await asyncio.wait_for(self._arrived.get(), timeout)


FULL_GRANT = ["inferenceRequest", "inferenceRequest.streaming", "modelInfo"]


class StdioHub(Hub):
    kind = "stdio"

    def __init__(self) -> None:
        super().__init__()
        self._server: asyncio.Server | None = None
        self.port = 0

    def config(self, tag: str, grant: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "command": [sys.executable, str(RELAY)],
            "env": {"MCPL_E2E_RELAY": f"127.0.0.1:{self.port}", "MCPL_E2E_TAG": tag},
            "grant": FULL_GRANT if grant is None else grant,
            "shutdown_grace_s": 2.0,
            **extra,
        }

    async def start(self) -> StdioHub:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
        if not line:
            writer.close()
            return
        hello = json.loads(line)["relay"]
        session = self._session(TcpChannel(reader, writer), hello["tag"], hello["pid"])
        session.environ = hello["environ"]
        await session.closed.wait()

    async def stop(self) -> None:
        await super().stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class WsHub(Hub):
    kind = "ws"

    def __init__(self) -> None:
        super().__init__()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def config(self, tag: str, grant: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "url": f"ws://127.0.0.1:{self.port}/mcpl/{tag}",
            "grant": FULL_GRANT if grant is None else grant,
            **extra,
        }

    async def start(self) -> WsHub:
        app = web.Application()
        app.router.add_get("/mcpl/{tag}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        session = self._session(WsChannel(ws), request.match_info["tag"], None)
        await session.closed.wait()
        return ws

    async def stop(self) -> None:
        await super().stop()
        if self._runner is not None:
            await self._runner.cleanup()


def make_hub(kind: str) -> Hub:
    return StdioHub() if kind == "stdio" else WsHub()


def hold_policy_updates(session: ServerSession) -> asyncio.Event:
    """From now on the server answers each `featureSets/update` only once the returned
    event is set (the initial exchange, already over, is not held)."""
    release = asyncio.Event()

    async def hold(_: ServerSession, __: dict[str, Any]) -> None:
        await release.wait()

    session.script.before_receipt = hold
    return release


def routed_model_info(answer: Answer) -> bool:
    """`model/info` got past the grant to the router. The rigs' default model is one nothing
    describes, so the router's answer is -32603 naming all it does not know (§12.2: every
    field or an error)."""
    unknown: list[str] = answer.error["data"]["unknown"]
    return unknown == ["vendor", "context_window", "capabilities"]
