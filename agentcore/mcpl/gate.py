"""What may cross one session, each way, under the policy in force (`agentcore.mcpl.policy`).

Outbound, the host sends a method only if the grant allows it (§5.4: "MUST NOT
deliver"). Inbound, a request passes these checks, in this order, before a handler
sees it: the method's capability is granted (-32002), and with `stream: true` also
`inferenceRequest.streaming`; for a method that carries a `featureSet` (§6.5) the set
is declared (-32003), enabled (-32001), and its `uses` covers what the request
exercises (-32001, `reason: "declaration_mismatch"`, §6.4); and an `inference/request`
that arrives while a host→server `context/*` request is pending is refused (-32600,
`reason: "context_hook"`, §10.7).
"""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger

from agentcore.mcpl.compat import denied, refused_in
from agentcore.mcpl.grants import is_granted
from agentcore.mcpl.jsonrpc import ConnectionClosed, JsonRpcPeer, Params
from agentcore.mcpl.methods import FEATURE_SET_METHODS, INBOUND_CAPABILITY, OUTBOUND_CAPABILITIES
from agentcore.mcpl.policy import Policy
from agentcore.mcpl.protocol import (
    FEATURE_SET_NOT_ENABLED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNKNOWN_FEATURE_SET,
    McplError,
)


