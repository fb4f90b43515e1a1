"""No configured secret leaves `agentcore serve`, even when the provider echoes it.

`agentcore serve` (a real subprocess) serves a real stdio MCPL server; the server asks
`inference/request`s, streamed and whole, on both provider wires, and the loopback
provider answers each with its credentials echoed back: in a 401's message, in an
error frame mid-stream, and in the reply's text. Neither the provider key nor a
credential header configured in the settings, nor a server's secret env value, may
reach the MCPL server (answers and chunks), serve's stderr, or the traces file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import TIMEOUT_S, Hub, serving

from agentcore.testing import API_KEY, LoopbackServer, Scenario

ORG_TOKEN = "tok-org-secret-9191-e2e"
"""A credential header every provider call carries (``x-org-token``)."""
SERVER_TOKEN = "srv-env-token-5150-e2e"
"""A secret in the stdio server's ``env``."""
SECRETS = (API_KEY, ORG_TOKEN, SERVER_TOKEN)

ENDINGS = {
    "401-echo": Scenario.echoes_credentials(),
    "mid-stream-echo": Scenario.echoes_credentials(mid_stream=True),
    "text-echo": Scenario.text(f"your key is {API_KEY} and your token {ORG_TOKEN}"),
    # Each secret echoed in two chunks: each chunk's frame alone holds no whole secret.
    "split-echo": Scenario.text(
        f"your key is {API_KEY} and your token {ORG_TOKEN}",
        chunks=(
            *("your key is ", API_KEY[:9], API_KEY[9:]),
            *(" and your token ", ORG_TOKEN[:5], ORG_TOKEN[5:]),
        ),
    ),
}
# Echoed in another case, or split by whitespace: whole, and across chunks at the split.
ENDINGS |= {
    "upper-echo": Scenario.text(f"your key is {API_KEY.upper()} and your token {ORG_TOKEN}"),
    "space-split-echo": Scenario.text(
        f"your key is {API_KEY[:12]} {API_KEY[12:]} and your token {ORG_TOKEN[:4]}\n"
        f"{ORG_TOKEN[4:].upper()}",
        chunks=(
            *("your key is ", API_KEY[:12] + " ", API_KEY[12:]),
            *(" and your token ", ORG_TOKEN[:4], "\n" + ORG_TOKEN[4:].upper()),
        ),
    ),
}
TEXT_ECHOES = ("text-echo", "split-echo", "upper-echo", "space-split-echo")
ONE_ATTEMPT = {"max_attempts": 1, "overloaded": {"max_attempts": 1}}
FEATURES = {"a": "fs.a", "o": "fs.o"}  # provider name -> the feature set routed to it


@pytest.fixture
def transport() -> str:
    return "stdio"


def leaks(text: str) -> list[str]:
    """The secrets in `text`, in any case, or split by whitespace (a JSON frame's too)."""
    squashed = "".join(text.replace("\\n", " ").split()).lower()
    return [secret for secret in SECRETS if secret.lower() in squashed]


async def test_serve_never_sends_or_logs_a_configured_secret(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    server = hub.config("srv")
    server["env"] = {**server["env"], "MCPL_E2E_API_TOKEN": SERVER_TOKEN}
    traces = tmp_path / "traces.jsonl"
    settings = loopback_settings(
        PROVIDERS,
        headers={"x-org-token": ORG_TOKEN},
        inference={"progress_timeout_s": 30.0, "request_timeout_s": 30.0},
        sections={
            **settings_sections(hub, {"srv": server}, retry=ONE_ATTEMPT),
            "traces": {"jsonl": str(traces)},
        },
    )
    async with serving(settings) as served:
        answers: dict[tuple[str, bool, str], tuple[Any, dict[str, Any]]] = {}
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for provider, feature in FEATURES.items():
            for stream in (True, False):
                for name, ending in ENDINGS.items():
                    loopback_provider.script(ending, provider=provider)
                    params = {
                        "featureSet": feature,
                        "stream": stream,
                        "messages": [{"role": "user", "content": "Hi"}],
                    }
                    rid = await session.request("inference/request", params)
                    answers[provider, stream, name] = (rid, (await session.answer(rid)).message)
        code, stdout, stderr = await served.stop()
    assert code == 0, stderr

    # Every credential was sent to the provider, so each could be echoed.
    assert len(loopback_provider.calls) == len(answers)
    for call in loopback_provider.calls:
        assert call.headers["x-org-token"] == ORG_TOKEN
        assert API_KEY in call.headers.get("authorization", "") + call.headers.get("x-api-key", "")

    # What reached the MCPL server: every frame, answers and chunks alike, and each
    # request's chunks joined (a secret split across two of them).
    assert session.received
    for item in session.received:
        assert leaks(json.dumps(item.message, ensure_ascii=False)) == [], item.message
    for rid, _ in answers.values():
        assert leaks("".join(delta for _, _, delta in session.chunks(rid))) == []
    for (provider, stream, name), (rid, answer) in answers.items():
        case = f"{provider} stream={stream} {name}"
        if name in TEXT_ECHOES:
            content = answer["result"]["content"]
            assert content == "your key is [REDACTED] and your token [REDACTED]", case
            if stream:
                streamed = "".join(delta for _, _, delta in session.chunks(rid))
                assert streamed == content, case
        else:
            message = answer["error"]["message"]
            assert "Incorrect API key provided:" in message, case
            assert "x-org-token=[REDACTED]" in message, case
    assert session.unanswered_or_twice() == {}

    # serve's own output and the traces file.
    assert leaks(stdout + stderr) == []
    written = traces.read_text()
    assert "mcpl:inference_fail" in written
    assert leaks(written) == []
