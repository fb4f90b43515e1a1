"""One configured MCPL server: the host's connection to it, across its sessions.

A façade over the modules that do the work, each named for its concern: `methods`
(which methods cross, each way, and what each needs), `policy` (the §6.7 machine, pure),
`gate` (what may cross a session under the policy in force, and `SessionHandle`),
`session` (a session's handshake, policy exchange and inbound dispatch) and
`manifest_watch` (§17). This module keeps the connection's lifecycle: the first session,
the reconnects (`agentcore.mcpl.reconnect`), closing, and the live policy the settings
offer (`update_policy`). docs/mcpl.md tells the whole story with its § numbers.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from loguru import logger

from agentcore._constants import MCPL_MANIFEST_FETCH_INTERVAL_S as DEFAULT_MANIFEST_FETCH_INTERVAL_S
from agentcore._constants import MCPL_REQUEST_TIMEOUT_S as DEFAULT_REQUEST_TIMEOUT_S
from agentcore.mcpl.compat import (
    HOST_MCPL_CAPABILITIES,
    MCPL_VERSION,
    Negotiation,
    host_capabilities,
)
from agentcore.mcpl.deadline import DEFAULT_REQUEST_DEADLINE_S, Deadline
from agentcore.mcpl.gate import SessionHandle
from agentcore.mcpl.grants import FeatureSet
from agentcore.mcpl.jsonrpc import ConnectionClosed, EncodedParams, JsonRpcPeer
from agentcore.mcpl.manifest import ChangeReceipt
from agentcore.mcpl.manifest_watch import TraceEmitter
from agentcore.mcpl.methods import (
    CANCELLABLE_METHOD,
    FEATURE_SET_METHODS,
    INBOUND_CAPABILITY,
    MCP_PROTOCOL_VERSION,
    OUTBOUND_CAPABILITIES,
)
from agentcore.mcpl.outbox import Outbox
from agentcore.mcpl.policy import PENDING_RECEIPT, Policy, PolicyStep
from agentcore.mcpl.protocol import INTERNAL_ERROR, SHUTDOWN_MESSAGE, McplError
from agentcore.mcpl.reconnect import ReconnectPolicy, Reconnects
from agentcore.mcpl.session import McplRequestHandler, McplStartError, Session, SessionSettings
from agentcore.mcpl.transports import TransportFactory

McplNotificationHandler = Callable[["ServerConnection", str, dict[str, Any]], Awaitable[None]]


class ServerConnection:
    """The host's connection to one `[mcpl.servers.NAME]`; implements `ServerHandle`.

    `handler` answers every request that passes the checks (the kernel passes
    one that calls the plugins' `on_mcpl_request`). With `reconnect`, a lost
    session is replaced by a new one, which runs the whole handshake again;
    `closed` is set once the connection is finished for good.
    """

    def __init__(
        self,
        name: str,
        transport_factory: TransportFactory,
        *,
        grant: Sequence[str],
        handler: McplRequestHandler,
        disabled_feature_sets: Sequence[str] = (),
        notification_handler: McplNotificationHandler | None = None,
        reconnect: ReconnectPolicy | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        host_capabilities: Mapping[str, Any] | None = None,
        emit: TraceEmitter | None = None,
        manifest_fetch_interval_s: float = DEFAULT_MANIFEST_FETCH_INTERVAL_S,
        deadline: Deadline | None = None,
        make_peer: Callable[..., JsonRpcPeer] = JsonRpcPeer,  # the host's: `BoundedPeer`
    ) -> None:
        self._name = name
        self._factory = transport_factory
        self._configured = tuple(grant)
        self._disabled = tuple(disabled_feature_sets)
        self._reconnect = reconnect
        self._reconnects = Reconnects(self, reconnect or ReconnectPolicy(), emit)
        self._settings = SessionSettings(
            name=name,
            host_capabilities=dict(host_capabilities or HOST_MCPL_CAPABILITIES),
            timeout_s=request_timeout_s,
            manifest_fetch_interval_s=manifest_fetch_interval_s,
            deadline=deadline or Deadline(DEFAULT_REQUEST_DEADLINE_S, "the default"),
            handler=handler,
            notification_handler=(
                None if notification_handler is None else partial(notification_handler, self)
            ),
            emit=emit,
            make_peer=make_peer,
            close=self._spawn_close,
        )
        self._log = logger.bind(mcpl_server=name)
        self._policy = Policy(name, self._configured, self._disabled)  # the current session's
        self._session: Session | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._closing = False
        self.closed = asyncio.Event()
        self.sessions, self._outbox = 0, Outbox(name)

    # -- ServerHandle --------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def grant(self) -> frozenset[str]:
        """The effective capabilities in force: what inbound methods are checked against."""
        return self._policy.grant

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; refuses (McplError -32002) one the grant does not allow."""
        await self._sendable(method).notify(method, params)

    # -- the session in force ------------------------------------------------

    @property
    def ready(self) -> bool:
        """True once this session's policy exchange completed and MCPL is on."""
        return self._policy.ready

    @property
    def state(self) -> str:
        """pending, ready, refused (the server refused the policy), unacknowledged (its
        initial policy failed: an error or no answer) or absent (no MCPL)."""
        return self._policy.state

    @property
    def advertised(self) -> frozenset[str]:
        return self._policy.advertised

    @property
    def feature_sets(self) -> Mapping[str, FeatureSet]:
        return dict(self._policy.feature_sets)

    @property
    def negotiation(self) -> Negotiation:
        """What was agreed at initialize (compat)."""
        return self._policy.negotiation

    @property
    def manifest(self) -> dict[str, Any]:
        """The `initialize` result's `capabilities`, its `experimental.mcpl` as in force."""
        return self._policy.manifest

    @property
    def receipt(self) -> Any:
        """The server's last `featureSets/update` receipt."""
        return self._policy.receipt

    @property
    def server_info(self) -> Any:
        return None if self._session is None else self._session.server_info

    @property
    def change_receipts(self) -> list[ChangeReceipt]:
        """This session's §17.6 change receipts, oldest first."""
        return [] if self._session is None else self._session.watch.receipts

    # -- host→server ---------------------------------------------------------

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Send a host→server request (e.g. `context/beforeInference`) and await its result.

        While a `context/*` or `push/render` request is pending, an `inference/request`
        from this server is refused (§10.7; RFC-006 §5.3). Raises `RemoteError`, `TimeoutError`,
        `ConnectionClosed`, or McplError -32002 for a method the grant does not allow.
        """
        future = self.request_soon(method, params)
        async with asyncio.timeout(timeout):
            return await future

    def request_soon(
        self, method: str, params: dict[str, Any] | EncodedParams | None = None
    ) -> asyncio.Future[Any]:
        """`request` without waiting (`JsonRpcPeer.request_soon`): sent now, the future
        resolves with the result; cancel it to stop waiting. Raises at once what `request`
        raises before sending (McplError -32002, `ConnectionClosed`)."""
        peer = self._sendable(method)
        future = peer.request_soon(method, params)
        if method.startswith("context/") or method == "push/render":
            assert self._session is not None
            self._session.gate.hook_sent(future)  # §10.7 (RFC-006 §5.3): the window opens
        return future

    def notify_soon(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Queue a notification for this session, sent in order without making the caller
        wait (`inference/lifecycle`, §10.5). Refuses (McplError -32002) at once what the
        grant does not allow; raises `ConnectionClosed` when not connected."""
        self._outbox.put(self._sendable(method), method, params)

    def _sendable(self, method: str) -> JsonRpcPeer:
        session = self._session
        if session is None or self._closing:
            raise ConnectionClosed(f"mcpl server {self._name}: not connected")
        return session.handle.sendable(method)

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Open the first session and run the handshake. Raises McplStartError.

        With `reconnect`, a failed first session is retried on the same schedule as a
        lost one, so a host may start before its servers; only when the schedule runs
        out does this raise. Without it the first failure is final (the host reports it).
        """
        if self.sessions or self._closing:
            raise RuntimeError(f"mcpl server {self._name}: start() may be called once")
        try:
            await self._open_first_session()
        except BaseException:
            self._finish()
            raise
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"mcpl-supervisor:{self._name}"
        )

    async def close(self, reason: str = SHUTDOWN_MESSAGE) -> None:
        """Answer in-flight requests -32603 with `reason`, then close the transport."""
        if self._closing:
            await self.closed.wait()
            return
        self._closing = True
        current = asyncio.current_task()
        session = self._session
        try:
            if self._supervisor is not None and self._supervisor is not current:
                self._supervisor.cancel()
                await asyncio.gather(self._supervisor, return_exceptions=True)
            if session is not None:
                session.retire(keep=current)
                await self._outbox.flush()
                self._log.info("mcpl server {}: closing: {}", self._name, reason)
                await session.peer.close(McplError(INTERNAL_ERROR, reason), reason=reason)
        finally:
            self.closed.set()

    async def wait_closed(self) -> None:
        await self.closed.wait()

    def _finish(self) -> None:
        self._closing = True
        if self._session is not None:
            self._session.retire(keep=asyncio.current_task())
        self.closed.set()

    def _spawn_close(self, reason: str) -> None:
        self._closer = asyncio.get_running_loop().create_task(self.close(reason))

    async def _supervise(self) -> None:
        try:
            while True:
                assert self._session is not None
                peer = self._session.peer
                await self._reconnects.watch(peer.wait_closed())
                if self._closing or self._reconnect is None:
                    break
                if not await self._reopen(f"session lost ({peer.close_reason})"):
                    break
        finally:
            if not self._closing:
                self._log.info("mcpl server {}: connection closed", self._name)
                self._finish()

    async def _open_first_session(self) -> None:
        try:
            await self._open_session()
        except McplStartError as exc:
            if self._reconnect is None or not await self._reopen(f"first session failed ({exc})"):
                raise

    async def _reopen(self, why: str) -> bool:
        """Open a new session after `self._reconnects`' wait (`agentcore.mcpl.reconnect`)."""
        limit = self._reconnects.policy.max_attempts
        for _ in itertools.count() if limit is None else range(limit):
            await self._reconnects.wait(why)
            if self._closing:
                return False
            try:
                await self._open_session()
            except McplStartError as exc:
                why = f"reconnect failed ({exc})"
                continue
            if self._supervisor is not None:  # the host traces the first session itself
                await self._reconnects.reconnected()
            return True
        self._log.error("mcpl server {}: giving up reconnecting", self._name)
        return False

    async def _open_session(self) -> None:
        """A new session, with its own policy (§5.3-5.4: per connection); the old one retires."""
        if self._session is not None:
            self._session.retire()
        self._policy = Policy(self._name, self._configured, self._disabled)
        try:
            transport = await self._factory()
        except Exception as exc:
            raise McplStartError(f"mcpl server {self._name}: could not open: {exc}") from exc
        self._session = Session(self._settings, transport, self._policy)
        self.sessions += 1
        await self._session.open()

    # -- live policy (§6.7) ----------------------------------------------------

    async def update_policy(
        self, grant: Sequence[str], disabled_feature_sets: Sequence[str]
    ) -> str:
        """Apply a new configured grant and disabled feature sets to the live session (§6.7).

        What the change takes away is refused from the moment this is called; then the
        Request goes out, and what it adds is allowed once the receipt has come. A policy
        the server refused is offered again (§6.7: a refusal goes back to a human for a new
        decision, and this call is one): MCPL comes on if the server accepts it. Returns
        the session's outcome (`Session.change`), or "inactive" when MCPL is off in this
        session for good (the new policy applies to the next session).
        """
        self._configured = tuple(grant)
        self._disabled = tuple(disabled_feature_sets)
        self._policy.configure(grant, disabled_feature_sets)
        session = self._session
        if session is None or self._closing or self._policy.state == "absent":
            self._log.info(
                "mcpl server {}: new policy noted; MCPL is off in this session ({})",
                self._name,
                self._policy.state,
            )
            return "inactive"
        return await session.change("settings")


__all__ = [
    "CANCELLABLE_METHOD",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "FEATURE_SET_METHODS",
    "HOST_MCPL_CAPABILITIES",
    "INBOUND_CAPABILITY",
    "MCPL_VERSION",
    "MCP_PROTOCOL_VERSION",
    "OUTBOUND_CAPABILITIES",
    "PENDING_RECEIPT",
    "SHUTDOWN_MESSAGE",
    "McplNotificationHandler",
    "McplRequestHandler",
    "McplStartError",
    "PolicyStep",
    "ServerConnection",
    "SessionHandle",
    "TraceEmitter",
    "host_capabilities",
]
