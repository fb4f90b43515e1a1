"""XML tool mode's request: the conversation as a prefill transcript on the Anthropic wire.

Each turn is written ``Name: text``, turns apart by a blank line, and the assistant's turn
is left open as the last assistant message, so that the model writes on from there.
The first turn goes in the one user message the API wants first; the rest, ending with
the open turn, in the assistant message::

    user:       "User: Summarize the notes."
    assistant:  "Assistant:"

Tools are described in the system prompt, and the model writes a call as markup (read by
`agentcore.providers.xml_parser`); a host's own earlier calls and their results are
written into the transcript the same way. The stop sequences are ``</function_calls>``
and ``\\n{Name}:`` for each participant but the assistant, always, tools or not: the
model never answers its own call, nor speaks for anyone else.

No I/O here: `format_request` returns the Messages API body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentcore.inference import (
    ContentBlock,
    InferenceError,
    MediaBlock,
    Message,
    Request,
    TextBlock,
    ThinkingBlock,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.providers.wire import not_carried
from agentcore.providers.xml_parser import TOOL_CALLS_STOP

__all__ = ["Participants", "format_request", "stop_sequences", "tools_prompt", "transcript"]


@dataclass(frozen=True, slots=True)
class Participants:
    """The names the transcript gives the two sides (``[providers.NAME] participants``)."""

    user: str = "User"
    assistant: str = "Assistant"

    def of(self, message: Message) -> str:
        return self.assistant if message.role == "assistant" else self.user


def stop_sequences(participants: Participants, requested: Iterable[str] = ()) -> list[str]:
    """XML tool mode's own stop sequences, then the request's, each once."""
    own = [TOOL_CALLS_STOP, f"\n{participants.user}:"]
    return list(dict.fromkeys([*own, *requested]))


def tools_prompt(tools: Iterable[Tool]) -> str:
    """The system prompt's part that describes the tools and how to call them."""
    described = "\n".join(
        "<function>"
        + json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.input_schema},
            ensure_ascii=False,
        )
        + "</function>"
        for t in tools
    )
    return (
        "You can call the tools described below. To call one or more, write a block like\n"
        "this one and stop; the results come back in a <function_results> block.\n"
        "<function_calls>\n"
        '<invoke name="TOOL_NAME">\n'
        '<parameter name="PARAMETER_NAME">value</parameter>\n'
        "</invoke>\n"
        "</function_calls>\n"
        "Write text and numbers as they are, lists and objects as JSON.\n\n"
        f"The tools, each described in JSON Schema:\n<functions>\n{described}\n</functions>"
    )


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _calls(calls: list[ToolUseBlock]) -> str:
    invokes = "".join(
        f'<invoke name="{call.name}">\n'
        + "".join(
            f'<parameter name="{key}">{_value(value)}</parameter>\n'
            for key, value in call.input.items()
        )
        + "</invoke>\n"
        for call in calls
    )
    return f"<function_calls>\n{invokes}{TOOL_CALLS_STOP}"


def _results(results: list[ToolResultBlock], names: dict[str, str]) -> str:
    parts = []
    for result in results:
        name = names.get(result.tool_use_id, "")
        tag = "error" if result.is_error else "output"
        parts.append(f"<result>\n<name>{name}</name>\n<{tag}>{result.content}</{tag}>\n</result>\n")
    return "<function_results>\n" + "".join(parts) + "</function_results>"


def _text(content: list[ContentBlock], names: dict[str, str]) -> str:
    """One message's blocks as transcript text; consecutive calls share one block."""
    pieces: list[str] = []
    calls: list[ToolUseBlock] = []
    results: list[ToolResultBlock] = []

    def flush() -> None:
        if calls:
            pieces.append(_calls(calls))
            calls.clear()
        if results:
            pieces.append(_results(results, names))
            results.clear()

    for block in content:
        if isinstance(block, ToolUseBlock):
            if results:
                flush()
            names[block.id] = block.name
            calls.append(block)
            continue
        if isinstance(block, ToolResultBlock):
            if calls:
                flush()
            results.append(block)
            continue
        flush()
        if isinstance(block, TextBlock):
            pieces.append(block.text)
        elif isinstance(block, ThinkingBlock):
            pieces.append(f"<thinking>{block.thinking}</thinking>")
        elif isinstance(block, MediaBlock):
            raise not_carried("Anthropic XML tool mode (a text transcript)", block)
    flush()
    return "\n".join(piece for piece in pieces if piece)


def _only_results(message: Message) -> bool:
    return bool(message.content) and all(isinstance(b, ToolResultBlock) for b in message.content)


def transcript(messages: list[Message], participants: Participants) -> list[str]:
    """The turns, ``Name: text`` each, the last one the assistant's, open.

    A message of tool results only is not a turn of its own: its results follow the
    calls in the assistant's turn they answer, and when they come last that turn is
    the open one (the model writes on after its results). A last message that is the
    assistant's is the open turn itself (the host prefilled it).
    """
    turns: list[str] = []
    names: dict[str, str] = {}
    open_turn = f"{participants.assistant}:"
    for i, message in enumerate(messages):
        last = i == len(messages) - 1
        text = _text(message.content, names)
        if _only_results(message) and turns:
            turns[-1] = f"{turns[-1]}\n{text}"
            if last and messages[i - 1].role == "assistant":
                open_turn = turns.pop()
        elif message.role == "assistant" and last:
            open_turn = f"{open_turn} {text}" if text else open_turn
        else:
            turns.append(f"{participants.of(message)}: {text}")
    # The API refuses a last assistant message that ends with white space.
    turns.append(open_turn.rstrip())
    return turns


def format_request(
    request: Request,
    model: str,
    *,
    stream: bool,
    participants: Participants,
    prefill: bool = True,
) -> dict[str, Any]:
    """The Messages API body for `request` in XML tool mode. `request.extras` is merged last.

    For a model that takes no prefill (`prefill` false) the transcript goes whole in the
    user message, with no open assistant turn; a request whose assistant turn is open
    with something in it (a prefilled reply, results the model writes on after) cannot
    be sent so, and is refused here, before any provider traffic."""
    turns = transcript(request.messages, participants)
    if not prefill:
        return _body(request, model, stream, participants, _no_prefill(turns, model, participants))
    first, rest = (turns[0], turns[1:]) if len(turns) > 1 else ("", turns)
    messages: list[dict[str, Any]] = []
    if first:
        messages.append({"role": "user", "content": [{"type": "text", "text": first}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "\n\n".join(rest)}]})
    return _body(request, model, stream, participants, messages)


def _no_prefill(turns: list[str], model: str, participants: Participants) -> list[dict[str, Any]]:
    if turns[-1] != f"{participants.assistant}:":
        raise InferenceError(
            "invalid_request",
            f"model {model!r} takes no prefill (prefill = false), and in XML tool mode this "
            "conversation ends inside the assistant's own turn (a reply it continues, or tool "
            "results it writes on after), which only a prefill can send",
            retryable=False,
        )
    return [{"role": "user", "content": [{"type": "text", "text": "\n\n".join(turns[:-1])}]}]


def _body(
    request: Request,
    model: str,
    stream: bool,
    participants: Participants,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stop_sequences": stop_sequences(participants, request.stop_sequences),
    }
    system = [request.system] if request.system else []
    if request.tools:
        system.append(tools_prompt(request.tools))
    if system:
        body["system"] = "\n\n".join(system)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    body.update(request.extras)
    body["stream"] = stream
    return body
