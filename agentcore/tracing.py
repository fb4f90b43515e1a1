"""What a trace is, and the payloads of the traces one plugin reads of another.

A trace is a JSON object with `type`, `timestamp` (milliseconds since the epoch) and
camelCase fields (docs/traces.md). `TraceEvent` is the kernel's, not a sink's: every
trace goes through `on_trace` as one. The TypedDicts below write down the fields of the
traces that cross distributions (the rate limit's slots and the provider hold, read by
the console and the OpenTelemetry export; the waits, written by `waiting-trace`), so
the emitter and its readers check the same contract; `payload` reads one.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, cast

from agentcore.redaction import redact_log

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(slots=True)
class TraceEvent:
    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    subject: object = field(default=None, repr=False, compare=False)
    """What the trace is about, for in-process observers that opt in to content: the
    `Request` on ``inference:start``, the `Response` on ``inference:complete``. Never
    serialized (not in `to_dict`), never redacted: whoever reads it redacts what it sends."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "timestamp": self.timestamp, **self.fields}

    def to_json(self) -> str:
        """One line of JSON, with any known secret redacted; always encodable as UTF-8.

        Text stays readable (not \\u-escaped), except that a lone surrogate, which a peer
        can send as a valid JSON escape (an MCPL request id ``"\\ud800"``), has no UTF-8
        form: a trace holding one is written all-ASCII, escapes and all, so that it is not
        lost to the sink's write."""
        text = json.dumps(self.to_dict(), default=str, ensure_ascii=False)
        if not text.isascii() and _LONE_SURROGATE.search(text):
            text = json.dumps(self.to_dict(), default=str)
        return redact_log(text)


# -- the traces plugins read of each other (docs/traces.md) ---------------------------------

SLOTS_TRACE = "rate_limit:slots"
HOLD_TRACE = "provider:hold"
RELEASE_TRACE = "provider:release"
WAITING_TRACE = "inference:waiting"


class SlotsPayload(TypedDict):
    """``rate_limit:slots``: the rate limit took or gave back a ``max_in_flight`` slot."""

    change: Literal["taken", "released"]
    provider: str
    inUse: int
    """The slots of that provider this replica holds after the change."""
    maxInFlight: int | None
    """The fleet-wide limit."""
    scope: Literal["replica"]
    inferenceId: str
    attempt: int


class HoldPayload(TypedDict):
    """``provider:hold``: a hold starts or is lengthened."""

    provider: str
    model: str
    key: Literal["provider_model", "provider"]
    untilMs: int
    durationMs: int
    reason: str
    stated: bool
    error: str
    inferenceId: str


class ReleasePayload(TypedDict):
    """``provider:release``: the probe succeeded, the hold ends."""

    provider: str
    model: str
    key: Literal["provider_model", "provider"]
    heldMs: int
    inferenceId: str


class WaitingPayload(TypedDict):
    """``inference:waiting``: a call waits (at its start, every interval, at its end)."""

    reason: str
    provider: str
    model: str
    attempt: int
    inferenceId: str
    waitId: str
    remainingMs: int | None
    waitedMs: int
    ended: bool


PayloadT = TypeVar("PayloadT", SlotsPayload, HoldPayload, ReleasePayload, WaitingPayload)


def payload(event: TraceEvent, shape: type[PayloadT]) -> PayloadT:
    """`event`'s fields read as the payload its type promises (not checked at run time:
    the emitter built them as one)."""
    return cast(PayloadT, event.fields)
