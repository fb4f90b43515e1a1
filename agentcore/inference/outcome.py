"""Which endings count as a plain completion: the rule `agentcore infer`, the MCPL router
and a host turn's lifecycle (`agentcore.inference.turns.ending_of`) share.

MCPL's `FinishReason` (SPEC §11.3) names only ``end_turn``, ``max_tokens`` and
``stop_sequence``. An inference that ended any other way (a provider stop token
no adapter maps included, whatever ``[inference] unknown_stop`` says), or that
called a tool, is not a result a caller that offers no tools can use: it gets an
error whose message says why. In XML tool mode that includes tool-call markup the
model wrote: a block still open when the output ended, or one with no readable
call (docs/mcpl-router.md, "XML tool mode").
"""

from __future__ import annotations

from typing import Any

from agentcore.inference.errors import InferenceError, unmapped_stop_message
from agentcore.inference.events import Aborted
from agentcore.inference.models import Response, ToolUseBlock

NAMED_STOPS: frozenset[str] = frozenset({"end_turn", "max_tokens", "stop_sequence"})


def result_object(response: Response) -> dict[str, Any]:
    """The §11.3 result of a plain completion, which `agentcore infer --json` prints too:
    content from the text blocks, the real stop, usage, and the model that served it."""
    return {
        "content": response.text,
        "model": response.model_served,
        "finishReason": response.stop.reason,
        "usage": {
            "inputTokens": response.usage.input_tokens,
            "outputTokens": response.usage.output_tokens,
        },
    }


def completion_problem(
    response: Response, offers: str = "inference/request", *, tools: bool = False
) -> str | None:
    """Why `response` is not a plain completion, or None when it is one.

    `offers` names the caller in messages ("…, and inference/request offers none").
    With `tools` (the request offered tools), a reply that ends in calls to them is a
    completion: the caller's tool loop reads them.
    """
    stop = response.stop
    if stop.raw == "error":
        return "The provider ended the inference with an error (finish_reason 'error')"
    if not stop.mapped:
        return unmapped_stop_message(stop.raw)
    if stop.unclosed_tool_block:
        return (
            "The model's output ended with a tool-call block still open, "
            f"and {offers} offers no tools"
        )
    calls = [b for b in response.content if isinstance(b, ToolUseBlock)]
    if calls:
        names = ", ".join(dict.fromkeys(b.name for b in calls))
        if response.stop.reason != "tool_use":
            return (
                f"The model's output ended ({response.stop.reason}) inside a call to a tool "
                f"({names}), and {offers} offers no tools"
            )
        if tools:
            return None
        return f"The model called a tool ({names}), and {offers} offers none"
    reason = stop.reason
    if reason in NAMED_STOPS:
        if stop.tool_markup:  # XML tool mode: a block with no readable call in it
            return f"The model wrote tool-call markup, and {offers} offers no tools"
        return None
    if reason == "refusal":
        return "The model refused to answer (stop reason 'refusal')"
    if reason == "pause_turn":
        return (
            f"The provider paused the turn (stop reason 'pause_turn'), which {offers} cannot resume"
        )
    if reason == "tool_use":
        return f"The model stopped to call a tool, and {offers} offers none"
    return (
        f"The inference ended with stop reason '{reason}', for which {offers} has no finishReason"
    )


def aborted_message(event: Aborted) -> str:
    return f"The inference stopped before it finished ({event.reason}): {event.error.message}"


def failure_message(error: InferenceError) -> str:
    """What a caller is told about a failed inference: the error's own message, and for a
    provider's HTTP error status, that status. A provider's 500 says "Internal server
    error", which as a bare -32603 message would read as the host's own failure."""
    status = error.status
    if status is None or status < 400:
        return error.message
    if error.message.startswith(f"HTTP {status}"):
        return f"The provider answered {error.message}"
    return f"The provider answered HTTP {status}: {error.message}"
