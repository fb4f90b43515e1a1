"""The one block assembler every wire shares: a reply's blocks as they stream in.

A wire's translator starts blocks, adds their pieces and stops them through `Blocks`;
each block is built into its `OutputBlock` once, at its stop (a tool call's input
parsed from its accumulated JSON then), and the stops and the reply's content come
out in index order whatever order the pieces arrived in.
"""

from __future__ import annotations

import json
from typing import Any

from agentcore.inference import (
    BlockStart,
    BlockStop,
    BlockType,
    OutputBlock,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolUseBlock,
)

__all__ = ["Block", "Blocks", "json_object"]


class Block:
    """One output block being streamed: its pieces so far, built once at its stop."""

    __slots__ = (
        "id",
        "ignored",
        "index",
        "name",
        "parts",
        "redacted",
        "signature",
        "stopped",
        "type",
    )

    def __init__(self, index: int, type: BlockType, id: str = "", name: str = "") -> None:
        self.index = index
        self.type: BlockType = type
        self.parts: list[str] = []
        self.id = id
        self.name = name
        self.signature: str | None = None
        self.redacted: str | None = None
        self.stopped = False
        self.ignored = False

    def build(self) -> OutputBlock:
        text = "".join(self.parts)
        if self.type == "text":
            return TextBlock(text)
        if self.type == "thinking":
            return ThinkingBlock(text, self.signature, redacted=self.redacted)
        return ToolUseBlock(self.id, self.name, json_object(text), signature=self.signature)


class Blocks:
    """The reply's blocks by index, in the order they started: one assembler for every wire.

    A wire whose format numbers blocks (Anthropic) passes its indexes; one that does
    not (chat completions) takes `next_index`. Block types the normalized model has no
    place for are `ignore`d: their deltas are dropped and they are not in the reply.
    """

    __slots__ = ("by_index",)

    def __init__(self) -> None:
        self.by_index: dict[int, Block] = {}

    @property
    def next_index(self) -> int:
        return len(self.by_index)

    def start(
        self, out: list[StreamEvent], index: int, type: BlockType, id: str = "", name: str = ""
    ) -> Block:
        block = self.by_index[index] = Block(index, type, id, name)
        if type == "tool_use":
            out.append(BlockStart(index, type, name, id))
        else:
            out.append(BlockStart(index, type))
        return block

    def ignore(self, index: int) -> None:
        block = self.by_index[index] = Block(index, "text")
        block.ignored = block.stopped = True

    def add(self, out: list[StreamEvent], block: Block, text: str) -> None:
        """One more piece of `block`'s text, and its token (visible only for text)."""
        block.parts.append(text)
        out.append(Token(text, block.type, block.index, block.type == "text"))

    def stop(self, out: list[StreamEvent], block: Block | None) -> None:
        if block is not None and not block.stopped:
            block.stopped = True
            out.append(BlockStop(block.index, block.build()))

    def close(self, out: list[StreamEvent]) -> None:
        """Stop every block still open, so starts and stops pair up before the terminal."""
        for index in sorted(self.by_index):
            self.stop(out, self.by_index[index])

    def content(self) -> list[OutputBlock]:
        return [
            self.by_index[i].build() for i in sorted(self.by_index) if not self.by_index[i].ignored
        ]


def json_object(raw: str) -> dict[str, Any]:
    """Accumulated tool input (arguments) JSON; ``{}`` when there is none or it was cut off
    mid-way, ``{"value": ...}`` when it is JSON but not an object."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}
