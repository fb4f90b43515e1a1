"""MCPL's §19 bulk-reference conformance vectors (`conformance/bulk-reference-vectors.json`,
vendored unchanged under `conformance/`), one test per case, read from the file.

A ``render`` case goes through what the host does with a context injection's content
(`authorize_injections` of the `mcpl-context` plugin) and asserts on everything the model
would see. A ``fetch`` case renders, fetches with the host's fetcher against a loopback
HTTP fixture (a second origin for the redirect), and renders again with the payload. The
``registry`` case does not apply: agentcore resolves no reference id (the id only names
the reference in the model's context; nothing looks it up), said in docs/mcpl.md.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import ipaddress
import json
import unicodedata
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from agentcore_mcpl_context.wire import authorize_injections, fetched_block
from aiohttp import web

from agentcore.api import BulkFetcher, BulkSettings, MediaBlock, TextBlock
from agentcore.mcpl.bulk import LABEL_CHARS, TRUNCATED, read_reference

VECTORS = json.loads(
    (Path(__file__).parent / "conformance" / "bulk-reference-vectors.json").read_text()
)
CASES = [c for c in VECTORS["cases"] if c["operation"] != "registry"]
GRANT = frozenset({"contextHooks.beforeInference.inject.beforeUser"})
CARRIED = frozenset({"audio/wav", "image/png"})
STUB = "[bulk reference ref_"


@dataclass
class Fixture:
    """The loopback origins: what each case's payload route answers, and what was asked."""

    origin: str = ""
    other: str = ""
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    other_requests: list[dict[str, str]] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)

    async def payload(self, request: web.Request) -> web.StreamResponse:
        case_id = request.match_info["case"]
        self.requests[case_id] += 1
        spec = self.cases[case_id].get("response", {})
        if spec.get("redirect"):
            raise web.HTTPFound(f"{self.other}/case/{quote(case_id)}/payload")
        if "stream" in spec:
            return await self._stream(request, case_id, spec["stream"])
        body = base64.b64decode(spec.get("bodyBase64", ""))
        headers = {"Content-Type": spec.get("contentType", "application/octet-stream")}
        if spec.get("gzip"):
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        return web.Response(body=body, headers=headers)

    async def _stream(self, request: web.Request, case_id: str, s: dict[str, Any]) -> Any:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            for _ in range(s["chunks"]):
                await response.write(b"x" * s["chunkBytes"])
                await asyncio.sleep(s["intervalMs"] / 1000)
            # Held open past the vector's last chunk: on a loaded machine the fetcher may read
            # its first 64 bytes only after the 0.5 s stream was all written, and must still be
            # seen to cut it. A fetcher that waits for the end instead never gets it, and fails.
            await asyncio.sleep(10)
        except (ConnectionResetError, asyncio.CancelledError):
            self.cut.add(case_id)  # the fetcher closed the connection before the end
            raise
        return response

    async def second_origin(self, request: web.Request) -> web.Response:
        self.other_requests.append(dict(request.headers))
        return web.Response(body=b"RIFF0000WAVEpayload")


@pytest.fixture
async def fixture() -> AsyncIterator[Fixture]:
    state = Fixture()
    runners = []
    for route in (state.payload, state.second_origin):
        app = web.Application()
        app.router.add_get("/case/{case}/payload", route)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        runners.append(runner)
        if route == state.payload:
            state.origin = f"http://127.0.0.1:{port}"
        else:
            state.other = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        for runner in runners:
            await runner.cleanup()


def expand(value: Any, origin: str, case_id: str) -> Any:
    """The file's expansions: ``$ORIGIN``, ``$CASE`` and ``{"$repeat", "count"}``."""
    if isinstance(value, dict):
        if set(value) == {"$repeat", "count"}:
            return value["$repeat"] * value["count"]
        return {k: expand(v, origin, case_id) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, origin, case_id) for v in value]
    if isinstance(value, str):
        return value.replace("$ORIGIN", origin).replace("$CASE", quote(case_id, safe=""))
    return value


def render(blocks: list[dict[str, Any]]) -> tuple[str, Any]:
    """What the model would see of an injection made of `blocks`, and the injection."""
    result = {
        "contextInjections": [{"namespace": "n", "position": "beforeUser", "content": blocks}]
    }
    answer = authorize_injections(result, GRANT, CARRIED, "fixture")
    (injection,) = answer.injections
    return visible(injection.content), injection


def visible(content: tuple[Any, ...]) -> str:
    return "\n".join(b.text if isinstance(b, TextBlock) else b.data for b in content)


