"""The tokenless console answers only requests addressed to it (issue 22): a web page that
points a name of its own at 127.0.0.1 (DNS rebinding) sends that name as ``Host``, and is
refused on the page, ``/events`` and ``/status`` alike.

`agentcore serve` (a real subprocess) with ``[console] listen`` on loopback and no token
serves a real stdio MCPL server; requests go over real HTTP with the ``Host`` a rebinding
page's would carry, and with the names the console is reached by.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import TIMEOUT_S, Hub, serving

from agentcore.testing import LoopbackServer

ROUTES = ("/", "/events", "/status")


@pytest.fixture
def transport() -> str:
    return "stdio"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def answer(port: int, route: str, host: str) -> tuple[int, str]:
    """The status (and, when refused, the body) of GET `route` sent with ``Host: host``."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as client,
        client.get(f"http://127.0.0.1:{port}{route}", headers={"Host": host}) as response,
    ):
        body = "" if response.status == 200 else await response.text()
        return response.status, body  # /events: only its head is read, then closed


async def test_a_request_for_another_host_name_is_refused_on_every_route(
    hub: Hub, loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> None:
    port = free_port()
    console = {"listen": f"127.0.0.1:{port}", "public_names": ["console.internal"]}
    sections = settings_sections(hub, {"srv": hub.config("srv")}, extra={"console": console})
    async with serving(loopback_settings(PROVIDERS, sections=sections)) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        for route in ROUTES:
            for host in (f"rebind.attacker.example:{port}", "rebind.attacker.example", "evil"):
                status, body = await answer(port, route, host)
                assert status == 421, (route, host)
                assert "[console] public_names" in body
                assert "rebind" not in body  # the refused name is not echoed back
            for host in (
                f"127.0.0.1:{port}",
                f"localhost:{port}",
                f"[::1]:{port}",
                f"LOCALHOST.:{port}",
                f"console.internal:{port}",
                "Console.Internal",
            ):
                assert (await answer(port, route, host))[0] == 200, (route, host)
        code, _, stderr = await served.stop()
    assert code == 0, stderr
