"""XML tool mode's request body: the prefill transcript, the tools in the system prompt,
the stop sequences, and the settings that choose the mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcore.inference import (
    Message,
    Request,
    TextBlock,
    ThinkingBlock,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
)
from agentcore.providers.xml_transcript import (
    Participants,
    format_request,
    stop_sequences,
    tools_prompt,
    transcript,
)
from agentcore.settings import SettingsError, load_settings

DEFAULT = Participants()


def body(request: Request, participants: Participants = DEFAULT) -> dict[str, object]:
    return format_request(request, "claude-x", stream=True, participants=participants)


def test_one_prompt_is_a_user_turn_then_the_open_assistant_turn() -> None:
    request = Request("a:claude-x", [Message.user("Summarize the notes.")], system="Be brief.")
    assert body(request) == {
        "model": "claude-x",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "User: Summarize the notes."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Assistant:"}]},
        ],
        "stop_sequences": ["</function_calls>", "\nUser:"],
        "system": "Be brief.",
        "stream": True,
    }


def test_a_conversation_is_turns_with_the_assistant_left_open() -> None:
    messages = [
        Message.user("Hi"),
        Message.assistant("Hello. "),
        Message.user("Tides?"),
    ]
    request = Request("a:claude-x", messages, temperature=0.2, stop_sequences=["END"])
    sent = body(request, Participants("Ada", "Claude"))
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Ada: Hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Claude: Hello. \n\nAda: Tides?\n\nClaude:"}],
        },
    ]
    assert sent["stop_sequences"] == ["</function_calls>", "\nAda:", "END"]
    assert sent["temperature"] == 0.2
    assert "tools" not in sent and "system" not in sent


def test_a_prefilled_assistant_turn_is_the_open_one_without_trailing_space() -> None:
    turns = transcript([Message.user("Go"), Message.assistant("The answer is ")], DEFAULT)
    assert turns == ["User: Go", "Assistant: The answer is"]


def test_tools_go_in_the_system_prompt_never_as_tools() -> None:
    tool = Tool("search", "Search the notes", {"type": "object", "properties": {"q": {}}})
    sent = body(Request("a:claude-x", [Message.user("x")], system="Be brief.", tools=[tool]))
    assert "tools" not in sent
    assert sent["system"] == "Be brief.\n\n" + tools_prompt([tool])
    assert (
        '<function>{"name": "search", "description": "Search the notes", '
        '"parameters": {"type": "object", "properties": {"q": {}}}}</function>'
    ) in str(sent["system"])
    assert sent["stop_sequences"] == stop_sequences(DEFAULT)


def test_earlier_calls_and_results_are_written_as_markup_in_the_assistant_turn() -> None:
    messages = [
        Message.user("Weather?"),
        Message(
            "assistant",
            [
                ThinkingBlock("Use the tool."),
                TextBlock("Checking."),
                ToolUseBlock("t1", "get_weather", {"city": "Oslo", "days": [1, 2]}),
            ],
        ),
        Message("user", [ToolResultBlock("t1", "Sunny")]),
    ]
    assert transcript(messages, DEFAULT) == [
        "User: Weather?",
        "Assistant: <thinking>Use the tool.</thinking>\nChecking.\n"
        '<function_calls>\n<invoke name="get_weather">\n'
        '<parameter name="city">Oslo</parameter>\n'
        '<parameter name="days">[1, 2]</parameter>\n'
        "</invoke>\n</function_calls>\n"
        "<function_results>\n<result>\n<name>get_weather</name>\n<output>Sunny</output>\n"
        "</result>\n</function_results>",
    ]


def test_results_followed_by_a_user_turn_close_the_assistant_turn() -> None:
    messages = [
        Message.user("Weather?"),
        Message("assistant", [ToolUseBlock("t1", "get_weather", {})]),
        Message("user", [ToolResultBlock("t1", "no such city", is_error=True)]),
        Message.user("Thanks"),
    ]
    turns = transcript(messages, DEFAULT)
    assert turns[1].endswith("<error>no such city</error>\n</result>\n</function_results>")
    assert turns[2:] == ["User: Thanks", "Assistant:"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text(text)
    return path


def test_tool_mode_xml_is_for_the_anthropic_kind_only(tmp_path: Path) -> None:
    path = write(tmp_path, '[providers.o]\nkind = "openai"\ntool_mode = "xml"\n')
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert "providers.o.tool_mode" in message
    assert 'tool_mode = "xml" is for kind = "anthropic" only; this provider is \'openai\'' in (
        message
    )


def test_tool_mode_and_participants_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[providers.a]\nkind = "anthropic"\ntool_mode = "xml"\n'
        '[providers.a.participants]\nuser = "Ada"\n',
    )
    provider = load_settings(path).settings.providers["a"]
    assert (provider.tool_mode, provider.participants.user) == ("xml", "Ada")
    assert provider.participants.assistant == "Assistant"
    bad = write(tmp_path, '[providers.a]\nkind = "anthropic"\ntool_mode = "json"\n')
    with pytest.raises(SettingsError, match=r"providers\.a\.tool_mode"):
        load_settings(bad)


def test_the_example_settings_make_an_xml_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentcore.kernel import Kernel
    from agentcore.providers.anthropic_xml import AnthropicXmlProvider

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-example-not-a-real-key-0000")
    example = Path(__file__).resolve().parents[2] / "examples" / "anthropic-xml.toml"
    kernel = Kernel.load(example)
    provider = kernel.provider("claude")
    assert isinstance(provider, AnthropicXmlProvider)
    sent = provider.wire.call(Request("claude:m", [Message.user("Hi")]), "m", stream=True)
    assert sent.body["stop_sequences"] == ["</function_calls>", "\nUser:"]
