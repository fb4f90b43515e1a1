"""The loopback provider server: aiohttp on 127.0.0.1, playing scripted scenarios.

See the package docstring (`agentcore.testing`) for the API and examples.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from agentcore.testing.scenarios import (
    Cut,
    Long,
    Play,
    Scenario,
    Stall,
    Unplayable,
    Wire,
    credentials_message,
)
from agentcore.testing.sigv4 import AwsCredentials
from agentcore.testing.sigv4 import refusal as refusal
from agentcore.testing.wires import RENDERERS, render
from agentcore.testing.wires import refusal as wire_refusal
from agentcore.testing.wires.base import encode_frame

API_KEY_ENV = "LOOPBACK_API_KEY"
"""The environment variable the settings written by `write_settings` name for the key."""
API_KEY = "sk-loopback-not-a-real-key-0000"
"""A fake key to put in that variable; the server records it, never checks it."""

DEFAULT_PROVIDERS: dict[str, str] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "openrouter": "openrouter",
    "compat": "openai-compatible",
    "responses": "openai-responses",
    "gemini": "gemini",
}
"""`write_settings`' default ``[providers.NAME]`` sections: NAME to kind."""

_SLICE = 64 * 1024
_REDACT = ("authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token")
_ROOT_WIRES = ("anthropic", "gemini", "bedrock", "bedrock-converse")
"""Wires whose base URL is the server's root (the others' ends in ``/v1``)."""


@dataclass
class Call:
    """One request the server received, and what it played.

    `headers` are recorded as received, API keys included, so a test can assert
    the key was sent; `repr()` redacts them, so a failing assert never prints one.
    """

    wire: Wire
    provider: str | None
    """The NAME of a ``/p/NAME/...`` URL, else None."""
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: Any
    scenario: Scenario | None
    stream: bool = False
    """The call asked for a stream (``"stream": true``; Gemini: ``:streamGenerateContent``)."""
    model: str | None = None
    """The model asked for (in the body; Gemini: in the path)."""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    emitted_at: list[float] = field(default_factory=list)
    """`time.time()` of each visible-text chunk written (with ``timestamps=True``)."""
    disconnected: bool = False
    """The client left before the server finished playing."""
    stale: bool = False
    """It came on a keep-alive connection idle for `LoopbackServer.keepalive_timeout_s`:
    the server closed that connection without answering (no scenario was played)."""

    def __repr__(self) -> str:
        headers = {k: ("[REDACTED]" if k in _REDACT else v) for k, v in self.headers.items()}
        kind = self.scenario.kind if self.scenario else None
        return (
            f"Call(wire={self.wire!r}, provider={self.provider!r}, path={self.path!r}, "
            f"model={self.model!r}, stream={self.stream}, scenario={kind!r}, headers={headers})"
        )


