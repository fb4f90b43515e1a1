"""MCPL for the host's own turns, on the wire: `context/beforeInference` and
`inference/lifecycle` (SPEC §10), the message shapes and the checks the spec requires
of every host. Which servers take part, how long they may take, what is traced: that
is policy, in the `mcpl-context` plugin.

- `before_inference` sends the hook request and authorizes each returned injection on
  its own, by its `position`, against the grant current when the response arrives
  (§5.4 "enforcement is evaluated at response-receipt", §10.8, §13.4); the `featureSet`
  and `namespace` a response names authorize nothing (§5.4). While the request is
  pending, an `inference/request` from that server is refused (§10.7; the connection
  does this for every `context/*` request).
- `lifecycle_params` builds an `inference/lifecycle` notification: identifiers,
  phase, `model` only when asked (the caller checks `modelInfo`), `usage` only for
  ``completed``, and never any content — the fields do not exist (§10.5).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from agentcore.inference.turns import INJECTION_SEPARATOR, POSITIONS, Phase, Position
from agentcore.mcpl.grants import is_granted
from agentcore.mcpl.jsonrpc import ConnectionClosed, RemoteError
from agentcore.mcpl.protocol import McplError

if TYPE_CHECKING:  # only named in annotations; importing it would import aiohttp at load
    from agentcore.mcpl.connection import ServerConnection

BEFORE_INFERENCE = "context/beforeInference"
LIFECYCLE = "inference/lifecycle"
OBSERVE = "contextHooks.beforeInference.observe"
INJECT: dict[Position, str] = {
    "system": "contextHooks.beforeInference.inject.system",
    "beforeUser": "contextHooks.beforeInference.inject.beforeUser",
    "afterUser": "contextHooks.beforeInference.inject.afterUser",
}
HOOK_LEAVES: tuple[str, ...] = (OBSERVE, *INJECT.values())
INFERENCE_LIFECYCLE = "inferenceLifecycle"
MODEL_INFO = "modelInfo"

HookOutcome: TypeAlias = Literal["ok", "timeout", "error", "refused"]


def takes_hooks(grant: frozenset[str]) -> bool:
    """Granted any `contextHooks.beforeInference.*` leaf: the hook is sent (§10.1: an
    inject-only server gets it too, with `userMessage: null`)."""
    return any(is_granted(grant, leaf) for leaf in HOOK_LEAVES)


def may_observe(grant: frozenset[str]) -> bool:
    return is_granted(grant, OBSERVE)


@dataclass(frozen=True, slots=True)
class ContextInjection:
    """One injection the grant allowed, its content as text."""

    position: Position
    text: str
    namespace: str


@dataclass(slots=True)
class HookAnswer:
    """One server's part in one turn's `context/beforeInference`."""

    outcome: HookOutcome
    injections: list[ContextInjection] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """Why each dropped injection was dropped (its position not granted, malformed)."""
    dropped_content: list[str] = field(default_factory=list)
    """Content blocks of accepted injections left out (media agentcore's requests
    cannot carry), each saying which and why."""
    error: str | None = None
    """For an outcome other than ok: what happened."""


def before_inference_params(
    inference_id: str,
    conversation_id: str,
    turn_index: int,
    user_message: str | None,
    model: dict[str, Any],
) -> dict[str, Any]:
    """§10.1's params. `user_message` must already be None unless `observe` is granted."""
    return {
        "inferenceId": inference_id,
        "conversationId": conversation_id,
        "turnIndex": turn_index,
        "userMessage": user_message,
        "model": model,
    }


async def before_inference(
    connection: ServerConnection, params: dict[str, Any], timeout_s: float
) -> HookAnswer:
    """Ask one server for context, within `timeout_s` (§10.6), the
    send included. Never raises for what the server does: the answer says what happened."""
    try:
        async with asyncio.timeout(timeout_s):
            result = await connection.request(BEFORE_INFERENCE, params)
    except TimeoutError:
        return HookAnswer("timeout", error=f"no answer within {timeout_s:g} s")
    except RemoteError as exc:  # before McplError, which it is a kind of
        return HookAnswer("error", error=f"the server answered error {exc.code}: {exc.message}")
    except McplError as exc:  # the connection would not send it: its grant or state
        return HookAnswer("refused", error=exc.message)
    except ConnectionClosed as exc:
        return HookAnswer("error", error=str(exc) or "the connection closed")
    # Authorized against the grant as it is now, at receipt (§5.4), not as it was at send.
    return authorize_injections(result, connection.grant)


def authorize_injections(result: Any, grant: frozenset[str]) -> HookAnswer:
    """§10.2-10.4, §10.8: each injection on its own, by its position against the grant."""
    if not isinstance(result, dict):
        return HookAnswer("error", error="the result is not an object")
    raw = result.get("contextInjections", [])
    if not isinstance(raw, list):
        return HookAnswer("error", error="contextInjections is not an array")
    answer = HookAnswer("ok")
    for i, item in enumerate(raw):
        where = f"contextInjections[{i}]"
        if not isinstance(item, dict):
            answer.dropped.append(f"{where} is not an object")
            continue
        position = item.get("position")
        if position not in POSITIONS:
            answer.dropped.append(
                f"{where}.position is {position!r}; expected system, beforeUser or afterUser"
            )
            continue
        leaf = INJECT[position]
        if not is_granted(grant, leaf):
            answer.dropped.append(f"{where}: position {position} is not granted ({leaf})")
            continue
        namespace = item.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            answer.dropped.append(f"{where}.namespace (a string) is required")
            continue
        text = _content_text(item.get("content"), where, answer.dropped_content)
        if text is None:
            answer.dropped.append(f"{where}.content must be a string or an array of blocks")
            continue
        answer.injections.append(ContextInjection(position, text, namespace))
    return answer


def _content_text(content: Any, where: str, left_out: list[str]) -> str | None:
    """§10.3: a string, or content blocks whose text blocks are kept. Image, audio and
    resource blocks are left out (and said so): agentcore's requests carry text only."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in ("image", "audio", "resource"):
            left_out.append(
                f"{where}.content[{j}]: {kind} blocks are not carried (requests hold text only)"
            )
        else:
            left_out.append(f"{where}.content[{j}] is not a content block")
    return INJECTION_SEPARATOR.join(texts)


def lifecycle_params(
    inference_id: str,
    conversation_id: str,
    turn_index: int,
    phase: Literal["started"] | Phase,
    *,
    model: dict[str, Any] | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """§10.5's params: metadata only. `model` is for a server granted `modelInfo`;
    `usage` goes with ``completed`` and nothing else."""
    params: dict[str, Any] = {
        "inferenceId": inference_id,
        "conversationId": conversation_id,
        "turnIndex": turn_index,
        "phase": phase,
    }
    if model is not None:
        params["model"] = model
    if usage is not None and phase == "completed":
        params["usage"] = usage
    return params


__all__ = [
    "BEFORE_INFERENCE",
    "HOOK_LEAVES",
    "INFERENCE_LIFECYCLE",
    "INJECT",
    "LIFECYCLE",
    "MODEL_INFO",
    "OBSERVE",
    "ContextInjection",
    "HookAnswer",
    "HookOutcome",
    "authorize_injections",
    "before_inference",
    "before_inference_params",
    "lifecycle_params",
    "may_observe",
    "takes_hooks",
]
