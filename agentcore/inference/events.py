"""Stream events: what `kernel.stream()` yields, in order.

Every stream ends with exactly one terminal event: `Complete`, `Failed` or
`Aborted`. A provider stream that ends without one is turned into `Failed`
by the kernel (kind ``network``, code ``no_terminal``), never into a silent
completion. `Retrying` tells a consumer that earlier, invisible events belonged
to an attempt that failed and a fresh one follows; it never comes after a
visible token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from agentcore.inference.errors import InferenceError
from agentcore.inference.models import BlockType, OutputBlock, Response, Usage


@dataclass(slots=True)
class Token:
    """A piece of a block's text. `visible` is true only for text blocks."""

    text: str
    block: BlockType
    index: int = 0
    visible: bool = True


@dataclass(slots=True)
class BlockStart:
    index: int
    block: BlockType
    tool_name: str | None = None
    tool_id: str | None = None


@dataclass(slots=True)
class BlockStop:
    index: int
    content: OutputBlock


@dataclass(slots=True)
class UsageUpdate:
    usage: Usage


@dataclass(slots=True)
class Retrying:
    """The attempt failed before anything visible; the kernel waits `delay_s`, then tries again."""

    attempt: int
    delay_s: float
    error: InferenceError


@dataclass(slots=True)
class Complete:
    response: Response


@dataclass(slots=True)
class Failed:
    error: InferenceError


@dataclass(slots=True)
class Aborted:
    """The inference stopped before it finished: cancelled, or timed out."""

    reason: Literal["cancelled", "timeout"]
    error: InferenceError


Terminal: TypeAlias = Complete | Failed | Aborted
StreamEvent: TypeAlias = Token | BlockStart | BlockStop | UsageUpdate | Retrying | Terminal
TERMINAL_TYPES: tuple[type, ...] = (Complete, Failed, Aborted)
