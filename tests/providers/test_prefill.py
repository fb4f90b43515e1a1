"""Models that refuse a prefill: XML tool mode sends them the transcript without the open
assistant turn, or refuses (before any traffic) what only a prefill can say."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcore.inference import InferenceError, Message, Request, ToolResultBlock, ToolUseBlock
from agentcore.model_info import model_prefills
from agentcore.providers.xml_transcript import Participants, format_request
from agentcore.settings import ModelSettings, load_settings
from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, LoopbackServer, Scenario


def no_prefill(request: Request) -> dict[str, object]:
    return format_request(request, "m", stream=False, participants=Participants(), prefill=False)


def test_the_transcript_goes_whole_in_the_user_message() -> None:
    request = Request(
        "a:m",
        [Message.user("Hi."), Message.assistant("Hello."), Message.user("Summarize.")],
    )
    body = no_prefill(request)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "User: Hi.\n\nAssistant: Hello.\n\nUser: Summarize."}
            ],
        }
    ]


@pytest.mark.parametrize(
    "last",
    [
        [Message.assistant("I think")],  # a prefilled reply
        [
            Message("assistant", [ToolUseBlock("t1", "get", {"a": 1})]),
            Message("user", [ToolResultBlock("t1", "42")]),  # results the model goes on after
        ],
    ],
    ids=["prefilled-reply", "tool-results"],
)
def test_an_open_assistant_turn_is_refused_saying_why(last: list[Message]) -> None:
    request = Request("a:m", [Message.user("Go."), *last])
    with pytest.raises(InferenceError) as caught:
        no_prefill(request)
    assert caught.value.kind == "invalid_request" and not caught.value.retryable
    assert "takes no prefill (prefill = false)" in caught.value.message


def test_the_capability_comes_from_settings_then_the_built_in_table() -> None:
    assert model_prefills("claude-opus-4-6") is False
    assert model_prefills("us.anthropic.claude-opus-4-6-v1:0") is False
    assert model_prefills("claude-sonnet-4-6") is False
    assert model_prefills("claude-sonnet-4-5-20250929") is True
    assert model_prefills("some-unknown-model") is True
    assert model_prefills("claude-opus-4-6", ModelSettings(prefill=True)) is True
    assert model_prefills("claude-sonnet-4-5", ModelSettings(prefill=False)) is False


def test_prefill_is_a_models_key(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[providers.a]\nkind = "anthropic"\ntool_mode = "xml"\n'
        "[providers.a.models.claude-x]\nprefill = false\n"
    )
    settings = load_settings(path, environ={}).settings
    assert settings.providers["a"].models["claude-x"].prefill is False


async def test_anthropic_xml_mode_sends_no_prefill_and_refuses_without_traffic(
    loopback_provider: LoopbackServer, tmp_path: Path
) -> None:
    path = loopback_provider.write_settings(
        tmp_path / "s.toml",
        {
            "a": {
                "kind": "anthropic",
                "tool_mode": "xml",
                "models": {"claude-x": {"prefill": False}},
            }
        },
    )
    loopback_provider.script(Scenario.text("Fine."))
    async with Kernel.load(path, environ={API_KEY_ENV: API_KEY}, discover_plugins=False) as kernel:
        response = await kernel.complete(Request("a:claude-x", [Message.user("Hi.")]))
        with pytest.raises(InferenceError):
            await kernel.complete(
                Request("a:claude-x", [Message.user("Hi."), Message.assistant("Well")])
            )
    assert response.content[0].text == "Fine."  # type: ignore[union-attr]
    (call,) = loopback_provider.calls
    assert [m["role"] for m in call.body["messages"]] == ["user"]
