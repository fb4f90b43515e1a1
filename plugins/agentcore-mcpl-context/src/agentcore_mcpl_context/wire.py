"""MCPL for the host's own turns, on the wire: `context/beforeInference` and
`inference/lifecycle` (SPEC §10), the message shapes and the checks the spec requires
of every host. Which servers take part, how long they may take, what is traced: that
is policy, in the `mcpl-context` plugin.

- `before_inference` sends the hook request to every server at once and authorizes
  each returned injection on its own, by its `position`, against the grant current
  when the response arrives (§5.4 "enforcement is evaluated at response-receipt",
  §10.8, §13.4); the `featureSet` and `namespace` a response names authorize nothing
  (§5.4). While the request is pending, an `inference/request` from that server is
  refused (§10.7; the connection does this for every `context/*` request).
- `lifecycle_params` builds an `inference/lifecycle` notification: identifiers,
  phase, `model` only when asked (the caller checks `modelInfo`), `usage` only for
  ``completed``, and never any content — the fields do not exist (§10.5).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from agentcore.api import (
    POSITIONS,
    BulkReference,
    ConnectionClosed,
    EncodedParams,
    InjectedBlock,
    Injection,
    McplError,
    MediaBlock,
    Phase,
    Position,
    RemoteError,
    ServerHandle,
    TextBlock,
    encode_params,
    is_bulk_reference,
    is_granted,
    read_bulk_reference,
    withheld_block,
)
from agentcore_mcpl_context.events import Pending
from agentcore_mcpl_context.names import INFERENCE_LIFECYCLE as INFERENCE_LIFECYCLE
from agentcore_mcpl_context.names import LIFECYCLE as LIFECYCLE
from agentcore_mcpl_context.names import MODEL_INFO as MODEL_INFO

if TYPE_CHECKING:
    from agentcore.api import Fetched  # the bulk fetcher loads at its first use

BEFORE_INFERENCE = "context/beforeInference"
OBSERVE = "contextHooks.beforeInference.observe"
INJECT: dict[Position, str] = {
    "system": "contextHooks.beforeInference.inject.system",
    "beforeUser": "contextHooks.beforeInference.inject.beforeUser",
    "afterUser": "contextHooks.beforeInference.inject.afterUser",
}
HOOK_LEAVES: tuple[str, ...] = (OBSERVE, *INJECT.values())

HookOutcome: TypeAlias = Literal["ok", "timeout", "error", "refused"]


def takes_hooks(grant: frozenset[str]) -> bool:
    """Granted any `contextHooks.beforeInference.*` leaf: the hook is sent (§10.1: an
    inject-only server gets it too, with `userMessage: null`)."""
    return any(is_granted(grant, leaf) for leaf in HOOK_LEAVES)


def may_observe(grant: frozenset[str]) -> bool:
    return is_granted(grant, OBSERVE)


@dataclass(frozen=True, slots=True)
class ContextInjection:
    """One injection the grant allowed: its content as blocks the turn's request carries."""

    position: Position
    content: tuple[InjectedBlock, ...]
    namespace: str
    references: tuple[tuple[int, BulkReference], ...] = ()
    """§19 bulk references: the index in `content` of each one's stub, and its record."""

    @property
    def text(self) -> str:
        return Injection(self.position, self.content).text


@dataclass(slots=True)
class HookAnswer:
    """One server's part in one turn's `context/beforeInference`."""

    outcome: HookOutcome
    injections: list[ContextInjection] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """Why each dropped injection was dropped (its position not granted, malformed)."""
    dropped_content: list[str] = field(default_factory=list)
    """Content blocks of accepted injections left out (media the turn's provider cannot
    carry, a resource by reference only, ...), each saying which and why."""
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
    asks: Sequence[tuple[ServerHandle, dict[str, Any]]],
    timeout_s: float,
    media_types: frozenset[str] = frozenset(),
    on_answer: Callable[[int, HookAnswer], None] | None = None,
) -> list[HookAnswer]:
    """Ask every server of `asks` (a connection and its §10.1 params: pass one dict to the
    servers that get the same, it is encoded once) for context, all at once, each within
    `timeout_s` (§10.6), the send included. Media blocks are kept where the turn's
    provider carries their type (`media_types`). Each answer is authorized when it
    arrives (§5.4: the grant at response-receipt) and handed to `on_answer` (its index in
    `asks`) then, while slower servers are still working. No task per server: each
    answer's arrival counts down one wait. Never raises for what a server does: the
    answers, in the order of `asks`, say what happened."""
    hooks = _HookRound(asks, media_types, on_answer)
    hooks.send()
    try:
        await hooks.wait(timeout_s)
    except asyncio.CancelledError:  # the turn was cancelled: stop waiting for anyone
        hooks.give_up()
        raise
    hooks.at_deadline(timeout_s)
    return hooks.answers()


