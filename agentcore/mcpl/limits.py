"""The bounds an MCPL server is held to: settings, defaults, and the values in force.

An MCPL server is untrusted (SPEC §13.1: every capability is a cost or an attention
risk): whatever it sends, the host holds a bounded amount for it. Each bound is a key of
``[mcpl]`` (the default for every server) that ``[mcpl.servers.NAME]`` may set for one
server; a key a server leaves unset takes ``[mcpl]``'s. What is enforced where:

- ``max_requests_in_flight``, ``max_queued_bytes``: the connection's JSON-RPC peer
  (`agentcore.mcpl.bounded`);
- ``max_event_id_bytes``, ``push_dedup_max_events``, ``push_dedup_max_bytes``: the push
  events of the server (`agentcore.mcpl.push`);
- ``max_tokens``: whatever answers `inference/request` (the `mcpl-router` plugin), given
  on each request as `McplRequest.max_tokens`.

Plain pydantic models here, no `agentcore.settings` import: the settings module builds
its ``[mcpl]`` sections on them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds in force for one server. The defaults are ``[mcpl]``'s."""

    max_requests_in_flight: int = 64
    """Requests from the server being served or answered at once; the next is refused."""
    max_queued_bytes: int = 8 * MIB
    """Bytes written toward the server that it has not read; past it the host closes."""
    max_event_id_bytes: int = 1024
    """The longest `push/event` `eventId` (UTF-8 bytes) taken."""
    push_dedup_max_events: int = 10_000
    """`eventId`s remembered for deduplication (§9.4)."""
    push_dedup_max_bytes: int = 4 * MIB
    """What those remembered `eventId`s may take, counted by their UTF-8 bytes."""
    max_tokens: int = 128_000
    """The most output tokens one `inference/request` may ask for (`preferences.maxTokens`);
    the routed model's own maximum, where known, is a second ceiling."""


DEFAULT_LIMITS = Limits()
LIMIT_KEYS: tuple[str, ...] = tuple(asdict(DEFAULT_LIMITS))


class McplLimitSettings(BaseModel):
    """``[mcpl]``: the bounds every server is held to unless its own section sets one."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # see `Section`

    max_requests_in_flight: int = Field(default=DEFAULT_LIMITS.max_requests_in_flight, ge=1)
    max_queued_bytes: int = Field(default=DEFAULT_LIMITS.max_queued_bytes, ge=1)
    max_event_id_bytes: int = Field(default=DEFAULT_LIMITS.max_event_id_bytes, ge=1)
    push_dedup_max_events: int = Field(default=DEFAULT_LIMITS.push_dedup_max_events, ge=1)
    push_dedup_max_bytes: int = Field(default=DEFAULT_LIMITS.push_dedup_max_bytes, ge=1)
    max_tokens: int = Field(default=DEFAULT_LIMITS.max_tokens, ge=1)

    def limits(self, server: ServerLimitSettings | None = None) -> Limits:
        """The bounds of one server: its own keys, else these."""
        values: dict[str, Any] = {key: getattr(self, key) for key in LIMIT_KEYS}
        if server is not None:
            for key in LIMIT_KEYS:
                if (value := getattr(server, key)) is not None:
                    values[key] = value
        return Limits(**values)


class ServerLimitSettings(BaseModel):
    """The same keys in ``[mcpl.servers.NAME]``; unset (None): ``[mcpl]``'s."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # see `Section`

    max_requests_in_flight: int | None = Field(default=None, ge=1)
    max_queued_bytes: int | None = Field(default=None, ge=1)
    max_event_id_bytes: int | None = Field(default=None, ge=1)
    push_dedup_max_events: int | None = Field(default=None, ge=1)
    push_dedup_max_bytes: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)


__all__ = [
    "DEFAULT_LIMITS",
    "LIMIT_KEYS",
    "Limits",
    "McplLimitSettings",
    "ServerLimitSettings",
]