def check_rendered(seen: str, expect: dict[str, Any]) -> None:
    assert (STUB in seen) is expect["stub"], seen[:500]
    for hidden in expect["hidden"]:
        assert hidden not in seen
    for included in expect.get("includes", []):
        assert included in seen
    if expect.get("bounded"):
        assert len(seen) < 1000  # a 1 MiB name or type never reaches the model


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_vector(case: dict[str, Any], fixture: Fixture) -> None:
    fixture.cases[case["id"]] = case
    case = expand(case, fixture.origin, case["id"])
    expect = case["expect"]
    seen, injection = render(case["blocks"])
    if case["operation"] == "render" or "before" not in expect:
        check_rendered(seen, {**expect, **expect.get("before", {})})
    else:
        check_rendered(seen, {**expect, **expect["before"], "stub": True})
    check_fields(case, injection)
    if case["operation"] == "fetch":
        await check_fetch(case, fixture, injection, seen)


def check_fields(case: dict[str, Any], injection: Any) -> None:
    """The invalid-field rule (missingFields), the display bound (displayField), the
    rejection of a block whose uri breaks the schema (kind: invalid)."""
    expect = case["expect"]
    if expect.get("kind") == "invalid":
        assert injection.references == ()
        return
    references = [r for _, r in injection.references]
    for name in expect.get("missingFields", []):
        (reference,) = references
        assert name in reference.rejected
        assert (
            getattr(
                reference,
                {"sizeBytes": "size_bytes", "mimeType": "mime_type", "expiresAt": "expires_at"}.get(
                    name, name
                ),
            )
            is None
        )
        if case["blocks"][-1].get("disposition") == "never":
            assert reference.disposition == "never"  # a subtractive disposition stays
    if (shown := expect.get("displayField")) is not None:
        (reference,) = references
        value = case["blocks"][0][shown]
        stub = reference.stub("from the fixture")
        assert (TRUNCATED in stub) is (len(value) > LABEL_CHARS)


async def check_fetch(case: dict[str, Any], fixture: Fixture, injection: Any, before: str) -> None:
    expect = case["expect"]
    settings = BulkSettings(
        fetch=True,
        schemes=["http", "https"],
        allow_networks=[ipaddress.ip_network("127.0.0.0/8")],
        max_bytes=case["maxBytes"],
    )
    ((index, reference),) = injection.references
    fetched = await BulkFetcher(settings).fetch(reference)
    if "ok" in expect:
        assert fetched.ok is expect["ok"], fetched.detail
    if "requests" in expect:
        assert fixture.requests[case["id"]] == expect["requests"]
    if "decodedBase64" in expect:
        assert fetched.data == base64.b64decode(expect["decodedBase64"])
    if "digestVerified" in expect:
        assert fetched.digest_verified is expect["digestVerified"]
    if "savedMime" in expect:
        assert fetched.mime_type == expect["savedMime"]
    if expect.get("storageFromId"):
        assert fetched.file_name.startswith(reference.id + ".")
        assert "/" not in fetched.file_name and (reference.name or "") not in fetched.file_name
    if expect.get("cleanLabel"):
        label = reference.label or ""
        assert all(unicodedata.category(ch) not in ("Cc", "Cf") for ch in label)
    if expect.get("abortStream"):
        assert not fetched.ok and fetched.refusal == "size"
        await _until(lambda: case["id"] in fixture.cut)
    if expect.get("redirectSafe"):
        assert not fetched.ok and fetched.refusal == "redirect"
        assert fixture.other_requests == []  # never followed: no credential could go
    if not fetched.ok:
        assert fetched.data == b""  # partial or mismatched bytes are never kept
    after = list(injection.content)
    if fetched.ok and reference.disposition != "never":
        block = fetched_block(fetched, injection.position, CARRIED)
        if block is not None:
            after[index] = block
    seen_after = visible(tuple(after))
    if expect.get("unchanged"):
        assert seen_after == before
    if "after" in expect:
        payload = expect["after"]["stubOrInlineBase64"]
        assert STUB in seen_after or payload in seen_after
    else:
        check_rendered(seen_after, expect)  # never: a stub still, the payload hidden


async def _until(condition: Any) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the fixture never saw the transfer cut")


def test_every_case_is_run_or_said_not_to_apply() -> None:
    ids = [c["id"] for c in VECTORS["cases"]]
    assert VECTORS["format"] == "mcpl-bulk-references-1"
    assert len(ids) == len(set(ids)) == 43
    assert sorted(set(ids) - {c["id"] for c in CASES}) == ["20-eviction-and-unknown"]


def test_a_uri_form_media_block_is_a_reference_too() -> None:
    reference = read_reference({"type": "image", "uri": "https://x.example/a.png", "size": 3})
    assert not isinstance(reference, str)
    assert reference.kind == "image" and reference.size_bytes is None
    seen, _ = render([{"type": "resource_link", "uri": "https://x.example/a", "size": 7}])
    assert STUB in seen and "7 bytes (claimed)" in seen and "x.example" not in seen
    assert isinstance(MediaBlock("image/png", "AA=="), MediaBlock)
