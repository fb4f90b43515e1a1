"""A scripted in-process provider, the plugin that makes it a provider kind, and a trace recorder.

No server and no wire: `ScriptedProvider` implements the `Provider` protocol
(`agentcore.providers.base`) directly and plays one scripted answer per call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentcore import hookimpl
from agentcore.inference import (
    TERMINAL_TYPES,
    Complete,
    Failed,
    InferenceError,
    Request,
    Response,
    StopInfo,
    StreamEvent,
    TextBlock,
    Token,
    Usage,
)

if TYPE_CHECKING:
    from agentcore.inference.calls import Wait
    from agentcore.providers import ProviderFactory
    from agentcore.tracing import TraceEvent

SCRIPTED_KIND = "scripted"
"""The provider kind `scripted_kind` contributes."""


@dataclass(frozen=True)
class Stall:
    """Wait, as a stalled connection does: `seconds`, or forever (None).

    Announced on `ScriptedProvider.stalled`. As a whole answer it stalls, then
    gives the default reply (which it never does if it stalls forever)."""

    seconds: float | None = None


@dataclass(frozen=True)
class Partial:
    """An answer that shows visible `text`, then fails with `error`."""

    error: BaseException
    text: str = "hel"


class _NoTerminal:
    def __repr__(self) -> str:
        return "NO_TERMINAL"


class _Ok:
    def __repr__(self) -> str:
        return "OK"


OK: Any = _Ok()
"""The default reply: ``hello``, ``end_turn``, the requested model."""
NO_TERMINAL: Any = _NoTerminal()
"""A stream that shows ``hello`` and ends with no terminal event."""
STALL = Stall()
"""Send nothing, forever (a stream the progress timeout cuts)."""


@dataclass
class ScriptedCall:
    """One call the provider took."""

    model: str
    request: Request
    streamed: bool
    started_at: float
    """`time.time()`: comparable with a hold's ``untilMs``."""
    ended_at: float | None = None
    ending: str | None = None
    """``finished``, ``GeneratorExit`` or ``CancelledError`` (see `ScriptedProvider`)."""

    @property
    def tag(self) -> object:
        """The request's ``metadata["tag"]``."""
        return self.request.metadata.get("tag")


@dataclass(frozen=True)
class CallEvent:
    """A call starting or ending, in `ScriptedProvider.log`."""

    event: str
    """``start`` or ``end``."""
    tag: object
    """The request's ``metadata["tag"]``."""
    model: str
    at: float
    """`time.time()`."""


def text_response(text: str = "hello", model: str = "m1") -> Response:
    """A whole text reply that ended normally."""
    return Response([TextBlock(text)], StopInfo("end_turn", "end_turn"), Usage(1, 1), model, model)


