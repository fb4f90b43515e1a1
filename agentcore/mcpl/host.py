"""The MCPL host: one `ServerConnection` per `[mcpl.servers.NAME]`, answered by plugins.

Every inbound request that passes the connection's grant and feature-set checks
goes to `on_mcpl_request` (the `mcpl-router` plugin answers `inference/request`
and `model/info`), so server-initiated inference runs through the kernel with
every policy applied; a `push/event` goes to `on_push_event` instead (`push`).

On SIGHUP `agentcore serve` re-reads its settings file (`McplHost.reload`). A file
that no longer validates changes nothing, and the log says why. Otherwise: a server
removed from the file is closed, one added is started, one whose connection settings
changed is restarted, and one whose `grant` or `disabled_feature_sets` changed, or
whose policy the server refused, gets the policy live (`ServerConnection.update_policy`:
§6.7's orderings). Other
sections are read once, at start: a change to them is logged as needing a restart.

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
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from loguru import logger

from agentcore.kernel import Kernel
from agentcore.mcpl.bounded import BoundedPeer
from agentcore.mcpl.compat import STATE_REASONS
from agentcore.mcpl.connection import McplStartError, ServerConnection, host_capabilities
from agentcore.mcpl.deadline import Deadline
from agentcore.mcpl.endpoint import resolve
from agentcore.mcpl.environment import env_hint
from agentcore.mcpl.limits import Limits
from agentcore.mcpl.protocol import SHUTDOWN_MESSAGE, McplRequest
from agentcore.mcpl.push import PushEvents, coalescing_leaves
from agentcore.mcpl.reconnect import emit_state
from agentcore.mcpl.transports import (
    ReconnectPolicy,
    TransportFactory,
    stdio_factory,
    websocket_factory,
)
from agentcore.settings import McplServerSettings, SettingsError, reload_settings
from agentcore.signals import StartupSignals

POLICY_FIELDS: set[str] = {"grant", "disabled_feature_sets"}
"""The `[mcpl.servers.NAME]` keys a reload applies to a live session (§6.7)."""


def describe_state(connection: ServerConnection) -> str:
    """What the log says of a server that is up: what was negotiated, or why MCPL is off."""
    state = connection.state
    if state == "absent":
        return "connected as a plain MCP server: it does not advertise MCPL"
    negotiated = connection.negotiation.describe()
    if state != "ready":
        return f"connected, MCPL off ({state}: {STATE_REASONS[state]}); {negotiated}"
    enabled = sorted(n for n, fs in connection.feature_sets.items() if fs.enabled)
    return f"ready: {negotiated}; granted {sorted(connection.grant)}; feature sets {enabled}"


def transport_factory(name: str, config: McplServerSettings) -> TransportFactory:
    """The server's transport; settings validation guarantees exactly one of command/url."""
    if config.command:
        return stdio_factory(
            name,
            config.command,
            env=config.env or None,
            env_passthrough=config.env_passthrough,
            cwd=config.cwd,
            max_frame_bytes=config.max_frame_bytes,
            shutdown_grace_s=config.shutdown_grace_s,
        )
    assert config.url is not None
    # §18: an mcpl:// URI dials the wss:// it resolves to; ws:// and wss:// as written.
    url = resolve(config.url).resolved
    return websocket_factory(name, url, max_frame_bytes=config.max_frame_bytes)


def reconnect_policy(config: McplServerSettings) -> ReconnectPolicy | None:
    """The server's reconnect schedule (`agentcore.mcpl.reconnect`), None without `reconnect`."""
    if not config.reconnect:
        return None
    return ReconnectPolicy(
        initial_delay_s=config.reconnect_initial_delay_s,
        max_delay_s=config.reconnect_max_delay_s,
        reset_after_s=config.reconnect_reset_after_s,
        crash_loop_after=config.crash_loop_after,
    )


