"""Amazon Bedrock end to end: `agentcore serve` (a real subprocess, every installed plugin,
a real stdio MCPL server) and `agentcore infer` against the loopback Bedrock server, which
checks each call's SigV4 signature. The ending matrix the other wires pass, on InvokeModel
(Anthropic models) and Converse (the others), streamed and whole; throttling then ok is
retried by the retry plugin; no AWS secret reaches any output."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import HOLD, settings_sections
from e2e_support import AGENTCORE, REPO, TIMEOUT_S, Hub, finish, serve

from agentcore.testing import LoopbackServer, Scenario

ACCESS, SECRET = "AKIDE2EBEDROCK000001", "e2e/bedrock+secret/not-real-00000000"
TOKEN = "e2e-session-token-IQoJb3JpZ2luX2VjE0000"
MODELS = {
    "invoke": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "converse": "amazon.nova-pro-v1:0",
}
FEATURES = {"invoke": "fs.a", "converse": "fs.o"}  # the MCPL server's own feature sets
ROUTING = {"default": f"br:{MODELS['invoke']}",
           "by_feature": {FEATURES[api]: f"br:{m}" for api, m in MODELS.items()}}  # fmt: skip
RETRY = {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0.0,
         "overloaded": {"max_attempts": 1}}  # fmt: skip
CALM = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}

# name -> (scenarios played in turn, the answer's content or error text, provider calls
# streamed and whole: a cut is retried only while nothing visible was sent)
ENDINGS: dict[str, tuple[list[Scenario], dict[str, str], int | tuple[int, int]]] = {
    "ok": ([Scenario.text("Hello from Bedrock.")], {"content": "Hello from Bedrock."}, 1),
    "max_tokens": ([Scenario.max_tokens("Cut at")], {"content": "Cut at"}, 1),
    "stop_sequence": ([Scenario.stop_sequence("1 2 3")], {"content": "1 2 3"}, 1),
    "refusal": ([Scenario.refusal()], {"error": "The model refused to answer"}, 1),
    "tool_use": (
        [Scenario.tool_use()],
        {"error": "The model called a tool (get_weather)"},
        1,
    ),
    "error_frame": (
        [Scenario.stream_error("Partial ", message="Busy")],
        {"error": "Busy"},
        1,
    ),
    "throttling_then_ok": (
        [Scenario.rate_limit(), Scenario.text("After the wait.")],
        {"content": "After the wait."},
        2,
    ),
    "no_terminal": (
        [Scenario.cut("Partial "), Scenario.cut("Partial ")],
        {"error": "The connection to the provider broke"},
        (1, 2),
    ),
}


def calls_for(name: str, stream: bool) -> int:
    calls = ENDINGS[name][2]
    return calls if isinstance(calls, int) else calls[0 if stream else 1]


def aws_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTCORE_", "AWS_"))}
    return env | {
        "AWS_ACCESS_KEY_ID": ACCESS,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }


@pytest.fixture
def transport() -> str:
    return "stdio"


@pytest.fixture
async def bedrock_server() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer(aws_credentials={ACCESS: SECRET}) as server:
        yield server


def settings(server: LoopbackServer, path: Path, sections: dict[str, Any]) -> Path:
    provider = {"kind": "bedrock", "region": "us-east-1", "auth": "sigv4"}
    return server.write_settings(
        path, {"br": provider}, per_provider_urls=False, key_env="UNUSED", sections=sections
    )


def leaks(text: str) -> list[str]:
    return [s for s in (SECRET, TOKEN) if s.lower() in text.lower()]


async def test_serve_answers_every_ending_on_both_apis(
    hub: Hub, bedrock_server: LoopbackServer, tmp_path: Path
) -> None:
    sections = settings_sections(hub, {"srv": hub.config("srv")}, routing=ROUTING, retry=RETRY)
    path = settings(bedrock_server, tmp_path / "agentcore.toml", {**sections, "inference": CALM})
    process = await serve(path, aws_env(tmp_path), REPO)
    answers: dict[tuple[str, bool, str], tuple[Any, dict[str, Any]]] = {}
    try:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for api in MODELS:
            for stream in (True, False):
                for name, (scenarios, _, _) in ENDINGS.items():
                    bedrock_server.script(*scenarios[: calls_for(name, stream)])
                    params = {
                        "featureSet": FEATURES[api],
                        "stream": stream,
                        "messages": [{"role": "user", "content": "Hi"}],
                    }
                    rid = await session.request("inference/request", params)
                    answers[api, stream, name] = (rid, (await session.answer(rid)).message)
                    assert bedrock_server.pending() == 0, (
                        api,
                        stream,
                        name,
                        answers[api, stream, name],
                    )
        process.send_signal(signal.SIGTERM)
        code, stdout, stderr = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, stderr
    for (api, stream, name), (rid, answer) in answers.items():
        expected = ENDINGS[name][1]
        case = f"{api} stream={stream} {name}: {answer}"
        if "content" in expected:
            assert answer["result"]["content"] == expected["content"], case
            if stream:
                assert "".join(d for _, _, d in session.chunks(rid)) == expected["content"]
        else:
            assert expected["error"] in answer["error"]["message"], case
    wires = {c.wire for c in bedrock_server.calls}
    assert wires == {"bedrock", "bedrock-converse"}
    assert all(c.headers["x-amz-security-token"] == TOKEN for c in bedrock_server.calls)
    assert session.unanswered_or_twice() == {}
    assert leaks(stdout + stderr) == []
    for item in session.received:
        assert leaks(json.dumps(item.message)) == []


async def infer(path: Path, env: dict[str, str], model: str, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        AGENTCORE, "infer", "--settings", str(path), "--model", model, *args, "Hi",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=REPO, env=env,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


# Four endings, one for each (API, streamed) pair: serve above runs the whole matrix.
INFER_CASES = [
    (name, api, stream)
    for i, name in enumerate(["ok", "refusal", "throttling_then_ok", "error_frame"])
    for api, stream in [[("invoke", True), ("converse", False), ("converse", True),
                         ("invoke", False)][i % 4]]
]  # fmt: skip


@pytest.mark.parametrize(("name", "api", "stream"), INFER_CASES)
async def test_infer_ends_as_serve_does(
    bedrock_server: LoopbackServer, tmp_path: Path, name: str, api: str, stream: bool
) -> None:
    scenarios, expected, _ = ENDINGS[name]
    calls = calls_for(name, stream)
    bedrock_server.script(*scenarios[:calls])
    path = settings(
        bedrock_server,
        tmp_path / "s.toml",
        {"retry": RETRY, "inference": CALM, "provider_hold": HOLD},
    )
    flag = "--stream" if stream else "--no-stream"
    code, stdout, stderr = await infer(path, aws_env(tmp_path), f"br:{MODELS[api]}", flag, "--json")
    if "content" in expected:
        assert code == 0, stderr
        assert json.loads(stdout)["content"] == expected["content"]
    else:
        assert code == 1 and stdout == ""
        assert expected["error"] in stderr
    assert len(bedrock_server.calls) == calls
    assert leaks(stdout + stderr) == []


async def test_infer_reports_a_wrong_signature_as_an_auth_error(
    bedrock_server: LoopbackServer, tmp_path: Path
) -> None:
    path = settings(
        bedrock_server,
        tmp_path / "s.toml",
        {"retry": RETRY, "inference": CALM, "provider_hold": HOLD},
    )
    env = aws_env(tmp_path) | {"AWS_SECRET_ACCESS_KEY": "a-wrong-secret-000000000000"}
    code, stdout, stderr = await infer(path, env, f"br:{MODELS['converse']}", "--json")
    assert code == 1 and stdout == ""
    assert "403" in stderr and "signature" in stderr.lower()
    assert len(bedrock_server.calls) == 1  # auth is never retried
    assert "a-wrong-secret-000000000000" not in stderr


def test_the_infer_cases_cover_every_api_and_mode() -> None:
    assert {(a, s) for _, a, s in INFER_CASES} == {(a, s) for a in MODELS for s in (True, False)}
