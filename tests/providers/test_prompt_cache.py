"""Prompt-cache breakpoints: where `prompt_cache = "auto"` and the host's `CachePoint`s put
``cache_control`` on the Anthropic wire (native and XML tool mode), and that the loopback
server, which refuses what the Messages API refuses about them, takes every body."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from providers_support import KEY, KEY_ENV, create_provider

from agentcore.inference import (
    CachePoint,
    Message,
    Request,
    TextBlock,
    ThinkingBlock,
    Tool,
)
from agentcore.providers.base import Provider
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.testing import LoopbackServer, Scenario

Make = Callable[..., Any]
SYSTEM = "You are terse."
TOOL = Tool("look", "Looks a thing up.", {"type": "object", "properties": {}})


@pytest.fixture
async def make(
    monkeypatch: pytest.MonkeyPatch, loopback_provider: LoopbackServer
) -> AsyncIterator[Make]:
    monkeypatch.setenv(KEY_ENV, KEY)
    made: list[Provider] = []

    def build(kind: str = "anthropic", **config: Any) -> Provider:
        wire = "openai" if kind == "openai" else "anthropic"
        settings = ProviderSettings(
            kind=kind, base_url=loopback_provider.base_url(wire), api_key_env=KEY_ENV, **config
        )
        made.append(create_provider("p", settings, InferenceSettings()))
        return made[-1]

    yield build
    for provider in made:
        await provider.aclose()


def conversation() -> list[Message]:
    return [
        Message.user("First question."),
        Message.assistant("First answer."),
        Message.user("Second question."),
    ]


async def sent(server: LoopbackServer, provider: Provider, request: Request) -> Any:
    """The body the provider sent; the loopback server took it (it answers 400 otherwise)."""
    server.script(Scenario.text("ok"))
    response = await provider.complete(request, "m")
    assert response.text == "ok"
    return server.calls[-1].body


def marks(body: Any) -> list[tuple[str, Any]]:
    """Where ``cache_control`` sits: ("tools"|"system"|message index, its ttl or None)."""
    found: list[tuple[str, Any]] = []
    for tool in body.get("tools") or []:
        if "cache_control" in tool:
            found.append(("tools", tool["cache_control"].get("ttl")))
    system = body.get("system")
    for block in system if isinstance(system, list) else []:
        if "cache_control" in block:
            found.append(("system", block["cache_control"].get("ttl")))
    for i, message in enumerate(body["messages"]):
        for block in message["content"]:
            if "cache_control" in block:
                found.append((str(i), block["cache_control"].get("ttl")))
    return found


async def test_auto_marks_system_and_last_user_turn(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make(prompt_cache="auto")
    body = await sent(loopback_provider, provider, Request("p:m", conversation(), system=SYSTEM))
    assert marks(body) == [("system", None), ("2", None)]
    assert body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]


async def test_off_sends_none_but_the_hosts_own(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make()
    plain = Request("p:m", conversation(), system=SYSTEM)
    assert marks(await sent(loopback_provider, provider, plain)) == []
    assert isinstance((await sent(loopback_provider, provider, plain))["system"], str)
    marked = Request(
        "p:m", conversation(), system=SYSTEM, tools=[TOOL], cache=[CachePoint("tools")]
    )
    assert marks(await sent(loopback_provider, provider, marked)) == [("tools", None)]


async def test_one_hour_ttl_from_settings(make: Make, loopback_provider: LoopbackServer) -> None:
    provider = make(prompt_cache="auto", prompt_cache_ttl="1h")
    body = await sent(loopback_provider, provider, Request("p:m", conversation(), system=SYSTEM))
    assert marks(body) == [("system", "1h"), ("2", "1h")]


async def test_never_what_the_api_refuses(make: Make, loopback_provider: LoopbackServer) -> None:
    """Six asked for: the last four kept; a 1h after a 5m shortened; a message ending in
    thinking marked on its last other block; an empty text never marked."""
    messages = [
        Message.user("a"),
        Message("assistant", [TextBlock("b"), ThinkingBlock("hmm", "sig")]),
        Message.user("c"),
        Message("assistant", [TextBlock("d"), TextBlock("")]),
        Message.user("e"),
    ]
    host = [CachePoint("tools"), CachePoint(0), CachePoint(1), CachePoint(3, "1h"), CachePoint(9)]
    request = Request("p:m", messages, system=SYSTEM, tools=[TOOL], cache=host)
    body = await sent(loopback_provider, make(prompt_cache="auto"), request)
    assert marks(body) == [("0", None), ("1", None), ("3", None), ("4", None)]
    assert "cache_control" in body["messages"][1]["content"][0]  # the text, not the thinking
    assert "cache_control" in body["messages"][3]["content"][0]  # not the empty text


async def test_the_loopback_refuses_what_the_api_refuses(loopback_provider: LoopbackServer) -> None:
    """The check the tests above lean on can fail: five marks, and a 1h after a 5m."""
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    hour = {"type": "text", "text": "y", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    bodies = {
        "maximum of 4": [block] * 5,
        "must not come after": [block, hour],
        "empty text": [{**block, "text": ""}],
    }
    async with aiohttp.ClientSession() as session:
        for words, content in bodies.items():
            loopback_provider.script(Scenario.text("ok"))
            body = {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": content}],
            }
            url = loopback_provider.base_url("anthropic") + "/v1/messages"
            async with session.post(url, json=body) as reply:
                assert reply.status == 400
                assert words in (await reply.json())["error"]["message"]


async def test_xml_mode_marks_system_and_closed_turns(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make(prompt_cache="auto", tool_mode="xml")
    request = Request("p:m", conversation(), system=SYSTEM, tools=[TOOL])
    body = await sent(loopback_provider, provider, request)
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][0]["text"].startswith(SYSTEM)
    closed, open_turn = body["messages"][-1]["content"]
    assert closed["cache_control"] == {"type": "ephemeral"} and "cache_control" not in open_turn
    assert closed["text"].endswith("User: Second question.")
    assert open_turn["text"] == "\n\nAssistant:"
    unmarked = await sent(loopback_provider, make(tool_mode="xml"), request)
    assert closed["text"] + open_turn["text"] == unmarked["messages"][-1]["content"][0]["text"]


async def test_xml_mode_one_turn_marks_the_user_message(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make(prompt_cache="auto", tool_mode="xml")
    body = await sent(loopback_provider, provider, Request("p:m", [Message.user("Only.")]))
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "system" not in body


async def test_wires_that_cache_on_their_own_get_no_marks(
    make: Make, loopback_provider: LoopbackServer
) -> None:
    provider = make("openai", prompt_cache="auto")
    request = Request("p:m", conversation(), system=SYSTEM, cache=[CachePoint("system")])
    body = await sent(loopback_provider, provider, request)
    assert "cache_control" not in str(body)
