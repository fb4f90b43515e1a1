"""An MCPL server is untrusted: it cannot make `agentcore serve` hold without bound what
it asks for (issue 22), each bound answered with an error naming it.

Through a real ``agentcore serve`` and a real stdio server (``servers/hostile_server.py``):
the 3 MB `eventId` flood, and the server that sends streamed `inference/request`s and
never reads its stdin. serve's peak RSS (``VmHWM``) is read from /proc and held to a bound
stated here (unbounded, issue 22's probes took it to 979 MB and 1.46 GB). The maxTokens
ceilings and the temperature ranges are answered through the end-to-end rig (stdio and
WebSocket), routed to the loopback provider.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import RigFactory
from e2e_support import HOSTILE_SERVER, Served, serving, until, without_agentcore_env

from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

HOSTILE = HOSTILE_SERVER
RSS_BOUND_KB = 300 * 1024
# What model/info needs to answer at all (every §12.2 field known) for a test model.
KNOWN_MODEL = {"vendor": "anthropic", "context_window": 200_000, "capabilities": ["tools"]}
"""serve's peak resident memory on both probes, with every default plugin loaded (50 to
160 MB at rest, by machine; with the bounds, the probes add about 15 MB)."""
FLOOD = 300

_COUNTER = """
import os

from agentcore import hookimpl
from agentcore.mcpl.protocol import PushAnswer


@hookimpl
def on_push_event(event):
    with open(os.environ["ACME_PUSH_SEEN"], "a", encoding="utf-8") as seen:
        seen.write(event.event_id + "\\n")
    return PushAnswer(accepted=True, inference_id="inf_" + event.event_id)
"""


@pytest.fixture
def counter_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A subprocess environment with a plugin installed (by entry point) that accepts each
    push event it is asked about and writes its `eventId` down."""
    site = tmp_path / "site"
    info = site / "acme_push_counter-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "acme_push_counter.py").write_text(textwrap.dedent(_COUNTER))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-push-counter\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[agentcore.plugins]\npush-counter = acme_push_counter\n"
    )
    (info / "RECORD").write_text("")
    env = without_agentcore_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    seen = tmp_path / "push-seen.txt"
    env["ACME_PUSH_SEEN"] = str(seen)
    return env, seen


def hostile(mode: str, report: Path, **env: str) -> dict[str, Any]:
    """A ``[mcpl.servers.NAME]`` section running the hostile server in `mode`."""
    return {
        "command": [sys.executable, str(HOSTILE)],
        "env": {"HOSTILE_MODE": mode, "HOSTILE_REPORT": str(report), **env},
        "grant": ["pushEvents", "inferenceRequest", "inferenceRequest.streaming"],
    }


def peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


def traces(path: Path, type_: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(path) if e["type"] == type_]


async def stop(served: Served) -> str:
    """SIGTERM, then the exit within serve's documented 10 s (`finish`), 0; its log."""
    code, _, stderr = await served.stop()
    assert code == 0, stderr
    return stderr


async def test_an_event_id_flood_is_refused_and_duplicates_still_deduplicated(
    loopback_settings: Callable[..., Path], counter_env: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, seen = counter_env
    report = tmp_path / "flood.json"
    settings = loopback_settings(
        {"a": "anthropic"},
        sections={"mcpl": {"servers": {"flood": hostile("flood", report)}}},
    )
    async with serving(settings, env) as served:
        await until(report.exists, timeout=120.0)
        rss = peak_rss_kb(served.process.pid)
        stderr = await stop(served)
    answers = json.loads(report.read_text())["answers"]
    assert len(answers) == FLOOD + 3
    for rid in range(100, 100 + FLOOD):
        assert answers[str(rid)] == {
            "code": -32602,
            "message": f"Invalid params: push/event eventId is {3 * 1024 * 1024} bytes, "
            "over this host's limit of 1024 (max_event_id_bytes)",
            "data": {"param": "eventId", "maxBytes": 1024},
        }
    # The duplicate got the first answer again; the plugin was asked once per eventId.
    first = {"accepted": True, "inferenceId": "inf_evt-a"}
    assert answers["90"] == answers["91"] == first
    assert answers["92"] == {"accepted": True, "inferenceId": "inf_evt-b"}
    assert sorted(seen.read_text().split()) == ["evt-a", "evt-b"]
    assert rss < RSS_BOUND_KB, f"serve's peak RSS {rss} kB, over {RSS_BOUND_KB} kB\n{stderr}"


async def test_a_server_that_never_reads_is_bounded_and_closed(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], tmp_path: Path
) -> None:
    """Two servers that send streamed requests and never read their stdin again: "hog"
    goes past its byte bound and is closed; "stuck" (2000 requests) stays under it, its
    answers stalled, until SIGTERM. Both are held to 4 requests in flight; the rest are
    refused at once, until the refusals fill the pipe and the host stops reading."""
    jsonl = tmp_path / "traces.jsonl"
    hog_report, stuck_report = tmp_path / "hog.txt", tmp_path / "stuck.txt"
    servers = {
        "hog": {
            **hostile("hog", hog_report, HOSTILE_REQUESTS="20"),
            "max_queued_bytes": 32 * 1024,
        },
        "stuck": hostile("hog", stuck_report, HOSTILE_REQUESTS="2000"),
    }
    settings = loopback_settings(
        {"a": "anthropic"},
        inference={"progress_timeout_s": 60.0, "request_timeout_s": 60.0},
        sections={
            "traces": {"jsonl": str(jsonl)},
            "mcpl": {
                "max_requests_in_flight": 4,
                "servers": servers,
                "routing": {"default": "a:m"},
            },
        },
    )
    # Every call streams far more than a pipe holds (so each answer stalls on the server),
    # then holds its connection open until the host leaves.
    loopback_provider.default = Scenario.stall("".join(f"w{i} " for i in range(4000)))
    env = without_agentcore_env()
    async with serving(settings, env) as served:
        await until(lambda: hog_report.exists() and stuck_report.exists())
        limits = lambda: traces(jsonl, "mcpl:limit")  # noqa: E731
        # hog: 16 refused at once (4 in flight), then closed past its byte bound.
        await until(lambda: any(t["limit"] == "max_queued_bytes" for t in limits()))
        await until(
            lambda: any(
                (t["serverId"], t["state"]) == ("hog", "closed")
                for t in traces(jsonl, "mcpl:server_state")
            )
        )
        # stuck: its 4 streams stay in flight, each holding one provider call.
        await until(lambda: loopback_provider.in_flight == 4)
        rss = peak_rss_kb(served.process.pid)
        stderr = await stop(served)
    refused = [t for t in limits() if t["limit"] == "max_requests_in_flight"]
    assert sorted(t["requestId"] for t in refused if t["serverId"] == "hog") == list(
        range(104, 120)
    )
    stuck = sorted(t["requestId"] for t in refused if t["serverId"] == "stuck")
    assert stuck == list(range(104, 104 + len(stuck))) and stuck
    assert all(t["value"] == 4 and t["method"] == "inference/request" for t in refused)
    overflow = [t for t in limits() if t["limit"] == "max_queued_bytes"]
    assert [(t["serverId"], t["value"]) for t in overflow] == [("hog", 32 * 1024)]
    assert overflow[0]["queuedBytes"] > 32 * 1024
    assert "over its max_queued_bytes (32768); closing the connection" in stderr
    # Every request admitted was started and then ended by the host, none answered.
    fails = traces(jsonl, "mcpl:inference_fail")
    assert sorted((t["serverId"], t["requestId"]) for t in fails) == [
        *(("hog", rid) for rid in range(100, 104)),
        *(("stuck", rid) for rid in range(100, 104)),
    ]
    assert traces(jsonl, "mcpl:inference_complete") == []
    # Every provider connection was closed, and the two servers are gone.
    await loopback_provider.wait_idle()
    assert len(loopback_provider.calls) == 8
    assert "not reading its stdin" in stderr
    assert "Traceback" not in stderr  # bounds met are no bug
    assert rss < RSS_BOUND_KB, f"serve's peak RSS {rss} kB, over {RSS_BOUND_KB} kB\n{stderr}"


