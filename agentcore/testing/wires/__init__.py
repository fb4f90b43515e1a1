"""Each scenario family played on each wire: the order of steps is the family's, decided
here once; the words are the wire's, one small `Renderer` module per wire."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

from agentcore.testing.scenarios import (
    Cut,
    Echo,
    Ending,
    ErrorBody,
    Frame,
    HttpError,
    Long,
    Play,
    Reply,
    Scenario,
    Stall,
    Streamed,
    StreamError,
    ToolUse,
    Unplayable,
    Wire,
    http_date,
    usage_of,
)
from agentcore.testing.wires.anthropic import AnthropicRenderer
from agentcore.testing.wires.base import (
    JSON_HEADERS,
    Renderer,
    json_bytes,
)
from agentcore.testing.wires.bedrock import ConverseRenderer, InvokeRenderer
from agentcore.testing.wires.gemini import GeminiRenderer
from agentcore.testing.wires.openai import OpenAIRenderer
from agentcore.testing.wires.responses import ResponsesRenderer

RENDERERS: dict[Wire, type[Renderer]] = {
    "anthropic": AnthropicRenderer,
    "openai": OpenAIRenderer,
    "openai-responses": ResponsesRenderer,
    "gemini": GeminiRenderer,
    "bedrock": InvokeRenderer,
    "bedrock-converse": ConverseRenderer,
}


REDACTING: frozenset[Wire] = frozenset({"anthropic", "bedrock", "bedrock-converse"})
"""The wires with redacted thinking (`Streamed.redacted_thinking`)."""


def render(scenario: Scenario, wire: Wire, request: Any, *, streamed: bool, model: str) -> Play:
    """Render `scenario` for one call: `request` is its parsed JSON body, `model` the one
    it asked for (the served one unless the scenario names another)."""
    kind = RENDERERS[wire]
    long = isinstance(scenario, Long)
    if isinstance(scenario, Echo):
        scenario = _as_reply(scenario, reply=kind.last_user_text(request))
    elif isinstance(scenario, Long):
        scenario = scenario.as_reply()
    said = scenario.reply if isinstance(scenario, Streamed) else ""
    if isinstance(scenario, Streamed) and scenario.redacted_thinking and wire not in REDACTING:
        raise Unplayable("redacted thinking exists only on the anthropic and bedrock wires")
    renderer = kind(scenario.model or model, usage_of(scenario, said), scenario)
    play = _play(scenario, renderer, streamed)
    play.encode = kind.encode
    if long and play.streamed:  # rendered once, written in large slices
        play.prerendered = b"".join(kind.encode(f, None) for f in play.frames)
        play.frames = []
    play.carries_text = kind.carries_text
    play.headers.update(renderer.headers)
    play.headers.update(scenario.headers)
    if isinstance(scenario, HttpError) and scenario.retry_after_date_in is not None:
        when = datetime.fromtimestamp(time.time() + scenario.retry_after_date_in, UTC)
        play.headers["retry-after"] = http_date(when)
    return play


def refusal(wire: Wire, message: str) -> bytes:
    """The body of the server's own 400 on `wire`."""
    return json_bytes(RENDERERS[wire].refusal(message))


def _as_reply(scenario: Reply, **changes: Any) -> Reply:
    fields = {f.name: getattr(scenario, f.name) for f in dataclasses.fields(Reply)}
    return Reply(**{**fields, **changes})


def _play(scenario: Scenario, renderer: Renderer, streamed: bool) -> Play:
    if isinstance(scenario, HttpError):
        body = scenario.body if scenario.body is not None else renderer.http_error(scenario)
        return Play(scenario.status, dict(JSON_HEADERS), False, body=json_bytes(body))
    if isinstance(scenario, ErrorBody):
        return Play(200, dict(JSON_HEADERS), False, body=json_bytes(renderer.error_body(scenario)))
    if not isinstance(scenario, Streamed):
        raise Unplayable(f"{type(scenario).__name__} is not a scenario the server can play")
    return _stream(scenario, renderer) if streamed else _whole(scenario, renderer)


def _whole(scenario: Streamed, renderer: Renderer) -> Play:
    if isinstance(scenario, Stall):
        return Play(200, dict(JSON_HEADERS), False, ending="stall")
    if isinstance(scenario, StreamError):
        status, body = renderer.whole_error(scenario)
        return Play(status, dict(JSON_HEADERS), False, body=json_bytes(body))
    if isinstance(scenario, Cut):
        # Promise the whole body, send half of it.
        raw = json_bytes(renderer.whole(Reply(reply=scenario.reply, thought=scenario.thought)))
        half = raw[: len(raw) // 2]
        return Play(200, dict(JSON_HEADERS), False, body=half, ending=_cut_ending(scenario))
    assert isinstance(scenario, Reply)
    return Play(200, dict(JSON_HEADERS), False, body=json_bytes(renderer.whole(scenario)))


def _stream(scenario: Streamed, renderer: Renderer) -> Play:
    play = Play(200, dict(renderer.stream_headers), ping=renderer.keepalive)
    frames = renderer.open() + _said(scenario, renderer)
    if isinstance(scenario, ToolUse):
        frames += renderer.tool_call(scenario)
    if isinstance(scenario, Reply):
        frames += renderer.finish(scenario)
    elif isinstance(scenario, StreamError):
        frames += renderer.stream_error(scenario)
    elif isinstance(scenario, Cut):
        play.ending = _cut_ending(scenario)
    elif isinstance(scenario, Stall):
        if scenario.ping and renderer.keepalive is not None:
            frames.append(renderer.keepalive)
        play.ending = "stall"
    play.frames = frames
    return play


def _cut_ending(scenario: Cut) -> Ending:
    """A clean cut ends the HTTP body properly; the other drops the connection."""
    return "end" if scenario.clean else "cut"


def _said(scenario: Streamed, renderer: Renderer) -> list[Frame]:
    """Thinking, then text, with the wire's keep-alive once after the first piece of text."""
    frames: list[Frame] = []
    if scenario.redacted_thinking:
        frames += renderer.redacted_thinking(scenario.redacted_thinking)
    for piece in scenario.thought_pieces():
        frames += renderer.thinking(piece)
    for i, piece in enumerate(scenario.pieces()):
        frames += renderer.text(piece)
        if i == 0 and scenario.ping and renderer.keepalive is not None:
            frames.append(renderer.keepalive)
    return frames
