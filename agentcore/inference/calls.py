"""The kernel's view of an inference in flight, as hooks see it.

`Inference` is one `kernel.complete()` or `kernel.stream()` call; `Attempt`
is one provider call inside it; `Wait` is one announced pause (a hold or a
backoff). Decision hooks answer with `Retry` or `GiveUp`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from agentcore.inference.errors import InferenceError
from agentcore.inference.models import Request, Usage


def split_model(reference: str) -> tuple[str, str]:
    """A model reference, ``"NAME:MODEL"``, as (the `[providers.NAME]` key, the model)."""
    name, sep, model = reference.partition(":")
    if not sep or not name or not model:
        raise InferenceError(
            "invalid_request",
            f"model reference {reference!r} is not of the form NAME:MODEL",
            retryable=False,
        )
    return name, model


@dataclass(slots=True)
class Inference:
    id: str
    request: Request
    provider: str
    """The `[providers.NAME]` key the model reference named."""
    model: str
    """The model part of the reference, as sent to the provider."""
    streamed: bool
    errors: list[InferenceError] = field(default_factory=list)
    """Errors of earlier attempts, oldest first: what a retry policy counts."""

    @property
    def metadata(self) -> dict[str, Any]:
        return self.request.metadata


@dataclass(slots=True)
class Attempt:
    inference: Inference
    number: int
    """1 for the first call, 2 for the first retry, and so on."""
    usage: Usage | None = None
    """What the provider last reported this attempt used (a stream's `UsageUpdate`), kept
    as the events pass: an attempt that failed or was cancelled mid-stream was billed
    that much. None until a report came."""
    replied: bool = False
    """True once the provider's reply began (its first token came): the prompt was read
    and is billed, whatever ends the attempt, though some wires report usage only at
    their end (chat completions, Responses, Bedrock)."""

    @property
    def provider(self) -> str:
        return self.inference.provider

    @property
    def model(self) -> str:
        return self.inference.model


WaitReason: TypeAlias = Literal["hold", "backoff", "limit"]
"""``hold``: a provider hold; ``backoff``: a retry's delay; ``limit``: a rate limit's slot."""


@dataclass(slots=True)
class Wait:
    """A pause someone announced, so that observers can show it: a wait is never silent."""

    id: str
    reason: WaitReason
    attempt: Attempt
    started: float
    """`time.monotonic()` when the wait began."""
    until: float | None
    """`time.monotonic()` when it is due to end, or None when nobody knows."""

    @property
    def provider(self) -> str:
        return self.attempt.provider

    @property
    def model(self) -> str:
        return self.attempt.model

    def remaining_s(self, now: float | None = None) -> float | None:
        if self.until is None:
            return None
        return max(0.0, self.until - (time.monotonic() if now is None else now))

    def waited_s(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.started


@dataclass(slots=True, frozen=True)
class Retry:
    """Try again after `delay_s` seconds."""

    delay_s: float


@dataclass(slots=True, frozen=True)
class GiveUp:
    """Stop trying; the inference fails with `error` (or the attempt's own error when None)."""

    error: InferenceError | None = None


Decision: TypeAlias = Retry | GiveUp


def trace_fields(inference: Inference) -> dict[str, Any]:
    """What every inference:start, complete and fail trace says of its inference."""
    fields = {
        "inferenceId": inference.id,
        "model": inference.request.model,
        "streamed": inference.streamed,
    }
    metadata = inference.request.metadata
    server = metadata.get("serverId")
    if server is not None:
        fields["serverId"] = server
        fields["mcplRequestId"] = metadata.get("mcplRequestId")  # the request it answers
    turn = inference.request.turn
    if turn is not None:  # one of the host's own turns: its conversation and place in it
        fields["conversationId"] = turn.conversation_id
        fields["turnIndex"] = turn.turn_index
    else:
        conversation = metadata.get("conversationId")
        if conversation is not None:
            fields["conversationId"] = conversation
    return fields
