"""The console over real HTTP: a kernel with the default policies and the console plugin,
the loopback provider behind it, an aiohttp client in front. The page, the JSON status,
the event stream (the current state at once, then every change), the token beyond
loopback, and no secret on any of them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agentcore_console import ConsolePage
from agentcore_provider_hold import ProviderHold
from agentcore_retry import RetryPolicy
from agentcore_waiting_trace import WaitingTrace

from agentcore.api import InferenceError, Message, Request, SettingsError, redact
from agentcore.testing import (
    API_KEY,
    Kernel,
    LoopbackServer,
    PluginLoadError,
    Scenario,
)

TOKEN = "console-token-31337-test"
TIMEOUT = aiohttp.ClientTimeout(total=10)


def load(
    loopback_settings: Callable[..., Path], console: dict[str, Any], **sections: Any
) -> tuple[Kernel, ConsolePage]:
    page = ConsolePage()
    path = loopback_settings(
        {"a": "anthropic"},
        sections={
            "retry": {"max_attempts": 2, "initial_delay_s": 0.01, "jitter_s": 0.0},
            "console": console,
            **sections,
        },
    )
    plugins = {
        "retry": RetryPolicy,
        "provider-hold": ProviderHold,
        "waiting-trace": WaitingTrace,
        "console": page,
    }
    return Kernel.load(path, discover_plugins=False, plugins=plugins), page


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield session


async def next_state(events: aiohttp.ClientResponse) -> dict[str, Any]:
    """The next ``state`` event of a server-sent event stream."""
    kind = None
    while True:
        line = (await events.content.readline()).decode()
        assert line, "the event stream ended"
        if line.startswith("event:"):
            kind = line.partition(":")[2].strip()
        elif line.startswith("data:") and kind == "state":
            state: dict[str, Any] = json.loads(line.partition(":")[2])
            return state


async def test_page_status_and_a_live_event_stream(
    loopback_settings: Callable[..., Path],
    loopback_provider: LoopbackServer,
    client: aiohttp.ClientSession,
) -> None:
    kernel, page = load(loopback_settings, {"listen": "127.0.0.1:0"})
    loopback_provider.script(Scenario.text("hi", input_tokens=4, output_tokens=2), provider="a")
    async with kernel:
        assert page.url is not None and page.url.startswith("http://127.0.0.1:")
        async with client.get(page.url) as response:
            assert response.status == 200
            assert response.content_type == "text/html"
            html = await response.text()
        assert "agentcore console" in html and "EventSource" in html
        async with client.get(page.url + "events") as events:
            assert events.content_type == "text/event-stream"
            first = await next_state(events)  # at once, before anything happened
            assert first["totals"]["completed"] == 0 and first["inferences"] == []
            await kernel.complete(Request("a:claude-x", [Message.user("Hi")]))
            state = await next_state(events)
            while state["totals"]["completed"] < 1:
                state = await next_state(events)
        assert state["totals"]["inputTokens"] == 4
        assert state["providers"][0]["name"] == "a"
        async with client.get(page.url + "status") as response:
            status = await response.json()
        assert status["totals"]["completed"] == 1
        assert status["providers"] == state["providers"]
        # The loop's tasks, this request's own among them (bench/soak.py's leak check).
        assert status["process"]["asyncioTasks"] >= 1
        # A browser that reconnects gets the current state at once.
        async with client.get(page.url + "events") as events:
            assert (await next_state(events))["totals"]["completed"] == 1
    assert page.url is not None
    with pytest.raises(aiohttp.ClientConnectionError):  # stopped with the kernel
        async with client.get(page.url + "status"):
            pass


async def test_a_hold_and_a_waiting_call_show_in_the_status(
    loopback_settings: Callable[..., Path],
    loopback_provider: LoopbackServer,
    client: aiohttp.ClientSession,
) -> None:
    kernel, page = load(loopback_settings, {"listen": "127.0.0.1:0"})
    loopback_provider.script(Scenario.rate_limit(retry_after=1), Scenario.text("ok"), provider="a")
    async with kernel:
        call = asyncio.create_task(kernel.complete(Request("a:m", [Message.user("Hi")])))
        assert page.url is not None
        async with client.get(page.url + "events") as events:
            state = await next_state(events)
            while not (state["holds"] and state["waiting"]):
                state = await next_state(events)
            [hold] = state["holds"]
            assert (hold["provider"], hold["model"], hold["reason"]) == ("a", "m", "rate_limit")
            assert hold["untilMs"] > state["nowMs"] - 1000
            assert state["waiting"][0]["inferenceId"] == state["inferences"][0]["inferenceId"]
            await call
            while state["holds"] or state["waiting"] or state["inferences"]:
                state = await next_state(events)  # released: the probe succeeded
        assert state["totals"]["completed"] == 1


async def test_beyond_loopback_a_token_is_required_everywhere(
    loopback_settings: Callable[..., Path],
    loopback_provider: LoopbackServer,
    client: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONSOLE_TEST_TOKEN", TOKEN)
    kernel, page = load(
        loopback_settings, {"listen": "0.0.0.0:0", "token_env": "CONSOLE_TEST_TOKEN"}
    )
    async with kernel:
        assert page.url is not None
        base = page.url.replace("0.0.0.0", "127.0.0.1")
        for path in ("", "status", "events"):
            for headers, query in (
                ({}, ""),
                ({}, "?token=wrong"),
                ({"Authorization": "Bearer x"}, ""),
            ):
                async with client.get(base + path + query, headers=headers) as response:
                    assert response.status == 401, (path, headers, query)
                    assert TOKEN not in await response.text()
        async with client.get(base + "?token=" + TOKEN) as response:
            assert response.status == 200
            assert TOKEN not in await response.text()  # the page never carries it
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with client.get(base + "status", headers=auth) as response:
            assert response.status == 200
        async with client.get(base + "events?token=" + TOKEN) as events:
            assert events.status == 200
            await next_state(events)
        # A secret like any other: no log line, trace or page could show it.
        assert TOKEN not in redact(f"GET /?token={TOKEN}")


async def test_beyond_loopback_without_a_token_the_host_does_not_start(
    loopback_settings: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONSOLE_TEST_TOKEN", raising=False)
    kernel, _ = load(loopback_settings, {"listen": "0.0.0.0:0", "token_env": "CONSOLE_TEST_TOKEN"})
    with pytest.raises(PluginLoadError) as info:
        await kernel.start()
    message = str(info.value)
    assert "console" in message and "not loopback" in message
    assert "$CONSOLE_TEST_TOKEN is empty or not set" in message


def test_listen_must_be_host_and_port(loopback_settings: Callable[..., Path]) -> None:
    with pytest.raises(SettingsError) as info:
        load(loopback_settings, {"listen": "8765"})
    assert "console.listen" in str(info.value) and "HOST:PORT" in str(info.value)


async def test_no_secret_reaches_the_page_even_when_the_provider_echoes_it(
    loopback_settings: Callable[..., Path],
    loopback_provider: LoopbackServer,
    client: aiohttp.ClientSession,
) -> None:
    kernel, page = load(loopback_settings, {"listen": "127.0.0.1:0"})
    loopback_provider.script(Scenario.echoes_credentials(), provider="a")
    async with kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(Request("a:m", [Message.user("Hi")]))
        assert page.url is not None
        async with client.get(page.url + "status") as response:
            text = await response.text()
    assert "Incorrect API key provided" in text  # the failure and its cause are shown...
    assert API_KEY not in text  # ...without the key it echoed
