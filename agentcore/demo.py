"""`agentcore demo`: the whole story on one machine, with no key and no network.

A loopback provider (from `agentcore.testing`, speaking Anthropic's wire format)
answers the first call with a 429 and a stated wait, then streams. The example
MCPL server (`examples/memory_server.py`, over stdio) asks the host for a
streamed summary. The demo prints what happens as it happens: the retry, the
hold, the waiting traces counting down, the chunks reaching the server, and the
final result. It exits 0 when the server got its summary.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from agentcore import hookimpl
from agentcore.kernel import Kernel
from agentcore.log import configure_logging
from agentcore.mcpl.host import run_host
from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario
from agentcore.traces import TraceEvent

SUMMARY = (
    "Alice prefers morning meetings, the mannequin project grows to ten units in March, "
    "and Bob runs the DMX lighting."
)
MODEL = "loopback:claude-demo"
STATED_WAIT_S = 2


def example_server() -> Path:
    path = Path(__file__).resolve().parent.parent / "examples" / "memory_server.py"
    if not path.exists():
        raise SystemExit(f"agentcore demo needs a source checkout: {path} is missing")
    return path


class DemoPrinter:
    """Prints each trace as one readable line, and remembers whether the server was answered."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.answered = False

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        f = event.fields
        line = self._describe(event.type, f)
        if line is not None:
            self.console.print(f"[bold cyan]{event.type:<24}[/] {line}", highlight=False)
        if event.type == "mcpl:inference_complete":
            self.answered = True

    def _describe(self, type: str, f: dict[str, Any]) -> str | None:
        if type == "mcpl:inference_start":
            return f"server {f['serverId']} asks for {f['model']} (streamed: {f['streamed']})"
        if type == "inference:start":
            return f"{f['model']}"
        if type == "provider:hold":
            return f"{f['provider']}:{f['model']} held for {f.get('durationMs')} ms ({f['reason']})"
        if type == "provider:release":
            return f"{f['provider']}:{f['model']} released"
        if type == "inference:retry":
            return f"attempt {f['attempt']} failed ({f['error']}); retrying in {f['delayMs']} ms"
        if type == "inference:waiting":
            if f.get("ended"):
                return f"{f['reason']} wait over after {f.get('waitedMs')} ms"
            remaining = f.get("remainingMs")
            left = f"{remaining / 1000:.1f} s left" if remaining is not None else "until released"
            return f"{f['reason']}: {left}"
        if type == "inference:complete":
            return (
                f"{f['modelServed']} finished ({f['finishReason']}), "
                f"{f['inputTokens']} in / {f['outputTokens']} out, {f['attempts']} attempts"
            )
        if type == "mcpl:inference_complete":
            return f"server {f['serverId']} answered: {f['finishReason']}, model {f['model']}"
        if type in ("inference:fail", "mcpl:inference_fail"):
            return f"[red]{f['error']}[/]"
        return None


def demo_settings(server: LoopbackServer, directory: Path) -> Path:
    return server.write_settings(
        directory / "demo.toml",
        {"loopback": "anthropic"},
        sections={
            "retry": {"initial_delay_s": 0.5, "max_delay_s": 5.0, "jitter_s": 0.0},
            "provider_hold": {"max_wait_s": 30.0},
            "waiting_trace": {"interval_s": 0.5},
            "mcpl": {
                "servers": {
                    "memory": {
                        "command": [sys.executable, str(example_server())],
                        "grant": ["inferenceRequest", "inferenceRequest.streaming", "modelInfo"],
                        "shutdown_grace_s": 2.0,
                    }
                },
                "routing": {"default": MODEL},
            },
        },
    )


async def run_demo() -> int:
    configure_logging()
    console = Console()
    console.rule("agentcore demo")
    console.print(
        "An MCPL memory server asks this host for a streamed summary. The provider "
        f"(a loopback server on Anthropic's wire) answers the first call with HTTP 429, "
        f"retry-after {STATED_WAIT_S} s, then streams.\n",
        highlight=False,
    )
    os.environ[API_KEY_ENV] = API_KEY
    printer = DemoPrinter(console)
    async with LoopbackServer() as server:
        server.script(
            Scenario.rate_limit(retry_after=STATED_WAIT_S),
            Scenario.text(SUMMARY, chunk_delay_s=0.06, model="claude-demo-20261201"),
        )
        with tempfile.TemporaryDirectory(prefix="agentcore-demo-") as tmp:
            kernel = Kernel.load(demo_settings(server, Path(tmp)), plugins={"demo": printer})
            await run_host(kernel)
        calls = len(server.calls)
    console.print()
    if printer.answered:
        console.print(
            f"[green]done[/]: the server got its summary after {calls} provider calls "
            "(one refused with 429, one streamed).",
            highlight=False,
        )
        console.print(
            "\nTo watch a host live (holds counting down, waiting calls, MCPL servers and "
            "their requests), serve it with the console and open the page:\n"
            "  agentcore serve --settings deploy.toml --console 127.0.0.1:8765\n"
            "  then http://127.0.0.1:8765/  (JSON state at /status)",
            highlight=False,
        )
        return 0
    console.print("[red]the server was not answered[/]")
    return 1
