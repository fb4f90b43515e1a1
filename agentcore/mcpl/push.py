"""`push/event` (MCPL SPEC §9): checked, deduplicated by `eventId`, decided by a plugin.

The connection has already checked the grant (`pushEvents`, -32002) and the feature set
(declared -32003, enabled -32001, its `uses` covering `pushEvents`). Here: the params are
checked against §9.2 (-32602 naming the field), a duplicate `eventId` within the window
gets the first answer again without asking the plugins twice (§9.4; a duplicate that
arrives while the first is still being decided waits for it), and the answer is always
one (§6.6: never silence): the first plugin's `PushAnswer`, or `accepted: false` with a
reason when no plugin answers.

The server is untrusted (§13.1), so what it can make the host remember is bounded
(`agentcore.mcpl.limits`): an `eventId` over ``max_event_id_bytes`` is refused -32602
naming the limit, and the remembered ids are at most ``push_dedup_max_events`` and
``push_dedup_max_bytes`` (their UTF-8 bytes); past either the oldest are forgotten first.

RFC-006 (event coalescing): when a plugin advertises `eventCoalescing`, the `coalesce`
member is checked here (§13: -32602 with ``data: {field, reason}``, nothing admitted) and
handed to `on_push_event` as `PushEvent.coalesce`; what the subject's state makes of it
is the plugin's (it alone knows when the host's turns consume an event). A coalesced
occurrence's answer is remembered for at least `COALESCED_RETRY_WINDOW_S` (§3.1).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from agentcore._constants import PUSH_DEDUP_WINDOW_S
from agentcore.mcpl.limits import DEFAULT_LIMITS, Limits
from agentcore.mcpl.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    Coalesce,
    McplError,
    McplRequest,
    PushAnswer,
    PushEvent,
)

DEDUP_WINDOW_S = PUSH_DEDUP_WINDOW_S
DEDUP_MAX_EVENTS = DEFAULT_LIMITS.push_dedup_max_events
"""At most this many answers are remembered per server by default; the oldest go first."""
NO_PLUGIN_REASON = "no plugin on this host acts on push events"
COALESCED_RETRY_WINDOW_S = 3600.0
"""RFC-006 §3.1: a coalesced occurrence's retry gets its first answer for at least an hour."""
MAX_KEY_BYTES = 256  # RFC-006 §13
MAX_DATA_BYTES = 4096  # RFC-006 §5.1: `data` at most 4 KiB serialized

PushDecider = Callable[[PushEvent], Awaitable[Any]]


def _invalid(field: str, expected: str) -> McplError:
    return McplError(
        INVALID_PARAMS, f"Invalid params: push/event {field} must be {expected}", {"param": field}
    )


def coalescing_leaves(capabilities: dict[str, Any]) -> frozenset[str]:
    """Which RFC-006 §10 `eventCoalescing` leaves the host advertises (``true``: all)."""
    advertised = capabilities.get("eventCoalescing")
    leaves = ("pushEvents", "channelsIncoming", "deferred", "channelScopedPush")
    if advertised is True:
        return frozenset(leaves)
    if isinstance(advertised, dict):
        return frozenset(leaf for leaf in leaves if advertised.get(leaf) is True)
    return frozenset()


def _bad_coalesce(field: str, reason: str) -> McplError:
    """RFC-006 §13: a malformed `coalesce` is -32602 with ``data: {field, reason}``."""
    return McplError(
        INVALID_PARAMS,
        f"Invalid params: push/event {field} {reason} (RFC-006 §13)",
        {"field": field, "reason": reason, "param": field},
    )


