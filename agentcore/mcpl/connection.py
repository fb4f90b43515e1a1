"""One configured MCPL server: the handshake, the policy exchange, and inbound checks.

Lifecycle of a session (SPEC §5.2-5.3, §6.7):

1. `initialize`, advertising the host's `capabilities.experimental.mcpl`;
   the result's `capabilities` is the server's manifest.
2. `notifications/initialized`.
3. The effective grant is computed (configured ∩ advertised, `grants`), the
   declared feature sets are derived from it, and `featureSets/update` is
   sent as a Request; its result is the degradation receipt, logged.
4. Only after the receipt is the connection *ready*. Until then every MCPL
   method is refused with -32002 (`data.reason: "policy_pending"`): before
   the exchange the effective grant is, by §5.3, empty, and a denied
   capability is refused with -32002. A refusal receipt (`accepted: false`)
   leaves MCPL disabled (`data.reason: "policy_refused"`), an error or no answer
   too (`"policy_unacknowledged"`: nothing was refused), and a server without
   `experimental.mcpl` never enables it (`"mcpl_absent"`). A 0.3/0.4 server gets
   its own version's Notification instead, in force as sent (`compat`).

Checks on each inbound request, in this order, before the handler sees it:
the method's capability is granted (-32002, `data.capability`), and with
`stream: true` also `inferenceRequest.streaming`; for methods that carry a
`featureSet` (§6.5: `inference/request`, `push/event`) the set is declared
(-32003), enabled (-32001), and its `uses` covers what the request
exercises (-32001 with `reason: "declaration_mismatch"`, §6.4); and an
`inference/request` that arrives while a host→server `context/*` request to
this server is pending is refused (-32603, `reason: "context_hook"`):
§10.7 says hooks must not trigger inference, and the wire carries no link
between the two, so the open hook window is the only evidence, and the
check fails closed. A handler result of None is answered -32601: a method
never goes unanswered (§6.6), `model/info` included. `ping` is answered by
the connection itself; methods outside MCPL (no capability of their own) go
to the handler whatever the state.

Live policy (§6.7). `update_policy` replaces the configured grant and disabled feature
sets; a manifest change (§17) replaces what the server advertises and declares. Either
way the host derives the policy it wants (the *target*) and then, in §6.7's mirrored
orderings: what the target takes away is taken away at once, in one synchronous step,
before anything is sent (`_narrow`); then `featureSets/update` goes out as a Request
carrying the whole target; what the target adds becomes active only when the receipt
arrives, in the same step that reads it, so a request the server writes after its receipt
is checked against the wider policy, and one written before it against the narrower. A
refusal (`accepted: false`) or no answer leaves only the narrowed policy: a receipt
never widens anything. Requests are serialized per connection, and a newer change
supersedes an older one whose receipt has not come (the older one then never activates).
A refused policy (``fallback: "mcp-only"``) stays refused until the settings offer one
again (`update_policy`, on every SIGHUP): §6.7 lets a refusal go back to a human for a new
decision, never to the policy engine, so only that offer can bring MCPL on in the session.

Manifest changes (§17). `mcpl/manifestChanged` is a hint: it only marks the manifest
stale. One task per session fetches `mcpl/manifest` (at most once per
`manifest_fetch_interval_s`, coalescing every notice in between: §17.8), validates it
as at `initialize`, diffs it by domain against the manifest in force without trusting
its `revision` (§17.1), applies the consequences through the same live-policy path
(§17.5: removals at once, additions only after the receipt, changed or invalid `uses`
revalidated fail-closed), and emits one change receipt (§17.6), logged and traced as
`mcpl:manifest_change`. A fetch that fails or returns something that is not an object
leaves the previous manifest standing (§17.5.1).

`notifications/cancelled` (MCP's base protocol, which MCPL extends, §3.1) for
an `inference/request` in flight cancels the task serving it, which closes its
provider call, and the request gets no answer; the `McplRequest` says the
server cancelled it (`cancelled`). Any other id (unknown, answered, another
method) is ignored, as that protocol allows.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger

from agentcore.mcpl.compat import (
    HOST_MCPL_CAPABILITIES,
    MCPL_VERSION,
    OFF_STATES,
    Negotiation,
    client_version,
    denied,
    host_capabilities,
    keyed_feature_sets,
    legacy_policy_params,
    negotiate,
    refused_in,
)
from agentcore.mcpl.deadline import DEFAULT_REQUEST_DEADLINE_S, Deadline
from agentcore.mcpl.grants import (
    FeatureSet,
    advertised_capabilities,
    check_policy,
    derive_feature_sets,
    effective_grant,
    is_granted,
)
from agentcore.mcpl.jsonrpc import (
    ConnectionClosed,
    EncodedParams,
    JsonRpcPeer,
    Params,
    RemoteError,
    RequestId,
)
from agentcore.mcpl.manifest import ChangeReceipt, changed_domains, check_revision, impacts
from agentcore.mcpl.outbox import Outbox
from agentcore.mcpl.protocol import (
    FEATURE_SET_NOT_ENABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    SHUTDOWN_MESSAGE,
    UNKNOWN_FEATURE_SET,
    McplError,
    McplRequest,
)
from agentcore.mcpl.transports import ReconnectPolicy, TransportFactory

MCP_PROTOCOL_VERSION = "2025-06-18"
DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_MANIFEST_FETCH_INTERVAL_S = 1.0
"""§17.8: the least time between two `mcpl/manifest` fetches from one server."""
PENDING_RECEIPT = "pending_receipt"
"""Why a feature set the new policy enables is not enabled yet (§6.7: after the receipt)."""

# Server→host methods and the capability each needs (§9, §11, §12, §14.1).
INBOUND_CAPABILITY: dict[str, str] = {
    "inference/request": "inferenceRequest",
    "model/info": "modelInfo",
    "push/event": "pushEvents",
    "channels/register": "channels.register",
    "channels/changed": "channels.register",
    "channels/list": "channels.register",
    "channels/incoming": "channels.incoming",
    "channels/acknowledge": "channels.acknowledge",
    "channels/typing": "channels.typing",
}
# Server-initiated methods that must name their feature set (§6.5).
FEATURE_SET_METHODS = frozenset({"inference/request", "push/event"})
# The one server-initiated method the server may cancel (it costs the host tokens).
CANCELLABLE_METHOD = "inference/request"

# Host→server methods and the capabilities of which at least one must be
# granted before the host may send them (§5.4: "MUST NOT deliver").
OUTBOUND_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "context/beforeInference": (
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.system",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    ),
    "inference/lifecycle": ("inferenceLifecycle",),
    "inference/chunk": ("inferenceRequest.streaming",),
    "channels/list": ("channels.register",),
    "channels/open": ("channels.lifecycle",),
    "channels/close": ("channels.lifecycle",),
    "channels/publish": ("channels.publish",),
    "channels/outgoing/chunk": ("channels.streaming",),
    "channels/outgoing/complete": ("channels.streaming",),
}

McplRequestHandler = Callable[[McplRequest], Awaitable[Any]]
McplNotificationHandler = Callable[["ServerConnection", str, dict[str, Any]], Awaitable[None]]
TraceEmitter = Callable[..., Awaitable[None]]
"""`emit(type, **fields)`: the kernel's `Kernel.emit`."""


