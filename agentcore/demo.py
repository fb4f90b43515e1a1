"""`agentcore demo`: the whole story on one machine, with no key and no network.

Both directions of MCPL. First the server asks the host: a loopback provider
(from `agentcore.testing`, speaking Anthropic's wire format) answers the first
call with a 429 and a stated wait, then streams; the example MCPL server
(`agentcore/examples/memory_server.py`, over stdio) asks the host for a streamed summary.
Then the host runs a turn of its own: the server, granted to inject before the
user's message (not to read it) and to watch the turn's lifecycle, adds what it
remembers, and hears the turn start and complete. The demo prints what happens
as it happens. It exits 0 when the server got its summary and the turn completed
with the memory in it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from contextlib import aclosing
from pathlib import Path
from typing import Any

from rich.console import Console

from agentcore import hookimpl
from agentcore.inference import Complete, HostTurn, Message, Request
from agentcore.kernel import Kernel
from agentcore.log import configure_logging
from agentcore.mcpl.host import McplHost
from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario
from agentcore.tracing import TraceEvent

SUMMARY = (
    "Alice prefers morning meetings, the mannequin project grows to ten units in March, "
    "and Bob runs the DMX lighting."
)
MODEL = "loopback:claude-demo"
STATED_WAIT_S = 2
QUESTION = "What do you remember about the mannequins?"
GRANT = [
    "inferenceRequest",
    "inferenceRequest.streaming",
    "modelInfo",
    "contextHooks.beforeInference.inject.beforeUser",  # write before the user's text...
    "inferenceLifecycle",  # ...and watch the turn; not observe: it never reads the user
]
STEP_TIMEOUT_S = 30.0


def example_server() -> Path:
    """The example server ships inside the package: the demo runs from an installed wheel."""
    return Path(__file__).resolve().parent / "examples" / "memory_server.py"


class DemoPrinter:
    """Prints each trace as one readable line, and remembers whether the server was answered."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.answered = asyncio.Event()

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        f = event.fields
        line = self._describe(event.type, f)
        if line is not None:
            self.console.print(f"[bold cyan]{event.type:<24}[/] {line}", highlight=False)
        if event.type == "mcpl:inference_complete":
            self.answered.set()

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
        if type == "mcpl:context_hook":
            return (
                f"server {f['serverId']}: {f['outcome']}, {f['injections']} injected, "
                f"{f['dropped']} dropped"
            )
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
                        "grant": GRANT,
                        "shutdown_grace_s": 2.0,
                    }
                },
                "routing": {"default": MODEL},
            },
        },
    )


async def host_turn(kernel: Kernel, console: Console) -> str | None:
    """One of the host's own turns; returns its text, or None when it did not complete."""
    turn = HostTurn("conv_demo", 0, QUESTION)
    request = Request(MODEL, [Message.user(QUESTION)], max_tokens=200, turn=turn)
    async with aclosing(kernel.stream(request)) as events:
        async for event in events:
            if isinstance(event, Complete):
                console.print(f"\n[green]{event.response.text}[/]\n", highlight=False)
                return event.response.text
    return None


async def run_demo() -> int:
    configure_logging()
    console = Console()
    console.rule("agentcore demo: a server asks the host")
    console.print(
        "An MCPL memory server asks this host for a streamed summary. The provider "
        f"(a loopback server on Anthropic's wire) answers the first call with HTTP 429, "
        f"retry-after {STATED_WAIT_S} s, then streams.\n",
        highlight=False,
    )
    os.environ[API_KEY_ENV] = API_KEY
    printer = DemoPrinter(console)
    text: str | None = None
    async with LoopbackServer() as server:
        server.script(
            Scenario.rate_limit(retry_after=STATED_WAIT_S),
            Scenario.text(SUMMARY, chunk_delay_s=0.06, model="claude-demo-20261201"),
            Scenario.echo(chunk_delay_s=0.01),
        )
        with tempfile.TemporaryDirectory(prefix="agentcore-demo-") as tmp:
            kernel = Kernel.load(demo_settings(server, Path(tmp)), plugins={"demo": printer})
            async with kernel:
                host = McplHost(kernel)
                try:
                    await host.start()
                    await asyncio.wait_for(printer.answered.wait(), STEP_TIMEOUT_S)
                    console.print()
                    console.rule("the host's own turn")
                    console.print(
                        "The host asks its model a question. The memory server may add what "
                        "it remembers before the user's text (it is not allowed to read it), "
                        "and hears the turn start and end. The loopback provider echoes the "
                        "user message it received:\n",
                        highlight=False,
                    )
                    text = await host_turn(kernel, console)
                    # The server leaves once it has heard the turn end.
                    await asyncio.wait_for(host.wait_all_closed(), STEP_TIMEOUT_S)
                finally:
                    await host.close()
        calls = len(server.calls)
    console.print()
    if text is not None and SUMMARY in text:
        console.print(
            f"[green]done[/]: the server got its summary after {calls - 1} provider calls "
            "(one refused with 429, one streamed), and put it into the host's own turn.",
            highlight=False,
        )
        console.print(
            "\nTo watch a host live (holds counting down, waiting calls, MCPL servers and "
            "their requests), serve it with the console and open the page (from the "
            "repository's root):\n"
            "  agentcore serve --settings examples/memory.toml --console 127.0.0.1:8765\n"
            "  then http://127.0.0.1:8765/  (JSON state at /status)",
            highlight=False,
        )
        return 0
    console.print("[red]the demo did not finish[/]")
    return 1
