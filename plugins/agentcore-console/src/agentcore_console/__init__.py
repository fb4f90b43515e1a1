"""agentcore's console (entry point ``console``): a live page of the host's state.

``[console] listen = "127.0.0.1:8765"`` (off by default; ``agentcore serve --console
ADDR`` for one run) serves, from the host's own event loop:

- ``/``: the page (one HTML file, no external assets), fed live by
- ``/events``: server-sent events, each a whole ``state`` object; a client that
  (re)connects gets the current state at once, then every change (at most
  `PUSH_INTERVAL_S` apart);
- ``/status``: the same state as JSON, for scripts and health checks, plus
  ``process.asyncioTasks`` (the host's event loop's task count, for leak checks).

Built over `on_trace` alone (`agentcore_console.state`): folding a trace in is
dictionary work, and nothing is sent from the trace hook; each client's stream
runs in its own request task. Listening anywhere but loopback needs a token
(``[console] token_env`` names the environment variable holding it), checked on
every route, as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``. Every state
object passes the redaction boundary before it is sent: no secret reaches the page.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
from importlib import resources
from typing import Any

from aiohttp import web
from loguru import logger
from pydantic import Field, field_validator

from agentcore import hookimpl
from agentcore.plugins import PluginContext, SettingsSection
from agentcore.redaction import redact
from agentcore.settings import Section
from agentcore.traces import TraceEvent
from agentcore_console.state import HostState

PUSH_INTERVAL_S = 0.2
"""Changes are pushed at most this often: a burst of traces is one update."""
KEEPALIVE_S = 15.0
"""A comment line on an idle stream, so proxies and browsers keep it open."""
LISTEN_ENV = "AGENTCORE_CONSOLE__LISTEN"
"""What ``agentcore serve --console ADDR`` sets for its run."""


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6) as (host, port); ValueError saying why not."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{listen!r} is not HOST:PORT (say 127.0.0.1:8765)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


class ConsoleSettings(Section):
    """``[console]``."""

    listen: str | None = None
    """``HOST:PORT`` to serve the page on; None: no console."""
    token_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the token; required when `listen` is not loopback."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str | None) -> str | None:
        if listen is not None:
            split_listen(listen)
        return listen


class ConsolePage:
    """The plugin object; the kernel makes one per kernel."""

    def __init__(self) -> None:
        self.settings = ConsoleSettings()
        self.state = HostState()
        self.url: str | None = None
        """``http://HOST:PORT/`` once serving (the port the OS gave when PORT was 0)."""
        self._token: str | None = None
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("console", ConsoleSettings)

    @hookimpl
    async def agentcore_start(self, context: PluginContext) -> None:
        if isinstance(context.settings, ConsoleSettings):
            self.settings = context.settings
        listen = self.settings.listen
        if listen is None:
            return
        host, port = split_listen(listen)
        token_env = self.settings.token_env
        self._token = os.environ.get(token_env) or None if token_env else None
        if self._token is None and not is_loopback(host):
            named = f"${token_env} is empty or not set" if token_env else "no token_env is set"
            raise RuntimeError(
                f"[console] listen = {listen!r} is not loopback, and {named}: set "
                "[console] token_env to an environment variable holding a token"
            )
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
        self.url = f"http://{shown}:{bound[1]}/"
        logger.info("console: {}{}", self.url, " (token required)" if self._token else "")

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        if self.state.apply(event):
            self._changed.set()

    @hookimpl
    async def agentcore_stop(self) -> None:
        self._closing.set()
        self._changed.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- the web side ----------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/", self._page)
        app.router.add_get("/status", self._status)
        app.router.add_get("/events", self._events)
        return app

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._token is not None:
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


__all__ = ["ConsolePage", "ConsoleSettings", "HostState", "is_loopback", "split_listen"]
