"""The console's web side: the aiohttp application serving the page, ``/status`` and
``/events`` from the host's event loop.

A module of its own so that aiohttp's server is imported only when ``[console] listen``
is set: importing it costs every `agentcore` start a noticeable time.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Collection
from importlib import resources
from typing import Any

from aiohttp import web

from agentcore.api import redact
from agentcore_console import is_loopback, normal_host
from agentcore_console.state import HostState

PUSH_INTERVAL_S = 0.2
"""Changes are pushed at most this often: a burst of traces is one update."""
KEEPALIVE_S = 15.0
"""A comment line on an idle stream, so proxies and browsers keep it open."""


class ConsoleServer:
    """Serves `state` while started. `changed` is set by whoever changes the state;
    `closing` ends every open event stream."""

    def __init__(
        self,
        state: HostState,
        token: str | None,
        changed: asyncio.Event,
        closing: asyncio.Event,
        host_names: Collection[str] = (),
    ) -> None:
        self.state = state
        self._token = token
        self._host_names = {normal_host(name) for name in host_names}
        """Without a token, the `Host` names a request may carry (besides loopback ones)."""
        self._changed = changed
        self._closing = closing
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> str:
        """Listen on HOST:PORT; the page's URL (with the port the OS gave when PORT was 0)."""
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
        return f"http://{shown}:{bound[1]}/"

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/", self._page)
        app.router.add_get("/status", self._status)
        app.router.add_get("/events", self._events)
        return app

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._token is None:
            # No token: the listen address is loopback, and a web page the browser loaded
            # from elsewhere can still reach it by a name of its own that it points at
            # 127.0.0.1 (DNS rebinding). Its requests carry that name as their Host.
            if not self._addressed_to_us(request.host):
                names = ", ".join(sorted({"localhost", "127.0.0.1", "[::1]", *self._host_names}))
                raise web.HTTPMisdirectedRequest(
                    text="agentcore console: this console answers requests addressed to "
                    f"{names} only; another name it is reached by goes in "
                    "[console] public_names\n"
                )
        else:
            given = request.query.get("token", "")
            scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "bearer":
                given = credential.strip()
            if not hmac.compare_digest(given.encode(), self._token.encode()):
                raise web.HTTPUnauthorized(
                    text="agentcore console: a valid token is required (?token= or "
                    "Authorization: Bearer)\n",
                    headers={"WWW-Authenticate": 'Bearer realm="agentcore console"'},
                )
        response: web.StreamResponse = await handler(request)
        return response

    def _addressed_to_us(self, host: str) -> bool:
        name = normal_host(host)
        return name in self._host_names or is_loopback(name)

    def _state_json(self) -> str:
        return redact(json.dumps(self.state.snapshot(), default=str, ensure_ascii=False))

    async def _page(self, request: web.Request) -> web.Response:
        page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
        return web.Response(
            text=page,
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    async def _status(self, request: web.Request) -> web.Response:
        # The event loop's task count, for leak checks (bench/soak.py): counted only when
        # asked, so it costs the host nothing between requests. This request's own task
        # is one of them.
        state = {**self.state.snapshot(), "process": {"asyncioTasks": len(asyncio.all_tasks())}}
        return web.Response(
            text=redact(json.dumps(state, default=str, ensure_ascii=False)),
            content_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        sent = -1
        try:
            while not self._closing.is_set():
                if self.state.version != sent:
                    sent = self.state.version
                    await response.write(f"event: state\ndata: {self._state_json()}\n\n".encode())
                    await asyncio.sleep(PUSH_INTERVAL_S)  # coalesce a burst into one update
                    continue
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
        except ConnectionResetError:
            pass  # the browser left
        return response