def read_coalesce(raw: object, leaves: frozenset[str]) -> Coalesce:
    """RFC-006 §13's checks of a `push/event`'s `coalesce` member, in the order it lists
    them; `leaves` is what the host advertises (`coalescing_leaves`)."""
    if not isinstance(raw, dict):
        raise _bad_coalesce("coalesce", "must be an object")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise _bad_coalesce("coalesce.key", "must be a non-empty string")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise _bad_coalesce("coalesce.key", f"is over {MAX_KEY_BYTES} bytes")
    flags: dict[str, bool] = {}
    for name in ("initial", "deferred", "retract"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise _bad_coalesce(f"coalesce.{name}", "must be a boolean")
        flags[name] = value
    if flags["retract"] and flags["deferred"]:
        raise _bad_coalesce("coalesce.retract", "is exclusive with deferred")
    if flags["retract"] and flags["initial"]:
        raise _bad_coalesce("coalesce.retract", "is exclusive with initial")
    if "data" in raw:
        if not flags["deferred"]:
            raise _bad_coalesce("coalesce.data", "is allowed on deferred notices only")
        serialized = json.dumps(raw["data"], separators=(",", ":"), ensure_ascii=False)
        if len(serialized.encode("utf-8", "surrogatepass")) > MAX_DATA_BYTES:
            raise _bad_coalesce("coalesce.data", f"is over {MAX_DATA_BYTES} bytes serialized")
    # §3.2, §13: a leaf the host does not advertise is refused, never silently appended.
    if "channelId" in raw and "channelScopedPush" not in leaves:
        raise _bad_coalesce("coalesce.channelId", "needs channelScopedPush, not advertised")
    if flags["deferred"] and "deferred" not in leaves:
        raise _bad_coalesce("coalesce.deferred", "needs deferred, not advertised")
    return Coalesce(key, flags["initial"], flags["retract"], flags["deferred"], raw.get("data"))


def read_event(
    request: McplRequest,
    max_id_bytes: int | None = None,
    coalescing: frozenset[str] = frozenset(),
) -> PushEvent:
    """The §9.2 fields of a `push/event`; McplError -32602 naming the first one that is wrong
    (an `eventId` over `max_id_bytes` UTF-8 bytes included). The RFC-006 `coalesce` member
    is read only when the host advertises `eventCoalescing.pushEvents` (`coalescing`)."""
    params = request.params
    event_id = params.get("eventId")
    if not isinstance(event_id, str) or not event_id:
        raise _invalid("eventId", "a non-empty string")
    if max_id_bytes is not None and (size := _utf8_size(event_id, max_id_bytes)) > max_id_bytes:
        raise McplError(
            INVALID_PARAMS,
            f"Invalid params: push/event eventId is {size} bytes, over this host's limit of "
            f"{max_id_bytes} (max_event_id_bytes)",
            {"param": "eventId", "maxBytes": max_id_bytes},
        )
    timestamp = params.get("timestamp")
    if not isinstance(timestamp, str) or not timestamp:
        raise _invalid("timestamp", "an ISO 8601 string")
    payload = params.get("payload")
    if not isinstance(payload, dict):
        raise _invalid("payload", "an object")
    if not isinstance(payload.get("content"), list):
        raise _invalid("payload.content", "an array of content blocks")
    origin = params.get("origin")
    if origin is not None and not isinstance(origin, dict):
        raise _invalid("origin", "an object")
    tags = params.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise _invalid("tags", "an array of strings")
    coalesce = None
    if "pushEvents" in coalescing and "coalesce" in params:
        coalesce = read_coalesce(params["coalesce"], coalescing)
    provenance = f"from MCPL server {request.server.name}, push event {event_id[:64]}"
    from agentcore.mcpl.bulk import model_content  # §19: loaded with the first push event

    content, references = model_content(payload["content"], provenance)
    return PushEvent(
        server=request.server,
        feature_set=params["featureSet"],  # checked by the connection
        event_id=event_id,
        timestamp=timestamp,
        payload=payload,
        origin=origin,
        tags=tuple(tags),
        coalesce=coalesce,
        content=content,
        references=references,
    )


def _utf8_size(text: str, limit: int | None = None) -> int:
    """`text`'s length in UTF-8 bytes; an ASCII one, or one whose characters alone pass
    `limit`, without encoding it."""
    if text.isascii() or (limit is not None and len(text) > limit):
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _wire(answer: object) -> dict[str, Any]:
    if answer is None:
        return PushAnswer(accepted=False, reason=NO_PLUGIN_REASON).to_wire()
    if isinstance(answer, PushAnswer):
        return answer.to_wire()
    raise McplError(
        INTERNAL_ERROR,
        f"a plugin answered on_push_event with {type(answer).__name__}, not a PushAnswer",
    )


class PushEvents:
    """The push events of one server (kept across its reconnections, since a server
    retries an event with the same `eventId` after a lost session)."""

    def __init__(
        self,
        decide: PushDecider,
        *,
        window_s: float = DEDUP_WINDOW_S,
        limits: Limits = DEFAULT_LIMITS,
        coalescing: frozenset[str] = frozenset(),
    ) -> None:
        self._decide = decide
        self._window_s = window_s
        self._coalescing = coalescing
        self.limits = limits
        """The server's bounds in force (its dedup sizes, its `eventId` length)."""
        # eventId -> (when it may be forgotten, its answer: a result, or the McplError it got)
        self._seen: OrderedDict[str, tuple[float, asyncio.Future[dict[str, Any]]]] = OrderedDict()
        self._seen_bytes = 0  # the remembered eventIds' UTF-8 bytes

    @property
    def remembered(self) -> tuple[int, int]:
        """How many eventIds are remembered, and their UTF-8 bytes."""
        return len(self._seen), self._seen_bytes

    async def answer(self, request: McplRequest) -> dict[str, Any]:
        event = read_event(request, self.limits.max_event_id_bytes, self._coalescing)
        self._forget_old()
        while (seen := self._seen.get(event.event_id)) is not None:
            try:
                return await asyncio.shield(seen[1])
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not seen[1].cancelled() or (task is not None and task.cancelling()):
                    raise
                # The first one was given up undecided; this one decides instead.
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        # RFC-006 §3.1: a coalesced occurrence's retry is recognised for at least an hour.
        window = self._window_s
        if event.coalesce is not None:
            window = max(window, COALESCED_RETRY_WINDOW_S)
        self._remember(event.event_id, future, window)
        try:
            result = _wire(await self._decide(event))
        except McplError as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a duplicate may never come
            raise
        except BaseException:
            # Cancelled or a bug: nothing was decided, so a retry asks again.
            if (seen := self._seen.get(event.event_id)) is not None and seen[1] is future:
                self._forget(event.event_id)
            future.cancel()
            raise
        future.set_result(result)
        return result

    def _remember(
        self, event_id: str, future: asyncio.Future[dict[str, Any]], window_s: float
    ) -> None:
        if event_id in self._seen:
            self._forget(event_id)
        self._seen[event_id] = (time.monotonic() + window_s, future)
        self._seen_bytes += _utf8_size(event_id)
        self._trim()

    def _forget(self, event_id: str) -> None:
        del self._seen[event_id]
        self._seen_bytes -= _utf8_size(event_id)

    def _forget_old(self) -> None:
        """Forget what the window has passed, then what the bounds do not hold (room is
        kept for the event about to be remembered)."""
        now = time.monotonic()
        while self._seen and next(iter(self._seen.values()))[0] < now:
            self._forget(next(iter(self._seen)))
        while self._seen and len(self._seen) >= self.limits.push_dedup_max_events:
            self._forget(next(iter(self._seen)))

    def _trim(self) -> None:
        """The oldest go first until the remembered ids fit `push_dedup_max_bytes` (the
        newest is kept: its length is bounded by `max_event_id_bytes`)."""
        while len(self._seen) > 1 and self._seen_bytes > self.limits.push_dedup_max_bytes:
            self._forget(next(iter(self._seen)))


__all__ = [
    "COALESCED_RETRY_WINDOW_S",
    "DEDUP_MAX_EVENTS",
    "DEDUP_WINDOW_S",
    "NO_PLUGIN_REASON",
    "PushEvents",
    "coalescing_leaves",
    "read_coalesce",
    "read_event",
]