@dataclass(frozen=True, slots=True)
class PolicyStep:
    """One policy change: the policy wanted (`grant`, `feature_sets`, sent as `params`),
    what it took away at once, and what waits for the server's receipt."""

    generation: int
    cause: str  # initialize, settings, manifest
    grant: frozenset[str]
    feature_sets: dict[str, FeatureSet]
    params: dict[str, Any]
    removed: frozenset[str]
    degraded: tuple[str, ...]
    pending: frozenset[str]
    pending_sets: tuple[str, ...]


def _on(feature_sets: Mapping[str, FeatureSet], name: str) -> bool:
    fs = feature_sets.get(name)
    return fs is not None and fs.enabled


class McplStartError(Exception):
    """A session could not be established (spawn, connect, or handshake failed)."""


class SessionHandle:
    """One session of a `ServerConnection`, as the requests that arrived on it see it
    (`McplRequest.server`): what a request sends goes to its own session or nowhere.

    A reconnect is a new connection with its own handshake and grant (SPEC §5.3: "After
    initialization, hosts MUST send `featureSets/update`"; §5.4: "The host computes the
    effective grant per connection"), and its JSON-RPC ids start again, so a chunk of a
    request from the old session must never reach the new one, where the same id may name
    another request. Once its session is gone, `notify` raises `ConnectionClosed`.
    """

    __slots__ = ("_connection", "_peer")

    def __init__(self, connection: ServerConnection, peer: JsonRpcPeer) -> None:
        self._connection = connection
        self._peer = peer

    @property
    def name(self) -> str:
        return self._connection.name

    @property
    def live(self) -> bool:
        """True while this is the connection's current session and it is not closing."""
        return self._connection._current_peer() is self._peer and not self._peer.closing

    @property
    def grant(self) -> frozenset[str]:
        """The effective grant of this session; empty once it is gone."""
        return self._connection.grant if self.live else frozenset()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification on this session; `ConnectionClosed` once it is gone,
        McplError -32002 for one the grant does not allow."""
        if not self.live:
            raise ConnectionClosed(
                f"mcpl server {self.name}: the session this request arrived on is gone"
            )
        self._connection._check_outbound(method)
        await self._peer.notify(method, params)


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
        self._handler = handler
        self._notification_handler = notification_handler
        self._reconnect = reconnect
        self._timeout = request_timeout_s
        self._host_capabilities = dict(host_capabilities or HOST_MCPL_CAPABILITIES)
        self._emit = emit
        self._fetch_interval_s, self._make_peer = manifest_fetch_interval_s, make_peer
        self._deadline = deadline or Deadline(DEFAULT_REQUEST_DEADLINE_S, "the default")
        self._log = logger.bind(mcpl_server=name)
        self._peer: JsonRpcPeer | None = None
        self._session: SessionHandle | None = None  # what requests of the current session see
        self._supervisor: asyncio.Task[None] | None = None
        self._closing = False
        self.closed = asyncio.Event()
        self._policy_lock = asyncio.Lock()  # one featureSets/update Request at a time
        self._session_tasks: set[asyncio.Task[Any]] = set()
        self._reset_session_state()
        self.sessions, self._outbox = 0, Outbox(name)

    def _reset_session_state(self) -> None:
        for task in self._session_tasks:
            task.cancel()
        self._session_tasks = set()
        self._state = "pending"
        self._outbound_allowed: set[str] = set()
        self._grant: frozenset[str] = frozenset()
        self._advertised: frozenset[str] = frozenset()
        self._declared: object = None  # the manifest's featureSets member, as in force
        self._feature_sets: dict[str, FeatureSet] = {}
        self._acknowledged: dict[str, Any] | None = None  # the last policy the server accepted
        self._generation = 0  # bumped by every policy change; a newer one supersedes
        self._hooks_pending = 0
        self._cancellable: dict[RequestId, McplRequest] = {}  # inference/requests being served
        self._manifest_stale = asyncio.Event()
        self._manifest_notices = 0  # mcpl/manifestChanged seen since the last fetch began
        self._manifest_fetcher: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()  # the initial policy exchange is over, either way
        self.negotiation = Negotiation()  # what was agreed at initialize (compat)
        self._undeclared_warned: set[tuple[str, str]] = set()
        self.server_info: Any = None
        self.manifest: dict[str, Any] = {}
        """The `initialize` result's `capabilities`, its `experimental.mcpl` as in force."""
        self.receipt: Any = None
        self.change_receipts: list[ChangeReceipt] = []

    # -- ServerHandle --------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def grant(self) -> frozenset[str]:
        """The effective capabilities in force: what inbound methods are checked against."""
        return self._grant

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; refuses (McplError -32002) one the grant does not allow."""
        peer = self._live_peer()
        self._check_outbound(method)
        await peer.notify(method, params)

    # -- more of the connection ---------------------------------------------

    @property
    def ready(self) -> bool:
        """True once this session's policy exchange completed and MCPL is on."""
        return self._state == "ready"

    @property
    def state(self) -> str:
        """pending, ready, refused (the server refused the policy), unacknowledged (its
        initial policy failed: an error or no answer) or absent (no MCPL)."""
        return self._state

    @property
    def advertised(self) -> frozenset[str]:
        return self._advertised

    @property
    def feature_sets(self) -> Mapping[str, FeatureSet]:
        return dict(self._feature_sets)

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Send a host→server request (e.g. `context/beforeInference`) and await its result.

        While a `context/*` request is pending, an `inference/request` from this
        server is refused (§10.7). Raises `RemoteError`, `TimeoutError`,
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
        peer = self._live_peer()
        self._check_outbound(method)
        future = peer.request_soon(method, params)
        if method.startswith("context/"):
            self._hooks_pending += 1
            # Runs when the response resolves the future, before the task of any
            # request read after that response (see jsonrpc), so a request the
            # server sends after answering the hook is not mistaken for one from
            # inside it.
            future.add_done_callback(lambda _: self._hook_answered(peer))
        return future

    def _hook_answered(self, peer: JsonRpcPeer) -> None:
        if self._peer is peer:
            self._hooks_pending -= 1

    def notify_soon(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Queue a notification for this session, sent in order without making the caller
        wait (`inference/lifecycle`, §10.5). Refuses (McplError -32002) at once what the
        grant does not allow; raises `ConnectionClosed` when not connected."""
        peer = self._live_peer()
        self._check_outbound(method)
        self._outbox.put(peer, method, params)

    def _current_peer(self) -> JsonRpcPeer | None:
        return None if self._closing else self._peer

    def _live_peer(self) -> JsonRpcPeer:
        peer = self._peer
        if peer is None or peer.closing or self._closing:
            raise ConnectionClosed(f"mcpl server {self._name}: not connected")
        return peer

    def _check_outbound(self, method: str) -> None:
        if method in self._outbound_allowed:
            return  # decided once per grant: every change of the grant clears this
        needs = OUTBOUND_CAPABILITIES.get(method)
        if needs is None:
            return
        if self._state != "ready":
            raise refused_in(self._state, needs[0])
        if not any(is_granted(self._grant, capability) for capability in needs):
            raise denied(needs[0], "not in the effective grant")
        self._outbound_allowed.add(method)

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
            self._closing = True
            self.closed.set()
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
        try:
            if self._supervisor is not None and self._supervisor is not current:
                self._supervisor.cancel()
                await asyncio.gather(self._supervisor, return_exceptions=True)
            for task in self._session_tasks:
                if task is not current:
                    task.cancel()
            if self._peer is not None:
                await self._outbox.flush()
                self._log.info("mcpl server {}: closing: {}", self._name, reason)
                await self._peer.close(McplError(INTERNAL_ERROR, reason), reason=reason)
        finally:
            self.closed.set()

    async def wait_closed(self) -> None:
        await self.closed.wait()

    async def _supervise(self) -> None:
        try:
            while True:
                peer = self._peer
                assert peer is not None
                await peer.wait_closed()
                if self._closing or self._reconnect is None:
                    break
                self._log.warning(
                    "mcpl server {}: session lost ({}); reconnecting",
                    self._name,
                    peer.close_reason,
                )
                if not await self._reopen(self._reconnect):
                    break
        finally:
            if not self._closing:
                self._log.info("mcpl server {}: connection closed", self._name)
                self._closing = True
                self.closed.set()

    async def _open_first_session(self) -> None:
        try:
            await self._open_session()
        except McplStartError as exc:
            if self._reconnect is None:
                raise
            self._log.warning(
                "mcpl server {}: first session failed ({}); retrying", self._name, exc
            )
            if not await self._reopen(self._reconnect):
                raise

    async def _reopen(self, policy: ReconnectPolicy) -> bool:
        for delay in policy.delays():
            await asyncio.sleep(delay)
            if self._closing:
                return False
            try:
                await self._open_session()
                return True
            except McplStartError as exc:
                self._log.warning("mcpl server {}: reconnect failed: {}", self._name, exc)
        self._log.error("mcpl server {}: giving up reconnecting", self._name)
        return False

    async def _open_session(self) -> None:
        self._reset_session_state()
        try:
            transport = await self._factory()
        except Exception as exc:
            raise McplStartError(f"mcpl server {self._name}: could not open: {exc}") from exc
        peer = self._make_peer(
            transport, self._on_request, self._on_notification, name=f"mcpl server {self._name}"
        )
        self._peer = peer
        self._session = SessionHandle(self, peer)
        self.sessions += 1
        peer.start()
        try:
            await self._handshake(peer)
        except BaseException as exc:
            await peer.close(None, reason="the handshake failed")
            if isinstance(exc, Exception) and not isinstance(exc, McplStartError):
                raise McplStartError(f"mcpl server {self._name}: handshake failed: {exc}") from exc
            raise
        finally:
            self._settled.set()

    async def _handshake(self, peer: JsonRpcPeer) -> None:
        result = await peer.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {"experimental": {"mcpl": self._host_capabilities}},
                "clientInfo": {"name": "agentcore", "version": client_version()},
            },
            timeout=self._timeout,
        )
        if not isinstance(result, dict):
            raise McplStartError(f"mcpl server {self._name}: initialize result is not an object")
        capabilities = result.get("capabilities")
        self.manifest = capabilities if isinstance(capabilities, dict) else {}
        self.server_info = result.get("serverInfo")
        experimental = self.manifest.get("experimental")
        mcpl = experimental.get("mcpl") if isinstance(experimental, dict) else None
        if not isinstance(mcpl, dict):
            # §3.3: an MCP server; MCPL stays off and its methods are refused.
            await peer.notify("notifications/initialized")
            self._state = "absent"
            self._log.warning("mcpl server {}: does not advertise MCPL", self._name)
            return
        self._adopt_manifest(mcpl, "initialize")
        # §5.3: the initial policy is a policy change from nothing, so nothing is narrowed
        # and everything waits for the receipt.
        step = self._narrow("initialize")
        for fs in step.feature_sets.values():
            if not fs.enabled:
                self._log.info(
                    "mcpl server {}: feature set {} disabled: {}{}",
                    self._name,
                    fs.name,
                    fs.reason,
                    f" (missing {', '.join(fs.missing)})" if fs.missing else "",
                )
        self._log.info(
            "mcpl server {}: effective grant {}; enabled feature sets {}",
            self._name,
            step.params["effectiveCapabilities"],
            step.params["enabled"],
        )
        if not self.negotiation.policy_as_request:
            self._activate(step)  # 0.4: in force before the server may send; it does not wait
        await peer.notify("notifications/initialized")
        outcome = await self._tell(peer, step, initial=True)
        if outcome == "close":
            raise McplStartError(
                f"mcpl server {self._name}: refused the host's policy and asked to close"
            )

    # -- policy (§6.7) ---------------------------------------------------------

    def _adopt_manifest(self, mcpl: dict[str, Any], source: str) -> None:
        """Hold `mcpl` as the manifest in force, validated as §17.5 asks: as at initialize."""
        if source == "initialize":  # the dialect is the session's: chosen once (compat)
            self.negotiation = negotiate(mcpl)
            if (problem := self.negotiation.problem()) is not None:
                self._log.warning("mcpl server {}: {}", self._name, problem)
        problem = check_revision(mcpl).problem()
        if problem is not None:  # §17.2: a conformance defect, never grounds to reject
            self._log.warning("mcpl server {}: {} ({})", self._name, problem, source)
        experimental = self.manifest.get("experimental")
        self.manifest = {
            **self.manifest,
            "experimental": {
                **(experimental if isinstance(experimental, dict) else {}),
                "mcpl": mcpl,
            },
        }
        self._advertised = frozenset(advertised_capabilities(self.manifest))
        self._declared, problem = keyed_feature_sets(mcpl.get("featureSets"))
        if problem is not None:  # §6.1 says an object: another form is read, never silently
            self._log.warning("mcpl server {}: {}", self._name, problem)

    def _current_mcpl(self) -> dict[str, Any]:
        experimental = self.manifest.get("experimental")
        mcpl = experimental.get("mcpl") if isinstance(experimental, dict) else None
        return mcpl if isinstance(mcpl, dict) else {}

    def _narrow(self, cause: str) -> PolicyStep:
        """Derive the policy wanted now and take away, at once, what it takes away (§6.7).

        Synchronous, so no inbound request is checked against a half-applied policy:
        the grant becomes the old one intersected with the new, and a feature set the
        new policy enables stays disabled unless it was enabled already with the same
        `uses` (a changed `uses` revalidates, §17.5). What the new policy adds waits for
        the receipt (`_tell`).
        """
        grant = effective_grant(self._configured, self._advertised)
        feature_sets = derive_feature_sets(self._declared, grant, self._disabled)
        params = self._policy_params(grant, feature_sets)
        before_grant, before_sets = self._grant, self._feature_sets
        if self._state in OFF_STATES:  # nothing was on: everything waits for the receipt
            before_sets = {}
        interim: dict[str, FeatureSet] = {}
        for name, fs in feature_sets.items():
            old = before_sets.get(name)
            kept = old is not None and old.enabled and frozenset(old.uses) == frozenset(fs.uses)
            interim[name] = (
                fs if kept or not fs.enabled else replace(fs, enabled=False, reason=PENDING_RECEIPT)
            )
        self._grant = before_grant & grant
        self._feature_sets = interim
        self._outbound_allowed.clear()
        self._generation += 1
        return PolicyStep(
            generation=self._generation,
            cause=cause,
            grant=grant,
            feature_sets=feature_sets,
            params=params,
            removed=before_grant - grant,
            degraded=tuple(
                sorted(n for n, fs in before_sets.items() if fs.enabled and not _on(interim, n))
            ),
            pending=grant - before_grant,
            pending_sets=tuple(
                sorted(n for n, fs in interim.items() if fs.reason == PENDING_RECEIPT)
            ),
        )

    def _policy_params(
        self, grant: frozenset[str], feature_sets: Mapping[str, FeatureSet]
    ) -> dict[str, Any]:
        effective = sorted(grant)
        denied = sorted(self._advertised - grant)
        check_policy(effective, denied)
        return {
            "effectiveCapabilities": effective,
            "deniedCapabilities": denied,
            "enabled": sorted(n for n, fs in feature_sets.items() if fs.enabled),
            "disabled": sorted(n for n, fs in feature_sets.items() if not fs.enabled),
        }

    async def _tell(self, peer: JsonRpcPeer, step: PolicyStep, *, initial: bool = False) -> str:
        """Send `step`'s policy as a `featureSets/update` Request; activate it on the receipt.

        Returns what happened: accepted (the whole policy is in force), notified (a 0.4
        server's Notification: in force as sent), unchanged (no Request was needed), refused,
        close (refused, and the server asked to close), unanswered, superseded (a newer change
        came first; it sends its own Request), closed (the session ended), inactive (MCPL is
        off in this session).
        """
        async with self._policy_lock:
            if self._peer is not peer or peer.closing:
                return "closed"
            if not initial and self._state != "ready":
                return "inactive"
            if step.generation != self._generation:
                return "superseded"
            in_force = self._grant == step.grant and self._feature_sets == step.feature_sets
            if not initial and in_force and step.params == self._acknowledged:
                return "unchanged"
            if not self.negotiation.policy_as_request:
                return await self._notify_policy(peer, step)
            try:
                receipt = await peer.request(
                    "featureSets/update", step.params, timeout=self._timeout
                )
            except (RemoteError, TimeoutError) as exc:
                # §6.7: an unanswered expansion does not activate; the narrowing stands.
                self._log.error(
                    "mcpl server {}: featureSets/update failed ({}); {}",
                    self._name,
                    exc,
                    "MCPL stays disabled" if initial else "what it would add stays off",
                )
                if initial:  # it refused nothing (§6.7 `accepted: false` is a refusal)
                    self._state = "unacknowledged"
                return "unanswered"
            except ConnectionClosed:
                return "closed"
            # No await from the receipt to the end of this block: a request the server
            # writes after its receipt is checked against what this block leaves.
            self.receipt = receipt
            fallback = self._refusal(receipt)
            if fallback is not None:
                # §6.7 and §3.2: MCPL is off for this session; nothing is widened.
                self._state = "refused"
                self._grant = frozenset()
                self._outbound_allowed.clear()
                return "close" if fallback == "close" else "refused"
            self._acknowledged = step.params
            if initial:
                self._state = "ready"
            if step.generation != self._generation:
                return "superseded"
            self._grant, self._feature_sets = step.grant, step.feature_sets
            self._outbound_allowed.clear()
            return "accepted"

    async def _notify_policy(self, peer: JsonRpcPeer, step: PolicyStep) -> str:
        """MCPL 0.3/0.4 (`compat`): the policy is a Notification with no receipt, so it is in
        force from just before it is sent: a request the server writes on reading it is served."""
        self._activate(step)
        try:
            await peer.notify("featureSets/update", legacy_policy_params(step.params))
        except ConnectionClosed:
            return "closed"
        return "notified"

    def _activate(self, step: PolicyStep) -> None:
        self._state = "ready"
        self._acknowledged = step.params
        self._grant, self._feature_sets = step.grant, step.feature_sets
        self._outbound_allowed.clear()

    def _refusal(self, receipt: Any) -> str | None:
        """Log the degradation receipt; its `fallback` when it refuses (testimony only,
        §6.7: it never changes the grant). A refusal without one is read as mcp-only."""
        if isinstance(receipt, dict) and receipt.get("accepted") is False:
            fallback = receipt.get("fallback")
            self._log.error(
                "mcpl server {}: refused the policy (fallback {!r}, missing {}): {}",
                self._name,
                fallback,
                receipt.get("missingCapabilities"),
                receipt.get("reason"),
            )
            return fallback if fallback in ("mcp-only", "close") else "mcp-only"
        if not isinstance(receipt, dict) or "accepted" not in receipt:
            self._log.warning(
                "mcpl server {}: featureSets/update receipt is not a §6.7 receipt: {!r}",
                self._name,
                receipt,
            )
            return None
        self._log.info(
            "mcpl server {}: policy accepted (mode {!r}, unavailable {})",
            self._name,
            receipt.get("mode"),
            receipt.get("unavailableFeatures"),
        )
        return None

    async def update_policy(
        self, grant: Sequence[str], disabled_feature_sets: Sequence[str]
    ) -> str:
        """Apply a new configured grant and disabled feature sets to the live session (§6.7).

        What the change takes away is refused from the moment this is called; then the
        Request goes out, and what it adds is allowed once the receipt has come. A policy
        the server refused is offered again (§6.7: a refusal goes back to a human for a new
        decision, and this call is one): MCPL comes on if the server accepts it. Returns
        `_tell`'s outcome, or "inactive" when MCPL is off in this session for good (the
        new policy applies to the next session).
        """
        self._configured = tuple(grant)
        self._disabled = tuple(disabled_feature_sets)
        peer = self._peer
        if peer is None or self._closing or self._state == "absent":
            self._log.info(
                "mcpl server {}: new policy noted; MCPL is off in this session ({})",
                self._name,
                self._state,
            )
            return "inactive"
        return await self._change(peer, "settings")

    async def _change(self, peer: JsonRpcPeer, cause: str) -> str:
        step = self._narrow(cause)
        if step.removed or step.degraded:
            await self._trace_policy(step, removed=step.removed, disabled=step.degraded)
        narrowed = self._grant
        # A refused policy offered again from the settings is an initial exchange once
        # more: MCPL is on only if the server accepts it.
        offered_again = cause == "settings" and self._state in ("refused", "unacknowledged")
        outcome = await self._tell(peer, step, initial=offered_again)
        if outcome in ("accepted", "notified") and (step.pending or step.pending_sets):
            await self._trace_policy(
                step, added=step.pending, enabled=step.pending_sets, receipt=outcome
            )
        elif outcome in ("refused", "close"):
            await self._trace_policy(step, removed=narrowed, receipt=outcome)
        elif outcome == "unanswered" and (step.pending or step.pending_sets):
            await self._trace_policy(step, receipt=outcome, withheld=step.pending)
        if outcome == "close":
            self._spawn_close("the server refused the host's policy and asked to close")
        return outcome

    async def _trace_policy(
        self,
        step: PolicyStep,
        *,
        added: frozenset[str] = frozenset(),
        removed: frozenset[str] = frozenset(),
        enabled: Sequence[str] = (),
        disabled: Sequence[str] = (),
        withheld: frozenset[str] = frozenset(),
        receipt: str = "pending",
    ) -> None:
        self._log.info(
            "mcpl server {}: policy change ({}): added {}, removed {}, feature sets enabled {},"
            " disabled {}; receipt {}",
            self._name,
            step.cause,
            sorted(added),
            sorted(removed),
            list(enabled),
            list(disabled),
            receipt,
        )
        if self._emit is None:
            return
        fields: dict[str, Any] = {
            "serverId": self._name,
            "cause": step.cause,
            "added": sorted(added),
            "removed": sorted(removed),
            "featureSetsEnabled": list(enabled),
            "featureSetsDisabled": list(disabled),
            "receipt": receipt,
        }
        if withheld:
            fields["withheld"] = sorted(withheld)
        await self._emit("mcpl:policy_change", **fields)

    def _spawn_session_task(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"{name}:{self._name}")
        self._session_tasks.add(task)
        task.add_done_callback(self._session_tasks.discard)
        return task

    def _spawn_close(self, reason: str) -> None:
        # Not a session task: close() cancels those.
        self._closer = asyncio.get_running_loop().create_task(self.close(reason))

    # -- manifest changes (§17) ------------------------------------------------

    def _on_manifest_changed(self, params: Params) -> None:
        """§17.3: a hint that the manifest changed. Only marks it stale: the fetch task
        decides, at the rate §17.8 allows, from what `mcpl/manifest` returns."""
        if self._state in OFF_STATES or self._closing:
            self._log.debug("mcpl server {}: mcpl/manifestChanged ignored (MCPL off)", self._name)
            return
        fields = params if isinstance(params, dict) else {}
        if not isinstance(fields.get("revision"), str) or not isinstance(
            fields.get("domains"), list
        ):
            self._log.warning(
                "mcpl server {}: mcpl/manifestChanged without a revision and domains (§17.3); "
                "fetching the manifest all the same",
                self._name,
            )
        self._manifest_notices += 1
        self._manifest_stale.set()
        if self._manifest_fetcher is None and self._peer is not None:
            self._manifest_fetcher = self._spawn_session_task(
                self._fetch_manifests(self._peer), "mcpl-manifest"
            )

    async def _fetch_manifests(self, peer: JsonRpcPeer) -> None:
        last_fetch = -math.inf
        while True:
            await self._manifest_stale.wait()
            await self._settled.wait()
            # §17.8: the host bounds the fetch rate; notices in between share one fetch.
            delay = last_fetch + self._fetch_interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._state != "ready" or self._peer is not peer:
                return
            self._manifest_stale.clear()
            notices, self._manifest_notices = self._manifest_notices, 0
            if notices > 1:
                self._log.warning(
                    "mcpl server {}: {} mcpl/manifestChanged notifications within the fetch "
                    "limit (one per {} s); {} dropped, one fetch made (§17.8: a conformance "
                    "defect of the server)",
                    self._name,
                    notices,
                    self._fetch_interval_s,
                    notices - 1,
                )
            last_fetch = time.monotonic()
            await self._refresh_manifest(peer)

    async def _refresh_manifest(self, peer: JsonRpcPeer) -> None:
        try:
            fetched = await peer.request("mcpl/manifest", {}, timeout=self._timeout)
        except (RemoteError, TimeoutError) as exc:
            self._log.warning(
                "mcpl server {}: announced a manifest change, but mcpl/manifest failed ({}); "
                "the manifest in force stands",
                self._name,
                exc,
            )
            return
        except ConnectionClosed:
            return
        if self._peer is not peer or self._state != "ready":
            return
        if not isinstance(fetched, dict):
            # §17.5.1: nothing learned, so nothing narrowed: the previous manifest stands.
            self._log.warning(
                "mcpl server {}: mcpl/manifest returned {}, not a manifest object; "
                "the manifest in force stands",
                self._name,
                type(fetched).__name__,
            )
            return
        before = self._current_mcpl()
        domains = changed_domains(before, fetched)
        revision = check_revision(fetched)
        if not domains:
            self._log.info("mcpl server {}: fetched the manifest; nothing changed", self._name)
            return
        if revision.stated is not None and revision.stated == before.get("revision"):
            # §17.1: the revision is never proof that nothing changed; the diff decides.
            self._log.warning(
                "mcpl server {}: the manifest changed ({}) under an unchanged revision {}",
                self._name,
                ", ".join(domains),
                revision.stated,
            )
        advertised_before, grant_before = self._advertised, self._grant
        sets_before = dict(self._feature_sets)
        self._adopt_manifest(fetched, "mcpl/manifest")
        outcome = await self._change(peer, "manifest")
        receipt = ChangeReceipt(
            server=self._name,
            domains=domains,
            revision=revision,
            impacts=impacts(
                advertised_before=advertised_before,
                advertised_after=self._advertised,
                grant_before=grant_before,
                grant_after=self._grant,
                sets_before=sets_before,
                sets_after=self._feature_sets,
                ontology_changed="tagOntology" in domains,
            ),
            policy=outcome,
        )
        self.change_receipts.append(receipt)
        self._log.info("mcpl server {}: manifest changed: {}", self._name, receipt.describe())
        if self._emit is not None:
            await self._emit("mcpl:manifest_change", **receipt.to_fields())

    # -- inbound -------------------------------------------------------------

    async def _on_request(self, request_id: RequestId, method: str, params: Params) -> Any:
        if method == "ping":
            return {}
        # _admit runs before the first await, i.e. in the task's first step:
        # the state it reads is the state as of this request's place on the wire.
        request = self._admit(request_id, method, params)
        if method != CANCELLABLE_METHOD:
            return await self._answer(request)
        cancellable = self._cancellable
        cancellable[request_id] = request
        try:
            return await self._answer(request)
        finally:
            # The server may reuse an id it cancelled while this task still unwinds.
            if cancellable.get(request_id) is request:
                del cancellable[request_id]

    async def _answer(self, request: McplRequest) -> Any:
        async with self._deadline.applied(request):
            result = await self._handler(request)
        if result is None:
            raise McplError(
                METHOD_NOT_FOUND, f"Method not found: nothing here answers {request.method}"
            )
        return result

    def _admit(self, request_id: RequestId, method: str, params: Params) -> McplRequest:
        capability = INBOUND_CAPABILITY.get(method)
        if capability is not None:
            if self._state != "ready":
                raise refused_in(self._state, capability)
            if not is_granted(self._grant, capability):
                raise denied(capability)
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise McplError(INVALID_PARAMS, "Invalid params: params must be an object")
        exercised = [capability] if capability is not None else []
        if method == "inference/request":
            stream = params.get("stream", False)
            if not isinstance(stream, bool):
                raise McplError(INVALID_PARAMS, "Invalid params: stream must be a boolean")
            if stream:
                if not is_granted(self._grant, "inferenceRequest.streaming"):
                    raise denied("inferenceRequest.streaming")
                exercised.append("inferenceRequest.streaming")
        if method in FEATURE_SET_METHODS:
            self._check_feature_set(params.get("featureSet"), exercised)
        if method == "inference/request" and self._hooks_pending:
            raise McplError(
                INTERNAL_ERROR,
                "inference/request refused: it arrived while this host's context hook "
                "request to the server was pending, and context hooks must not trigger "
                "inference (SPEC §10.7)",
                {"reason": "context_hook"},
            )
        # Bound to the session it arrived on, never to "whichever session is current".
        assert self._session is not None, "a request arrives only on an open session"
        return McplRequest(server=self._session, id=request_id, method=method, params=params)

    def _check_feature_set(self, name: object, exercised: list[str]) -> None:
        if not isinstance(name, str) or not name:
            raise McplError(
                INVALID_PARAMS,
                "Invalid params: featureSet (a string) is required",
                {"param": "featureSet"},
            )
        fs = self._feature_sets.get(name)
        if fs is None:
            raise McplError(UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
        if not fs.enabled:
            raise McplError(
                FEATURE_SET_NOT_ENABLED,
                "Feature set not enabled",
                {"featureSet": name, "reason": fs.reason},
            )
        for capability in exercised:
            if not is_granted(fs.uses, capability) and self._undeclared_use(name, capability):
                # §6.4(2): the grant protects; the declaration did not say this.
                self._log.warning(
                    "mcpl server {}: declaration mismatch: feature set {} exercised {}, "
                    "which its uses {} does not declare",
                    self._name,
                    name,
                    capability,
                    list(fs.uses),
                )
                raise McplError(
                    FEATURE_SET_NOT_ENABLED,
                    f"Feature set not enabled for {capability}: its uses does not declare it",
                    {
                        "featureSet": name,
                        "capability": capability,
                        "reason": "declaration_mismatch",
                    },
                )

    def _undeclared_use(self, feature_set: str, capability: str) -> bool:
        """True when a use its feature set's `uses` leaves out is refused (§6.4(2), from 0.5);
        a 0.4 server's is served (the grant decided already) and warned about once."""
        if self.negotiation.refuses_undeclared_use:
            return True
        if (feature_set, capability) not in self._undeclared_warned:
            self._undeclared_warned.add((feature_set, capability))
            self._log.warning(
                "mcpl server {}: feature set {} exercised {}, which its uses does not declare; "
                "served: MCPL {} has no declaration-mismatch rule (§6.4(2) is 0.5's)",
                self._name,
                feature_set,
                capability,
                self.negotiation.spoken,
            )
        return False

    async def _on_notification(self, method: str, params: Params) -> None:
        capability = INBOUND_CAPABILITY.get(method)
        if capability is not None and not (self.ready and is_granted(self._grant, capability)):
            self._log.warning(
                "mcpl server {}: dropped notification {}: {} is not granted",
                self._name,
                method,
                capability,
            )
            return
        if method == "notifications/cancelled":
            self._on_cancelled(params)
            return
        if method == "mcpl/manifestChanged":  # §17.3: no capability gates it
            self._on_manifest_changed(params)
            return
        if self._notification_handler is None:
            self._log.debug("mcpl server {}: notification {}", self._name, method)
            return
        await self._notification_handler(self, method, params if isinstance(params, dict) else {})

    def _on_cancelled(self, params: Params) -> None:
        """The server gave up on a request it sent (MCP base protocol, Cancellation).

        Stop an `inference/request` in flight: it costs tokens, and its answer would
        go unread. The handler's task is cancelled and the request gets no answer.
        """
        fields = params if isinstance(params, dict) else {}
        request_id: Any = fields.get("requestId")  # checked by the peer
        reason = fields.get("reason")
        peer = self._peer
        if peer is None or not peer.cancel(request_id, method=CANCELLABLE_METHOD):
            self._log.debug(
                "mcpl server {}: ignoring notifications/cancelled for {!r}: "
                "no inference/request in flight with that id",
                self._name,
                request_id,
            )
            return
        why = reason if isinstance(reason, str) else ""
        # The task sees its cancellation at its next step, after this line, so its
        # handler can tell why. A request not in the map had not begun: nothing to tell.
        request = self._cancellable.get(request_id)
        if request is not None:
            request.cancelled = why
        self._log.info(
            "mcpl server {}: the server cancelled inference/request {!r}{}",
            self._name,
            request_id,
            f": {why}" if why else "",
        )


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
