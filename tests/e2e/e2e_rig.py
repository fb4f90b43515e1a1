"""What the end-to-end tests share besides fixtures: the settings every rig runs with and
the `Rig` a test gets. A module of its own with a name no other suite uses, so that test
modules import it (never `conftest`, which names a different file in each suite)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_support import Hub, ServerSession, TraceCapture

from agentcore.kernel import Kernel
from agentcore.mcpl.host import McplHost
from agentcore.testing import LoopbackServer

# x: the anthropic wire in XML tool mode.
PROVIDERS: dict[str, Any] = {
    "a": "anthropic",
    "o": "openai",
    "r": "openai-responses",
    "g": "gemini",
    "x": {"kind": "anthropic", "tool_mode": "xml"},
}
MODELS = {
    "a": "a:claude-e2e",
    "o": "o:gpt-e2e",
    "r": "r:gpt-responses-e2e",
    "g": "g:gemini-e2e",
    "x": "x:claude-xml-e2e",
}
ROUTING: dict[str, Any] = {
    "default": MODELS["a"],
    "by_feature": {f"fs.{name}": model for name, model in MODELS.items()},
}
# Short waits everywhere, so that giving up after retries takes milliseconds.
RETRY: dict[str, Any] = {
    "max_attempts": 2,
    "initial_delay_s": 0.01,
    "max_delay_s": 0.05,
    "jitter_s": 0.0,
    "overloaded": {"max_attempts": 2, "initial_delay_s": 0.01, "max_delay_s": 0.05, "jitter_s": 0},
}
# Calm timeouts unless a test is about one: on a loaded machine (four xdist workers on two
# cores) a 0.3 s progress timeout fired on streams that were only slow, turning a cut into a
# timeout. A test of a timeout sets its own (test_answers.py's QUICK).
INFERENCE: dict[str, Any] = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}
HOLD: dict[str, Any] = {"default_hold_s": 0.01, "max_wait_s": 5.0}


def settings_sections(
    hub: Hub,
    servers: dict[str, dict[str, Any]],
    *,
    routing: dict[str, Any] | None = None,
    retry: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    extra = dict(extra or {})
    mcpl = {  # extra's [mcpl.*] sections join the servers and the routing
        "servers": servers,
        "routing": ROUTING if routing is None else routing,
        **extra.pop("mcpl", {}),
    }
    return {
        "retry": retry or RETRY,
        "provider_hold": HOLD,
        "waiting_trace": {"interval_s": 0.05},
        "mcpl": mcpl,
        **extra,
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


RigFactory = Callable[..., Awaitable[Rig]]
