"""XML tool mode's one parser: what the model wrote, read as it streams.

In XML tool mode (`[providers.NAME] tool_mode = "xml"`) the model writes everything as
text: prose, thinking as ``<thinking>…</thinking>``, and tool calls as::

    <function_calls>
    <invoke name="search">
    <parameter name="query">tides</parameter>
    </invoke>
    </function_calls>

(each tag may carry an ``antml:`` prefix). `XmlParser` reads that text in whatever
pieces it arrives and builds the reply's blocks through the shared `Blocks` assembler:
prose is visible text, thinking is a thinking block, a block's invokes become tool-use
blocks when the block closes, and the markup itself is in no block at all. Streamed and
whole calls feed it the same way, so both give the same content, and the visible tokens
it makes join up to exactly the text content.

A tag may be split across any two pieces: the parser holds back only a piece's tail
that could still become a tag it is looking for, and nothing else. Outside a block,
``<function_results>`` or ``<invoke>`` is prose like any other text.

The provider does not echo a stop sequence, so a reply that stopped at
``</function_calls>`` ends inside its block: `finish` closes the block there.
A block whose close the model wrote itself (the
close with the ``antml:`` prefix, which is no stop sequence) ends the reply at once
when it held a readable call: nothing the model writes
after a call it cannot get results for belongs to the reply (`ended`).

No I/O here: the Anthropic wire (`agentcore.providers.anthropic_xml`) feeds it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentcore.inference import StopInfo, StopReason, StreamEvent, Token, ToolUseBlock
from agentcore.providers.blocks import Block, Blocks

__all__ = [
    "TOOL_CALLS_STOP",
    "XmlParser",
    "XmlReport",
    "parameter_value",
    "read_invokes",
    "xml_stop",
]

TOOL_CALLS_STOP = "</function_calls>"
"""The stop sequence XML tool mode always sends: a call is answered by its caller, never
by the model writing on."""

_PROSE, _THINKING, _CALLS = 0, 1, 2


PREFIX = "antml" + ":"
"""The namespace prefix a tag may carry (written in two pieces so that no tool that
reads this file takes it for markup)."""


def _tags(name: str) -> tuple[str, str]:
    return f"<{name}>", f"<{PREFIX}{name}>"


def _closers(name: str) -> tuple[str, str]:
    return f"</{name}>", f"</{PREFIX}{name}>"


_OPENERS: tuple[tuple[str, int], ...] = (
    *((tag, _THINKING) for tag in _tags("thinking")),
    *((tag, _CALLS) for tag in _tags("function_calls")),
)
_OPENER_TAGS = tuple(tag for tag, _ in _OPENERS)
_CALLS_OPENERS = _tags("function_calls")
_THINKING_OPENERS = _tags("thinking")
_CLOSERS: dict[int, tuple[str, str]] = {
    _THINKING: _closers("thinking"),
    _CALLS: _closers("function_calls"),
}
_LONGEST_OPENER = max(len(tag) for tag, _ in _OPENERS)
_LONGEST_CLOSER = max(len(tag) for tags in _CLOSERS.values() for tag in tags)

_INVOKE = re.compile(r"<(?:antml:)?invoke\b([^>]*)>(.*?)</(?:antml:)?invoke>", re.S)
_PARAMETER = re.compile(r"<(?:antml:)?parameter\b([^>]*)>(.*?)</(?:antml:)?parameter>", re.S)
_NAME = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)')""")


@dataclass(slots=True)
class XmlReport:
    """What the parser read, once the output ended."""

    calls: list[ToolUseBlock] = field(default_factory=list)
    """The readable calls of the block that ended the reply (none: no call was read)."""
    unclosed_tool_block: bool = False
    """A ``<function_calls>`` block was still open when the output ended."""
    triggered_sequence: str | None = None
    """The stop sequence that ended the output, or the block's close that ended the reply."""
    markup: bool = False
    """The output held tool-call markup: a block, open or closed, or a stop at
    ``</function_calls>``."""


