"""The kind's own settings keys (validated at load, typos refused), what goes on the wire
for each API and mode, usage with cache tokens, and frames that fail their checks."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from agentcore_bedrock import BedrockPlugin, BedrockSettings
from agentcore_bedrock.converse import ConverseTranslator
from agentcore_bedrock.eventstream import EventStreamDecoder
from agentcore_bedrock.wire import InvokeTranslator

from agentcore.api import (
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    SettingsError,
    TextBlock,
    ToolUseBlock,
)
from agentcore.testing import Kernel, LoopbackServer, Scenario
from agentcore.testing.wires.bedrock import encode_chunk, encode_converse, event_message

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def load(tmp_path: Path, body: str) -> Kernel:
    path = tmp_path / "s.toml"
    path.write_text(body)
    return Kernel.load(path, environ={}, discover_plugins=False, plugins={"bedrock": BedrockPlugin})


def test_the_kinds_keys_are_read_and_typed(tmp_path: Path) -> None:
    kernel = load(
        tmp_path,
        '[providers.br]\nkind = "bedrock"\nregion = "eu-west-1"\nauth = "api_key"\n'
        'api_key_env = "K"\nanthropic_beta = ["context-1m-2025-08-07"]\ntool_mode = "xml"\n',
    )
    config = kernel.settings.providers["br"]
    assert isinstance(config, BedrockSettings)
    assert (config.region, config.auth, config.tool_mode) == ("eu-west-1", "api_key", "xml")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('regoin = "us-east-1"', "providers.br.regoin"),  # a typo is refused, as everywhere
        ('auth = "password"', "providers.br.auth"),
        ("region = 3", "providers.br.region"),
    ],
)
def test_a_wrong_key_is_refused_at_load(tmp_path: Path, line: str, problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(tmp_path, f'[providers.br]\nkind = "bedrock"\n{line}\n')
    assert problem in str(caught.value)


def test_another_kind_still_refuses_bedrocks_keys(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load(tmp_path, '[providers.a]\nkind = "anthropic"\nregion = "us-east-1"\n')
    assert "providers.a.region" in str(caught.value)


async def test_no_region_is_a_clear_error(tmp_path: Path, bedrock_server: LoopbackServer) -> None:
    kernel = load(
        tmp_path, f'[providers.br]\nkind = "bedrock"\nbase_url = "{bedrock_server.url}"\n'
    )
    async with kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(Request(f"br:{MODEL}", [Message.user("hi")]))
    assert "has no AWS region" in caught.value.message
    assert bedrock_server.calls == []


async def test_an_invoke_body_is_a_messages_body_for_bedrock(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel]
) -> None:
    bedrock_server.script(Scenario.text("ok"))
    async with bedrock_kernel(anthropic_beta=["context-1m-2025-08-07"]) as kernel:
        await kernel.complete(Request(f"br:{MODEL}", [Message.user("hi")], system="Be brief."))
    (call,) = bedrock_server.calls
    assert call.body["anthropic_version"] == "bedrock-2023-05-31"
    assert call.body["anthropic_beta"] == ["context-1m-2025-08-07"]
    assert "model" not in call.body and "stream" not in call.body
    assert call.body["system"] == "Be brief."
    assert call.path == f"/model/{MODEL}/invoke"  # the cross-region profile id as given


XML_CALL = (
    'Checking.\n<function_calls>\n<invoke name="get_weather">\n'
    '<parameter name="city">Paris</parameter>\n</invoke>\n</function_calls>'
)


@pytest.mark.parametrize("prefill", [True, False])
async def test_xml_tool_mode_over_invoke(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel], prefill: bool
) -> None:
    bedrock_server.script(Scenario.text(XML_CALL))
    models = {} if prefill else {MODEL: {"prefill": False}}
    async with bedrock_kernel(tool_mode="xml", models=models) as kernel:
        response = await kernel.complete(Request(f"br:{MODEL}", [Message.user("Weather?")]))
        if not prefill:
            with pytest.raises(InferenceError, match="takes no prefill"):
                await kernel.complete(
                    Request(f"br:{MODEL}", [Message.user("Hi."), Message.assistant("Well")])
                )
    assert response.stop.reason == "tool_use"
    assert response.content == [
        TextBlock("Checking.\n"),
        ToolUseBlock(response.content[1].id, "get_weather", {"city": "Paris"}),  # type: ignore[union-attr]
    ]
    (call,) = bedrock_server.calls
    roles = [m["role"] for m in call.body["messages"]]
    assert roles == (["user", "assistant"] if prefill else ["user"])


def test_usage_counts_cached_input_in_the_input_tokens() -> None:
    converse = ConverseTranslator("br", "amazon.nova-pro-v1:0", "error")
    decoder = EventStreamDecoder()
    usage = {"inputTokens": 10, "outputTokens": 2, "cacheReadInputTokens": 100,
             "cacheWriteInputTokens": 5}  # fmt: skip
    frames = [
        encode_converse(("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})),
        encode_converse(("messageStop", {"stopReason": "end_turn"})),
        encode_converse(("metadata", {"usage": usage})),
    ]
    events = converse.feed(decoder.feed_tuples(b"".join(frames))) + converse.end()
    done = events[-1]
    assert isinstance(done, Complete)
    got = done.response.usage
    assert (got.input_tokens, got.cache_read_tokens, got.cache_write_tokens) == (115, 100, 5)

    invoke = InvokeTranslator("br", MODEL)
    start = {"type": "message_start", "message": {"model": MODEL, "usage": {
        "input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 5}}}  # fmt: skip
    chunks = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    ]
    decoder = EventStreamDecoder()
    raw = b"".join(encode_chunk((c["type"], c)) for c in chunks)
    events = invoke.feed(decoder.feed_tuples(raw)) + invoke.end()
    done = events[-1]
    assert isinstance(done, Complete)
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (115, 2)


def test_a_frame_that_fails_its_crc_fails_the_call() -> None:
    frame = bytearray(encode_converse(("messageStart", {"role": "assistant"})))
    frame[-6] ^= 0xFF  # a payload byte: the message CRC no longer matches
    translator = ConverseTranslator("br", "amazon.nova-pro-v1:0", "error")
    (failed,) = translator.feed(EventStreamDecoder().feed_tuples(bytes(frame)))
    assert isinstance(failed, Failed)
    assert failed.error.kind == "server" and "event-stream frame" in failed.error.message


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("throttlingException", "rate_limit"),
        ("serviceUnavailableException", "overloaded"),
        ("internalServerException", "server"),
        ("modelStreamErrorException", "server"),
        ("validationException", "invalid_request"),
    ],
)
def test_each_exception_frame_is_its_error_kind(name: str, kind: str) -> None:
    headers = {":exception-type": name, ":content-type": "application/json",
               ":message-type": "exception"}  # fmt: skip
    raw = event_message(headers, json.dumps({"message": "stop"}).encode())
    for translator in (
        ConverseTranslator("br", "amazon.nova-pro-v1:0", "error"),
        InvokeTranslator("br", MODEL),
    ):
        (failed,) = translator.feed(EventStreamDecoder().feed_tuples(raw))
        assert isinstance(failed, Failed) and failed.error.kind == kind


def test_a_chunk_carries_the_anthropic_event_in_base64() -> None:
    raw = encode_chunk(("ping", {"type": "ping"}))
    decoder = EventStreamDecoder()
    assert decoder.feed_tuples(raw[:7]) == []  # a frame split across reads waits for the rest
    ((name, data, _),) = decoder.feed_tuples(raw[7:])
    assert (name, json.loads(data)) == ("chunk", {"type": "ping"})
    payload = json.loads(raw[raw.index(b"{") : -4])
    assert base64.b64decode(payload["bytes"]) == b'{"type":"ping"}'


async def test_a_cache_control_ttl_is_left_out(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel]
) -> None:
    system = [{"type": "text", "text": "Be brief.",
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]  # fmt: skip
    bedrock_server.script(Scenario.text("ok"))
    async with bedrock_kernel() as kernel:
        request = Request(f"br:{MODEL}", [Message.user("hi")], extras={"system": system})
        await kernel.complete(request)
    (call,) = bedrock_server.calls
    assert call.body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert system[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}  # not the caller's


def test_one_large_read_of_many_frames_is_read_whole() -> None:
    delta = ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "w "}})
    raw = encode_converse(delta) * 3000  # some 300 KB in one read: fed to botocore in slices
    events = EventStreamDecoder().feed_tuples(raw)
    assert len(events) == 3000 and {e[0] for e in events} == {"contentBlockDelta"}