class LoopbackServer:
    """A scripted provider on loopback, speaking every wire. See `agentcore.testing`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default: Scenario | None = None,
        choose: Callable[[Call], Scenario | None] | None = None,
        keepalive_timeout_s: float | None = None,
        aws_credentials: AwsCredentials | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.default = default
        """Played when nothing is scripted; None answers such a call with a 400 that says so."""
        self.choose = choose
        """Picks each call's scenario from the call itself (its body, wire, provider), for
        many concurrent calls whose order no queue can know; None (its answer, or unset):
        the queues, then `default`. Called on the server's event loop: keep it quick."""
        self.keepalive_timeout_s = keepalive_timeout_s
        """Close a keep-alive connection idle this long, as uvicorn does after 5 s
        (``timeout_keep_alive``); None: keep it open. The server closes it when the next
        request arrives on it, unanswered (the call is recorded `stale`), so a client
        always meets what a real server makes it meet when its idle timer fires just as
        a request is on its way; 0: every request on a reused connection meets it."""
        self.aws_credentials = aws_credentials
        """The AWS keys a Bedrock call's SigV4 signature is checked with (`sigv4.refusal`)."""
        self._idle_since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self.calls: list[Call] = []
        self._shared: collections.deque[Scenario] = collections.deque()
        self._queues: dict[str, collections.deque[Scenario]] = {}
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._prerendered: dict[tuple[Any, ...], Play] = {}

    # -- scripting ----------------------------------------------------------------

    def script(self, *scenarios: Scenario, provider: str | None = None) -> LoopbackServer:
        """Queue scenarios, one per call, in order. With `provider`, only calls to
        ``/p/PROVIDER/...`` (the base URL `base_url(wire, PROVIDER)` gives) take them;
        those calls fall back to the shared queue, then to `default`."""
        with self._lock:
            if provider is None:
                self._shared.extend(scenarios)
            else:
                self._queues.setdefault(provider, collections.deque()).extend(scenarios)
        return self

    def pending(self, provider: str | None = None) -> int:
        """Scenarios still queued (shared, or for one provider)."""
        with self._lock:
            if provider is None:
                return len(self._shared)
            return len(self._queues.get(provider, ()))

    def reset(self) -> None:
        """Forget queued scenarios and recorded calls."""
        with self._lock:
            self._shared.clear()
            self._queues.clear()
            self.calls.clear()

    def _next(self, provider: str | None) -> Scenario | None:
        with self._lock:
            queue = self._queues.get(provider) if provider is not None else None
            if queue:
                return queue.popleft()
            if self._shared:
                return self._shared.popleft()
        return self.default

    def calls_to(self, provider: str | None = None, wire: Wire | None = None) -> list[Call]:
        return [
            c
            for c in list(self.calls)
            if (provider is None or c.provider == provider) and (wire is None or c.wire == wire)
        ]

    # -- addresses and settings -------------------------------------------------------

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("the loopback server is not running")
        return f"http://{self.host}:{self.port}"

    def base_url(self, wire: Wire | str, provider: str | None = None) -> str:
        """What ``[providers.NAME] base_url`` should say: the root for ``anthropic`` and
        ``gemini``, the API base (ending ``/v1``) for the openai family, Responses included
        (kinds are accepted too)."""
        root = self.url + (f"/p/{provider}" if provider else "")
        return root if wire in _ROOT_WIRES else root + "/v1"

    def settings_toml(
        self,
        providers: Mapping[str, str | Mapping[str, Any]] | None = None,
        *,
        inference: Mapping[str, Any] | None = None,
        sections: Mapping[str, Mapping[str, Any]] | None = None,
        key_env: str = API_KEY_ENV,
        per_provider_urls: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> str:
        """A settings file with a ``[providers.NAME]`` for each NAME -> kind (default
        `DEFAULT_PROVIDERS`), each pointed at this server (at ``/p/NAME`` when
        `per_provider_urls`, so `script(..., provider=NAME)` reaches it) and sending
        `headers`, plus ``[inference]`` and any other `sections`
        (``{"retry": {"max_attempts": 2}}``). A provider given as a table, not a kind,
        keeps its other keys: ``{"x": {"kind": "anthropic", "tool_mode": "xml"}}``."""
        out: dict[str, Any] = {}
        out["providers"] = {}
        for name, given in (providers or DEFAULT_PROVIDERS).items():
            options = {"kind": given} if isinstance(given, str) else dict(given)
            kind = options["kind"]
            out["providers"][name] = {
                "base_url": self.base_url(kind, name if per_provider_urls else None),
                "api_key_env": key_env,
                **({"headers": dict(headers)} if headers else {}),
                **options,
            }
        if inference:
            out["inference"] = dict(inference)
        for name, values in (sections or {}).items():
            out[name] = dict(values)
        return to_toml(out)

    def write_settings(self, path: str | Path, *args: Any, **kwargs: Any) -> Path:
        """Write `settings_toml(...)` to `path` and return it. Set `API_KEY_ENV` yourself
        (the `loopback_settings` fixture does)."""
        target = Path(path)
        target.write_text(self.settings_toml(*args, **kwargs))
        return target

    # -- connection accounting ------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """TCP connections from clients that are open right now (idle keep-alive ones too)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    @property
    def in_flight(self) -> int:
        """Requests whose handler is still running (a stall counts until the client leaves)."""
        return self._in_flight

    async def wait_idle(self, *, connections: bool = True, timeout_s: float = 5.0) -> None:
        """Wait until no request is in flight and (with `connections`) no connection is
        open; raise AssertionError saying what is left after `timeout_s`. Works from any
        event loop, whether the server runs on it or on its own thread."""
        deadline = time.monotonic() + timeout_s
        while not self._idle(connections):
            if time.monotonic() > deadline:
                raise AssertionError(self._leftovers())
            await asyncio.sleep(0.005)

    def wait_idle_sync(self, *, connections: bool = True, timeout_s: float = 5.0) -> None:
        """`wait_idle` for synchronous code (the server must run on its own thread)."""
        deadline = time.monotonic() + timeout_s
        while not self._idle(connections):
            if time.monotonic() > deadline:
                raise AssertionError(self._leftovers())
            time.sleep(0.005)

    def _idle(self, connections: bool) -> bool:
        return self._in_flight == 0 and (not connections or self.open_connections == 0)

    def _leftovers(self) -> str:
        return (
            f"loopback server not idle: {self._in_flight} request(s) in flight, "
            f"{self.open_connections} connection(s) open"
        )

    # -- running on the current loop ----------------------------------------------------------

    async def start(self) -> LoopbackServer:
        app = web.Application()
        routes: dict[str, Wire] = {
            "/v1/messages": "anthropic",
            "/v1/chat/completions": "openai",
            "/chat/completions": "openai",
            "/v1/responses": "openai-responses",
            "/responses": "openai-responses",
            "/v1beta/models/{model}:streamGenerateContent": "gemini",
            "/v1beta/models/{model}:generateContent": "gemini",
            "/v1/models/{model}:streamGenerateContent": "gemini",
            "/v1/models/{model}:generateContent": "gemini",
            "/model/{model}/invoke": "bedrock",
            "/model/{model}/invoke-with-response-stream": "bedrock",
            "/model/{model}/converse": "bedrock-converse",
            "/model/{model}/converse-stream": "bedrock-converse",
        }
        for prefix in ("", "/p/{provider}"):
            for path, wire in routes.items():
                app.router.add_post(prefix + path, self._handler(wire))
        # handler_cancellation: a handler (a stall above all) ends when its client leaves.
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> LoopbackServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- running on its own thread -----------------------------------------------------------

    def start_in_thread(self) -> LoopbackServer:
        """Run the server on a background thread with its own event loop, so any test
        (sync or async, any loop scope) can use it, and a benchmark's CPU clock of the
        calling thread does not count the server's work."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._thread_loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="agentcore-loopback", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop_in_thread(self) -> None:
        loop, thread = self._thread_loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._thread_loop = None

    def __enter__(self) -> LoopbackServer:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop_in_thread()

    # -- playing ----------------------------------------------------------------------------

    def _handler(self, wire: Wire) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._handle(request, wire)

        return handle

    async def _handle(self, request: web.Request, wire: Wire) -> web.StreamResponse:
        if self._idle_too_long(request):
            path = request.path
            self.calls.append(Call(wire, request.match_info.get("provider"), path, {}, None, None))
            self.calls[-1].stale = True
            return await _drop(request)
        self._in_flight += 1
        provider = request.match_info.get("provider")
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k.lower(): v for k, v in request.headers.items()}
        call = Call(wire, provider, request.path, headers, body, None)
        if wire == "gemini":  # the model and the streaming are in the path
            call.model = request.match_info["model"]
            call.stream = request.path.endswith(":streamGenerateContent")
        elif wire.startswith("bedrock"):
            call.model = request.match_info["model"]
            call.stream = request.path.endswith("-stream")
        elif isinstance(body, dict):
            call.model = body.get("model")
            call.stream = bool(body.get("stream"))
        denied = refusal(request, raw, self.aws_credentials) if wire.startswith("bedrock") else None
        if denied is not None:  # as AWS: no scenario is played for it
            self.calls.append(call)
            self._in_flight -= 1
            return denied
        scenario = self.choose(call) if self.choose is not None else None
        if scenario is None:
            scenario = self._next(provider)
        if scenario is not None and scenario.echo_credentials:
            scenario = scenario.replace(message=credentials_message(headers))
        call.scenario = scenario
        self.calls.append(call)
        try:
            problem = _problem(scenario, wire, body, request.path)
            if problem is not None or scenario is None:
                return _refuse(wire, f"loopback: {problem}")
            try:
                play = self._render(scenario, call)
            except Unplayable as exc:
                return _refuse(wire, f"loopback: scenario {scenario.kind!r}: {exc}")
            if scenario.delay_s:
                await asyncio.sleep(scenario.delay_s)
            if isinstance(scenario, Cut) and scenario.before_response:
                return await _drop(request)  # before any response: not even a status line
            if play.streamed:
                return await self._play_stream(request, play, scenario, call)
            return await self._play_whole(request, play, call)
        except (asyncio.CancelledError, ConnectionResetError):
            call.disconnected = True
            raise
        finally:
            call.ended_at = time.time()
            self._in_flight -= 1
            if request.transport is not None:
                self._idle_since[request.transport] = time.monotonic()

    def _idle_too_long(self, request: web.Request) -> bool:
        """Whether `request` came on a keep-alive connection idle `keepalive_timeout_s`."""
        timeout, transport = self.keepalive_timeout_s, request.transport
        if timeout is None or transport is None:
            return False
        since = self._idle_since.get(transport)
        return since is not None and time.monotonic() - since >= timeout

    def _render(self, scenario: Scenario, call: Call) -> Play:
        def play() -> Play:
            model = call.model or "m"
            return render(scenario, call.wire, call.body, streamed=call.stream, model=model)

        if not isinstance(scenario, Long):
            return play()
        # A long stream is rendered once per shape: benchmarks replay it many times.
        key = (call.wire, call.stream, call.model, repr(scenario))
        if key not in self._prerendered:
            self._prerendered[key] = play()
        return self._prerendered[key]

    async def _play_whole(self, request: web.Request, play: Play, call: Call) -> web.StreamResponse:
        if play.ending == "stall":
            await _forever()
        if play.ending == "cut":
            # Promise the whole body, send half of it, drop the connection.
            response = web.StreamResponse(status=play.status, headers=play.headers)
            response.content_length = len(play.body) * 2
            await response.prepare(request)
            await response.write(play.body)
            return await _drop(request)
        return web.Response(status=play.status, body=play.body, headers=play.headers)

    async def _play_stream(
        self, request: web.Request, play: Play, scenario: Scenario, call: Call
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=play.status, headers=play.headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            return await self._write_stream(request, response, play, scenario, call)
        except ConnectionResetError:  # the client left mid-write: an ending like any other
            call.disconnected = True
            return response

    async def _write_stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        play: Play,
        scenario: Scenario,
        call: Call,
    ) -> web.StreamResponse:
        encode = play.encode or encode_frame
        if play.prerendered is not None and not (scenario.timestamps or scenario.chunk_delay_s):
            data = play.prerendered
            for start in range(0, len(data), _SLICE):
                await response.write(data[start : start + _SLICE])
        elif scenario.timestamps or scenario.chunk_delay_s:
            frames = play.frames if play.prerendered is None else _long_frames(play)
            for frame in frames:
                if scenario.chunk_delay_s:
                    await asyncio.sleep(scenario.chunk_delay_s)
                if scenario.timestamps and play.carries_text(frame):
                    now = time.time()
                    call.emitted_at.append(now)
                    await response.write(encode(frame, now))
                else:
                    await response.write(encode(frame, None))
        else:
            await response.write(b"".join(encode(f, None) for f in play.frames))
        if play.ending == "cut":
            return await _drop(request)
        if play.ending == "stall":
            every = scenario.keepalive_s if isinstance(scenario, Stall) else None
            if every and play.ping is not None:
                ping = encode(play.ping, None)
                while True:
                    await asyncio.sleep(every)
                    await response.write(ping)
            await _forever()
        await response.write_eof()
        return response


def _long_frames(play: Play) -> Iterable[bytes]:
    """A prerendered stream frame by frame (when each chunk must be timed or timestamped)."""
    data = play.prerendered or b""
    for part in data.split(b"\n\n"):
        if part:
            yield part + b"\n\n"


async def _forever() -> Any:
    """Hang until the client leaves (aiohttp then cancels the handler) or the server stops."""
    await asyncio.Event().wait()


async def _drop(request: web.Request) -> web.StreamResponse:
    """Close the connection under the response: the client sees the body end abruptly."""
    transport = request.transport
    if transport is not None:
        transport.close()
    await _forever()
    raise AssertionError("unreachable")  # pragma: no cover


def _problem(scenario: Scenario | None, wire: Wire, body: Any, path: str) -> str | None:
    """Why the server answers 400 before playing anything: no scenario, or a request the
    real API refuses (`Renderer.check`)."""
    if scenario is None:
        return f"no scenario scripted for this call ({path})"
    return RENDERERS[wire].check(body)


def _refuse(wire: Wire, message: str) -> web.Response:
    return web.Response(
        status=400, body=wire_refusal(wire, message), content_type="application/json"
    )


# -- a tiny TOML writer for the settings files we generate --------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def to_toml(data: Mapping[str, Any]) -> str:
    """Tables of scalars and lists, nested tables as ``[a.b]``: enough for settings files."""
    return _table("", data).lstrip("\n")


def _table(name: str, table: Mapping[str, Any]) -> str:
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
    nested = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
    out = f"\n[{name}]\n" if name and (scalars or not nested) else ""
    out += "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in scalars)
    for key, value in nested:
        out += _table(f"{name}.{_toml_key(key)}" if name else _toml_key(key), value)
    return out
