"""agentcore's console (entry point ``console``): a live page of the host's state.

``[console] listen = "127.0.0.1:8765"`` (off by default; ``agentcore serve --console
ADDR`` for one run) serves, from the host's own event loop:

- ``/``: the page (one HTML file, no external assets), fed live by
- ``/events``: server-sent events, each a whole ``state`` object; a client that
  (re)connects gets the current state at once, then every change (at most
  `agentcore_console.server.PUSH_INTERVAL_S` apart);
- ``/status``: the same state as JSON, for scripts and health checks, plus
  ``process.asyncioTasks`` (the host's event loop's task count, for leak checks).

Built over `on_trace` alone (`agentcore_console.state`): folding a trace in is
dictionary work, and nothing is sent from the trace hook; each client's stream
runs in its own request task (`agentcore_console.server`, imported only to listen).
A host with no ``listen`` folds nothing and never imports either (issue 24: idle RSS).
Listening anywhere but loopback needs a token (``[console] token_env`` names the
environment variable holding it), checked on every route, as ``Authorization: Bearer
TOKEN`` or ``?token=TOKEN``. Without a token every route answers only a request whose
``Host`` is a loopback name or one of ``[console] public_names`` (421 otherwise), so a web
page that points a name of its own at 127.0.0.1 (DNS rebinding) cannot read the state.
Every state object passes the redaction boundary before it is sent: no secret reaches
the page.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from typing import TYPE_CHECKING, Any

from loguru import logger
from pydantic import Field, field_validator

from agentcore.api import PluginContext, Section, SettingsSection, TraceEvent, hookimpl

if TYPE_CHECKING:
    from agentcore_console.server import ConsoleServer
    from agentcore_console.state import HostState

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


def normal_host(host: str) -> str:
    """A ``Host`` header's name, or a configured one: without port, brackets or final dot,
    lowercased (``[::1]:8765`` is ``::1``, ``Console.Example.:80`` is ``console.example``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        host = name
    return host.rstrip(".")


class ConsoleSettings(Section):
    """``[console]``."""

    listen: str | None = None
    """``HOST:PORT`` to serve the page on; None: no console."""
    token_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the token; required when `listen` is not loopback."""
    public_names: list[str] = Field(default_factory=list)
    """Without a token, host names besides loopback ones (``localhost``, ``127.0.0.1``,
    ``[::1]``) that a request's ``Host`` may name: an ``/etc/hosts`` alias, a proxy's name."""

    @field_validator("public_names")
    @classmethod
    def _host_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not name.strip() or any(c in name for c in "/@?# "):
                raise ValueError(f"{name!r} is not a host name (say console.internal)")
        return names

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str | None) -> str | None:
        if listen is not None:
            split_listen(listen)
        return listen


class ConsolePage:
    """The plugin object; the kernel makes one per kernel."""

    def __init__(self) -> None:
        self.settings = ConsoleSettings.model_construct()
        self._state: HostState | None = None
        self._off = False
        """Started with no ``listen``: nothing will read the state, so no trace is folded."""
        self.url: str | None = None
        """``http://HOST:PORT/`` once serving (the port the OS gave when PORT was 0)."""
        self._server: ConsoleServer | None = None
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()

    @property
    def state(self) -> HostState:
        """The host's state as the page shows it, made at the first trace or at start."""
        if self._state is None:
            from agentcore_console.state import HostState

            self._state = HostState()
        return self._state

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("console", ConsoleSettings)

    @hookimpl
    async def agentcore_start(self, context: PluginContext[ConsoleSettings]) -> None:
        self.settings = context.settings
        listen = self.settings.listen
        # Only the host serves the page: `agentcore infer` or `spend` with the deployment's
        # settings would take the port of the `serve` running beside it.
        if listen is None or context.command not in (None, "serve"):
            self._off, self._state = True, None
            return
        host, port = split_listen(listen)
        token_env = self.settings.token_env
        token = os.environ.get(token_env) or None if token_env else None
        if token is None and not is_loopback(host):
            named = f"${token_env} is empty or not set" if token_env else "no token_env is set"
            raise RuntimeError(
                f"[console] listen = {listen!r} is not loopback, and {named}: set "
                "[console] token_env to an environment variable holding a token"
            )
        # Imported here, not at the top: aiohttp's server costs every `agentcore` start a
        # noticeable time, and only a console that listens needs it.
        from agentcore_console.server import ConsoleServer

        self._server = ConsoleServer(
            self.state, token, self._changed, self._closing, self.settings.public_names
        )
        self.url = await self._server.start(host, port)
        logger.info("console: {}{}", self.url, " (token required)" if token else "")

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        if self._off:
            return
        if self.state.apply(event):
            self._changed.set()

    @hookimpl
    async def agentcore_stop(self) -> None:
        self._closing.set()
        self._changed.set()
        server, self._server = self._server, None
        if server is not None:
            await server.stop()


def __getattr__(name: str) -> Any:
    """`HostState`, importable from here as before, loads with the first console that listens."""
    if name == "HostState":
        from agentcore_console.state import HostState

        return HostState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConsolePage",
    "ConsoleSettings",
    "HostState",
    "is_loopback",
    "normal_host",
    "split_listen",
]