class McplHost:
    """Connects to every configured MCPL server and serves it through the kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.connections: dict[str, ServerConnection] = {}
        self._configs: dict[str, McplServerSettings] = {}
        self._push: dict[str, PushEvents] = {}
        self._limits: dict[str, Limits] = {}  # each server's bounds (`agentcore.mcpl.limits`)
        self._reload_lock = asyncio.Lock()
        self._membership = asyncio.Event()  # set whenever `connections` changes
        self._watchers: set[asyncio.Future[None]] = set()
        self.capabilities = host_capabilities(kernel.hooks.mcpl_capabilities())
        """What `initialize` advertises (§5.2): only what a plugin provides the policy of."""
        kernel.mcpl_servers = self.servers  # for the host's own turns (SPEC §10)

    def servers(self) -> list[ServerConnection]:
        """The connections in the current settings' order (they start concurrently and finish
        in any order; a SIGHUP reload may change the settings)."""
        connections = self.connections
        return [connections[n] for n in self._configs if n in connections]

    def handle(self, request: McplRequest) -> Awaitable[Any]:
        """The answer to a request: the push events' (§9), else the `on_mcpl_request` hook's.
        Their coroutine itself, not one of this method awaiting it: a frame less held by
        every request in flight. A plugin's failure there (`PluginError`) is answered
        -32603 with its message where every exception becomes an error object
        (`agentcore.mcpl.frames.error_object`)."""
        request.max_tokens = self._limits_of(request.server.name).max_tokens
        if request.method == "push/event":
            return self._push_events(request.server.name).answer(request)
        return self.kernel.hooks.mcpl_request(request)

    def _push_events(self, server: str) -> PushEvents:
        events = self._push.get(server)
        if events is None:
            events = self._push[server] = PushEvents(
                self.kernel.hooks.push_event, coalescing=coalescing_leaves(self.capabilities)
            )
        events.limits = self._limits_of(server)  # a restart may have changed them
        return events

    def _limits_of(self, server: str) -> Limits:
        limits = self._limits.get(server)
        if limits is None:
            config = self._configs.get(server)
            limits = self._limits[server] = self.kernel.settings.mcpl.limits(config)
        return limits

    def _report_limit(self, server: str) -> Callable[..., None]:
        def report(**fields: Any) -> None:
            self.kernel.emit_now("mcpl:limit", serverId=server, **fields)

        return report

    async def start(self) -> None:
        """Open every server, all at once; one that cannot start is logged and left out.

        Concurrently, so that a server slow to finish its handshake holds up neither
        the others nor a shutdown (cancelling this closes the ones not yet ready).
        """
        self._configs = dict(self.kernel.settings.mcpl.servers)
        # Asked again: `agentcore serve` makes the host before the kernel starts, and a
        # plugin may answer from its settings, which it gets at `agentcore_start`.
        self.capabilities = host_capabilities(self.kernel.hooks.mcpl_capabilities())
        async with asyncio.TaskGroup() as group:
            for name, config in self._configs.items():
                group.create_task(self._start_one(name, config), name=f"mcpl-start:{name}")

    async def _start_one(self, name: str, config: McplServerSettings) -> None:
        limits = self._limits[name] = self.kernel.settings.mcpl.limits(config)
        connection = ServerConnection(
            name,
            transport_factory(name, config),
            grant=config.grant,
            handler=self.handle,
            disabled_feature_sets=config.disabled_feature_sets,
            reconnect=reconnect_policy(config),
            request_timeout_s=self.kernel.settings.mcpl.request_timeout_s,
            host_capabilities=self.capabilities,
            emit=self.kernel.emit,
            deadline=self._deadline(name, config),
            make_peer=partial(BoundedPeer, limits=limits, report=self._report_limit(name)),
        )
        try:
            await connection.start()
        except McplStartError as exc:
            hint = f" ({env_hint(name)})" if config.command else ""
            logger.error("mcpl server {} did not start: {}{}", name, exc, hint)
            await self.kernel.emit(
                "mcpl:server_state", serverId=name, state="failed", error=str(exc)
            )
            return
        logger.info("mcpl server {}: {}", name, describe_state(connection))
        self.connections[name] = connection
        self._membership.set()
        await self._state_trace(connection)
        self._watchers.add(asyncio.ensure_future(self._trace_close(connection)))

    def _deadline(self, name: str, config: McplServerSettings) -> Deadline:
        if config.request_deadline_s is not None:
            return Deadline(config.request_deadline_s, f"[mcpl.servers.{name}] request_deadline_s")
        return Deadline(self.kernel.settings.mcpl.request_deadline_s, "[mcpl] request_deadline_s")

    # -- SIGHUP ------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Re-read the settings file and apply what changed in ``[mcpl.servers]``.

        Returns False, having changed nothing, when the file no longer validates.
        """
        async with self._reload_lock:
            path = self.kernel.loaded.path
            try:
                loaded = reload_settings(self.kernel.loaded)
            except SettingsError as exc:
                logger.error(
                    "reload: {} was not applied, nothing changed: {}", path, "; ".join(exc.problems)
                )
                return False
            logger.info("reload: applying {}", path)
            old = self.kernel.loaded.settings.model_dump(exclude={"mcpl": {"servers"}})
            if loaded.settings.model_dump(exclude={"mcpl": {"servers"}}) != old:
                logger.warning(
                    "reload: only [mcpl.servers] changes apply without a restart; "
                    "the rest of {} takes effect when agentcore serve restarts",
                    path,
                )
            try:
                await self.apply(loaded.settings.mcpl.servers)
            finally:
                self._membership.set()
            return True

    async def apply(self, servers: dict[str, McplServerSettings]) -> None:
        """Bring the running servers in line with `servers` (see the module docstring)."""
        old, self._configs = self._configs, dict(servers)
        work: list[Awaitable[Any]] = []
        for name in old.keys() - servers.keys():
            logger.info("reload: mcpl server {} was removed from the settings", name)
            work.append(self._stop_one(name, "the server was removed from the host's settings"))
        for name, config in servers.items():
            before = old.get(name)
            if before is None:
                logger.info("reload: mcpl server {} was added to the settings", name)
                work.append(self._start_one(name, config))
            elif before.model_dump(exclude=POLICY_FIELDS) != config.model_dump(
                exclude=POLICY_FIELDS
            ):
                logger.info("reload: mcpl server {}: its connection settings changed", name)
                work.append(self._restart_one(name, config))
            else:
                connection = self.connections.get(name)
                changed = before.model_dump(include=POLICY_FIELDS) != config.model_dump(
                    include=POLICY_FIELDS
                )
                # A policy the server refused is offered again on every reload (§6.7: a
                # refusal goes back to a human, whose SIGHUP is the new decision).
                off = connection is not None and connection.state in ("refused", "unacknowledged")
                if connection is not None and (changed or off):
                    work.append(
                        connection.update_policy(config.grant, config.disabled_feature_sets)
                    )
        # Each policy update takes away what it takes away in its first step (§6.7),
        # before any of them awaits the server.
        await asyncio.gather(*work)

    async def _stop_one(self, name: str, reason: str) -> None:
        connection = self.connections.pop(name, None)
        if connection is not None:
            await connection.close(reason)
        self._membership.set()

    async def _restart_one(self, name: str, config: McplServerSettings) -> None:
        await self._stop_one(name, "the server's settings changed; it is being restarted")
        await self._start_one(name, config)

    # -- ending ------------------------------------------------------------------------

    async def _state_trace(self, connection: ServerConnection) -> None:
        """``mcpl:server_state``: what an observer (the console) shows of a server."""
        await emit_state(self.kernel.emit, connection)

    async def _trace_close(self, connection: ServerConnection) -> None:
        await connection.wait_closed()
        await self.kernel.emit("mcpl:server_state", serverId=connection.name, state="closed")

    async def wait_all_closed(self) -> None:
        """Return once every connection has closed, servers a reload adds included."""
        while True:
            self._membership.clear()
            open_ = [c for c in self.connections.values() if not c.closed.is_set()]
            if not open_ and not self._reload_lock.locked():
                return
            everyone: asyncio.Future[Any] = asyncio.gather(*(c.wait_closed() for c in open_))
            changed = asyncio.ensure_future(self._membership.wait())
            try:
                await asyncio.wait({everyone, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                everyone.cancel()
                changed.cancel()
                await asyncio.gather(everyone, changed, return_exceptions=True)

    async def close(self, reason: str = SHUTDOWN_MESSAGE) -> None:
        # The host's own turns end first, so their servers hear `aborted` (SPEC §10.5)
        # before the connections close; then the servers' own requests are answered.
        await self.kernel.end_host_turns()
        await asyncio.gather(
            *(c.close(reason) for c in self.connections.values()), return_exceptions=True
        )
        await asyncio.gather(*self._watchers, return_exceptions=True)  # their last traces


YOUNG_GENERATION = 20_000
"""Allocations the collector lets pass before a young collection, while serving."""


def settle_garbage_collector() -> None:
    """Keep the collector's pauses out of the streams' way once the host is serving.

    Startup leaves a few hundred thousand long-lived objects (modules, plugins,
    settings); `gc.freeze` takes them out of every later collection, which otherwise
    walks them all in each oldest-generation pass (85 ms at 1000 streams, measured
    with `bench/mcpl_router.py`).

    Then the young generation grows from CPython's 700 to `YOUNG_GENERATION`. A
    suspended stream holds a handful of objects made for its current wait (a
    future, the generators' send objects), replaced at each chunk; with a young
    collection every 700 allocations they are promoted while still waiting, and the
    streams' objects pile up in the old generation until a full pass walks them all
    (at 1000 streams: ~400 collections and four full passes of 40-90 ms per run, a
    sixth of the host's CPU). With 20,000 most of them die by reference count
    before any collection sees them; cycles are still collected, a little later.
    """
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_GENERATION), middle, old)


