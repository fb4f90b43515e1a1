"""Helpers shared by the kernel's tests: scripted providers, recorders, stream checks.

Imported by the test modules as ``kernel_support`` (conftest.py puts this
directory on sys.path: with ``--import-mode=importlib`` test directories are
not importable packages).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from agentcore import hookimpl
from agentcore.inference import (
    TERMINAL_TYPES,
    BlockStart,
    BlockStop,
    Complete,
    InferenceError,
    Message,
    Request,
    Response,
    StopInfo,
    StreamEvent,
    TextBlock,
    Token,
    Usage,
    UsageUpdate,
)
from agentcore.inference.calls import Attempt, Inference
from agentcore.mcpl.protocol import McplRequest

# Every module a fixture distribution installs starts with this prefix, so a test
# can tell whether one was imported, and the modules are forgotten after each test.
MODULE_PREFIX = "ackt_"


def imported(module: str) -> bool:
    return module in sys.modules


def fixture_module(name: str) -> Any:
    """A fixture distribution's module, which must have been imported already."""
    return sys.modules[name]


# -- scripted providers ------------------------------------------------------------------


@dataclass
class Stall:
    """A step that waits (a stalled connection); announced on `Scripted.stalled`."""

    seconds: float = 30.0


def reply(text: str, model: str = "m1") -> list[StreamEvent]:
    """The events of a whole text reply, word by word, ending with Complete."""
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    response = Response(
        [TextBlock(text)],
        StopInfo("end_turn", "end_turn"),
        Usage(input_tokens=3, output_tokens=len(words)),
        model,
        model + "-served",
        "fake",
    )
    return [
        BlockStart(0, "text"),
        *(Token(w, "text", 0, True) for w in words),
        BlockStop(0, response.content[0]),
        UsageUpdate(response.usage),
        Complete(response),
    ]


def response(text: str = "done", model: str = "m1") -> Response:
    event = reply(text, model)[-1]
    assert isinstance(event, Complete)
    return event.response


def server_error(message: str = "upstream broke") -> InferenceError:
    return InferenceError("server", message, status=503)


class Scripted:
    """A provider whose attempts follow a script.

    Each attempt is a list of steps: a stream event is yielded, an exception is
    raised, a `Stall` sleeps. For `complete()`, a step is a `Response` (returned),
    an exception (raised) or a `Stall`, and a stream script's `Complete` gives its
    response. The last attempt's script repeats.
    `endings` says how each attempt's generator ended: ``finished`` (its script
    ran out, or it was closed after its terminal), ``GeneratorExit`` (closed
    before its terminal) or ``CancelledError``.
    """

    kind = "scripted"

    def __init__(self, *attempts: Iterable[Any]) -> None:
        self.name = "fake"
        self.attempts = [list(a) for a in attempts]
        self.calls = 0
        self.endings: list[str] = []
        self.stalled = asyncio.Event()
        self.closed = False

    def _script(self) -> list[Any]:
        script = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        return script

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        ending, done = "finished", False
        try:
            for step in self._script():
                if isinstance(step, Stall):
                    self.stalled.set()
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, BaseException):
                    raise step
                else:
                    done = isinstance(step, TERMINAL_TYPES)
                    yield step
        except GeneratorExit:  # closed by the consumer: early, or after the terminal
            ending = "finished" if done else "GeneratorExit"
            raise
        except asyncio.CancelledError:
            ending = "CancelledError"
            raise
        finally:
            self.endings.append(ending)

    async def complete(self, request: Request, model: str) -> Response:
        for step in self._script():
            if isinstance(step, Stall):
                self.stalled.set()
                await asyncio.sleep(step.seconds)
            elif isinstance(step, BaseException):
                raise step
            elif isinstance(step, Complete):  # a stream script: its whole response
                return step.response
            elif isinstance(step, Response):
                return step
        raise AssertionError("a complete() script must end with a Response or an error")

    async def aclose(self) -> None:
        self.closed = True


FAKE_ENV = {"AGENTCORE_PROVIDERS__FAKE__KIND": "scripted"}
"""Settings for `[providers.fake] kind = "scripted"`: the test's `Scripted` provider."""


def request(model: str = "fake:m1", text: str = "hello there") -> Request:
    return Request(model, [Message.user(text)])


# -- kernels and recorders -------------------------------------------------------------


class Traces:
    """A plugin that keeps every trace as its JSON dict."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @hookimpl
    def on_trace(self, event: Any) -> None:
        self.events.append(event.to_dict())

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type]

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    """Every event of a stream, checking that exactly one terminal came, and came last."""
    events = [event async for event in stream]
    terminals = [e for e in events if isinstance(e, TERMINAL_TYPES)]
    assert len(terminals) == 1, events
    assert events[-1] is terminals[0], events
    return events


def text_of(events: Iterable[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Token) and e.visible)


def attempt(number: int = 1, streamed: bool = True) -> Attempt:
    """An attempt of an inference nobody runs: for calling the hooks directly."""
    return Attempt(Inference("inf_test", request(), "fake", "m1", streamed), number)


class Server:
    """The MCPL server handle an `McplRequest` carries."""

    name = "memory"
    grant = frozenset({"inferenceRequest"})

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        pass


def mcpl_request(method: str = "acme/echo") -> McplRequest:
    return McplRequest(Server(), 7, method, {"x": 1})
