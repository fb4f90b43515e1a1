"""What a provider adapter is to the kernel, and the small helpers every adapter shares.

An adapter turns a normalized `Request` into its wire format and the reply back
into normalized stream events. It never retries, holds or traces: those are
policies, and they live in plugins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from loguru import logger

from agentcore.inference import (
    InferenceError,
    Request,
    Response,
    StopInfo,
    StopReason,
    StreamEvent,
    unmapped_stop_message,
)


class Provider(Protocol):
    """One configured `[providers.NAME]`.

    A provider may also declare ``media_types``, a frozenset of the MIME types of the
    `MediaBlock`s it carries in a user message (`Wire.media_types` for the HTTP wires);
    one that declares none is taken to carry text only (`Kernel.media_types`).
    """

    name: str
    kind: str

    def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        """Stream one attempt. Ends with exactly one terminal event (`Complete` or
        `Failed`); may instead raise `InferenceError`. Closing the iterator early
        must close the underlying connection."""
        ...

    async def complete(self, request: Request, model: str) -> Response:
        """One whole (non-streamed) attempt; raises `InferenceError` on failure."""
        ...

    async def aclose(self) -> None: ...


_logged_unknown_stops: set[tuple[str, str]] = set()


def normalize_stop(
    provider: str,
    token: str | None,
    mapping: Mapping[str, StopReason],
    *,
    unknown_stop: str = "error",
    sequence: str | None = None,
) -> StopInfo:
    """Map a provider's stop token to the closed set, keeping the raw token.

    A token with no mapping is logged once per (provider, token) and handled as
    `[inference] unknown_stop` says: as an error, or as ``end_turn`` marked unmapped
    (which the completion rule still refuses).
    """
    if token is not None and token in mapping:
        return StopInfo(reason=mapping[token], raw=token, sequence=sequence)
    key = (provider, str(token))
    if key not in _logged_unknown_stops:
        _logged_unknown_stops.add(key)
        logger.warning("provider {} sent stop token {!r}, which has no mapping", provider, token)
    if unknown_stop == "error":
        raise InferenceError(
            "unknown", unmapped_stop_message(token), retryable=False, provider=provider
        )
    return StopInfo(reason="end_turn", raw=token, sequence=sequence, mapped=False)
