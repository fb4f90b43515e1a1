"""agentcore's MCPL router: the answer to an MCPL server's `inference/request` and `model/info`.

Routing (``[mcpl.routing]``): ``overrides[conversationId]``, then
``by_feature[featureSet]``, then ``wildcards`` (``*`` is one segment), then
``default``; a request no rule routes is answered -32603 saying so.

The answer (docs/mcpl-router.md): a result only for an inference that
completed with a stop MCPL can name (``end_turn``, ``max_tokens``,
``stop_sequence``) and called no tool; -32603 with the cause for every other
ending, streamed or not, each with an ``mcpl:inference_fail`` trace. In XML tool
mode that covers the model's tool-call markup too: a readable call, a block with
no readable call, a block still open (`agentcore.inference.outcome`, the rule
`agentcore infer` shares). A streamed
request gets `inference/chunk` notifications of visible text only, ``index``
from 0, all before the answer; an error after chunks carries no partial text.
The kernel retries only before the first visible token, so never after a chunk.
A chunk's tail that could start a configured secret waits for the next chunk
(`McplRequest.chunk_stream`), so a key echoed in two chunks is masked too.
A request the server cancels (``notifications/cancelled``, MCP's base protocol) is
not answered: its task is cancelled, which closes the provider call, and the
``mcpl:inference_fail`` trace says the server cancelled it.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from contextlib import aclosing
from typing import Any

from pydantic import Field

from agentcore.api import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NO_RESULT_MESSAGE,
    SHUTDOWN_MESSAGE,
    SHUTTING_DOWN,
    Aborted,
    Complete,
    Failed,
    InferenceError,
    McplError,
    McplRequest,
    Message,
    ModelInfo,
    ModelReference,
    PluginContext,
    Request,
    Response,
    Section,
    SettingsSection,
    TextBlock,
    Token,
    aborted_message,
    completion_problem,
    failure_message,
    hookimpl,
    result_object,
    sampling_range,
    spend_fields,
)

DEFAULT_MAX_TOKENS = 1024
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Valid in a JSON string as an escape (``"\\ud800"``), but no text: no provider body can
carry it as UTF-8."""


class RoutingSettings(Section):
    """``[mcpl.routing]``: which model answers which request. Every target is a
    ``NAME:MODEL`` whose provider the loader checks is configured."""

    default: ModelReference | None = None
    by_feature: dict[str, ModelReference] = Field(default_factory=dict)
    wildcards: dict[str, ModelReference] = Field(default_factory=dict)
    overrides: dict[str, ModelReference] = Field(default_factory=dict)
    """Keyed by conversationId."""
    default_max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    """Used when a request's preferences name no maxTokens (kept under its ceilings)."""


def wildcard_matches(pattern: str, name: str) -> bool:
    """``memory.*`` matches ``memory.consolidation``: ``*`` is exactly one segment."""
    want, have = pattern.split("."), name.split(".")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


def route(routing: RoutingSettings, feature_set: str, conversation_id: str | None) -> str | None:
    if conversation_id is not None and conversation_id in routing.overrides:
        return routing.overrides[conversation_id]
    if feature_set in routing.by_feature:
        return routing.by_feature[feature_set]
    for pattern, model in routing.wildcards.items():
        if wildcard_matches(pattern, feature_set):
            return model
    return routing.default


def parse_messages(raw: Any) -> tuple[list[Message], str | None]:
    """MCPL messages to the kernel's, with a -32602 that names the bad field."""
    if not isinstance(raw, list) or not raw:
        raise McplError(INVALID_PARAMS, "params.messages must be a non-empty array of messages")
    messages: list[Message] = []
    system: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise McplError(INVALID_PARAMS, f"params.messages[{i}] must be an object")
        role = item.get("role")
        text = _content_text(item.get("content"), i)
        if role == "system":
            system.append(text)
        elif role in ("user", "assistant"):
            messages.append(Message(role, [TextBlock(text)]))
        else:
            raise McplError(
                INVALID_PARAMS,
                f"params.messages[{i}].role is {role!r}; expected 'user', 'assistant' or 'system'",
            )
    if not messages:
        raise McplError(INVALID_PARAMS, "params.messages holds no user or assistant message")
    return messages, "\n\n".join(system) or None


