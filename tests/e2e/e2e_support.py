"""The MCPL server side of the end-to-end tests, for stdio and WebSocket alike.

The helpers live in `agentcore.testing` (`mcpl_server`: the scriptable MCPL server and its
hubs; `serve`: ``agentcore serve`` as a subprocess, traces, waiting), where the benches
use them too; they are re-exported here under the names the tests have always imported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from agentcore.testing import serve as _serve
from agentcore.testing.mcpl_server import (
    FULL_GRANT,
    HOSTILE_SERVER,
    MANIFEST,
    RECEIPT,
    RELAY,
    STREAMING_USES,
    TIMEOUT_S,
    Answer,
    Channel,
    HookStep,
    Hub,
    PolicyStep,
    Received,
    ServerScript,
    ServerSession,
    StdioHub,
    TcpChannel,
    WsChannel,
    WsHub,
    hold_policy_updates,
    make_hub,
    routed_model_info,
)
from agentcore.testing.serve import (
    AGENTCORE,
    Served,
    TraceCapture,
    env,
    finish,
    pid_alive,
    rewrite_settings,
    until,
    wait_gone,
    without_agentcore_env,
)

REPO = Path(__file__).resolve().parents[2]


async def serve(
    settings: Path,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    *,
    args: Sequence[str] = (),
) -> asyncio.subprocess.Process:
    """`agentcore.testing.serve.serve`, run from the repository's root (the tests' paths)."""
    return await _serve.serve(settings, env, cwd, args=args)


def serving(
    settings: Path,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    *,
    args: Sequence[str] = (),
) -> AbstractAsyncContextManager[Served]:
    """`agentcore.testing.serve.serving`, run from the repository's root."""
    return _serve.serving(settings, env, cwd, args=args)


__all__ = [
    "AGENTCORE",
    "FULL_GRANT",
    "HOSTILE_SERVER",
    "MANIFEST",
    "RECEIPT",
    "RELAY",
    "REPO",
    "STREAMING_USES",
    "TIMEOUT_S",
    "Answer",
    "Channel",
    "HookStep",
    "Hub",
    "PolicyStep",
    "Received",
    "Served",
    "ServerScript",
    "ServerSession",
    "StdioHub",
    "TcpChannel",
    "TraceCapture",
    "WsChannel",
    "WsHub",
    "env",
    "finish",
    "hold_policy_updates",
    "make_hub",
    "pid_alive",
    "rewrite_settings",
    "routed_model_info",
    "serve",
    "serving",
    "until",
    "wait_gone",
    "without_agentcore_env",
]
