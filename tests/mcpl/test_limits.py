"""The bounds an MCPL server is held to (`agentcore.mcpl.limits`): their settings, the
in-flight limit of the host's peer, and the push-event deduplication cache's size. The
same bounds through `agentcore serve` and a real server: tests/e2e/test_untrusted_bounds.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentcore.mcpl.bounded import BoundedPeer
from agentcore.mcpl.jsonrpc import InboundRequest
from agentcore.mcpl.limits import DEFAULT_LIMITS, Limits
from agentcore.mcpl.protocol import McplError, McplRequest, PushAnswer, PushEvent
from agentcore.mcpl.push import PushEvents
from agentcore.mcpl.transports import memory_pair
from agentcore.settings import SettingsError, load_settings

TIMEOUT = 5.0


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text(text)
    return path


def test_a_server_takes_the_mcpl_defaults_unless_it_sets_its_own(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            """
            [mcpl]
            max_requests_in_flight = 8
            max_tokens = 4000

            [mcpl.servers.own]
            command = ["true"]
            max_requests_in_flight = 2
            max_queued_bytes = 65536

            [mcpl.servers.plain]
            command = ["true"]
            """,
        ),
        environ={"AGENTCORE_MCPL__PUSH_DEDUP_MAX_BYTES": "1000"},
    ).settings
    mcpl = settings.mcpl
    assert mcpl.limits(mcpl.servers["own"]) == Limits(
        max_requests_in_flight=2,
        max_queued_bytes=65536,
        max_event_id_bytes=DEFAULT_LIMITS.max_event_id_bytes,
        push_dedup_max_events=DEFAULT_LIMITS.push_dedup_max_events,
        push_dedup_max_bytes=1000,
        max_tokens=4000,
    )
    assert mcpl.limits(mcpl.servers["plain"]).max_requests_in_flight == 8
    assert load_settings(None, environ={}).settings.mcpl.limits() == DEFAULT_LIMITS


@pytest.mark.parametrize(
    ("section", "key"),
    [("mcpl", "max_queued_bytes"), ("mcpl.servers.s", "max_requests_in_flight")],
)
def test_a_bound_below_one_is_refused_at_load(tmp_path: Path, section: str, key: str) -> None:
    command = 'command = ["true"]\n' if section.startswith("mcpl.servers") else ""
    path = write(tmp_path, f"[{section}]\n{command}{key} = 0\n")
    with pytest.raises(SettingsError) as refused:
        load_settings(path, environ={})
    assert any(f"{section}.{key}" in problem for problem in refused.value.problems)


# -- requests in flight ----------------------------------------------------------------


async def test_past_the_limit_a_request_is_refused_at_once_naming_it() -> None:
    release = asyncio.Event()

    async def handler(request: InboundRequest) -> Any:
        request_id = request.id
        await release.wait()
        return {"served": request_id}

    reports: list[dict[str, Any]] = []
    peer_end, raw = memory_pair()
    limits = Limits(max_requests_in_flight=2)
    peer = BoundedPeer(peer_end, handler, limits=limits, report=lambda **f: reports.append(f))
    peer.start()
    try:
        for rid in (1, 2, 3):
            await raw.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "work"}))
        refusal = json.loads(await asyncio.wait_for(raw.receive(), TIMEOUT) or "")
        assert refusal == {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {
                "code": -32603,
                "message": "Too many requests in flight: this host serves at most 2 at once "
                "from this server (max_requests_in_flight)",
                "data": {"reason": "limit", "limit": "max_requests_in_flight", "value": 2},
            },
        }
        assert reports == [
            {"limit": "max_requests_in_flight", "value": 2, "requestId": 3, "method": "work"}
        ]
        # Once they are answered, the next one is served again.
        release.set()
        served = [json.loads(await raw.receive() or "") for _ in range(2)]
        assert sorted(m["result"]["served"] for m in served) == [1, 2]
        await raw.send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "work"}))
        assert json.loads(await raw.receive() or "")["result"] == {"served": 4}
    finally:
        await peer.close()


# -- push/event deduplication ------------------------------------------------------------


class Server:
    name = "srv"
    grant: frozenset[str] = frozenset({"pushEvents"})

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        raise AssertionError("a push/event sends nothing")


def push(event_id: str) -> McplRequest:
    params = {
        "featureSet": "alerts",
        "eventId": event_id,
        "timestamp": "2026-01-23T10:30:00Z",
        "payload": {"content": []},
    }
    return McplRequest(Server(), 1, "push/event", params)


async def test_the_dedup_cache_is_bounded_in_bytes_as_well_as_entries() -> None:
    asked: list[str] = []

    async def decide(event: PushEvent) -> PushAnswer:
        asked.append(event.event_id)
        return PushAnswer(accepted=True, inference_id=f"inf_{len(asked)}")

    limits = Limits(max_event_id_bytes=40, push_dedup_max_events=100, push_dedup_max_bytes=100)
    events = PushEvents(decide, limits=limits)
    ids = [f"event-{n:03d}-" + "é" * 10 for n in range(10)]  # 30 UTF-8 bytes each
    for event_id in ids:
        await events.answer(push(event_id))
    assert events.remembered == (3, 90)  # the newest three: 100 bytes hold no more
    # A remembered duplicate gets the first answer again; a forgotten one is asked again.
    assert await events.answer(push(ids[-1])) == {"accepted": True, "inferenceId": "inf_10"}
    assert await events.answer(push(ids[0])) == {"accepted": True, "inferenceId": "inf_11"}
    assert asked == [*ids, ids[0]]
    # Entries bound it too.
    few = PushEvents(decide, limits=Limits(push_dedup_max_events=2))
    for event_id in ("a", "b", "c"):
        await few.answer(push(event_id))
    assert few.remembered == (2, 2)


async def test_an_event_id_over_the_limit_is_refused_naming_it() -> None:
    async def decide(event: PushEvent) -> PushAnswer:
        raise AssertionError("never asked")

    events = PushEvents(decide, limits=Limits(max_event_id_bytes=8))
    with pytest.raises(McplError) as refused:
        await events.answer(push("é" * 5))  # 5 characters, 10 bytes
    assert refused.value.code == -32602
    assert refused.value.message == (
        "Invalid params: push/event eventId is 10 bytes, over this host's limit of 8 "
        "(max_event_id_bytes)"
    )
    assert refused.value.data == {"param": "eventId", "maxBytes": 8}
    assert events.remembered == (0, 0)