def _content_text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return _checked_text(content, i)
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        parts = []
        for block in content:
            if not (isinstance(block, dict) and block.get("type") == "text"):
                raise McplError(
                    INVALID_PARAMS, f"params.messages[{i}].content holds a block that is not text"
                )
            text = block.get("text")
            if not isinstance(text, str):
                raise McplError(
                    INVALID_PARAMS, f"params.messages[{i}].content text is not a string"
                )
            parts.append(text)
        return _checked_text("".join(parts), i)
    raise McplError(INVALID_PARAMS, f"params.messages[{i}].content must be a string or text blocks")


def _trace_fields(request: McplRequest, streamed: bool) -> dict[str, Any]:
    """The fields every ``mcpl:inference_*`` trace of `request` carries."""
    return {"serverId": request.server.name, "requestId": request.id, "streamed": streamed}


def _ending_error(event: Failed | Aborted) -> InferenceError:
    """The error of a stream that ended without a response: a timeout's is said as one."""
    if isinstance(event, Failed) or event.error.code == SHUTTING_DOWN:
        return event.error
    return InferenceError("timeout", aborted_message(event), retryable=False)


def _checked_text(text: str, i: int) -> str:
    if not text.isascii() and _LONE_SURROGATE.search(text):
        raise McplError(
            INVALID_PARAMS,
            f"params.messages[{i}].content holds a lone surrogate (a \\ud800-\\udfff escape "
            "without its pair), which is not text",
        )
    return text