async def run_host(
    kernel: Kernel, stop: asyncio.Event | None = None, startup: StartupSignals | None = None
) -> int:
    """`agentcore serve`: serve until SIGTERM/SIGINT (or `stop`), or until every server has gone.

    Returns the exit code: 0, or 1 when servers are configured and none of them could start.

    A signal is honoured at any point, also while servers are still starting: those
    not yet ready are given up, and the rest are closed as usual. SIGHUP re-reads the
    settings (`McplHost.reload`) once every server has started, one reload at a time.
    `startup` holds the signals that came before this ran (`agentcore.signals`).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host = McplHost(kernel)
    reloads = Reloads(host, stop)
    loop.add_signal_handler(signal.SIGHUP, reloads.signalled)
    if startup is not None:
        startup.hand_over(stop.set, reloads.signalled)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await kernel.start()
        await _start_unless_stopped(host, stopped)
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
            reloads.serving()
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
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await reloads.stop()
        await kernel.stop()
    return 0


async def _start_unless_stopped(host: McplHost, stopped: asyncio.Future[Any]) -> None:
    """Start every server; a signal first gives up on those not ready yet."""
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


class Reloads:
    """SIGHUP for `run_host`: a reload per signal, in order, once the host is serving (a
    signal that comes while the servers start is applied when they have)."""

    def __init__(self, host: McplHost, stop: asyncio.Event) -> None:
        self._host = host
        self._stop = stop
        self._waiting = 0
        self._serving = False
        self._tasks: set[asyncio.Task[bool]] = set()

    def signalled(self) -> None:
        if self._stop.is_set():
            return
        logger.info("SIGHUP: re-reading the settings")
        if not self._serving:
            self._waiting += 1
            return
        self._spawn()

    def serving(self) -> None:
        self._serving = True
        if self._waiting:  # one reload reads the file as it is now, however many signals
            self._spawn()
        self._waiting = 0

    def _spawn(self) -> None:
        task = asyncio.get_running_loop().create_task(self._host.reload(), name="mcpl-reload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