class ScriptedProvider:
    """A provider whose calls follow a script, one answer per call.

    `script` is the queue of answers; each call takes the next, and once it is
    empty every call plays `default` (`OK` unless set). With `answer_for`, a call
    whose request it answers (anything but None) plays that instead, whatever the
    order of concurrent calls: say, by the request's last message. An answer is:

    - a list of steps, played in order: a stream event is yielded, an exception
      is raised, a `Stall` waits. For `complete()` a `Response` is returned, a
      `Complete` gives its response, a `Failed` raises its error;
    - `OK` (``hello``), a `Response` (its text, then `Complete`), an exception
      (`stream()` yields `Failed` for an `InferenceError`, raises anything else;
      `complete()` raises), a `Stall` (then `OK`), `Partial(error)`, `NO_TERMINAL`.

    Every call waits `latency_s` first. `calls` records each call (`ScriptedCall`),
    `log` each start and end (`CallEvent`; a call ends when its answer is given,
    before the consumer sees the terminal, or when it is stopped). `endings` says
    how each streamed attempt's generator ended: ``finished`` (its script ran out,
    or it was closed after its terminal), ``GeneratorExit`` (closed before its
    terminal) or ``CancelledError``. `stalled` is set when a `Stall` begins;
    `closed` once `aclose()` ran.
    """

    OK = OK
    STALL = STALL
    NO_TERMINAL = NO_TERMINAL
    Partial = Partial

    def __init__(
        self,
        *answers: Any,
        name: str = "fake",
        kind: str = SCRIPTED_KIND,
        default: Any = OK,
        latency_s: float = 0.0,
        answer_for: Callable[[Request], Any] | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.script: list[Any] = list(answers)
        self.default = default
        self.latency_s = latency_s
        self.answer_for = answer_for
        self.calls: list[ScriptedCall] = []
        self.log: list[CallEvent] = []
        self.endings: list[str] = []
        self.stalled = asyncio.Event()
        self.closed = False

    # -- what a test reads ---------------------------------------------------------

    @property
    def models(self) -> list[str]:
        """Every call's model, in order."""
        return [c.model for c in self.calls]

    def starts(self) -> list[CallEvent]:
        return [c for c in self.log if c.event == "start"]

    # -- playing -------------------------------------------------------------------

    def _begin(self, request: Request, model: str, streamed: bool) -> tuple[ScriptedCall, Any]:
        call = ScriptedCall(model, request, streamed, time.time())
        self.calls.append(call)
        self.log.append(CallEvent("start", call.tag, model, call.started_at))
        answer = self.answer_for(request) if self.answer_for is not None else None
        if answer is None:
            answer = self.script.pop(0) if self.script else self.default
        return call, answer

    def _end(self, call: ScriptedCall) -> None:
        if call.ended_at is None:
            call.ended_at = time.time()
            self.log.append(CallEvent("end", call.tag, call.model, call.ended_at))

    @staticmethod
    def _steps(answer: Any, model: str) -> list[Any]:
        if isinstance(answer, list | tuple):
            return list(answer)
        if answer is OK:
            response = text_response("hello", model)
            return [Token("hello", "text"), Complete(response)]
        if answer is NO_TERMINAL:
            return [Token("hello", "text")]
        if isinstance(answer, Response):
            return [Token(answer.text, "text"), Complete(answer)]
        if isinstance(answer, Partial):
            return [Token(answer.text, "text"), _failed(answer.error)]
        if isinstance(answer, Stall):
            return [answer, *ScriptedProvider._steps(OK, model)]
        if isinstance(answer, BaseException):
            return [_failed(answer)]
        raise TypeError(f"not a scripted answer: {answer!r}")

    async def _stall(self, stall: Stall) -> None:
        self.stalled.set()
        if stall.seconds is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(stall.seconds)

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        call, answer = self._begin(request, model, streamed=True)
        ending, done = "finished", False
        try:
            await asyncio.sleep(self.latency_s)
            for step in self._steps(answer, model):
                if isinstance(step, Stall):
                    await self._stall(step)
                elif isinstance(step, BaseException):
                    raise step
                else:
                    done = isinstance(step, TERMINAL_TYPES)
                    if done:
                        self._end(call)
                    yield step
        except GeneratorExit:  # closed by the consumer: early, or after the terminal
            ending = "finished" if done else "GeneratorExit"
            raise
        except asyncio.CancelledError:
            ending = "CancelledError"
            raise
        finally:
            self._end(call)
            call.ending = ending
            self.endings.append(ending)

    async def complete(self, request: Request, model: str) -> Response:
        call, answer = self._begin(request, model, streamed=False)
        ending = "finished"
        try:
            await asyncio.sleep(self.latency_s)
            for step in self._steps(answer, model):
                if isinstance(step, Stall):
                    await self._stall(step)
                elif isinstance(step, BaseException):
                    raise step
                elif isinstance(step, Failed):
                    raise step.error
                elif isinstance(step, Complete):  # a stream script: its whole response
                    return step.response
                elif isinstance(step, Response):
                    return step
            raise AssertionError("a complete() script must end with a Response or an error")
        except asyncio.CancelledError:
            ending = "CancelledError"
            raise
        finally:
            self._end(call)
            call.ending = ending

    async def aclose(self) -> None:
        self.closed = True


def _failed(error: BaseException) -> Any:
    """`Failed` for an `InferenceError`; any other exception is raised as it is."""
    return Failed(error) if isinstance(error, InferenceError) else error


class ProviderKindsPlugin:
    """A plugin contributing provider kinds through `agentcore_provider_kinds`, as an
    installed one would: ``Kernel.load(..., plugins={"acme": ProviderKindsPlugin({"acme":
    factory})})``. The kinds exist in that kernel only."""

    def __init__(self, kinds: Mapping[str, ProviderFactory]) -> None:
        self.kinds = dict(kinds)

    @hookimpl
    def agentcore_provider_kinds(self) -> dict[str, ProviderFactory]:
        return dict(self.kinds)


def scripted_kind(provider: ScriptedProvider, kind: str = SCRIPTED_KIND) -> ProviderKindsPlugin:
    """The plugin through which every ``[providers.NAME] kind = "<kind>"`` section resolves
    to `provider`: ``Kernel.load(..., plugins={"scripted": scripted_kind(provider)})``."""

    def factory(name: str, config: Any, inference: Any) -> ScriptedProvider:
        return provider

    return ProviderKindsPlugin({kind: factory})


class TraceRecorder:
    """A plugin that keeps every trace (`events`) and every announced wait (`waits`)."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.waits: list[tuple[str, Wait]] = []

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
        self.events.append(event)

    @hookimpl
    def on_wait_start(self, wait: Wait) -> None:
        self.waits.append(("start", wait))

    @hookimpl
    def on_wait_end(self, wait: Wait) -> None:
        self.waits.append(("end", wait))

    def of(self, type: str) -> list[dict[str, Any]]:
        """The fields of every trace of this type, in order."""
        return [e.fields for e in self.events if e.type == type]

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]
