"""`agentcore infer`'s run (`agentcore.cli`): the streamed text, the status line while a call
waits, and a host turn with the MCPL servers taking part. Imported by that command only: no
other command (`serve` above all) runs this code, so none loads it (issue 24: idle RSS)."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import time
from contextlib import aclosing
from typing import TYPE_CHECKING

from agentcore import hookimpl
from agentcore.cli_output import say
from agentcore.inference import Aborted, Complete, Failed, InferenceError, Request, Token
from agentcore.inference.outcome import aborted_message, result_object
from agentcore.inference.turns import ending_of
from agentcore.redaction import StreamRedactor, redact

# rich draws only the status line of `infer` on a terminal: `agentcore.cli` imports it there.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status
    from rich.text import Text

    from agentcore.kernel import Kernel
    from agentcore.tracing import TraceEvent


class WaitLine:
    """The status line's text for one wait, worked out afresh each time it is drawn, so the
    seconds left count down every second however far apart the waiting traces come."""

    def __init__(self, target: str, reason: object, deadline: float | None) -> None:
        self.target = target
        self.reason = reason
        self.deadline = deadline  # time.time() when the wait should end; None: nobody knows

    def __str__(self) -> str:
        if self.deadline is None:
            return redact(f"waiting for {self.target}, {self.reason}")
        left = max(0, math.ceil(self.deadline - time.time()))
        return redact(f"waiting for {self.target}, {self.reason}, {left} s left")

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text(str(self))


class InferStatus:
    """A live status line on stderr while a call waits, drawn from `inference:waiting` traces.

    rich redraws the line several times a second in its own thread; each redraw
    reads the clock (`WaitLine`), so the countdown needs no trace and no task.
    """

    def __init__(self, console: Console) -> None:
        self._console = console
        self._status: Status | None = None
        self._line: WaitLine | None = None

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        if event.type != "inference:waiting":
            return
        fields = event.fields
        if fields.get("ended"):
            self.agentcore_stop()
            return
        remaining = fields.get("remainingMs")
        deadline = (
            (event.timestamp + remaining) / 1000 if isinstance(remaining, int | float) else None
        )
        target = f"{fields.get('provider')}:{fields.get('model')}"
        self._line = WaitLine(target, fields.get("reason"), deadline)
        if self._status is None:
            self._status = self._console.status(self._line)
            self._status.start()
        else:
            self._status.update(self._line)

    @property
    def text(self) -> str | None:
        """What the status line says now, or None while nothing waits."""
        return None if self._line is None else str(self._line)

    @hookimpl
    def agentcore_stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        self._line = None


def write_text(text: str) -> bool:
    """Print streamed text (already redacted) at once. Returns whether there was any."""
    if not text:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def end_text_line(printed: bool) -> bool:
    """End the line of streamed text, if one is open, so that what follows (an error on
    stderr, on the same terminal) starts a line of its own. Returns False: no line is open."""
    if printed:
        sys.stdout.write("\n")
        sys.stdout.flush()
    return False


async def run_inference(kernel: Kernel, request: Request, stream: bool, as_json: bool) -> int:
    """One inference; prints visible text as it streams (unless --json). Returns the exit code."""
    async with kernel:
        return await _infer(kernel, request, stream, as_json)


async def run_host_turn(kernel: Kernel, request: Request, stream: bool, as_json: bool) -> int:
    """One of the host's own turns (`--conversation`): connect to the configured MCPL
    servers as `serve` does, run the turn with them taking part, then close them.

    Ctrl-C or SIGTERM aborts the turn: servers granted `inferenceLifecycle` are told
    ``aborted`` before their connections close.
    """
    from agentcore.mcpl.host import McplHost

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated = asyncio.Event()

    def terminate() -> None:
        terminated.set()
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        async with kernel:
            host = McplHost(kernel)
            try:
                await host.start()
                return await _infer(kernel, request, stream, as_json)
            finally:
                await host.close()
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise
        say("agentcore: terminated: the turn was aborted", err=True)
        return 128 + signal.SIGTERM
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _infer(kernel: Kernel, request: Request, stream: bool, as_json: bool) -> int:
    """Run `request`, print what it gave, and return the exit code, which `ending_of`
    decides: the rule that tells a host turn's MCPL servers how it ended."""
    terminal: Complete | Failed | Aborted | None = None
    printed = False
    if not stream:
        try:
            terminal = Complete(await kernel.complete(request))
        except InferenceError as exc:
            say(f"agentcore: the inference failed: {exc.describe()}", err=True)
            terminal = Failed(exc)
    else:
        # One redactor for the whole text: a key echoed in two chunks is masked too.
        visible = StreamRedactor()
        async with aclosing(kernel.stream(request)) as events:
            async for event in events:
                if isinstance(event, Token):
                    if not as_json and event.visible:
                        printed = write_text(visible.feed(event.text)) or printed
                    continue
                if isinstance(event, Complete | Failed | Aborted):
                    printed = write_text(visible.flush()) or printed
                    terminal = event
                if isinstance(event, Failed):
                    printed = end_text_line(printed)
                    say(f"agentcore: the inference failed: {event.error.describe()}", err=True)
                elif isinstance(event, Aborted):
                    printed = end_text_line(printed)
                    say(f"agentcore: {aborted_message(event)}", err=True)
    end_text_line(printed)
    if terminal is None:
        return 1
    ending = ending_of(terminal, tools=bool(request.tools), offers="agentcore infer")
    if ending.phase != "completed" or not isinstance(terminal, Complete):
        if isinstance(terminal, Complete) and ending.error is not None:
            say(f"agentcore: {ending.error.message}", err=True)
        return 1
    if as_json:
        say(json.dumps(result_object(terminal.response)))
    elif not stream:
        say(terminal.response.text)
    return 0
