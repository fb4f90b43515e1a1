"""The MCPL host: one `ServerConnection` per `[mcpl.servers.NAME]`, answered by plugins.

Every inbound request that passes the connection's grant and feature-set checks
goes to `on_mcpl_request` (the `mcpl-router` plugin answers `inference/request`
and `model/info`), so server-initiated inference runs through the kernel with
every policy applied.

Shutdown order, and why: first the kernel is marked stopping, so calls waiting
on a hold or a backoff wake and fail at once; then each connection answers its
in-flight requests -32603 "the host is shutting down" (cancelling them, which
closes their provider calls) and closes its transport (a stdio child's stdin
is closed, so its own cleanup runs; SIGTERM only if it has not exited within
`shutdown_grace_s`, SIGKILL 2 s after that); last the plugins stop. With the
default grace a server that ignores both still leaves `serve` inside its 10 s.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Any

from loguru import logger

from agentcore.inference import PluginError
from agentcore.kernel import Kernel
from agentcore.mcpl.connection import SHUTDOWN_MESSAGE, McplStartError, ServerConnection
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError, McplRequest
from agentcore.mcpl.transports import (
    ReconnectPolicy,
    TransportFactory,
    stdio_factory,
    websocket_factory,
)
from agentcore.settings import McplServerSettings


def transport_factory(name: str, config: McplServerSettings) -> TransportFactory:
    if config.command and config.url:
        raise ValueError(f"[mcpl.servers.{name}] sets both command and url; choose one")
    if config.command:
        return stdio_factory(
            name,
            config.command,
            env=config.env or None,
            cwd=config.cwd,
            max_frame_bytes=config.max_frame_bytes,
            shutdown_grace_s=config.shutdown_grace_s,
        )
    if config.url:
        return websocket_factory(name, config.url, max_frame_bytes=config.max_frame_bytes)
    raise ValueError(f"[mcpl.servers.{name}] needs command (stdio) or url (WebSocket)")


class McplHost:
    """Connects to every configured MCPL server and serves it through the kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.connections: dict[str, ServerConnection] = {}
        kernel.mcpl_servers = self.servers  # for the host's own turns (SPEC §10)

    def servers(self) -> list[ServerConnection]:
        """The connections in settings order (they start concurrently, finish in any order)."""
        connections = self.connections
        return [connections[n] for n in self.kernel.settings.mcpl.servers if n in connections]

    async def handle(self, request: McplRequest) -> Any:
        try:
            return await self.kernel.hooks.mcpl_request(request)
        except PluginError as exc:
            raise McplError(INTERNAL_ERROR, str(exc)) from exc

    async def start(self) -> None:
        """Open every server, all at once; one that cannot start is logged and left out.

        Concurrently, so that a server slow to finish its handshake holds up neither
        the others nor a shutdown (cancelling this closes the ones not yet ready).
        """
        async with asyncio.TaskGroup() as group:
            for name, config in self.kernel.settings.mcpl.servers.items():
                group.create_task(self._start_one(name, config), name=f"mcpl-start:{name}")

    async def _start_one(self, name: str, config: McplServerSettings) -> None:
        try:
            factory = transport_factory(name, config)
        except ValueError as exc:
            logger.error("{}", exc)
            return
        connection = ServerConnection(
            name,
            factory,
            grant=config.grant,
            handler=self.handle,
            disabled_feature_sets=config.disabled_feature_sets,
            reconnect=ReconnectPolicy() if config.reconnect else None,
        )
        try:
            await connection.start()
        except McplStartError as exc:
            logger.error("mcpl server {} did not start: {}", name, exc)
            return
        logger.info("mcpl server {}: ready, granted {}", name, sorted(connection.grant))
        self.connections[name] = connection

    async def wait_all_closed(self) -> None:
        await asyncio.gather(*(c.wait_closed() for c in self.connections.values()))

    async def close(self, reason: str = SHUTDOWN_MESSAGE) -> None:
        # The host's own turns end first, so their servers hear `aborted` (SPEC §10.5)
        # before the connections close; then the servers' own requests are answered.
        await self.kernel.end_host_turns()
        await asyncio.gather(
            *(c.close(reason) for c in self.connections.values()), return_exceptions=True
        )


def settle_garbage_collector() -> None:
    """Keep the collector's pauses out of the streams' way once the host is serving.

    Startup leaves a few hundred thousand long-lived objects (modules, plugins,
    settings); `gc.freeze` takes them out of every later collection, which otherwise
    walks them all in each oldest-generation pass (85 ms at 1000 streams, measured
    with `bench/mcpl_router.py`).
    """
    gc.collect()
    gc.freeze()


async def run_host(kernel: Kernel, stop: asyncio.Event | None = None) -> int:
    """`agentcore serve`: serve until SIGTERM/SIGINT (or `stop`), or until every server has gone.

    Returns the exit code: 0, or 1 when servers are configured and none of them could start.

    A signal is honoured at any point, also while servers are still starting: those
    not yet ready are given up, and the rest are closed as usual.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host = McplHost(kernel)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await kernel.start()
        starting = asyncio.ensure_future(host.start())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            logger.info("signalled while the servers were starting: giving up on the rest")
            starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        if not starting.cancelled():
            try:
                starting.result()  # a failure other than a server's own is a bug: raise it
            except BaseException:
                await host.close()
                raise
        configured = kernel.settings.mcpl.servers
        if not stop.is_set() and configured and not host.connections:
            logger.error(
                "none of the configured MCPL servers ({}) could start; nothing to serve",
                ", ".join(sorted(configured)),
            )
            await host.close()
            return 1
        if not stop.is_set():
            if not host.connections:
                logger.warning("no MCPL server is configured; the host has nothing to serve")
            settle_garbage_collector()
            gone = asyncio.ensure_future(host.wait_all_closed())
            await asyncio.wait({stopped, gone}, return_when=asyncio.FIRST_COMPLETED)
            gone.cancel()
        if stop.is_set():
            logger.info("signalled: answering in-flight requests and closing the servers")
        else:
            logger.info("every MCPL server has closed its connection")
        await host.close()
    finally:
        stopped.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await kernel.stop()
    return 0
