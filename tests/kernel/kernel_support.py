"""Helpers shared by the kernel's tests: scripted replies, recorders, stream checks.

The scripted provider itself is `agentcore.testing.ScriptedProvider` (`Stall` is
re-exported from there).

Imported by the test modules as ``kernel_support`` (conftest.py puts this
directory on sys.path: with ``--import-mode=importlib`` test directories are
not importable packages).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable
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
from agentcore.testing import Stall

__all__ = ["Stall"]  # re-exported for the test modules

# Every module a fixture distribution installs starts with this prefix, so a test
# can tell whether one was imported, and the modules are forgotten after each test.
MODULE_PREFIX = "ackt_"


def imported(module: str) -> bool:
    return module in sys.modules


def fixture_module(name: str) -> Any:
    """A fixture distribution's module, which must have been imported already."""
    return sys.modules[name]


# -- scripted replies ------------------------------------------------------------------


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


FAKE_ENV = {"AGENTCORE_PROVIDERS__FAKE__KIND": "scripted"}
"""Settings for `[providers.fake] kind = "scripted"`: the test's `ScriptedProvider`."""


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
