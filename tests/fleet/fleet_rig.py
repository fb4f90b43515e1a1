"""Replicas of one host: `agentcore serve` processes, each serving its own MCPL server
(over a real stdio subprocess), sharing one Redis prefix and one loopback provider."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e_support import TIMEOUT_S, Hub, ServerSession, finish, serve

from agentcore.testing import Call
from agentcore.testing.serve import read_jsonl

START_TIMEOUT_S = 30.0
"""How long replicas may take to start and connect: several `serve` processes import
and start at once, which on a loaded 2-core machine can take longer than one reply's
bound. A liveness bound, not a timing assertion."""

PROVIDERS = {"a": "anthropic"}
MODEL = "a:claude-fleet"
INFERENCE = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}


def fleet_section(redis_url: str, prefix: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "backend": "redis",
        "redis_url": redis_url,
        "key_prefix": prefix or f"fleet-{uuid.uuid4().hex[:8]}",
        **more,
    }


@dataclass
class Replica:
    tag: str
    process: asyncio.subprocess.Process
    session: ServerSession
    traces_path: Path
    requests: list[Any] = field(default_factory=list)

    async def ask(self, text: str = "Hi") -> Any:
        params = {
            "featureSet": "fs.a",
            "stream": False,
            "messages": [{"role": "user", "content": text}],
        }
        rid = await self.session.request("inference/request", params)
        self.requests.append(rid)
        return rid

    def traces(self, *types: str) -> list[dict[str, Any]]:
        return [e for e in read_jsonl(self.traces_path) if not types or e["type"] in types]

    async def wait_trace(self, type: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not (found := self.traces(type)):
            assert time.monotonic() < deadline, f"{self.tag}: no {type} trace"
            await asyncio.sleep(0.02)
        return found[0]

    async def stop(self) -> tuple[int, str, str]:
        if self.process.returncode is None:
            self.process.terminate()
        return await finish(self.process)


async def start_replicas(
    count: int,
    hub: Hub,
    write_settings: Callable[..., Path],
    tmp_path: Path,
    sections: dict[str, Any],
) -> list[Replica]:
    """`count` serve processes, each with its own stdio MCPL server ``rN`` (all sessions
    ready) and traces file; `sections` go into every settings file."""
    processes: dict[str, tuple[asyncio.subprocess.Process, Path]] = {}
    for n in range(count):
        tag = f"r{n}"
        traces = tmp_path / f"traces-{tag}.jsonl"
        path = write_settings(
            PROVIDERS,
            name=f"{tag}.toml",
            inference=INFERENCE,
            sections={
                **sections,
                "mcpl": {
                    "servers": {tag: hub.config(tag)},
                    "routing": {"default": MODEL, "by_feature": {"fs.a": MODEL}},
                },
                "traces": {"jsonl": str(traces)},
            },
        )
        processes[tag] = (await serve(path), traces)
    sessions: dict[str, ServerSession] = {}
    for _ in range(count):
        session = await hub.next_session(START_TIMEOUT_S)
        sessions[session.tag] = session
    for session in sessions.values():
        await asyncio.wait_for(session.ready.wait(), START_TIMEOUT_S)
    return [
        Replica(tag, process, sessions[tag], traces) for tag, (process, traces) in processes.items()
    ]


def most_at_once(calls: list[Call]) -> int:
    """The most of `calls` the provider was serving at one time."""
    edges = sorted(
        [(c.started_at, 1) for c in calls]
        + [(c.ended_at if c.ended_at is not None else float("inf"), -1) for c in calls],
        key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same instant
    )
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
