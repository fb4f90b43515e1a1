"""agentcore.testing itself: scripting, recording, connection accounting, settings, fixtures."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from agentcore.inference import Message, Request, Token
from agentcore.kernel import Kernel
from agentcore.testing import API_KEY, API_KEY_ENV, Call, LoopbackServer, Scenario, to_toml

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides

CHAT = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


def post(
    server: LoopbackServer, path: str, body: dict[str, object], **headers: str
) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=headers, timeout=5)


def test_fixture_is_registered_through_pytest11(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("agentcore")


def test_queues_per_provider_then_shared_then_default(loopback_provider: LoopbackServer) -> None:
    server = loopback_provider
    server.script(Scenario.text("for a"), provider="a")
    server.script(Scenario.text("shared"))
    assert (server.pending("a"), server.pending()) == (1, 1)
    texts = []
    for path in ("/p/b/v1/chat/completions", "/p/a/v1/chat/completions", "/v1/chat/completions"):
        reply = post(server, path, CHAT)
        texts.append(
            reply.json()["choices"][0]["message"]["content"]
            if reply.is_success
            else reply.status_code
        )
    assert texts == ["shared", "for a", 400]
    assert "no scenario scripted" in post(server, "/v1/messages", CHAT).json()["error"]["message"]
    server.default = Scenario.echo()
    reply = post(server, "/v1/messages", CHAT)
    assert reply.json()["content"] == [{"type": "text", "text": "ping"}]
    assert [c.provider for c in server.calls] == ["b", "a", None, None, None]
    assert [c.wire for c in server.calls][-2:] == ["anthropic", "anthropic"]
    server.reset()
    assert server.calls == [] and server.pending() == 0


def test_choose_picks_each_calls_scenario_from_the_call_and_falls_back_to_the_queues() -> None:
    """`choose=` sees the whole call (body, wire, provider) before it plays: concurrent calls
    each get their own scenario, whatever order they come in; None falls back."""

    def by_prompt(call: Call) -> Scenario | None:
        prompt = call.body["messages"][-1]["content"]
        return Scenario.text(f"for {prompt}") if prompt != "queued" else None

    with LoopbackServer(choose=by_prompt) as server:
        server.script(Scenario.text("from the queue"))
        texts = []
        for prompt in ("b", "queued", "a"):
            body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
            texts.append(post(server, "/v1/chat/completions", body).json())
    assert [t["choices"][0]["message"]["content"] for t in texts] == [
        "for b",
        "from the queue",
        "for a",
    ]
    assert [c.scenario.kind if c.scenario else None for c in server.calls] == ["text"] * 3


def test_reset_closes_the_connection_before_any_response(
    loopback_provider: LoopbackServer,
) -> None:
    loopback_provider.script(Scenario.reset())
    with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
        post(loopback_provider, "/v1/messages", CHAT)
    loopback_provider.wait_idle_sync()
    assert loopback_provider.calls[-1].disconnected


def test_calls_record_headers_and_redact_them_in_repr(loopback_provider: LoopbackServer) -> None:
    loopback_provider.script(Scenario.text())
    post(loopback_provider, "/v1/messages", CHAT, **{"X-Api-Key": "sk-very-secret"})
    call = loopback_provider.calls[-1]
    assert call.headers["x-api-key"] == "sk-very-secret"
    assert call.body == CHAT and call.model == "m" and call.stream is False
    assert "sk-very-secret" not in repr(call) and "[REDACTED]" in repr(call)


def test_unplayable_combinations_answer_400(loopback_provider: LoopbackServer) -> None:
    loopback_provider.script(Scenario.finish_error(), Scenario.pause_turn())
    first = post(loopback_provider, "/v1/messages", {**CHAT, "stream": True})
    second = post(loopback_provider, "/v1/chat/completions", CHAT)
    assert (first.status_code, second.status_code) == (400, 400)
    assert "openai wire" in first.json()["error"]["message"]
    assert "pause_turn" in second.json()["error"]["message"]


def test_timestamps_and_chunk_delay(loopback_provider: LoopbackServer) -> None:
    loopback_provider.script(Scenario.text("one two three", timestamps=True, chunk_delay_s=0.001))
    with httpx.stream(
        "POST", loopback_provider.url + "/v1/chat/completions", json={**CHAT, "stream": True}
    ) as reply:
        datas = [line[6:] for line in reply.iter_lines() if line.startswith("data: {")]
    stamped = [json.loads(d) for d in datas if "agentcore_emitted_at" in d]
    call = loopback_provider.calls[-1]
    assert [c["choices"][0]["delta"]["content"] for c in stamped] == ["one ", "two ", "three"]
    assert [c["agentcore_emitted_at"] for c in stamped] == call.emitted_at
    assert call.emitted_at == sorted(call.emitted_at)


def test_sync_use_and_wait_idle_reports_what_is_left(loopback_provider: LoopbackServer) -> None:
    loopback_provider.script(Scenario.stall())
    with (
        httpx.Client() as client,
        client.stream(
            "POST", loopback_provider.url + "/v1/messages", json={**CHAT, "stream": True}
        ) as reply,
    ):
        chunks = reply.iter_raw()
        next(chunks)  # the ping arrived; the server now hangs
        with pytest.raises(AssertionError, match="1 request"):
            loopback_provider.wait_idle_sync(timeout_s=0.05)
    loopback_provider.wait_idle_sync()
    assert loopback_provider.calls[-1].disconnected


async def test_runs_on_the_current_loop_as_a_context_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    async with LoopbackServer(default=Scenario.text("same loop")) as server:
        path = server.write_settings(tmp_path / "s.toml", {"main": "anthropic"})
        async with Kernel.load(path, environ=LOOPBACK_ENV, discover_plugins=False) as kernel:
            response = await kernel.complete(Request("main:m", [Message.user("x")]))
        await server.wait_idle()
    assert response.text == "same loop"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_long_stream(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], provider: str
) -> None:
    loopback_provider.script(Scenario.long(2000), Scenario.long(2000), provider=provider)
    async with Kernel.load(
        loopback_settings(), environ=LOOPBACK_ENV, discover_plugins=False
    ) as kernel:
        request = Request(f"{provider}:m", [Message.user("x")])
        tokens = [e.text async for e in kernel.stream(request) if isinstance(e, Token)]
        whole = await kernel.complete(request)
    assert len(tokens) == 2000
    assert len(set(tokens[:2])) == 2  # consecutive chunks differ
    assert "".join(tokens) == whole.text
    await loopback_provider.wait_idle()


def test_settings_file(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    path = loopback_settings(
        {"main": "anthropic", "router": "openrouter"},
        inference={"progress_timeout_s": 0.5},
        sections={"retry": {"max_attempts": 2}, "mcpl": {"routing": {"default": "main:m"}}},
    )
    data = tomllib.loads(path.read_text())
    assert data["providers"]["main"] == {
        "kind": "anthropic",
        "base_url": loopback_provider.base_url("anthropic", "main"),
        "api_key_env": API_KEY_ENV,
    }
    assert data["providers"]["router"]["base_url"].endswith("/p/router/v1")
    assert data["inference"] == {"progress_timeout_s": 0.5}
    assert data["retry"] == {"max_attempts": 2}
    assert data["mcpl"] == {"routing": {"default": "main:m"}}


def test_to_toml_round_trips() -> None:
    data = {
        "top": 1,
        "plugins": {"disabled": ["a", "b"], "strict": False},
        "mcpl": {"servers": {"x": {"command": ["python", "s.py"], "env": {"A": "1"}}}},
        "keys": {"with space": 'v"q'},
    }
    assert tomllib.loads(to_toml(data)) == data
