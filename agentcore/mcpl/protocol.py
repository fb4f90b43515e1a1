"""The parts of MCPL that plugins see: error codes, the error type, an inbound request.

The connection layer (`agentcore.mcpl.connection` and what it stands on) owns the
wire; a plugin answering `on_mcpl_request` sees only an `McplRequest` and returns a
result or raises `McplError`. Everything else a plugin raises becomes -32603 at the
one boundary where exceptions become error objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentcore.mcpl.chunks import ChunkStream

if TYPE_CHECKING:  # §19's reading loads with the first push event or bulk fetch
    from agentcore.mcpl.bulk import BulkReference

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCPL 0.5 (SPEC §6)
FEATURE_SET_NOT_ENABLED = -32001
CAPABILITY_DENIED = -32002
UNKNOWN_FEATURE_SET = -32003

SHUTDOWN_MESSAGE = "the host is shutting down"
"""How an in-flight request is answered when the host stops: by the connection, and by
the router when the kernel's stop wakes the request first (so both answers read alike)."""


class McplError(Exception):
    """An error answer: `code`, `message` and optional `data`, exactly as sent."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ServerHandle(Protocol):
    """The MCPL server a request came from, as a plugin may use it."""

    @property
    def name(self) -> str:
        """The `[mcpl.servers.NAME]` key."""
        ...

    @property
    def grant(self) -> frozenset[str]:
        """The effective capabilities in force (§6.7: a narrowing at once, a widening
        only after the server's receipt)."""
        ...

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification to the server (e.g. `inference/chunk`)."""
        ...


class InboundCancellation(Protocol):
    """What `McplRequest` reads of the one object the JSON-RPC peer made for the request
    (`agentcore.mcpl.jsonrpc.InboundRequest`), which alone owns its cancellation."""

    @property
    def cancel_reason(self) -> str | None: ...


@dataclass(slots=True)
class McplRequest:
    """One inbound request that passed the kernel's grant and feature-set checks: what a
    plugin sees of it. `server` is the session it came on, the back-channel for its chunks."""

    server: ServerHandle
    id: int | str
    method: str
    params: dict[str, Any]
    deadline: float | None = None
    """When (the event loop's clock) the host stops working on it and answers it -32603
    (`agentcore.mcpl.deadline`); a handler cancelled at that time was cut by it."""
    max_tokens: int | None = None
    """The host's ceiling on the output tokens this request may ask for (``[mcpl.servers.NAME]
    max_tokens``, else ``[mcpl]``'s; None: none known). A plugin answering an
    `inference/request` refuses a larger `maxTokens` and keeps its own default under it."""
    inbound: InboundCancellation | None = field(default=None, repr=False, compare=False)
    """The request as the peer read it, owner of its task and cancellation (None for a
    request made outside a connection, e.g. in a test)."""

    @property
    def cancelled(self) -> str | None:
        """The server's reason ("" if it gave none) once it cancelled this request with
        `notifications/cancelled` (MCP's base protocol). Recorded before the handler's task
        is cancelled, so a handler that catches the `CancelledError` can tell why; the
        request then gets no answer. Only `inference/request` can be cancelled."""
        return None if self.inbound is None else self.inbound.cancel_reason

    def chunk_stream(self) -> ChunkStream:
        """The back-channel of this request's `inference/chunk` notifications: numbered
        from 0, redacted across chunks, to the session it came on (`ChunkStream`). Make
        one per streamed answer."""
        return ChunkStream(self.server, self.id)


CoalesceOutcome = Literal["first", "replaced", "appended", "retracted", "noted", "consumed"]
"""RFC-006 §7: what the host did with a coalesced occurrence."""


@dataclass(frozen=True, slots=True)
class Coalesce:
    """A `push/event`'s RFC-006 `coalesce` member (§13), checked: the subject's key in the
    event's feature-set scope (§3.2), and how this occurrence acts on it."""

    key: str
    initial: bool = False
    """RFC-006 §3.3: the server says no earlier occurrence of this subject was sent."""
    retract: bool = False
    """RFC-006 §6: the subject ceased to exist; the payload is the deletion notice."""
    deferred: bool = False
    """RFC-006 §5: a notice whose content the host asks for with `push/render`."""
    data: Any = None
    """RFC-006 §5.1: deferred notices only; server-private, never shown to a model."""


@dataclass(frozen=True, slots=True)
class CoalesceResult:
    """RFC-006 §7's `coalesce` member of a `push/event` result."""

    outcome: CoalesceOutcome
    prior_event_id: str | None = None
    """The occurrence displaced or found consumed, when known."""

    def to_wire(self) -> dict[str, Any]:
        result: dict[str, Any] = {"outcome": self.outcome}
        if self.prior_event_id is not None:
            result["priorEventId"] = self.prior_event_id
        return result


@dataclass(frozen=True, slots=True)
class PushEvent:
    """A `push/event` (SPEC §9) that passed the grant and feature-set checks: what
    `on_push_event` decides about. Fields are §9.2's, already checked for type."""

    server: ServerHandle
    feature_set: str
    event_id: str
    timestamp: str
    payload: dict[str, Any]
    """Its `content` is a list of §10.3 content blocks for the model to interpret."""
    origin: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    """§16: descriptive claims the host may route attention on, never authority."""
    coalesce: Coalesce | None = None
    """RFC-006's member, checked; None without one, or when no plugin of this host
    advertises `eventCoalescing` (an older host ignores the member, RFC-006 §8)."""
    content: tuple[Any, ...] = ()
    """`payload.content` as it may reach a model (§19, before any wake assembly): each
    bulk reference as a text block holding its stub (no URI, no payload), inline data
    that must be withheld left out. A plugin that puts the event before a model uses
    this, never `payload` itself."""
    references: tuple[BulkReference, ...] = ()
    """The host-private records of its bulk references (§19), for `BulkFetcher`."""


@dataclass(frozen=True, slots=True)
class PushAnswer:
    """What a plugin answering `on_push_event` returns; sent as §9.3's result.

    `inference_id` names the inference the event triggered; `reason` says why an event
    was not accepted (§9.3 wants one then; the host supplies one if the plugin did not).
    """

    accepted: bool
    inference_id: str | None = None
    reason: str | None = None
    coalesce: CoalesceResult | None = None
    """RFC-006 §7: what a coalescing plugin did with the event's `coalesce` member."""

    def to_wire(self) -> dict[str, Any]:
        result: dict[str, Any] = {"accepted": self.accepted}
        if self.inference_id is not None:
            result["inferenceId"] = self.inference_id
        if self.coalesce is not None:
            result["coalesce"] = self.coalesce.to_wire()
        if not self.accepted:
            result["reason"] = self.reason or "the host declined the event"
        elif self.reason is not None:
            result["reason"] = self.reason
        return result