# -- maxTokens and temperature, through the rig -------------------------------------------


def infer(**preferences: Any) -> dict[str, Any]:
    return {
        "featureSet": "fs.a",
        "messages": [{"role": "user", "content": "Hi"}],
        "preferences": preferences,
    }


async def test_max_tokens_over_a_ceiling_is_refused_naming_it(rig: RigFactory) -> None:
    r = await rig(
        server_options={"srv": {"max_tokens": 3000}},
        provider_models={"a": {"claude-e2e": {"max_output_tokens": 2000, **KNOWN_MODEL}}},
    )
    r.provider.default = Scenario.text("Fine.")
    over_model = await r.server.infer(infer(maxTokens=2500))
    assert over_model.error == {
        "code": -32602,
        "message": "params.preferences.maxTokens is 2500, over 2000: the most "
        "a:claude-e2e writes in one reply",
        "data": {"param": "preferences.maxTokens", "ceiling": 2000},
    }
    over_server = await r.server.infer(infer(maxTokens=10**30))
    assert over_server.error["data"] == {"param": "preferences.maxTokens", "ceiling": 3000}
    assert "[mcpl.servers.srv] max_tokens" in over_server.error["message"]
    # At the ceiling it goes through, and the default is kept under the ceilings.
    assert (await r.server.infer(infer(maxTokens=2000))).result["content"] == "Fine."
    assert (await r.server.infer(infer())).result["content"] == "Fine."
    sent = [call.body.get("max_tokens") for call in r.provider.calls]
    assert sent == [2000, 1024]
    # model/info tells the server the model's own ceiling.
    info = await r.server.call("model/info")
    assert info.result["maxOutputTokens"] == 2000


async def test_a_server_ceiling_below_the_default_lowers_the_default(rig: RigFactory) -> None:
    r = await rig(server_options={"srv": {"max_tokens": 100}})
    r.provider.default = Scenario.text("Short.")
    assert (await r.server.infer(infer())).result["content"] == "Short."
    assert r.provider.calls[0].body["max_tokens"] == 100


@pytest.mark.parametrize(
    ("feature_set", "temperature", "expected"),
    [
        ("fs.a", 1.5, "outside 0 to 1: the range a:claude-e2e's provider (anthropic) takes"),
        ("fs.o", 2.5, "outside 0 to 2: the range o:gpt-e2e's provider (openai) takes"),
        ("fs.g", -7, "outside 0 to 2: the range g:gemini-e2e's provider (gemini) takes"),
    ],
)
async def test_a_temperature_outside_the_providers_range_is_refused(
    rig: RigFactory, feature_set: str, temperature: float, expected: str
) -> None:
    r = await rig()
    answer = await r.server.infer({**infer(temperature=temperature), "featureSet": feature_set})
    assert answer.error["code"] == -32602
    assert answer.error["message"] == (
        f"params.preferences.temperature is {temperature:g}, {expected}"
    )
    assert answer.error["data"]["param"] == "preferences.temperature"
    assert r.provider.calls == []
    # Inside the range, it is sent as given.
    r.provider.default = Scenario.text("Warm.")
    inside = await r.server.infer({**infer(temperature=0.7), "featureSet": feature_set})
    assert inside.result["content"] == "Warm."
    assert len(r.provider.calls) == 1
