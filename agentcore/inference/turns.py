"""The host's own turns: what marks one, the context added before it, how it ended.

An inference whose `Request.turn` is set is one of the host's own turns (not an
MCPL server's `inference/request`): the kernel asks `on_host_turn_context` for
context to add before it runs, and tells `on_host_turn_start` / `on_host_turn_end`
that it started and how it ended (the `mcpl-context` plugin turns these into MCPL
`context/beforeInference` and `inference/lifecycle`, SPEC §10).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from agentcore.inference.errors import InferenceError
from agentcore.inference.events import Aborted, Complete, Failed
from agentcore.inference.models import HostTurn, Message, Request, TextBlock, Usage

Position: TypeAlias = Literal["system", "beforeUser", "afterUser"]
POSITIONS: tuple[Position, ...] = ("system", "beforeUser", "afterUser")
Phase: TypeAlias = Literal["completed", "failed", "aborted"]

INJECTION_SEPARATOR = "\n\n"
"""Between injected texts, and between them and the user's own text: a wire that joins a
message's text blocks into one string (OpenAI chat) still keeps them apart."""


@dataclass(frozen=True, slots=True)
class Injection:
    """Text to add to a host turn at one position, from one source (an MCPL server)."""

    position: Position
    text: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class TurnEnding:
    """How a started host turn ended: exactly one per `on_host_turn_start`."""

    phase: Phase
    usage: Usage | None = None
    """Only for ``completed``."""
    error: InferenceError | None = None
    """Why it failed or was aborted."""
    model: str | None = None
    """The model that served a completed turn, as the provider reported it."""


def ending_of(terminal: Complete | Failed | Aborted) -> TurnEnding:
    """The ending a terminal event means for a turn.

    A stream that failed, whether before or after visible text, is ``failed`` — never
    ``completed`` (the reference host's AF #358) — and so is a response the provider
    itself ended with an error (a bare ``finish_reason: "error"``) or with a stop token
    nothing maps. A cancellation or shutdown is ``aborted``; a timeout is a failure.
    """
    if isinstance(terminal, Complete):
        stop = terminal.response.stop
        if stop.raw == "error" or not stop.mapped:
            return TurnEnding("failed", error=None, model=terminal.response.model_served)
        return TurnEnding(
            "completed", usage=terminal.response.usage, model=terminal.response.model_served
        )
    return ending_of_error(terminal.error)


def ending_of_error(error: InferenceError) -> TurnEnding:
    return TurnEnding("aborted" if error.kind == "cancelled" else "failed", error=error)


def with_injections(request: Request, injections: list[Injection]) -> Request:
    """The request with context added, grouped by position in the order given (SPEC §10.8):
    ``system`` after the host's system prompt, ``beforeUser`` / ``afterUser`` around the
    text of the last user message (a new user message at the end when there is none)."""
    grouped: dict[Position, list[str]] = {p: [] for p in POSITIONS}
    for injection in injections:
        if injection.text:
            grouped[injection.position].append(injection.text)
    if not any(grouped.values()):
        return request
    system = request.system
    if grouped["system"]:
        system = INJECTION_SEPARATOR.join([*([system] if system else []), *grouped["system"]])
    messages = list(request.messages)
    before, after = grouped["beforeUser"], grouped["afterUser"]
    if before or after:
        at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        content = list(messages[at].content) if at is not None else []
        if before:
            content.insert(0, TextBlock(INJECTION_SEPARATOR.join(before) + INJECTION_SEPARATOR))
        if after:
            content.append(TextBlock(INJECTION_SEPARATOR + INJECTION_SEPARATOR.join(after)))
        if at is None:
            messages.append(Message("user", content))
        else:
            messages[at] = Message("user", content)
    return replace(request, system=system, messages=messages, extras=dict(request.extras))


__all__ = [
    "INJECTION_SEPARATOR",
    "POSITIONS",
    "HostTurn",
    "Injection",
    "Phase",
    "Position",
    "TurnEnding",
    "ending_of",
    "ending_of_error",
    "with_injections",
]
