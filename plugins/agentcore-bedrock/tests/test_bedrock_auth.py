"""SigV4 (botocore's signer and credential chain, refreshed credentials included) and a
Bedrock API key as a bearer token, each checked by the loopback server as AWS checks it;
the secrets they carry never leave the process."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.api import InferenceError, Message, Request, redact, redact_log
from agentcore.testing import Kernel, LoopbackServer, Scenario

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
BEARER = "bedrock-api-key-loopback-not-real-0000"


def request() -> Request:
    return Request(f"br:{MODEL}", [Message.user("hi")], max_tokens=16)


async def test_a_signed_call_passes_and_carries_no_bearer(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel]
) -> None:
    bedrock_server.script(Scenario.text("Signed."))
    async with bedrock_kernel() as kernel:
        response = await kernel.complete(request())
    assert response.content[0].text == "Signed."  # type: ignore[union-attr]
    (call,) = bedrock_server.calls
    assert call.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDLOOPBACK")
    assert "/us-east-1/bedrock/aws4_request" in call.headers["authorization"]
    assert "x-amz-date" in call.headers


@pytest.mark.parametrize(
    ("secret", "code"),
    [("the-wrong-secret-0000000000", "InvalidSignatureException"), (None, "Unrecognized")],
)
async def test_a_wrong_signature_is_403_and_an_auth_error(
    bedrock_kernel: Callable[..., Kernel],
    monkeypatch: pytest.MonkeyPatch,
    secret: str | None,
    code: str,
) -> None:
    if secret is None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNOBODYKNOWS00000")
    else:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    async with bedrock_kernel() as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert (caught.value.kind, caught.value.status) == ("auth", 403)
    assert (caught.value.code or "").startswith(code)


async def test_a_session_token_is_signed_and_never_shown(
    bedrock_server: LoopbackServer,
    bedrock_kernel: Callable[..., Kernel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "session-token-loopback-FQoGZXIvYXdzEBAaD0000"
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    bedrock_server.script(Scenario.text("ok"))
    async with bedrock_kernel() as kernel:
        await kernel.complete(request())
    (call,) = bedrock_server.calls
    assert call.headers["x-amz-security-token"] == token
    assert "x-amz-security-token" in call.headers["authorization"]  # among SignedHeaders
    assert token not in repr(call)
    secret = "loopback/secret+key/not-real-0000000000"
    assert redact(f"echo {token} and {secret}") == "echo [REDACTED] and [REDACTED]"
    signature = call.headers["authorization"].rsplit("Signature=", 1)[1]
    assert signature not in redact_log(f"sent Authorization: {call.headers['authorization']}")
    assert token not in redact_log(f"x-amz-security-token: {token}")


async def test_an_api_key_goes_as_a_bearer_token_over_http(
    bedrock_server: LoopbackServer, bedrock_kernel: Callable[..., Kernel]
) -> None:
    bedrock_server.script(Scenario.text("Keyed."))
    async with bedrock_kernel(auth="api_key", api_key_env="BEDROCK_KEY") as kernel:
        await kernel.complete(request())
    (call,) = bedrock_server.calls
    assert call.headers["authorization"] == f"Bearer {BEARER}"
    assert "x-amz-date" not in call.headers
    assert redact(BEARER) == "[REDACTED]"


CREDENTIAL_PROCESS = """
import datetime, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=120)
print(json.dumps({
    "Version": 1,
    "AccessKeyId": f"AKIDROTATING{n:08d}",
    "SecretAccessKey": f"rotating-secret-{n:08d}-xxxxxxxx",
    "SessionToken": f"rotating-token-{n:08d}-xxxxxxxx",
    "Expiration": expires.isoformat(),
}))
"""


async def test_expiring_credentials_are_refreshed_before_each_use(
    bedrock_kernel: Callable[..., Kernel],
    bedrock_server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A ``credential_process`` whose credentials expire within botocore's mandatory
    refresh window: every call is signed with a fresh set, each one valid."""
    script = tmp_path / "creds.py"
    script.write_text(CREDENTIAL_PROCESS)
    counter = tmp_path / "counter"
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\ncredential_process = {sys.executable} {script} {counter}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))

    def secret_of(access: str) -> str | None:
        n = access.removeprefix("AKIDROTATING")
        return f"rotating-secret-{n}-xxxxxxxx" if n.isdigit() else None

    bedrock_server.aws_credentials = secret_of
    bedrock_server.script(Scenario.text("one"), Scenario.text("two"))
    async with bedrock_kernel() as kernel:
        first = await kernel.complete(request())
        second = await kernel.complete(request())
    assert [first.content[0].text, second.content[0].text] == ["one", "two"]  # type: ignore[union-attr]
    keys = [c.headers["authorization"].split("Credential=")[1][:20] for c in bedrock_server.calls]
    assert keys[0] != keys[1] and all(k.startswith("AKIDROTATING") for k in keys)
    tokens = [c.headers["x-amz-security-token"] for c in bedrock_server.calls]
    assert all(redact(t) == "[REDACTED]" for t in tokens)
    assert int(counter.read_text()) >= 3  # the first look-up, then one refresh per call


async def test_no_credentials_is_an_auth_error_before_any_traffic(
    bedrock_server: LoopbackServer,
    bedrock_kernel: Callable[..., Kernel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    async with bedrock_kernel() as kernel:
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(request())
    assert caught.value.kind == "auth" and "no AWS credentials" in caught.value.message
    assert bedrock_server.calls == []
