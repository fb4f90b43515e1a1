"""Prompt-cache breakpoints on the wires that need them marked (Anthropic, XML tool mode).

Where they go: the host's own (`Request.cache`), and with ``[providers.NAME]
prompt_cache = "auto"`` the system prompt and the last user turn. What the Messages API
would refuse is never sent: at most 4 breakpoints (the later ones kept: each caches all
before it), never on an empty text block or a thinking block, and a longer TTL never after
a shorter one (a later ``1h`` is shortened to the earlier ``5m``). The default ``5m`` TTL is
sent as the API's default (no ``ttl`` key); ``1h`` is named.
"""

from __future__ import annotations

from typing import Any, Literal

from agentcore.inference import CachePoint, CacheTtl, Request

__all__ = ["MAX_BREAKPOINTS", "breakpoints", "cache_control", "mark_messages_body"]

MAX_BREAKPOINTS = 4
"""The Messages API's limit on ``cache_control`` blocks in one request."""

_ORDER = {"tools": -2, "system": -1}


def _position(point: CachePoint) -> int:
    return _ORDER[point.at] if isinstance(point.at, str) else point.at


def breakpoints(request: Request, mode: Literal["off", "auto"], ttl: CacheTtl) -> list[CachePoint]:
    """The breakpoints to send, in prompt order, each place once, TTLs never growing."""
    points = list(request.cache)
    if mode == "auto":
        if request.system:
            points.append(CachePoint("system", ttl))
        users = [i for i, m in enumerate(request.messages) if m.role == "user"]
        if users:
            points.append(CachePoint(users[-1], ttl))
    chosen: dict[int, CachePoint] = {}
    for point in points:
        where = _position(point)
        if isinstance(point.at, int) and not 0 <= point.at < len(request.messages):
            continue  # a breakpoint past the conversation marks nothing
        if where not in chosen or point.ttl == "1h":
            chosen[where] = point  # one per place, the longer TTL wins
    ordered = [chosen[k] for k in sorted(chosen)][-MAX_BREAKPOINTS:]
    out: list[CachePoint] = []
    for point in ordered:
        if out and out[-1].ttl == "5m" and point.ttl == "1h":
            point = CachePoint(point.at, "5m")
        out.append(point)
    return out


def cache_control(ttl: CacheTtl) -> dict[str, str]:
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def _markable(block: dict[str, Any]) -> bool:
    if block.get("type") in ("thinking", "redacted_thinking"):
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def mark_messages_body(body: dict[str, Any], points: list[CachePoint]) -> None:
    """Put ``cache_control`` on the Messages API body built 1:1 from the request's messages."""
    for point in points:
        control = cache_control(point.ttl)
        if point.at == "tools":
            tools = body.get("tools")
            if tools:
                tools[-1]["cache_control"] = control
        elif point.at == "system":
            system = body.get("system")
            if isinstance(system, str) and system:
                body["system"] = [{"type": "text", "text": system, "cache_control": control}]
        else:
            content = body["messages"][point.at]["content"]
            for block in reversed(content):
                if _markable(block):
                    block["cache_control"] = control
                    break


def mark_xml_body(body: dict[str, Any], points: list[CachePoint], assistant: str) -> None:
    """XML tool mode: the tools live in the system prompt and the conversation is one
    transcript, so a breakpoint at the tools or the system marks the system prompt, and
    one at any message marks the transcript's closed turns (all but the open one)."""
    system_ttl = [p.ttl for p in points if isinstance(p.at, str)]
    message_ttl = [p.ttl for p in points if isinstance(p.at, int)]
    system = body.get("system")
    if system_ttl and isinstance(system, str) and system:
        control = cache_control(system_ttl[-1])  # in prompt order, TTLs never grow
        body["system"] = [{"type": "text", "text": system, "cache_control": control}]
    if not message_ttl:
        return
    control = cache_control(message_ttl[-1])
    messages = body["messages"]
    prefill = messages[-1]["content"]
    text = prefill[0]["text"] if len(prefill) == 1 else ""
    cut = text.rfind(f"\n\n{assistant}:")
    if cut > 0:
        # The closed turns, then the open one: the same text, in two blocks.
        messages[-1]["content"] = [
            {"type": "text", "text": text[:cut], "cache_control": control},
            {"type": "text", "text": text[cut:]},
        ]
    elif len(messages) > 1 and messages[0]["content"][0].get("text"):
        messages[0]["content"][0]["cache_control"] = control  # the one closed turn