def _preferences(params: dict[str, Any]) -> tuple[int | None, float | None]:
    """`maxTokens` and `temperature` as given (None: not given), checked for type."""
    prefs = params.get("preferences") or {}
    if not isinstance(prefs, dict):
        raise McplError(INVALID_PARAMS, "params.preferences must be an object")
    max_tokens = prefs.get("maxTokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise McplError(INVALID_PARAMS, "params.preferences.maxTokens must be a positive integer")
    temperature = prefs.get("temperature")
    if temperature is None:
        return max_tokens, None
    # JSON allows 1e400 (read as inf) and 10**400 (no float holds it); no provider does.
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise McplError(INVALID_PARAMS, "params.preferences.temperature must be a number")
    try:
        value = float(temperature)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise McplError(INVALID_PARAMS, "params.preferences.temperature must be a finite number")
    return max_tokens, value


def ceilings(request: McplRequest, model: str, info: ModelInfo) -> list[tuple[int, str]]:
    """The ceilings on the request's output tokens, each with what sets it: the server's
    (`McplRequest.max_tokens`) and the routed model's own maximum, where known."""
    found = []
    if request.max_tokens is not None:
        setting = f"[mcpl.servers.{request.server.name}] max_tokens, or [mcpl] max_tokens"
        found.append((request.max_tokens, f"this host's ceiling for the server ({setting})"))
    if info.max_output_tokens is not None:
        found.append((info.max_output_tokens, f"the most {model} writes in one reply"))
    return found


def held_to_bounds(
    request: McplRequest,
    preferences: tuple[int | None, float | None],
    *,
    model: str,
    info: ModelInfo,
    kind: str | None,
    default_max_tokens: int,
) -> int:
    """The request's `maxTokens` (or the default, kept under every ceiling), after -32602
    for one over a ceiling or a temperature outside the routed provider's range. A
    ceiling refuses rather than clamps: the server asked for more than it may have, and
    a quietly shorter reply would read as the model's own choice (§11.3 `max_tokens`)."""
    max_tokens, temperature = preferences
    limits = ceilings(request, model, info)
    if max_tokens is None:
        max_tokens = min([default_max_tokens, *(ceiling for ceiling, _ in limits)])
    for ceiling, why in limits:
        if max_tokens > ceiling:
            raise McplError(
                INVALID_PARAMS,
                f"params.preferences.maxTokens is {max_tokens}, over {ceiling}: {why}",
                {"param": "preferences.maxTokens", "ceiling": ceiling},
            )
    bounds = sampling_range(kind, "temperature") if kind is not None else None
    if temperature is not None and bounds is not None and temperature not in bounds:
        raise McplError(
            INVALID_PARAMS,
            f"params.preferences.temperature is {temperature:g}, outside {bounds}: the range "
            f"{model}'s provider ({kind}) takes",
            {"param": "preferences.temperature", "min": bounds.low}
            | ({"max": bounds.high} if math.isfinite(bounds.high) else {}),
        )
    return max_tokens


class McplRouter:
    """The `mcpl-router` plugin."""

    def __init__(self) -> None:
        self._context: PluginContext[RoutingSettings] | None = None

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("mcpl.routing", RoutingSettings)

    @hookimpl
    def agentcore_start(self, context: PluginContext[RoutingSettings]) -> None:
        self._context = context

    @hookimpl
    def agentcore_mcpl_capabilities(self) -> dict[str, Any]:
        """What the host advertises because this plugin answers it (§5.2, §11, §12)."""
        return {"inferenceRequest": {"streaming": True}, "modelInfo": True}

    @property
    def _started(self) -> PluginContext[RoutingSettings]:
        assert self._context is not None, "the mcpl-router plugin was not started"
        return self._context

    @property
    def _routing(self) -> RoutingSettings:
        return self._started.settings

    @hookimpl(trylast=True)
    async def on_mcpl_request(self, request: McplRequest) -> Any:
        """The answer to an `inference/request` (or `model/info`): the inference's result,
        or -32603 with its cause for every other ending, each such ending traced
        ``mcpl:inference_fail``. A stream holds this frame for its whole life, so the
        answering is written here, not in frames of its own (~0.3 KB each): the reading is
        `_inference_of`'s, done before the stream starts."""
        if request.method == "model/info":
            return self.model_info()
        if request.method != "inference/request":
            return None
        inference, stream = await self._inference_of(request)
        model = inference.model
        try:
            # Inside the try: a cancellation that comes while this trace goes out is traced.
            feature_set = inference.metadata["featureSet"]
            # The traces' fields are made per trace: no dict of them held while it streams.
            await self._emit(
                "mcpl:inference_start",
                model=model,
                featureSet=feature_set,
                **_trace_fields(request, stream),
            )
            if stream:
                # Numbered from 0, and redacted across chunks: a key the provider echoes in
                # two chunks is masked too (the frame's own redaction sees one at a time).
                chunks, response = request.chunk_stream(), None
                async with aclosing(self._started.stream(inference)) as events:
                    async for event in events:
                        if type(event) is Token:
                            if event.visible and event.text:
                                waiting = chunks.send_now(event.text)  # no coroutine per chunk
                                if waiting is not None:
                                    await waiting
                        elif isinstance(event, Complete):
                            await chunks.end()
                            response = event.response
                            break
                        elif isinstance(event, Failed | Aborted):
                            raise _ending_error(event)
                if response is None:  # the kernel always ends with one
                    raise InferenceError("network", NO_RESULT_MESSAGE)
            else:
                response = await self._started.complete(inference)
            problem = completion_problem(response)
            if problem is not None:
                raise InferenceError("unknown", problem, retryable=False)
        except InferenceError as error:
            raise await self._failure(error, model, _trace_fields(request, stream)) from None
        except asyncio.CancelledError:
            # Not answered: the connection answers a shutdown, and a request the server
            # cancelled gets no answer at all (MCP's base protocol).
            await self._failed(model, self._why(request), _trace_fields(request, stream))
            raise
        except Exception as exc:
            # Not an ending of the inference (say, the connection closed under a chunk),
            # but the request failed all the same: traced, then answered at the boundary.
            why = str(exc) or type(exc).__name__
            await self._failed(model, why, _trace_fields(request, stream))
            raise
        return await self._result(response, _trace_fields(request, stream))

    def model_info(self) -> dict[str, Any]:
        default = self._routing.default
        if default is None:
            raise McplError(INTERNAL_ERROR, "No default model is routed ([mcpl.routing] default)")
        # §12.2: the model's own metadata; `vendor` is its maker, not the provider kind.
        # Every field or an error, never a partial object (clients type them as required).
        info = self._started.model_info(default)
        unknown = info.unknown()
        if unknown:
            provider, model = default.split(":", 1)
            table_key = json.dumps(model)  # a TOML basic string: dots stay in the key
            raise McplError(
                INTERNAL_ERROR,
                f"model/info: this host does not know the {', '.join(unknown)} of {default} "
                f"(the routed default); set them in [providers.{provider}.models.{table_key}]",
                {"model": default, "unknown": unknown},
            )
        return info.to_wire()

    async def _inference_of(self, request: McplRequest) -> tuple[Request, bool]:
        """The kernel's request for an `inference/request` and whether it streams; -32602
        naming a bad param, -32603 when no rule routes it."""
        params = request.params
        feature_set = params.get("featureSet")
        conversation = params.get("conversationId")
        if conversation is not None and not isinstance(conversation, str):
            raise McplError(INVALID_PARAMS, "params.conversationId must be a string")
        stream = params.get("stream", False)
        if not isinstance(stream, bool):
            raise McplError(INVALID_PARAMS, "params.stream must be a boolean")
        messages, system = parse_messages(params.get("messages"))
        preferences = _preferences(params)
        model = await self._routed(feature_set, conversation, _trace_fields(request, stream))
        inference = Request(
            model,
            messages,
            system=system,
            max_tokens=self._max_tokens(request, preferences, model),
            temperature=preferences[1],
            metadata={
                "serverId": request.server.name,
                "featureSet": feature_set,
                "conversationId": conversation,
                "mcplRequestId": request.id,
            },
        )
        return inference, stream

    async def _result(self, response: Response, trace: dict[str, Any]) -> dict[str, Any]:
        """The answer's result, traced ``mcpl:inference_complete``."""
        result = result_object(response)
        await self._emit(
            "mcpl:inference_complete",
            model=result["model"],
            **spend_fields(response),
            finishReason=response.stop.reason,
            **trace,
        )
        return result

    async def _routed(
        self, feature_set: Any, conversation: str | None, trace: dict[str, Any]
    ) -> str:
        """The model the routing rules give the request, or -32603 saying none does."""
        model = route(self._routing, str(feature_set), conversation)
        if model is None:
            message = (
                f"No routing rule covers feature set {feature_set!r}: set [mcpl.routing] "
                "default, by_feature, wildcards or overrides"
            )
            # Answered -32603 like a failed inference, so traced like one (SPEC §13.2).
            await self._emit("mcpl:inference_fail", model=None, error=message, **trace)
            raise McplError(INTERNAL_ERROR, message)
        return model

    def _max_tokens(
        self, request: McplRequest, preferences: tuple[int | None, float | None], model: str
    ) -> int:
        """`held_to_bounds` for the routed model and its provider's kind."""
        provider = self._started.providers.get(model.partition(":")[0])
        return held_to_bounds(
            request,
            preferences,
            model=model,
            info=self._started.model_info(model),
            kind=provider.kind if provider is not None else None,
            default_max_tokens=self._routing.default_max_tokens,
        )

    async def _failed(self, model: str, why: str, trace: dict[str, Any]) -> None:
        """The ``mcpl:inference_fail`` trace of an inference that ended without a result."""
        await self._emit("mcpl:inference_fail", model=model, error=why, **trace)

    async def _failure(self, error: InferenceError, model: str, trace: dict[str, Any]) -> McplError:
        """The -32603 answering an inference that ended in `error`, traced first."""
        if error.code == SHUTTING_DOWN:
            # Woken from a hold or a backoff by the kernel stopping, this request
            # may answer before the connection does: with the connection's words.
            await self._failed(model, error.message, trace)
            return McplError(INTERNAL_ERROR, SHUTDOWN_MESSAGE)
        message = failure_message(error)
        await self._failed(model, message, trace)
        return McplError(INTERNAL_ERROR, message, error.data)

    def _why(self, cancelled: McplRequest) -> str:
        """Why a request's inference was cancelled, for its trace."""
        if cancelled.cancelled is not None:
            reason = f": {cancelled.cancelled}" if cancelled.cancelled else ""
            return f"The server cancelled the request (notifications/cancelled){reason}"
        deadline = cancelled.deadline
        if deadline is not None and asyncio.get_running_loop().time() >= deadline:
            return "The request's deadline passed; the host stopped working on it"
        if self._context is not None and self._context.stopping.is_set():
            return "The host is shutting down"
        return "The inference was cancelled"

    async def _emit(self, type: str, **fields: Any) -> None:
        if self._context is not None:
            await self._context.emit(type, **fields)
