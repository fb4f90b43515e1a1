"""One session of a configured MCPL server: its peer, handshake, policy exchange, and
what arrives on it.

A reconnect opens a new `Session` (SPEC §5.3-5.4: the handshake and the effective grant
are per connection); the old one is retired, so nothing of it reaches the new one. The
handshake (§5.2-5.3): `initialize`, advertising the host's `capabilities.experimental.mcpl`
(its result's `capabilities` is the server's manifest); `notifications/initialized`; then
the initial policy as a `featureSets/update` Request (a 0.3/0.4 server: its version's
Notification, `compat`). Each inbound request is admitted by the session's `Gate` in the
task's first step and handed, as an `McplRequest`, to the connection's handler under the
server's deadline. The order of things, and why, is in docs/mcpl.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger

from agentcore.mcpl.compat import client_version, legacy_policy_params
from agentcore.mcpl.deadline import Deadline
from agentcore.mcpl.gate import Gate, SessionHandle
from agentcore.mcpl.jsonrpc import (
    ConnectionClosed,
    InboundRequest,
    JsonRpcPeer,
    Params,
    RemoteError,
    Transport,
)
from agentcore.mcpl.manifest_watch import ManifestWatch, TraceEmitter
from agentcore.mcpl.methods import CANCELLABLE_METHOD, MCP_PROTOCOL_VERSION
from agentcore.mcpl.policy import Policy, PolicyStep
from agentcore.mcpl.protocol import METHOD_NOT_FOUND, McplError, McplRequest

McplRequestHandler = Callable[[McplRequest], Awaitable[Any]]
SessionNotificationHandler = Callable[[str, dict[str, Any]], Awaitable[None]]


class McplStartError(Exception):
    """A session could not be established (spawn, connect, or handshake failed)."""


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What every session of one connection is opened with."""

    name: str
    host_capabilities: Mapping[str, Any]
    timeout_s: float
    manifest_fetch_interval_s: float
    deadline: Deadline
    handler: McplRequestHandler
    notification_handler: SessionNotificationHandler | None
    emit: TraceEmitter | None
    make_peer: Callable[..., JsonRpcPeer]
    close: Callable[[str], None]
    """Ask the connection to close (the server refused the policy and asked for it)."""


