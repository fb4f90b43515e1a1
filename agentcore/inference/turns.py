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
from agentcore.inference.models import (
    ContentBlock,
    HostTurn,
    MediaBlock,
    Message,
    Request,
    TextBlock,
    Usage,
)
from agentcore.inference.outcome import completion_problem

Position: TypeAlias = Literal["system", "beforeUser", "afterUser"]
POSITIONS: tuple[Position, ...] = ("system", "beforeUser", "afterUser")
Phase: TypeAlias = Literal["completed", "failed", "aborted"]
NOT_A_COMPLETION = "not_a_completion"
"""`InferenceError.code` of a failed turn whose reply was whole but no plain completion."""

INJECTION_SEPARATOR = "\n\n"
"""Between injected texts, and between them and the user's own text: a wire that joins a
message's text blocks into one string (OpenAI chat) still keeps them apart."""


InjectedBlock: TypeAlias = TextBlock | MediaBlock


@dataclass(frozen=True, slots=True)
class Injection:
    """Context to add to a host turn at one position, from one source (an MCPL server):
    text, or blocks of text and media. Media goes around the user's message only (a
    system prompt is text): at ``system`` it is left out."""

    position: Position
    content: str | tuple[InjectedBlock, ...]
    source: str = ""

    @property
    def blocks(self) -> tuple[InjectedBlock, ...]:
        if isinstance(self.content, str):
            return (TextBlock(self.content),) if self.content else ()
        return tuple(b for b in self.content if not isinstance(b, TextBlock) or b.text)

    @property
    def text(self) -> str:
        """The text blocks, joined as the injection's text runs are (`INJECTION_SEPARATOR`)."""
        return INJECTION_SEPARATOR.join(b.text for b in self.blocks if isinstance(b, TextBlock))


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


def ending_of(
    terminal: Complete | Failed | Aborted, *, tools: bool = False, offers: str = "the host"
) -> TurnEnding:
    """The ending a terminal event means for a turn: ``completed`` exactly when the
    inference gave a plain completion by `completion_problem`, the rule that decides
    `agentcore infer`'s exit code too (it calls this), so the two never disagree.

    Anything else is ``failed`` with the reason as its error: a refusal, a paused turn, a
    tool call the request offered no tools for (`tools`: it offered some), a stream that
    failed before or after visible text (never ``completed``, the reference host's AF
    #358), a response the provider ended with an error or with a stop token nothing maps,
    a timeout. A cancellation or shutdown is ``aborted``. `offers` names the caller in
    the reason ("…, and agentcore infer offers none").
    """
    if isinstance(terminal, Complete):
        response = terminal.response
        problem = completion_problem(response, offers, tools=tools)
        if problem is not None:
            error = InferenceError("unknown", problem, retryable=False, code=NOT_A_COMPLETION)
            return TurnEnding("failed", error=error, model=response.model_served)
        return TurnEnding("completed", usage=response.usage, model=response.model_served)
    return ending_of_error(terminal.error)


def ending_of_error(error: InferenceError) -> TurnEnding:
    return TurnEnding("aborted" if error.kind == "cancelled" else "failed", error=error)


def with_injections(request: Request, injections: list[Injection]) -> Request:
    """The request with context added, grouped by position in the order given (SPEC §10.8):
    ``system`` text after the host's system prompt, ``beforeUser`` / ``afterUser`` blocks
    around the content of the last user message (a new user message at the end when there
    is none). Adjacent texts are joined with `INJECTION_SEPARATOR`, and kept apart from the
    user's own text by it, so a wire that joins a message's text stays readable."""
    grouped: dict[Position, list[InjectedBlock]] = {p: [] for p in POSITIONS}
    for injection in injections:
        grouped[injection.position].extend(injection.blocks)
    system_texts = [b.text for b in grouped["system"] if isinstance(b, TextBlock)]
    before, after = _runs(grouped["beforeUser"]), _runs(grouped["afterUser"])
    if not (system_texts or before or after):
        return request
    system = request.system
    if system_texts:
        system = INJECTION_SEPARATOR.join([*([system] if system else []), *system_texts])
    messages = list(request.messages)
    if before or after:
        if before and isinstance(before[-1], TextBlock):
            before[-1] = TextBlock(before[-1].text + INJECTION_SEPARATOR)
        if after and isinstance(after[0], TextBlock):
            after[0] = TextBlock(INJECTION_SEPARATOR + after[0].text)
        at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        content: list[ContentBlock] = [
            *before,
            *(messages[at].content if at is not None else ()),
            *after,
        ]
        if at is None:
            messages.append(Message("user", content))
        else:
            messages[at] = Message("user", content)
    return replace(request, system=system, messages=messages, extras=dict(request.extras))


def _runs(blocks: list[InjectedBlock]) -> list[ContentBlock]:
    """`blocks` with each run of adjacent texts joined into one text block."""
    out: list[ContentBlock] = []
    for block in blocks:
        last = out[-1] if out else None
        if isinstance(block, TextBlock) and isinstance(last, TextBlock):
            out[-1] = TextBlock(last.text + INJECTION_SEPARATOR + block.text)
        else:
            out.append(block)
    return out


__all__ = [
    "INJECTION_SEPARATOR",
    "NOT_A_COMPLETION",
    "POSITIONS",
    "HostTurn",
    "InjectedBlock",
    "Injection",
    "Phase",
    "Position",
    "TurnEnding",
    "ending_of",
    "ending_of_error",
    "with_injections",
]
