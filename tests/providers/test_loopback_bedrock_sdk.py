"""The loopback server's Bedrock wires checked against boto3's ``bedrock-runtime`` client:
what it sends for each scenario family, on InvokeModel and Converse, streamed and whole,
parses in botocore (event-stream framing and both CRCs, the exception frames, the error
replies) and reads as the text, stop, usage, tool call and error scripted; boto3's own
SigV4 signature passes the server's check, and a wrong one is refused as AWS refuses it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from agentcore.testing import LoopbackServer, Scenario

ACCESS, SECRET = "AKIDSDKCHECK00000001", "sdk-check-secret-0000000000000000"
ANTHROPIC = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
OTHER = "amazon.nova-pro-v1:0"


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(aws_credentials={ACCESS: SECRET}) as running:
        yield running


@pytest.fixture
def client(server: LoopbackServer) -> Any:
    server.reset()
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=5),
    )


def invoke_stream(client: Any) -> dict[str, Any]:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    response = client.invoke_model_with_response_stream(modelId=ANTHROPIC, body=json.dumps(body))
    seen: dict[str, Any] = {"text": "", "tool": "", "redacted": []}
    for item in response["body"]:
        event = json.loads(item["chunk"]["bytes"])
        if event["type"] == "content_block_start":
            block = event["content_block"]
            if block["type"] == "redacted_thinking":
                seen["redacted"].append(block["data"].encode())
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            seen["text"] += delta.get("text", "")
            seen["tool"] += delta.get("partial_json", "")
        elif event["type"] == "message_delta":
            seen["stop"] = event["delta"]["stop_reason"]
            seen["output"] = event["usage"]["output_tokens"]
        elif event["type"] == "message_start":
            seen["input"] = event["message"]["usage"]["input_tokens"]
    return seen


def converse_stream(client: Any) -> dict[str, Any]:
    response = client.converse_stream(
        modelId=OTHER, messages=[{"role": "user", "content": [{"text": "hi"}]}]
    )
    seen: dict[str, Any] = {"text": "", "tool": "", "redacted": []}
    for item in response["stream"]:
        if "contentBlockDelta" in item:
            delta = item["contentBlockDelta"]["delta"]
            if "redactedContent" in delta.get("reasoningContent", {}):
                seen["redacted"].append(delta["reasoningContent"]["redactedContent"])
            seen["text"] += delta.get("text", "")
            seen["tool"] += delta.get("toolUse", {}).get("input", "")
        elif "messageStop" in item:
            seen["stop"] = item["messageStop"]["stopReason"]
        elif "metadata" in item:
            usage = item["metadata"]["usage"]
            seen["input"], seen["output"] = usage["inputTokens"], usage["outputTokens"]
    return seen


def converse(client: Any) -> dict[str, Any]:
    response = client.converse(
        modelId=OTHER, messages=[{"role": "user", "content": [{"text": "hi"}]}]
    )
    content = response["output"]["message"]["content"]
    tool = next((c["toolUse"]["input"] for c in content if "toolUse" in c), None)
    reasoning = [c["reasoningContent"] for c in content if "reasoningContent" in c]
    return {
        "redacted": [r["redactedContent"] for r in reasoning if "redactedContent" in r],
        "text": "".join(c.get("text", "") for c in content),
        "tool": json.dumps(tool) if tool is not None else "",
        "stop": response["stopReason"],
        "input": response["usage"]["inputTokens"],
        "output": response["usage"]["outputTokens"],
    }


def invoke(client: Any) -> dict[str, Any]:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    response = client.invoke_model(modelId=ANTHROPIC, body=json.dumps(body))
    data = json.loads(response["body"].read())
    tool = next((c["input"] for c in data["content"] if c["type"] == "tool_use"), None)
    redacted = [c["data"].encode() for c in data["content"] if c["type"] == "redacted_thinking"]
    return {
        "redacted": redacted,
        "text": "".join(c.get("text", "") for c in data["content"]),
        "tool": json.dumps(tool) if tool is not None else "",
        "stop": data["stop_reason"],
        "input": data["usage"]["input_tokens"],
        "output": data["usage"]["output_tokens"],
    }


REDACTED = "cmVkYWN0ZWQtcmVhc29uaW5n"
"""Redacted reasoning's data (base64, as Bedrock's blobs travel in JSON)."""

CALLS = {
    "invoke_model_with_response_stream": invoke_stream,
    "converse_stream": converse_stream,
    "converse": converse,
    "invoke_model": invoke,
}
STOPS = {  # scenario stop -> (Anthropic's word, Converse's word)
    "end_turn": ("end_turn", "end_turn"),
    "max_tokens": ("max_tokens", "max_tokens"),
    "stop_sequence": ("stop_sequence", "stop_sequence"),
    "refusal": ("refusal", "content_filtered"),
    "tool_use": ("tool_use", "tool_use"),
}
REPLIES = {
    "text": Scenario.text("Hello there, w\u00f6rld \u2603"),
    "max_tokens": Scenario.max_tokens(),
    "stop_sequence": Scenario.stop_sequence(),
    "refusal": Scenario.refusal(),
    "tool_use": Scenario.tool_use(text="Looking."),
    "thinking": Scenario.thinking(),
    "redacted": Scenario.text("Hello.", redacted_thinking=REDACTED),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("family", REPLIES)
def test_each_reply_reads_in_boto3(
    server: LoopbackServer, client: Any, call: str, family: str
) -> None:
    scenario = REPLIES[family]
    server.script(scenario)
    seen = CALLS[call](client)
    assert seen["text"] == scenario.reply  # type: ignore[attr-defined]
    anthropic_word, converse_word = STOPS[scenario.stop]  # type: ignore[attr-defined]
    assert seen["stop"] == (anthropic_word if "invoke" in call else converse_word)
    assert (seen["input"], seen["output"]) == (12, len(scenario.reply.split()))  # type: ignore[attr-defined]
    if family == "tool_use":
        assert json.loads(seen["tool"]) == {"city": "Paris", "unit": "celsius"}
    # Converse's redactedContent is a blob: boto3 hands out its bytes, decoded from base64.
    redacted = REDACTED.encode() if "invoke" in call else base64.b64decode(REDACTED)
    assert seen["redacted"] == ([redacted] if family == "redacted" else [])


@pytest.mark.parametrize("call", ["invoke_model_with_response_stream", "converse_stream"])
@pytest.mark.parametrize(
    ("error_type", "code"),
    [("rate_limit_error", "throttlingException"),
     ("overloaded_error", "serviceUnavailableException"),
     ("modelStreamErrorException", "modelStreamErrorException")],
)  # fmt: skip
def test_a_mid_stream_exception_is_an_event_stream_error(
    server: LoopbackServer, client: Any, call: str, error_type: str, code: str
) -> None:
    server.script(Scenario.stream_error("Partial ", error_type=error_type, message="went wrong"))
    with pytest.raises(EventStreamError) as caught:
        CALLS[call](client)
    assert caught.value.response["Error"] == {"Code": code, "Message": "went wrong"}


ERROR_REPLIES = {
    "throttling": (Scenario.rate_limit(), "ThrottlingException", 429),
    "quota": (Scenario.quota(), "ServiceQuotaExceededException", 429),
    "validation": (Scenario.bad_request("bad"), "ValidationException", 400),
    "server": (Scenario.server_error(), "InternalServerException", 500),
}
WHOLE_ERROR = (
    Scenario.stream_error(error_type="overloaded_error"),
    "ServiceUnavailableException",
    503,
)
"""A stream error before any text, asked for whole: a 503. Streamed, it is an event-stream
error (the test above)."""


def error_replies() -> list[Any]:
    cases = [
        pytest.param(call, *reply, id=f"{name}-{call}")
        for name, reply in ERROR_REPLIES.items()
        for call in CALLS
    ]
    whole = [call for call in CALLS if not call.endswith("stream")]
    return cases + [pytest.param(call, *WHOLE_ERROR, id=f"whole-error-{call}") for call in whole]


@pytest.mark.parametrize(("call", "scenario", "code", "status"), error_replies())
def test_an_error_reply_is_a_client_error(
    server: LoopbackServer, client: Any, call: str, scenario: Scenario, code: str, status: int
) -> None:
    server.script(scenario)
    with pytest.raises(ClientError) as caught:
        CALLS[call](client)
    error = caught.value.response
    assert error["Error"]["Code"] == code
    assert error["ResponseMetadata"]["HTTPStatusCode"] == status


def test_boto3s_signature_passes_and_a_wrong_one_is_refused(server: LoopbackServer) -> None:
    server.reset()
    server.script(Scenario.text("ok"))
    wrong = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id=ACCESS,
        aws_secret_access_key="not-the-secret-00000000000000",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    with pytest.raises(ClientError) as caught:
        converse(wrong)
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert server.pending() == 1  # nothing was played for it
