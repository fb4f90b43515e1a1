"""Fixtures for the end-to-end tests: a real host (`McplHost` on a kernel loaded from a
settings file, every default plugin discovered), the loopback provider on both wires,
and the scriptable MCPL server over a real stdio subprocess or a real WebSocket."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("e2e_support")

from e2e_support import (  # noqa: E402
    Hub,
    ServerScript,
    ServerSession,
    TraceCapture,
    make_hub,
)

from agentcore.kernel import Kernel  # noqa: E402
from agentcore.mcpl.host import McplHost  # noqa: E402
from agentcore.testing import LoopbackServer  # noqa: E402

# x: the anthropic wire in XML tool mode.
PROVIDERS: dict[str, Any] = {
    "a": "anthropic",
    "o": "openai",
    "x": {"kind": "anthropic", "tool_mode": "xml"},
}
MODELS = {"a": "a:claude-e2e", "o": "o:gpt-e2e", "x": "x:claude-xml-e2e"}
ROUTING: dict[str, Any] = {
    "default": MODELS["a"],
    "by_feature": {"fs.a": MODELS["a"], "fs.o": MODELS["o"], "fs.x": MODELS["x"]},
}
# Short waits everywhere, so that giving up after retries takes milliseconds.
RETRY: dict[str, Any] = {
    "max_attempts": 2,
    "initial_delay_s": 0.01,
    "max_delay_s": 0.05,
    "jitter_s": 0.0,
    "overloaded": {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0},
}
INFERENCE: dict[str, Any] = {"progress_timeout_s": 0.3, "request_timeout_s": 5.0}
HOLD: dict[str, Any] = {"default_hold_s": 0.01, "max_wait_s": 5.0}


def settings_sections(
    hub: Hub,
    servers: dict[str, dict[str, Any]],
    *,
    routing: dict[str, Any] | None = None,
    retry: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "retry": retry or RETRY,
        "provider_hold": HOLD,
        "waiting_trace": {"interval_s": 0.05},
        "mcpl": {"servers": servers, "routing": ROUTING if routing is None else routing},
        **(extra or {}),
    }


@dataclass
class Rig:
    """One running host and what it talks to."""

    provider: LoopbackServer
    hub: Hub
    kernel: Kernel
    host: McplHost
    traces: TraceCapture
    sessions: dict[str, ServerSession]
    settings_path: Path

    closed: bool = False

    async def close(self) -> None:
        """Shut the host down as `agentcore serve` does: the connections, then the kernel."""
        if not self.closed:
            self.closed = True
            await self.host.close()
            await self.kernel.stop()

    @property
    def server(self) -> ServerSession:
        """The session of the only (or first) configured server."""
        return next(iter(self.sessions.values()))


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


RigFactory = Callable[..., Awaitable[Rig]]


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
        kernel = Kernel.load(path, plugins={"capture": traces, **(plugins or {})})
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
