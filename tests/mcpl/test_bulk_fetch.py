"""The §19 fetcher's rules beyond the vectors, against a real loopback HTTP server: which
addresses it will dial (every resolved address checked, resolved once, the checked
address connected to), redirects, schemes, credentials, expiry; and `[mcpl.bulk]`'s
settings refused with the key named."""

from __future__ import annotations

import datetime as dt
import gzip
import ipaddress
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentcore.api import BulkFetcher, BulkReference, BulkSettings, SettingsError
from agentcore.mcpl.bulk import read_reference
from agentcore.mcpl.bulk_fetch import _CheckedConnector, sha256_digest
from agentcore.settings import load_settings

BODY = b"the payload"
LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


class Origin:
    def __init__(self) -> None:
        self.url = ""
        self.hosts: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hosts.append(request.headers.get("Host", ""))
        if request.path == "/bomb":  # 32 MiB of zeros, some 32 KiB on the wire
            body = gzip.compress(bytes(32 * 1024 * 1024), compresslevel=9)
            return web.Response(body=body, headers={"Content-Encoding": "gzip"})
        hops = int(request.query.get("hops", "0"))
        if hops:
            raise web.HTTPFound(f"/p?hops={hops - 1}")
        return web.Response(body=BODY, content_type="text/plain")


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    state = Origin()
    app = web.Application()
    app.router.add_get("/p", state.handle)
    app.router.add_get("/bomb", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        await runner.cleanup()


def ref(uri: str, **fields: Any) -> BulkReference:
    reference = read_reference({"type": "resource", "uri": uri, **fields})
    assert not isinstance(reference, str)
    return reference


def fetcher(lookup: Any = None, **settings: Any) -> BulkFetcher:
    values: dict[str, Any] = {"fetch": True, "schemes": ["http"], "allow_networks": LOOPBACK}
    return BulkFetcher(BulkSettings(**{**values, **settings}), lookup=lookup)


def answering(*addresses: str) -> tuple[Any, list[str]]:
    """A lookup that answers `addresses` (a stand-in for DNS, which a test cannot steer)
    and counts the names it was asked."""
    asked: list[str] = []

    async def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    return lookup, asked


async def test_a_name_is_resolved_once_and_its_checked_address_is_the_one_dialed(
    origin: Origin,
) -> None:
    lookup, asked = answering("127.0.0.1")
    port = origin.url.rsplit(":", 1)[1]
    got = await fetcher(lookup).fetch(
        ref(f"http://bulk.test:{port}/p?hops=2", digest=sha256_digest(BODY))
    )
    assert got.ok, got.detail
    assert (got.data, got.digest_verified, got.mime_type) == (BODY, True, "text/plain")
    assert asked == ["bulk.test"] * 3  # once per hop, never again by aiohttp
    assert origin.hosts == [f"bulk.test:{port}"] * 3  # same origin: followed


async def test_a_name_with_any_non_public_address_is_refused_undialed(origin: Origin) -> None:
    # The rebinding shape: one answer public, one internal. Every address is checked.
    lookup, _ = answering("93.184.216.34", "10.1.2.3")
    got = await fetcher(lookup, allow_networks=[]).fetch(ref("http://bulk.test/p"))
    assert (got.refusal, got.data) == ("address", b"")
    assert "10.1.2.3" in got.detail


@pytest.mark.parametrize(
    "host",
    ["10.0.0.1", "192.168.1.1", "169.254.169.254", "[::ffff:127.0.0.1]", "[fe80::1]", "[::1]"],
)
async def test_non_public_literals_are_refused_unless_allowed(host: str) -> None:
    got = await fetcher(allow_networks=[]).fetch(ref(f"http://{host}/p"))
    assert got.refusal == "address", got.detail


async def test_localhost_resolves_to_loopback_which_is_refused_by_default(origin: Origin) -> None:
    port = origin.url.rsplit(":", 1)[1]
    got = await fetcher(allow_networks=[]).fetch(ref(f"http://localhost:{port}/p"))
    assert got.refusal == "address"
    assert origin.hosts == []


async def test_too_many_redirects_and_the_wrong_scheme_are_refused(origin: Origin) -> None:
    got = await fetcher(max_redirects=1).fetch(ref(f"{origin.url}/p?hops=2"))
    assert got.refusal == "redirect" and "more than 1" in got.detail
    https_only = BulkFetcher(BulkSettings(fetch=True, allow_networks=LOOPBACK))
    assert (await https_only.fetch(ref(f"{origin.url}/p"))).refusal == "scheme"
    for uri in ("file:///etc/passwd", "ftp://127.0.0.1/p", "gopher://x/"):
        assert (await fetcher().fetch(ref(uri))).refusal == "scheme"
    assert len(origin.hosts) == 2  # the two hops before the limit, nothing after


async def test_userinfo_and_expiry_are_refused_before_dialing(origin: Origin) -> None:
    with_user = origin.url.replace("http://", "http://user:pw@")
    assert (await fetcher().fetch(ref(f"{with_user}/p"))).refusal == "credentials"
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).isoformat()
    assert (await fetcher().fetch(ref(f"{origin.url}/p", expiresAt=past))).refusal == "expired"
    assert origin.hosts == []
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert (await fetcher().fetch(ref(f"{origin.url}/p", expiresAt=future))).ok


async def test_a_compression_bomb_is_cut_at_max_bytes_of_decoded_bytes(origin: Origin) -> None:
    got = await fetcher(max_bytes=1024 * 1024).fetch(ref(f"{origin.url}/bomb"))
    assert (got.refusal, got.data) == ("size", b"")


async def test_a_network_failure_is_said_without_the_url() -> None:
    lookup, _ = answering("127.0.0.1")
    got = await fetcher(lookup).fetch(ref("http://bulk.test:9/p?sig=s3cret"))  # nothing there
    assert got.refusal == "network" and "s3cret" not in got.detail and "/p" not in got.detail
    assert got.origin == "http://bulk.test:9"


def test_reference_ids_are_never_reused() -> None:
    ids = {ref("https://x.example/a").id for _ in range(1000)}
    assert len(ids) == 1000


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('schemes = ["file"]', "mcpl.bulk.schemes"),
        ("schemes = []", "mcpl.bulk.schemes"),
        ('allow_networks = ["localhost"]', "mcpl.bulk.allow_networks"),
        ("max_bytes = 0", "mcpl.bulk.max_bytes"),
        ("max_redirects = 11", "mcpl.bulk.max_redirects"),
        ("fetch_all = true", "fetch_all"),
    ],
)
def test_bad_bulk_settings_name_the_key(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f"[mcpl.bulk]\n{toml}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path, environ={})
    assert key in str(caught.value)


def test_bulk_settings_default_to_off_and_https_only(tmp_path: Path) -> None:
    bulk = load_settings(None, environ={}).settings.mcpl.bulk
    assert (bulk.fetch, bulk.schemes, bulk.allow_networks) == (False, ["https"], [])


async def test_the_connected_peer_is_checked_before_the_request_is_written(origin: Origin) -> None:
    """The second check (the socket's peer address) runs on every new connection, before a
    byte is sent: a peer it refuses closes the connection and nothing reaches the server."""
    seen: list[str] = []

    def refuse(transport: Any, host: str) -> None:
        seen.append(transport.get_extra_info("peername")[0])
        raise RefusedForTest

    connector = _CheckedConnector(refuse)
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(RefusedForTest):
            await session.get(f"{origin.url}/p")
    assert seen == ["127.0.0.1"] and origin.hosts == []


class RefusedForTest(Exception):
    pass