def _starts_a_tag(tail: str, tags: tuple[str, ...]) -> bool:
    return any(tag.startswith(tail) for tag in tags)


def parameter_value(raw: str) -> Any:
    """A parameter's text as the model wrote it; an object or array written as JSON is
    read as JSON (the tool descriptions ask for lists and objects in JSON)."""
    stripped = raw.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return raw


def _name(attributes: str) -> str:
    found = _NAME.search(attributes)
    return (found.group(1) or found.group(2) or "") if found else ""


def read_invokes(block: str) -> list[tuple[str, dict[str, Any]]]:
    """The readable calls in a block's text: each ``<invoke name="…">`` with a name, and its
    named parameters. An invoke with no name (or never closed) is not a call."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for invoke in _INVOKE.finditer(block):
        name = _name(invoke.group(1))
        if not name:
            continue
        arguments: dict[str, Any] = {}
        for parameter in _PARAMETER.finditer(invoke.group(2)):
            key = _name(parameter.group(1))
            if key:
                arguments[key] = parameter_value(parameter.group(2))
        calls.append((name, arguments))
    return calls


class XmlParser:
    """One reply's text in XML tool mode, fed piece by piece (`feed`), then `finish`ed."""

    __slots__ = (
        "blocks",
        "calls",
        "ended",
        "held",
        "in_block",
        "markup",
        "seen_text",
        "state",
        "text_block",
        "thinking_block",
    )

    def __init__(self, blocks: Blocks) -> None:
        self.blocks = blocks
        self.state = _PROSE
        self.held = ""
        """A tail that may still become a tag, kept until the next piece says."""
        self.text_block: Block | None = None
        self.thinking_block: Block | None = None
        self.in_block: list[str] = []
        self.seen_text = False
        self.markup = False
        self.calls: list[ToolUseBlock] = []
        self.ended: str | None = None
        """The close of a block that held a call: the reply ended there."""

    # -- feeding -------------------------------------------------------------------------

    def feed(self, text: str, out: list[StreamEvent]) -> None:
        """One more piece of the model's text; appends the stream events it makes."""
        if self.ended is not None:
            return
        if self.held:
            text, self.held = self.held + text, ""
        elif self.state == _PROSE and "<" not in text:
            # The hot path: prose with no tag in sight, inside a text block already open.
            block = self.text_block
            if block is None:
                self._visible(text, out)
            else:
                block.parts.append(text)
                out.append(Token(text, "text", block.index, True))
            return
        position = 0
        while position < len(text) and self.ended is None:
            if self.state == _PROSE:
                position = self._prose(text, position, out)
            else:
                position = self._inside(text, position, out)

    def _prose(self, text: str, position: int, out: list[StreamEvent]) -> int:
        """Prose from `position` up to the next opening tag; returns where to go on."""
        search = position
        while True:
            at = text.find("<", search)
            if at < 0:
                self._visible(text[position:], out)
                return len(text)
            for tag, state in _OPENERS:
                if text.startswith(tag, at):
                    self._visible(text[position:at], out)
                    self._enter(state, out)
                    return at + len(tag)
            if len(text) - at < _LONGEST_OPENER and _starts_a_tag(text[at:], _OPENER_TAGS):
                self._visible(text[position:at], out)
                self.held = text[at:]
                return len(text)
            search = at + 1

    def _inside(self, text: str, position: int, out: list[StreamEvent]) -> int:
        """Thinking or a tool-call block from `position` up to its close."""
        closers = _CLOSERS[self.state]
        search = position
        while True:
            at = text.find("<", search)
            if at < 0:
                self._invisible(text[position:], out)
                return len(text)
            for tag in closers:
                if text.startswith(tag, at):
                    self._invisible(text[position:at], out)
                    self._leave(tag, out)
                    return at + len(tag)
            if len(text) - at < _LONGEST_CLOSER and _starts_a_tag(text[at:], closers):
                self._invisible(text[position:at], out)
                self.held = text[at:]
                return len(text)
            search = at + 1

    # -- what the pieces make ------------------------------------------------------------------

    def _visible(self, text: str, out: list[StreamEvent]) -> None:
        if not self.seen_text:
            # What follows the open turn's "Assistant:" starts with a space or a newline,
            # and so may what follows a thinking block: not part of the answer.
            text = text.lstrip()
            if not text:
                return
            self.seen_text = True
        block = self.text_block
        if block is None:
            block = self.text_block = self.blocks.start(out, self.blocks.next_index, "text")
        block.parts.append(text)
        out.append(Token(text, "text", block.index, True))

    def _invisible(self, text: str, out: list[StreamEvent]) -> None:
        if not text:
            return
        if self.state == _CALLS:
            self.in_block.append(text)
        elif self.thinking_block is not None:
            self.blocks.add(out, self.thinking_block, text)

    def _enter(self, state: int, out: list[StreamEvent]) -> None:
        self.blocks.stop(out, self.text_block)
        self.text_block = None
        self.state = state
        if state == _THINKING:
            self.thinking_block = self.blocks.start(out, self.blocks.next_index, "thinking")
        else:
            self.markup = True
            self.in_block = []

    def _leave(self, tag: str, out: list[StreamEvent]) -> None:
        state, self.state = self.state, _PROSE
        if state == _THINKING:
            self.blocks.stop(out, self.thinking_block)
            self.thinking_block = None
        elif self._close_block(out):
            self.ended = tag

    def _close_block(self, out: list[StreamEvent]) -> bool:
        """The block's calls, as tool-use blocks; True when it held any."""
        for name, arguments in read_invokes("".join(self.in_block)):
            call_id = f"toolu_xml_{len(self.calls) + 1}"
            block = self.blocks.start(out, self.blocks.next_index, "tool_use", call_id, name)
            self.blocks.add(out, block, json.dumps(arguments, ensure_ascii=False))
            self.blocks.stop(out, block)
            self.calls.append(ToolUseBlock(call_id, name, arguments))
        self.in_block = []
        return bool(self.calls)

    # -- the end -----------------------------------------------------------------------------

    def finish(
        self, out: list[StreamEvent], reason: StopReason | None, sequence: str | None
    ) -> XmlReport:
        """The output ended (`reason`, at stop sequence `sequence`): flush what was held
        back, close a block the stop closed, and say what was read."""
        report = XmlReport(triggered_sequence=self.ended or sequence)
        if self.ended is None:
            held, self.held = self.held, ""
            if self.state == _PROSE:
                if held and reason == "max_tokens" and len(held) > 1:
                    # An opening tag cut off by the token limit (what is held back always
                    # starts one): the model was opening a block, not writing prose. A tool-
                    # call block is then still open; a thinking block holds nothing yet.
                    if _starts_a_tag(held, _CALLS_OPENERS):
                        self.markup = report.unclosed_tool_block = True
                elif held:
                    self._visible(held, out)
            elif self.state == _THINKING:
                self._invisible(held, out)
            else:
                self._invisible(held, out)
                if sequence == TOOL_CALLS_STOP:
                    self.state = _PROSE
                    self._close_block(out)
                else:
                    report.unclosed_tool_block = True
        report.calls = list(self.calls)
        report.markup = self.markup or sequence == TOOL_CALLS_STOP
        return report


def xml_stop(provider: StopInfo, report: XmlReport) -> StopInfo:
    """The reply's stop in XML tool mode: a read call makes it ``tool_use``, as a native call
    does, so a host's tool loop reads both modes alike; the rest of the report rides along."""
    if report.calls:
        return StopInfo("tool_use", provider.raw, report.triggered_sequence, tool_markup=True)
    return StopInfo(
        provider.reason,
        provider.raw,
        report.triggered_sequence,
        unclosed_tool_block=report.unclosed_tool_block,
        tool_markup=report.markup,
    )