class _HookRound:
    """One turn's `context/beforeInference` to every server of `asks`: each server's answer
    is taken once, when it arrives or at the deadline, whichever comes first."""

    def __init__(
        self,
        asks: Sequence[tuple[ServerHandle, dict[str, Any]]],
        media_types: frozenset[str],
        on_answer: Callable[[int, HookAnswer], None] | None,
    ) -> None:
        self._asks = asks
        self._media_types = media_types
        self._on_answer = on_answer
        self._answers: list[HookAnswer | None] = [None] * len(asks)
        self._waiting: dict[asyncio.Future[Any], int] = {}
        self._all_in: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def send(self) -> None:
        """Send every request at once; one the connection will not send is answered now."""
        encoded: dict[int, EncodedParams] = {}  # servers given the same params share one encoding
        for i, (connection, params) in enumerate(self._asks):
            json_params = encoded.get(id(params))
            if json_params is None:
                json_params = encoded[id(params)] = encode_params(params)
            try:
                future = connection.request_soon(BEFORE_INFERENCE, json_params)
            except McplError as exc:  # the connection would not send it: its grant or state
                self._answered(i, HookAnswer("refused", error=exc.message))
                continue
            except ConnectionClosed as exc:
                self._answered(i, HookAnswer("error", error=str(exc) or "the connection closed"))
                continue
            future.add_done_callback(functools.partial(self._arrived, i))
            self._waiting[future] = i

    async def wait(self, timeout_s: float) -> None:
        """Wait until every answer is in, or `timeout_s` has passed (§10.6)."""
        if self._waiting:
            await asyncio.wait((self._all_in,), timeout=timeout_s)

    def give_up(self) -> None:
        for future in list(self._waiting):
            future.cancel()

    def at_deadline(self, timeout_s: float) -> None:
        """At the deadline: an answer in but not yet taken is taken, the rest time out."""
        for future, i in list(self._waiting.items()):
            if self._answers[i] is not None:
                continue
            if future.done():  # done at the deadline, its callback not run yet
                self._answered(i, _hook_answer(future, self._asks[i][0], self._media_types))
            else:
                future.cancel()
                self._answered(i, HookAnswer("timeout", error=f"no answer within {timeout_s:g} s"))

    def answers(self) -> list[HookAnswer]:
        return [answer for answer in self._answers if answer is not None]

    def _answered(self, i: int, answer: HookAnswer) -> None:
        if self._answers[i] is not None:
            return  # read at the deadline already
        self._answers[i] = answer
        if self._on_answer is not None:
            self._on_answer(i, answer)

    def _arrived(self, i: int, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():  # cancelled: given up at the timeout, answered there
            self._answered(i, _hook_answer(future, self._asks[i][0], self._media_types))
        self._waiting.pop(future, None)
        if not self._waiting and not self._all_in.done():
            self._all_in.set_result(None)


def _hook_answer(
    future: asyncio.Future[Any], connection: ServerHandle, media_types: frozenset[str]
) -> HookAnswer:
    try:
        result = future.result()
    except RemoteError as exc:  # before McplError, which it is a kind of
        return HookAnswer("error", error=f"the server answered error {exc.code}: {exc.message}")
    except McplError as exc:
        return HookAnswer("refused", error=exc.message)
    except ConnectionClosed as exc:
        return HookAnswer("error", error=str(exc) or "the connection closed")
    # Authorized against the grant as it is now, at receipt (§5.4), not as it was at send.
    return authorize_injections(result, connection.grant, media_types, connection.name)


def authorize_injections(
    result: Any, grant: frozenset[str], media_types: frozenset[str] = frozenset(), server: str = ""
) -> HookAnswer:
    """§10.2-10.4, §10.8: each injection on its own, by its position against the grant;
    its content (§10.3) as the blocks the turn's provider carries (`media_types`); a §19
    bulk reference as its stub, the record kept on the injection (`server` names where it
    came from in the stub)."""
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
        references: list[tuple[int, BulkReference]] = []
        content = _content_blocks(
            item.get("content"),
            _Where(where, position, media_types, server),
            answer.dropped_content,
            references,
        )
        if content is None:
            answer.dropped.append(f"{where}.content must be a string or an array of blocks")
            continue
        answer.injections.append(ContextInjection(position, content, namespace, tuple(references)))
    return answer


@dataclass(frozen=True, slots=True)
class _Where:
    """The injection a block belongs to: where it is, and what the turn carries."""

    where: str
    position: Position
    media_types: frozenset[str]
    server: str


def event_blocks(
    event: Pending, content: list[Any], media_types: frozenset[str]
) -> tuple[InjectedBlock, ...]:
    """A push event's `content` (its own, or its batch's rendering or fallback) as blocks
    of the turn: a line saying where it came from, then §10.3's blocks, kept as an
    injection's are (RFC-006 §5.2: rendered content is checked as pushed content is)."""
    head = TextBlock(
        f"[MCPL push event from server {event.server}, feature set {event.feature_set}, "
        f"at {event.timestamp}]"
    )
    # §19: a bulk reference is its stub here, never fetched for an event.
    where = _Where("payload", "beforeUser", media_types, event.server)
    blocks = _content_blocks(content, where, [], [])
    return (head, *(blocks or ()))


def _content_blocks(
    content: Any,
    at_injection: _Where,
    left_out: list[str],
    references: list[tuple[int, BulkReference]],
) -> tuple[InjectedBlock, ...] | None:
    """§10.3: a string, or content blocks. Text is kept; an embedded text resource is kept
    as text labelled with its URI (`resource_text`); image, audio and blob resources are
    kept as media where the turn's provider carries their type, around the user's message
    only (a system prompt is text); a block by URI is a §19 bulk reference, kept as its
    stub (its record in `references`). What is left out is said, block by block, in
    `left_out`. None when `content` is neither a string nor an array."""
    if isinstance(content, str):
        return (TextBlock(content),)
    if not isinstance(content, list):
        return None
    position, media_types = at_injection.position, at_injection.media_types
    blocks: list[InjectedBlock] = []
    for j, block in enumerate(content):
        at = f"{at_injection.where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append(TextBlock(block["text"]))
            continue
        kept: InjectedBlock | None
        if (why := withheld_block(block)) is not None:
            left_out.append(f"{at}: {why}")
            kept = None
        elif is_bulk_reference(block):
            stub = _reference(block, at, at_injection.server, left_out)
            if stub is not None:
                references.append((len(blocks), stub[1]))
            kept = None if stub is None else stub[0]
        elif kind in ("image", "audio"):
            kept = _media(block, kind, at, position, media_types, left_out)
        elif kind == "resource":
            kept = _resource(block, at, position, media_types, left_out)
        else:
            left_out.append(f"{at} is not a content block (text, image, audio or resource)")
            kept = None
        if kept is not None:
            blocks.append(kept)
    return tuple(blocks)


def _reference(
    block: dict[str, Any], at: str, server: str, left_out: list[str]
) -> tuple[TextBlock, BulkReference] | None:
    """A §19 bulk reference as its stub, or None when its `uri` rejects it whole."""
    reference = read_bulk_reference(block)
    if isinstance(reference, str):
        left_out.append(f"{at}: a bulk reference rejected: {reference}")
        return None
    source = f"from MCPL server {server}" if server else "from an MCPL server"
    return TextBlock(reference.stub(f"{source}, context injection")), reference


def fetched_block(
    fetched: Fetched, position: Position, media_types: frozenset[str]
) -> InjectedBlock | None:
    """A verified payload as the turn carries it (§19: a host MAY inline a ``ref`` or
    unannotated reference's verified payload within its policy): text, labelled with the
    reference id and never the URI; media around the user's message where the provider
    carries its observed type. None: it stays a stub."""
    reference, mime_type = fetched.reference, fetched.mime_type or ""
    if mime_type.startswith("text/") or mime_type.endswith("json"):
        label = _escape(reference.label or "")
        shown_type = _escape(mime_type[:255])  # §19: mimeType is 255 at most
        opening = f'<resource ref="{reference.id}" name="{label}" type="{shown_type}">'
        return TextBlock(f"{opening}\n{fetched.data.decode('utf-8')}\n</resource>")
    if position == "system" or mime_type not in media_types:
        return None
    data = base64.b64encode(fetched.data).decode("ascii")
    return MediaBlock(mime_type, data, name=fetched.file_name)


def _media(
    block: dict[str, Any],
    kind: str,
    at: str,
    position: Position,
    media_types: frozenset[str],
    left_out: list[str],
) -> MediaBlock | None:
    """An image or audio block (§10.3) as media the turn carries, or None (and why)."""
    data, mime_type = block.get("data"), block.get("mimeType")
    if not isinstance(data, str) or not isinstance(mime_type, str):
        left_out.append(f"{at}: {kind} without data and mimeType")
        return None
    media = MediaBlock(mime_type, data)
    if media.kind != kind:
        left_out.append(f"{at}: an {kind} block's mimeType is {mime_type!r}")
        return None
    return _carried(media, f"{at} ({kind} {media.mime_type})", position, media_types, left_out)


def _resource(
    block: dict[str, Any],
    at: str,
    position: Position,
    media_types: frozenset[str],
    left_out: list[str],
) -> InjectedBlock | None:
    """An embedded resource (MCP's ``{"type": "resource", "resource": {uri, text | blob,
    mimeType}}``): text as labelled text, a blob as media. (One by reference only, §10.3's
    ``{"type": "resource", "uri"}``, is a §19 bulk reference: `_reference`.)"""
    resource = block.get("resource")
    uri = resource.get("uri") if isinstance(resource, dict) else block.get("uri")
    uri = uri if isinstance(uri, str) else ""
    if isinstance(resource, dict) and isinstance(resource.get("text"), str):
        return TextBlock(resource_text(uri, resource["text"]))
    if isinstance(resource, dict) and isinstance(resource.get("blob"), str):
        mime_type = resource.get("mimeType")
        if not isinstance(mime_type, str):
            left_out.append(f"{at}: a blob resource without a mimeType")
            return None
        media = MediaBlock(mime_type, resource["blob"], name=uri.rsplit("/", 1)[-1] or None)
        return _carried(
            media, f"{at} (resource {media.mime_type})", position, media_types, left_out
        )
    left_out.append(f"{at}: a resource without text, blob or uri")
    return None


def _carried(
    media: MediaBlock,
    which: str,
    position: Position,
    media_types: frozenset[str],
    left_out: list[str],
) -> MediaBlock | None:
    if position == "system":
        left_out.append(f"{which}: a system prompt carries text only")
    elif media.mime_type not in media_types:
        left_out.append(f"{which}: the turn's provider does not carry it")
    elif not _is_base64(media.data):
        left_out.append(f"{which}: its data is not base64")
    else:
        return media
    return None


def _is_base64(data: str) -> bool:
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return bool(data)


def _escape(text: str) -> str:
    """`html.escape` (quotes too), imported at its first use: the `html` package builds its
    table of 2,231 named entities at import, about 0.4 MB an idle host would hold."""
    import html

    return html.escape(text, quote=True)


def resource_text(uri: str, text: str) -> str:
    """An embedded text resource as the model reads it: its text inside a ``<resource>``
    element naming its URI, so the model can tell where it came from."""
    return f'<resource uri="{_escape(uri)}">\n{text}\n</resource>'


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
    "fetched_block",
    "lifecycle_params",
    "may_observe",
    "resource_text",
    "takes_hooks",
]
