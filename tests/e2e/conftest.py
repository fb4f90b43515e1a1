"""Fixtures for the end-to-end tests: a real host (`McplHost` on a kernel loaded from a
settings file, every default plugin discovered), the loopback provider on every wire,
and the scriptable MCPL server over a real stdio subprocess or a real WebSocket."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("e2e_support", "e2e_rig")

from e2e_rig import (  # noqa: E402
    INFERENCE,
    PROVIDERS,
    Rig,
    RigFactory,
    settings_sections,
)
from e2e_support import Hub, ServerScript, TraceCapture, make_hub  # noqa: E402

from agentcore.kernel import Kernel  # noqa: E402
from agentcore.mcpl.host import McplHost  # noqa: E402
from agentcore.testing import LoopbackServer  # noqa: E402


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """Every message logged (loguru) during the test."""
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="DEBUG")
    try:
        yield lines
    finally:
        logger.remove(sink)


@pytest.fixture(params=["stdio", "ws"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def hub(transport: str) -> AsyncIterator[Hub]:
    hub = await make_hub(transport).start()
    try:
        yield hub
    finally:
        await hub.stop()


@pytest.fixture
async def rig(
    hub: Hub, loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path]
) -> AsyncIterator[RigFactory]:
    """``await rig(...)``: a host serving one server ("srv") per `scripts` entry, ready."""
    started: list[Rig] = []

    async def start(
        scripts: dict[str, ServerScript] | None = None,
        *,
        grants: dict[str, list[str]] | None = None,
        server_options: dict[str, dict[str, Any]] | None = None,
        routing: dict[str, Any] | None = None,
        inference: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        plugins: dict[str, object] | None = None,
        kernel_type: type[Kernel] = Kernel,
        wait_ready: bool = True,
    ) -> Rig:
        scripts = scripts or {"srv": ServerScript()}
        hub.scripts.update(scripts)
        servers = {
            tag: hub.config(tag, (grants or {}).get(tag), **(server_options or {}).get(tag, {}))
            for tag in scripts
        }
        path = loopback_settings(
            PROVIDERS,
            inference={**INFERENCE, **(inference or {})},
            sections=settings_sections(hub, servers, routing=routing, retry=retry, extra=extra),
        )
        traces = TraceCapture()
        kernel = kernel_type.load(path, plugins={"capture": traces, **(plugins or {})})
        await kernel.start()
        host = McplHost(kernel)
        rig = Rig(loopback_provider, hub, kernel, host, traces, {}, path)
        started.append(rig)
        await host.start()
        for _ in scripts:
            session = await hub.next_session()
            rig.sessions[session.tag] = session
        if wait_ready:
            for session in rig.sessions.values():
                if session.script.receipt.get("accepted", True):
                    await session.ready.wait()
        return rig

    try:
        yield start
    finally:
        for r in started:
            await r.close()
        for r in started:
            # Exactly one answer per request id, on every path, shutdown included.
            for session in r.sessions.values():
                await session.wait_closed()
                if not session.left:
                    assert session.unanswered_or_twice() == {}, session.tag
            # Every provider connection was closed.
            await r.provider.wait_idle()
