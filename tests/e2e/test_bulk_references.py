"""MCPL §19 bulk content references end to end: `agentcore infer --conversation` (a real
subprocess, the host's own turn) with a scripted server over stdio and WebSocket whose
context injection carries references, a loopback HTTP origin serving their payloads, and
the loopback provider saying what the model was sent; and a push event's references as
the plugin deciding about it sees them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from e2e_rig import PROVIDERS, RigFactory, settings_sections
from e2e_support import Hub, finish
from test_host_turns import ALL_HOOKS, inj, injecting, script
from test_infer_turns import PATIENT, infer
from test_push_events import Reactor, event, start

from agentcore.mcpl.bulk_fetch import sha256_digest
from agentcore.testing import LoopbackServer, Scenario
from agentcore.testing.serve import read_jsonl

PLAN = b"The plan: oak for the mannequins."
MISMATCHED = b"MISMATCHED-BYTES"
BIG = b"B" * 200


class Origin:
    """A loopback HTTP origin: what it serves, and which paths were asked for."""

    def __init__(self) -> None:
        self.url = ""
        self.port = 0
        self.asked: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.asked.append(request.path)
        name = request.match_info["name"]
        if name == "away":  # to another origin (localhost is not 127.0.0.1 as an origin)
            raise web.HTTPFound(f"http://localhost:{self.port}/plan")
        body = {"plan": PLAN, "other": MISMATCHED, "big": BIG}.get(name, b"")
        return web.Response(body=body, content_type="text/plain")


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    state = Origin()
    app = web.Application()
    app.router.add_get("/{name}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{state.port}"
    try:
        yield state
    finally:
        await runner.cleanup()


def resource(uri: str, **fields: Any) -> dict[str, Any]:
    return {"type": "resource", "uri": uri, "mimeType": "text/plain", **fields}


async def run_turn(
    hub: Hub,
    provider: LoopbackServer,
    write_settings: Callable[..., Path],
    tmp_path: Path,
    content: list[dict[str, Any]],
    bulk: dict[str, Any] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """One host turn with a server injecting `content` before the user's message: the
    request body the provider got (as JSON text) and the `mcpl:bulk_reference` traces."""
    hub.scripts["files"] = script(injecting(inj("beforeUser", content)))
    traces = tmp_path / "traces.jsonl"
    sections = settings_sections(
        hub,
        {"files": hub.config("files", ALL_HOOKS)},
        extra={"mcpl": {"bulk": bulk}} if bulk else None,
    )
    settings = write_settings(
        PROVIDERS, inference=PATIENT, sections={**sections, "traces": {"jsonl": str(traces)}}
    )
    provider.script(Scenario.text("Noted."))
    process = await infer(settings, "--conversation", "conv_1", "--json", "What is the plan?")
    await hub.next_session()
    code, stdout, stderr = await finish(process)
    assert code == 0, stderr
    assert json.loads(stdout)["content"] == "Noted."  # the turn completed
    seen = read_jsonl(traces)
    body = json.dumps(provider.calls[0].body)
    return body, [t for t in seen if t["type"] == "mcpl:bulk_reference"]


async def test_an_injected_reference_reaches_the_provider_as_its_stub(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    origin: Origin,
) -> None:
    uri = f"{origin.url}/plan?token=s3cret-capability"
    content = [
        {"type": "text", "text": "Attached:"},
        resource(uri, name="chord.wav", mimeType="audio/wav", sizeBytes=4233704, disposition="ref"),
    ]
    body, (trace,) = await run_turn(hub, loopback_provider, loopback_settings, tmp_path, content)
    assert "Attached:" in body and "[bulk reference ref_" in body
    assert "chord.wav" in body and "4233704 bytes (claimed)" in body
    assert "s3cret" not in body and origin.url not in body  # §19: never the URI
    assert origin.asked == []  # receipt never triggers a fetch (§19)
    assert (trace["serverId"], trace["fetch"], trace["shown"]) == ("files", "off", "stub")
    assert trace["referenceId"] in body and trace["disposition"] == "ref"
    assert "s3cret" not in json.dumps(trace)


async def test_fetching_allowed_the_verified_payload_goes_in_and_each_hostile_one_is_refused(
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
    origin: Origin,
) -> None:
    url = origin.url
    content = [
        resource(f"{url}/plan", name="plan.txt", digest=sha256_digest(PLAN)),
        resource(f"{url}/plan", name="claim", sizeBytes=1000),  # over max_bytes, claimed
        resource(f"{url}/big", name="big", sizeBytes=10),  # over max_bytes, really
        resource(f"{url}/other", name="mismatch", digest=sha256_digest(PLAN)),
        resource(f"{url}/plan", name="old", expiresAt="2020-01-01T00:00:00Z"),
        resource("file:///etc/passwd", name="local"),
        resource(f"{url}/away", name="away"),
        resource("http://10.0.0.1/plan", name="private"),
        resource(f"{url}/plan", name="withheld", disposition="never"),
        resource(f"{url}/plan", name="ninth"),  # past max_fetches_per_turn: not fetched
    ]
    bulk = {
        "fetch": True,
        "schemes": ["http"],
        "allow_networks": ["127.0.0.1/32"],  # loopback, for this test only
        "max_bytes": 64,
        "max_fetches_per_turn": 8,
    }
    body, traces = await run_turn(
        hub, loopback_provider, loopback_settings, tmp_path, content, bulk
    )
    by_name = {t["referenceId"]: t for t in traces}
    assert len(by_name) == len(content)
    decided = [(t["fetch"], t.get("reason"), t["shown"]) for t in traces]
    assert decided == [
        ("ok", None, "payload"),
        ("refused", "claimed_size", "stub"),
        ("refused", "size", "stub"),
        ("refused", "digest", "stub"),
        ("refused", "expired", "stub"),
        ("refused", "scheme", "stub"),
        ("refused", "redirect", "stub"),
        ("refused", "address", "stub"),
        ("never", None, "stub"),
        ("over_budget", None, "stub"),
    ]
    good = traces[0]
    assert (good["digestVerified"], good["sizeBytes"]) == (True, len(PLAN))
    assert PLAN.decode() in body and body.count("[bulk reference ref_") == len(content) - 1
    assert MISMATCHED.decode() not in body and "BBBB" not in body and url not in body
    # Asked for: the good one, the cut one, the mismatched one, the redirect; nothing else
    # (the claim, the expired, the never and the refused addresses are never dialed).
    assert sorted(origin.asked) == ["/away", "/big", "/other", "/plan"]


async def test_a_push_events_references_reach_the_plugin_as_stubs(rig: RigFactory) -> None:
    """§19 vector 8's lane: what a plugin may put before a model (`PushEvent.content`)
    carries the text and a stub, never the URI or the inline data to withhold."""
    reactor = Reactor()
    r = await start(rig, plugins={"reactor": reactor})
    blocks = [
        {"type": "text", "text": "Render done"},
        resource("https://files.example/r.wav?sig=s3cret", name="r.wav", disposition="never"),
        {"type": "image", "data": "U0VDUkVU", "mimeType": "image/png", "disposition": "never"},
    ]
    answer = await r.server.call("push/event", event(payload={"content": blocks}))
    assert answer.result is not None and answer.result["accepted"]
    [seen] = reactor.events
    text, stub = seen.content
    assert text == blocks[0] and seen.payload["content"] == blocks  # the wire, as sent
    (reference,) = seen.references
    assert stub["text"].startswith(f'[bulk reference {reference.id}, "r.wav"')
    assert "from MCPL server srv, push event evt_1" in stub["text"]
    assert "s3cret" not in json.dumps(seen.content) and "U0VDUkVU" not in json.dumps(seen.content)
