"""`push/event` (MCPL SPEC §9): checked, deduplicated by `eventId`, decided by a plugin.

The connection has already checked the grant (`pushEvents`, -32002) and the feature set
(declared -32003, enabled -32001, its `uses` covering `pushEvents`). Here: the params are
checked against §9.2 (-32602 naming the field), a duplicate `eventId` within the window
gets the first answer again without asking the plugins twice (§9.4; a duplicate that
arrives while the first is still being decided waits for it), and the answer is always
one (§6.6: never silence): the first plugin's `PushAnswer`, or `accepted: false` with a
reason when no plugin answers.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from agentcore.mcpl.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    McplError,
    McplRequest,
    PushAnswer,
    PushEvent,
)

DEDUP_WINDOW_S = 600.0
"""How long an `eventId`'s answer is remembered (§9.4: servers retry with stable ids)."""
DEDUP_MAX_EVENTS = 10_000
"""At most this many answers are remembered per server; the oldest go first."""
NO_PLUGIN_REASON = "no plugin on this host acts on push events"

PushDecider = Callable[[PushEvent], Awaitable[Any]]


def _invalid(field: str, expected: str) -> McplError:
    return McplError(
        INVALID_PARAMS, f"Invalid params: push/event {field} must be {expected}", {"param": field}
    )


def read_event(request: McplRequest) -> PushEvent:
    """The §9.2 fields of a `push/event`; McplError -32602 naming the first one that is wrong."""
    params = request.params
    event_id = params.get("eventId")
    if not isinstance(event_id, str) or not event_id:
        raise _invalid("eventId", "a non-empty string")
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
    return PushEvent(
        server=request.server,
        feature_set=params["featureSet"],  # checked by the connection
        event_id=event_id,
        timestamp=timestamp,
        payload=payload,
        origin=origin,
        tags=tuple(tags),
    )


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
        max_events: int = DEDUP_MAX_EVENTS,
    ) -> None:
        self._decide = decide
        self._window_s = window_s
        self._max_events = max_events
        # eventId -> (when first seen, its answer: a result, or the McplError it got)
        self._seen: OrderedDict[str, tuple[float, asyncio.Future[dict[str, Any]]]] = OrderedDict()

    async def answer(self, request: McplRequest) -> dict[str, Any]:
        event = read_event(request)
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
        self._seen[event.event_id] = (time.monotonic(), future)
        try:
            result = _wire(await self._decide(event))
        except McplError as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a duplicate may never come
            raise
        except BaseException:
            # Cancelled or a bug: nothing was decided, so a retry asks again.
            del self._seen[event.event_id]
            future.cancel()
            raise
        future.set_result(result)
        return result

    def _forget_old(self) -> None:
        horizon = time.monotonic() - self._window_s
        while self._seen:
            first_seen, _ = next(iter(self._seen.values()))
            if first_seen >= horizon and len(self._seen) < self._max_events:
                return
            self._seen.popitem(last=False)


__all__ = ["DEDUP_MAX_EVENTS", "DEDUP_WINDOW_S", "NO_PLUGIN_REASON", "PushEvents", "read_event"]