class Gate:
    """One session's checks, each way (see the module docstring)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._name = policy.name
        self._allowed: set[str] = set()  # outbound methods allowed under `_allowed_at`
        self._allowed_at = policy.revision
        self._undeclared_warned: set[tuple[str, str]] = set()
        self.hooks_pending = 0  # host→server context/* and push/render not yet answered

    # -- outbound (§5.4) -------------------------------------------------------------

    def check_outbound(self, method: str) -> None:
        """Raise McplError -32002 for a method the policy in force does not allow."""
        policy = self._policy
        if self._allowed_at != policy.revision:  # decided once per policy in force
            self._allowed, self._allowed_at = set(), policy.revision
        if method in self._allowed:
            return
        needs = OUTBOUND_CAPABILITIES.get(method)
        if needs is None:
            return
        if policy.state != "ready":
            raise refused_in(policy.state, needs[0])
        if not any(is_granted(policy.grant, capability) for capability in needs):
            raise denied(needs[0], "not in the effective grant")
        self._allowed.add(method)

    def hook_sent(self, answered: asyncio.Future[Any]) -> None:
        """A `context/*` or `push/render` request went out: the §10.7 window is open until
        it resolves (RFC-006 §5.3: a server rendering must not request inference either)."""
        self.hooks_pending += 1
        # Runs when the response resolves the future, before the task of any request
        # read after that response (see jsonrpc), so a request the server sends after
        # answering the hook is not mistaken for one from inside it.
        answered.add_done_callback(self._hook_answered)

    def _hook_answered(self, _: asyncio.Future[Any]) -> None:
        self.hooks_pending -= 1

    # -- inbound ---------------------------------------------------------------------

    def admits_notification(self, method: str) -> bool:
        """False (and logged) for a notification whose capability is not granted."""
        capability = INBOUND_CAPABILITY.get(method)
        policy = self._policy
        if capability is None or (policy.ready and is_granted(policy.grant, capability)):
            return True
        logger.warning(
            "mcpl server {}: dropped notification {}: {} is not granted",
            self._name,
            method,
            capability,
        )
        return False

    def admit(self, method: str, params: Params) -> dict[str, Any]:
        """The request's params, once it passed every check; raises McplError otherwise."""
        policy = self._policy
        capability = INBOUND_CAPABILITY.get(method)
        if capability is not None:
            if policy.state != "ready":
                raise refused_in(policy.state, capability)
            if not is_granted(policy.grant, capability):
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
                if not is_granted(policy.grant, "inferenceRequest.streaming"):
                    raise denied("inferenceRequest.streaming")
                exercised.append("inferenceRequest.streaming")
        if method in FEATURE_SET_METHODS:
            self._check_feature_set(params.get("featureSet"), exercised)
        if method == "inference/request" and self.hooks_pending:
            # §10.7 names no code; MCPL's RFC-006 vector 26 expects -32600 for it.
            raise McplError(
                INVALID_REQUEST,
                "inference/request refused: it arrived while this host's context hook or "
                "push/render request to the server was pending, and neither may trigger "
                "inference (SPEC §10.7, RFC-006 §5.3)",
                {"reason": "context_hook"},
            )
        return params

    def _check_feature_set(self, name: object, exercised: list[str]) -> None:
        if not isinstance(name, str) or not name:
            raise McplError(
                INVALID_PARAMS,
                "Invalid params: featureSet (a string) is required",
                {"param": "featureSet"},
            )
        fs = self._policy.feature_sets.get(name)
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
                logger.warning(
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
        negotiation = self._policy.negotiation
        if negotiation.refuses_undeclared_use:
            return True
        if (feature_set, capability) not in self._undeclared_warned:
            self._undeclared_warned.add((feature_set, capability))
            logger.warning(
                "mcpl server {}: feature set {} exercised {}, which its uses does not declare; "
                "served: MCPL {} has no declaration-mismatch rule (§6.4(2) is 0.5's)",
                self._name,
                feature_set,
                capability,
                negotiation.spoken,
            )
        return False


class SessionHandle:
    """One session of a `ServerConnection`, as the requests that arrived on it see it
    (`McplRequest.server`): what a request sends goes to its own session or nowhere.

    A reconnect is a new connection with its own handshake and grant (SPEC §5.3: "After
    initialization, hosts MUST send `featureSets/update`"; §5.4: "The host computes the
    effective grant per connection"), and its JSON-RPC ids start again, so a chunk of a
    request from the old session must never reach the new one, where the same id may name
    another request. Once its session is gone (`retire`), `notify` raises `ConnectionClosed`.
    """

    __slots__ = ("_gate", "_name", "_peer", "_policy", "_retired")

    def __init__(self, name: str, peer: JsonRpcPeer, policy: Policy, gate: Gate) -> None:
        self._name, self._peer, self._policy, self._gate = name, peer, policy, gate
        self._retired = False

    def retire(self) -> None:
        """The connection moved on (a new session, or closing): this one sends nothing more."""
        self._retired = True

    @property
    def name(self) -> str:
        return self._name

    @property
    def live(self) -> bool:
        """True while this is the connection's current session and it is not closing."""
        return not self._retired and not self._peer.closing

    @property
    def grant(self) -> frozenset[str]:
        """The effective grant of this session; empty once it is gone."""
        return self._policy.grant if self.live else frozenset()

    def sendable(self, method: str) -> JsonRpcPeer:
        """This session's peer, if `method` may go out on it now; raises what `notify` does."""
        if not self.live:
            raise ConnectionClosed(f"mcpl server {self._name}: not connected")
        self._gate.check_outbound(method)
        return self._peer

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification on this session; `ConnectionClosed` once it is gone,
        McplError -32002 for one the grant does not allow."""
        self._check(method)
        await self._peer.notify(method, params)

    def send_now(self, method: str, frame: str) -> bool:
        """Send `frame`, a `method` notification already encoded (`ChunkStream`), if the
        transport takes it without waiting; False: nothing sent, await `send`. Checked
        and redacted as `notify` is, on every frame: the grant may narrow mid-stream."""
        gate, peer = self._gate, self._peer
        # `_check` in full only when the grant's memo does not answer at once: the gate
        # decides a method once per policy in force (`check_outbound`). `closing`'s
        # attribute, not the property: a call less per chunk.
        if (
            self._retired
            or peer._closing
            or gate._allowed_at != self._policy.revision
            or method not in gate._allowed
        ):
            self._check(method)
        return peer.send_now(frame)

    async def send(self, method: str, frame: str) -> None:
        """`send_now`, waiting for the transport when it must."""
        self._check(method)
        await self._peer.send_encoded(frame)

    def _check(self, method: str) -> None:
        if self._retired or self._peer.closing:
            raise ConnectionClosed(
                f"mcpl server {self._name}: the session this request arrived on is gone"
            )
        self._gate.check_outbound(method)


__all__ = ["Gate", "SessionHandle"]