class Session:
    """One session: peer, policy, gate, manifest watch and tasks (see the module docstring)."""

    def __init__(self, settings: SessionSettings, transport: Transport, policy: Policy) -> None:
        self.settings, self.policy = settings, policy
        self.name = name = settings.name
        self.gate = Gate(policy)
        self.peer = settings.make_peer(
            transport, self._on_request, self._on_notification, name=f"mcpl server {name}"
        )
        self.handle = SessionHandle(name, self.peer, policy, self.gate)
        self.settled = asyncio.Event()  # the initial policy exchange is over, either way
        self.server_info: Any = None
        self._policy_lock = asyncio.Lock()  # one featureSets/update Request at a time
        self._tasks: set[asyncio.Task[Any]] = set()
        self.watch = ManifestWatch(
            policy,
            self.peer,
            settled=self.settled,
            interval_s=settings.manifest_fetch_interval_s,
            timeout_s=settings.timeout_s,
            change=self.change,
            emit=settings.emit,
        )
        self._log = logger.bind(mcpl_server=name)

    async def open(self) -> None:
        """Start reading and run the handshake. Raises McplStartError."""
        self.peer.start()
        try:
            await self._handshake()
        except BaseException as exc:
            await self.peer.close(None, reason="the handshake failed")
            if isinstance(exc, Exception) and not isinstance(exc, McplStartError):
                raise McplStartError(f"mcpl server {self.name}: handshake failed: {exc}") from exc
            raise
        finally:
            self.settled.set()

    def retire(self, keep: asyncio.Task[Any] | None = None) -> None:
        """The connection moved on: nothing more goes out on this session, its tasks stop."""
        self.handle.retire()
        for task in self._tasks:
            if task is not keep:
                task.cancel()

    async def _handshake(self) -> None:
        peer, policy = self.peer, self.policy
        result = await peer.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {"experimental": {"mcpl": dict(self.settings.host_capabilities)}},
                "clientInfo": {"name": "agentcore", "version": client_version()},
            },
            timeout=self.settings.timeout_s,
        )
        if not isinstance(result, dict):
            raise McplStartError(f"mcpl server {self.name}: initialize result is not an object")
        capabilities = result.get("capabilities")
        policy.manifest = capabilities if isinstance(capabilities, dict) else {}
        self.server_info = result.get("serverInfo")
        mcpl = policy.current_mcpl() if _has_mcpl(policy.manifest) else None
        if mcpl is None:
            # §3.3: an MCP server; MCPL stays off and its methods are refused.
            await peer.notify("notifications/initialized")
            policy.state = "absent"
            self._log.warning("mcpl server {}: does not advertise MCPL", self.name)
            return
        policy.adopt_manifest(mcpl, "initialize")
        # §5.3: the initial policy is a policy change from nothing, so nothing is narrowed
        # and everything waits for the receipt.
        step = policy.narrow("initialize")
        self._log_initial(step)
        if not policy.negotiation.policy_as_request:
            policy.activate(step)  # 0.4: in force before the server may send; it does not wait
        await peer.notify("notifications/initialized")
        outcome = await self._tell(step, initial=True)
        if outcome == "close":
            raise McplStartError(
                f"mcpl server {self.name}: refused the host's policy and asked to close"
            )

    def _log_initial(self, step: PolicyStep) -> None:
        for fs in step.feature_sets.values():
            if not fs.enabled:
                self._log.info(
                    "mcpl server {}: feature set {} disabled: {}{}",
                    self.name,
                    fs.name,
                    fs.reason,
                    f" (missing {', '.join(fs.missing)})" if fs.missing else "",
                )
        self._log.info(
            "mcpl server {}: effective grant {}; enabled feature sets {}",
            self.name,
            step.params["effectiveCapabilities"],
            step.params["enabled"],
        )

    # -- policy changes (§6.7) ---------------------------------------------------------

    async def change(self, cause: str) -> str:
        """Apply the policy wanted now: narrow at once, send, widen on the receipt (§6.7)."""
        policy = self.policy
        step = policy.narrow(cause)
        if step.removed or step.degraded:
            await self._trace_policy(step, removed=step.removed, disabled=step.degraded)
        narrowed = policy.grant
        # A refused policy offered again from the settings is an initial exchange once
        # more: MCPL is on only if the server accepts it.
        offered_again = cause == "settings" and policy.state in ("refused", "unacknowledged")
        outcome = await self._tell(step, initial=offered_again)
        if outcome in ("accepted", "notified") and (step.pending or step.pending_sets):
            await self._trace_policy(
                step, added=step.pending, enabled=step.pending_sets, receipt=outcome
            )
        elif outcome in ("refused", "close"):
            await self._trace_policy(step, removed=narrowed, receipt=outcome)
        elif outcome == "unanswered" and (step.pending or step.pending_sets):
            await self._trace_policy(step, receipt=outcome, withheld=step.pending)
        if outcome == "close":
            self.settings.close("the server refused the host's policy and asked to close")
        return outcome

    async def _tell(self, step: PolicyStep, *, initial: bool = False) -> str:
        """Send `step`'s policy as a `featureSets/update` Request; activate it on the receipt.

        Returns what happened: accepted (the whole policy is in force), notified (a 0.4
        server's Notification: in force as sent), unchanged (no Request was needed), refused,
        close (refused, and the server asked to close), unanswered, superseded (a newer change
        came first; it sends its own Request), closed (the session ended), inactive (MCPL is
        off in this session).
        """
        policy, peer = self.policy, self.peer
        async with self._policy_lock:
            if not self.handle.live:
                return "closed"
            held_back = policy.hold_back(step, initial=initial)
            if held_back is not None:
                return held_back
            if not policy.negotiation.policy_as_request:
                return await self._notify_policy(step)
            try:
                receipt = await peer.request(
                    "featureSets/update", step.params, timeout=self.settings.timeout_s
                )
            except (RemoteError, TimeoutError) as exc:
                self._log.error(
                    "mcpl server {}: featureSets/update failed ({}); {}",
                    self.name,
                    exc,
                    "MCPL stays disabled" if initial else "what it would add stays off",
                )
                return policy.unanswered(initial=initial)
            except ConnectionClosed:
                return "closed"
            # No await from the receipt to the end of this block: a request the server
            # writes after its receipt is checked against what this block leaves.
            return policy.receive(step, receipt, initial=initial)

    async def _notify_policy(self, step: PolicyStep) -> str:
        """MCPL 0.3/0.4 (`compat`): the policy is a Notification with no receipt, so it is in
        force from just before it is sent: a request the server writes on reading it is served."""
        self.policy.activate(step)
        try:
            await self.peer.notify("featureSets/update", legacy_policy_params(step.params))
        except ConnectionClosed:
            return "closed"
        return "notified"

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
            self.name,
            step.cause,
            sorted(added),
            sorted(removed),
            list(enabled),
            list(disabled),
            receipt,
        )
        emit = self.settings.emit
        if emit is None:
            return
        fields: dict[str, Any] = {
            "serverId": self.name,
            "cause": step.cause,
            "added": sorted(added),
            "removed": sorted(removed),
            "featureSetsEnabled": list(enabled),
            "featureSetsDisabled": list(disabled),
            "receipt": receipt,
        }
        if withheld:
            fields["withheld"] = sorted(withheld)
        await emit("mcpl:policy_change", **fields)

    # -- inbound -----------------------------------------------------------------------

    async def _on_request(self, inbound: InboundRequest) -> Any:
        if inbound.method == "ping":
            return {}
        # admit runs before the first await, i.e. in the task's first step: the
        # policy it reads is the policy as of this request's place on the wire.
        params = self.gate.admit(inbound.method, inbound.params)
        # Bound to the session it arrived on, never to "whichever session is current".
        request = McplRequest(self.handle, inbound.id, inbound.method, params, inbound=inbound)
        deadline = self.settings.deadline
        scope = deadline.scope(request)
        try:
            async with scope:
                result = await self.settings.handler(request)
        except TimeoutError:
            if not scope.expired():
                raise  # the handler's own TimeoutError, not the deadline's
            raise deadline.passed() from None
        if result is None:  # §6.6: a method never goes unanswered
            raise McplError(
                METHOD_NOT_FOUND, f"Method not found: nothing here answers {request.method}"
            )
        return result

    async def _on_notification(self, method: str, params: Params) -> None:
        if not self.gate.admits_notification(method):
            return
        if method == "notifications/cancelled":
            self._on_cancelled(params)
            return
        if method == "mcpl/manifestChanged":  # §17.3: no capability gates it
            if self.handle.live and self.watch.changed(params):
                self.watch.fetcher = self._spawn(self.watch.run(), "mcpl-manifest")
            return
        handler = self.settings.notification_handler
        if handler is None:
            self._log.debug("mcpl server {}: notification {}", self.name, method)
            return
        await handler(method, params if isinstance(params, dict) else {})

    def _on_cancelled(self, params: Params) -> None:
        """The server gave up on a request it sent (MCP base protocol, Cancellation).

        Stop an `inference/request` in flight: it costs tokens, and its answer would go
        unread. The request itself records why and cancels its task (`InboundRequest.cancel`);
        it gets no answer. Any other id (unknown, answered, another method) is ignored.
        """
        fields = params if isinstance(params, dict) else {}
        request_id: Any = fields.get("requestId")  # checked by the peer
        reason = fields.get("reason")
        why = reason if isinstance(reason, str) else ""
        if not self.peer.cancel(request_id, method=CANCELLABLE_METHOD, reason=why):
            self._log.debug(
                "mcpl server {}: ignoring notifications/cancelled for {!r}: "
                "no inference/request in flight with that id",
                self.name,
                request_id,
            )
            return
        self._log.info(
            "mcpl server {}: the server cancelled inference/request {!r}{}",
            self.name,
            request_id,
            f": {why}" if why else "",
        )

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"{name}:{self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _has_mcpl(manifest: Mapping[str, Any]) -> bool:
    experimental = manifest.get("experimental")
    return isinstance(experimental, dict) and isinstance(experimental.get("mcpl"), dict)


__all__ = [
    "McplRequestHandler",
    "McplStartError",
    "Session",
    "SessionNotificationHandler",
    "SessionSettings",
]
