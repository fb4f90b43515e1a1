"""The kernel: the inference pipeline every inference runs through, over the plugins
`agentcore.plugins.load_plugins` found (`Kernel.load`).

One inference is a loop of attempts. Each attempt is admitted (`on_admission`,
where the provider hold waits), calls the provider, passes every stream event
through `on_stream_event` to the consumer, and ends in exactly one terminal.
A failed attempt is offered to `on_inference_error` — only while nothing
visible has reached the consumer — which decides to retry after N seconds or
give up; the kernel announces the backoff as a wait and sleeps, cancellably.
A reply is priced (`agentcore.pricing`); `complete()` and `stream()` consume the loop;
policy and provider kinds live in plugins (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
from loguru import logger

from agentcore._constants import STOP_GRACE_S as STOP_GRACE_S
from agentcore.admission import Admission
from agentcore.fleet import FleetStore, open_store
from agentcore.hooks import Hooks, plugin_manager
from agentcore.inference import (
    Aborted,
    Complete,
    Failed,
    InferenceError,
    PluginError,
    Request,
    Response,
    Retrying,
    StreamEvent,
    Terminal,
    Token,
    UsageUpdate,
)
from agentcore.inference.calls import (
    Attempt,
    GiveUp,
    Inference,
    Retry,
    Wait,
    WaitReason,
    split_model,
)
from agentcore.inference.calls import trace_fields as _trace_fields
from agentcore.inference.errors import cancelled, shutting_down
from agentcore.inference.turns import TurnEnding, ending_of, ending_of_error, with_injections
from agentcore.model_info import ModelInfo, describe_model
from agentcore.plugin_context import PluginContext, ProviderInfo
from agentcore.plugins import PluginLoadError, PluginRecord, load_plugins
from agentcore.pricing import Pricer, spend_fields
from agentcore.provider_calls import ProviderCalls, no_terminal
from agentcore.providers import Provider, ProviderKinds
from agentcore.settings import LoadedSettings, Settings, SettingsError
from agentcore.tracing import TraceEvent

if TYPE_CHECKING:
    from agentcore.mcpl.connection import ServerConnection


class Kernel:
    """Loads settings and plugins, runs inferences, emits traces. Use `Kernel.load()`."""

    def __init__(
        self,
        loaded: LoadedSettings,
        records: list[PluginRecord],
        pm: pluggy.PluginManager,
        kinds: ProviderKinds,
    ) -> None:
        self.loaded = loaded
        self.settings: Settings = loaded.settings
        self.records = records
        self.kinds = kinds
        """The provider kinds this kernel's plugins contribute."""
        self.stopping = asyncio.Event()
        self._pm = pm
        self.hooks = Hooks(pm)
        self._providers: dict[str, Provider] = {}
        self._model_infos: dict[str, ModelInfo] = {}  # the settings are fixed: made once each
        self._calls = ProviderCalls(self.settings.inference, self.stopping)  # calls in flight
        self.pricer = Pricer(self.settings.providers, self.emit_now)
        self._turns: set[_HostTurn] = set()  # host turns started and not yet ended
        self._ids = itertools.count(1)
        self._started = False
        self.mcpl_servers: Callable[[], Sequence[ServerConnection]] = tuple
        """The MCPL servers an `McplHost` running on this kernel is connected to, in
        settings order; none without one. The host sets it."""
        self._fleet: FleetStore | None = None
        self.command: str | None = None  # `PluginContext.command`: None when embedded
        self.admission = Admission(
            self.hooks, lambda: self.fleet, self.stopping, self.waiting, self.emit_now
        )

    @property
    def fleet(self) -> FleetStore:
        """The ``[fleet]`` store, made at first use (`agentcore.fleet`); closed at `stop()`."""
        if self._fleet is None:
            self._fleet = open_store(self.settings.fleet)
        return self._fleet

    @fleet.setter
    def fleet(self, store: FleetStore) -> None:
        """Replace the ``[fleet]`` store before the first call (tests, embedding hosts)."""
        self._fleet = store

    # -- loading -----------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        plugins: Mapping[str, object] | None = None,
        discover_plugins: bool = True,
        strict: bool | None = None,
    ) -> Kernel:
        """Find the plugins, validate the settings with their sections and provider kinds,
        build the kernel (`agentcore.plugins.load_plugins`).

        `path` is `--settings PATH` (else `AGENTCORE_SETTINGS`, else defaults only). `plugins`
        registers extra plugins by name, as if found by entry point (tests, embedding hosts),
        replacing a discovered one. `discover_plugins=False` searches no entry points: only
        agentcore's own plugins and `plugins` load. `strict` overrides ``[plugins] strict``.
        """
        pm = plugin_manager()
        found = load_plugins(
            pm,
            Hooks,
            path,
            environ=os.environ if environ is None else environ,
            plugins=plugins or {},
            discover_plugins=discover_plugins,
            strict=strict,
        )
        return cls(found.settings, found.records, pm, found.kinds)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Start every active plugin, in load order; a failure is reported by the plugin's name."""
        if self._started:
            return
        self._started = True
        failed: list[PluginRecord] = []
        for record in self.records:
            if record.state != "active":
                continue
            context = self._context(record)
            try:
                await self.hooks.start_plugin(record.name, context)
            except PluginError as error:
                record.state, record.error = "failed", error.reason
                failed.append(record)
                self._pm.unregister(name=record.name)
        self.hooks.refresh()
        if failed:
            if self.settings.plugins.strict:
                await self.stop()
                raise PluginLoadError(failed)
            for record in failed:
                logger.error("plugin {!r} is not loaded: {}", record.name, record.error)

    async def stop(self) -> None:
        """Wake every waiter (it fails: shutting down), stop plugins, close providers."""
        self.stopping.set()
        # In-flight provider calls end now, with the shutdown error, through their own
        # attempt's path (so each closes its connection and its consumer gets a terminal);
        # only once they have ended do the plugins stop and the providers close.
        self._calls.stop_all()
        await self._calls.ended(STOP_GRACE_S)
        await self.admission.stop()  # what attempts past the grace still hold comes back now
        await self.hooks.stop()
        fleet, self._fleet = self._fleet, None
        if fleet is not None:
            await fleet.aclose()
        providers, self._providers = self._providers, {}
        for provider in providers.values():
            try:
                await provider.aclose()
            except Exception:
                logger.exception("closing provider {!r} failed", provider.name)

    async def end_host_turns(self, grace_s: float = STOP_GRACE_S) -> None:
        """Begin the shutdown with the host's own turns: mark the kernel stopping and end
        every turn in flight now (``aborted``), waiting up to `grace_s` for them, so that
        MCPL servers hear so while still connected. `McplHost.close()` calls this first."""
        self.stopping.set()
        self._calls.stop_host_turns()
        pending = [turn.done.wait() for turn in self._turns]
        if pending:
            done = asyncio.gather(*pending)
            try:
                await asyncio.wait_for(done, grace_s)
            except TimeoutError:
                logger.warning("{} host turns had not ended at shutdown", len(self._turns))

    async def __aenter__(self) -> Kernel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _context(self, record: PluginRecord) -> PluginContext:
        """The narrow view of this kernel that one plugin is started with."""
        section = record.section.path if record.section else None
        providers = {n: ProviderInfo(n, c.kind) for n, c in self.settings.providers.items()}
        return PluginContext(
            record.name,
            self.settings.section(section) if section else None,
            inference=self.settings.inference.model_copy(),
            providers=providers,
            stopping=self.stopping,
            emit=self.emit_now,
            waiting=self.waiting,
            complete=self.complete,
            stream=self.stream,
            model_info=self.model_info,
            media_types=self.media_types,
            mcpl_servers=lambda: self.mcpl_servers(),  # set once an McplHost runs
            fleet=self.admission.store,  # with the plugins' claim kinds
            bulk=self.settings.mcpl.bulk.model_copy(),
            add_claim_kind=functools.partial(self.admission.add_kind, record.name),
            pricer=self.pricer,
            command=self.command,
        )

    # -- traces and waits ------------------------------------------------------------

    async def emit(self, type: str, *, subject: object = None, **fields: Any) -> None:
        self.emit_now(type, subject=subject, **fields)

    def emit_now(self, type: str, *, subject: object = None, **fields: Any) -> None:
        """Every trace goes out here. Its fields are redacted before any observer sees them,
        on the first read (`TraceEvent.fields`), so a trace no observer reads costs none.
        It never waits for an observer, so plain functions may emit too. `subject` is what
        the trace is about (`TraceEvent.subject`), for observers only: never serialized."""
        self.hooks.trace(TraceEvent(type, fields, subject=subject))

    @asynccontextmanager
    async def waiting(
        self,
        reason: WaitReason,
        attempt: Attempt,
        until: float | None,
        *,
        for_s: float | None = None,
    ) -> AsyncIterator[Wait]:
        """Announce a wait to observers for as long as the block runs. With `for_s`, it is
        due `for_s` after it starts, both read off one clock reading (`until` is ignored)."""
        started = time.monotonic()
        if for_s is not None:
            until = started + for_s
        wait = Wait(f"w{next(self._ids)}", reason, attempt, started, until)
        self.hooks.wait_start(wait)
        try:
            yield wait
        finally:
            self.hooks.wait_end(wait)

    async def sleep(self, delay_s: float) -> None:
        """Sleep, unless the kernel stops first: then raise the shutting-down error."""
        if self.stopping.is_set():
            raise shutting_down()
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=max(0.0, delay_s))
        except TimeoutError:
            return
        raise shutting_down()

    # -- providers ---------------------------------------------------------------------

    def model_info(self, reference: str) -> ModelInfo:
        """What the host knows of a model reference's model (``[providers.NAME.models.MODEL]``,
        then built-in knowledge), for MCPL's `model/info` and context hooks."""
        info = self._model_infos.get(reference)
        if info is None:
            name, model = split_model(reference)
            config = self.settings.providers.get(name)
            info = describe_model(model, config.models.get(model) if config else None)
            if len(self._model_infos) >= 1024:  # references are the host's own: a bound anyway
                self._model_infos.clear()
            self._model_infos[reference] = info
        return info

    def media_types(self, reference: str) -> frozenset[str]:
        """The media types (`MediaBlock`) the provider of a model reference carries in a user
        message: what it declares as `media_types`; a provider that declares none, none."""
        declared = getattr(self.provider(split_model(reference)[0]), "media_types", None)
        return declared if isinstance(declared, frozenset) else frozenset()

    def provider(self, name: str) -> Provider:
        provider = self._providers.get(name)
        if provider is None:
            config = self.settings.providers.get(name)
            if config is None:
                known = ", ".join(sorted(self.settings.providers))
                raise InferenceError(
                    "invalid_request",
                    f"no provider named {name!r} in the settings (configured: {known})",
                    retryable=False,
                )
            provider = self.kinds.create(name, config, self.settings.inference)
            self._providers[name] = provider
        return provider

    def _begin(self, request: Request, streamed: bool) -> tuple[Inference, Provider]:
        name, model = split_model(request.model)
        provider = self.provider(name)
        inference = Inference(f"inf_{next(self._ids)}", request, name, model, streamed)
        return inference, provider

    async def _start_trace(self, inference: Inference) -> None:
        request = inference.request
        await self.emit(
            "inference:start",
            subject=request,
            provider=inference.provider,
            providerKind=self.settings.providers[inference.provider].kind,
            maxTokens=request.max_tokens,
            temperature=request.temperature,
            **_trace_fields(inference),
        )

    # -- the pipeline --------------------------------------------------------------------

    async def _admit(self, attempt: Attempt) -> None:
        if self.stopping.is_set():
            raise shutting_down()
        try:
            await self.hooks.admission(attempt)
            await self.admission.admit(attempt)  # the claims, decided at once by the store
        except PluginError as exc:
            raise as_inference_error(exc) from exc

    async def _after_failure(
        self, attempt: Attempt, error: InferenceError
    ) -> float | InferenceError:
        """Ask the policies: the delay before the next attempt, or the error to fail with."""
        if error.kind == "cancelled":
            return error
        try:
            decision = await self.hooks.inference_error(attempt, error)
        except PluginError as exc:
            return as_inference_error(exc)
        except InferenceError as exc:
            return exc
        if isinstance(decision, Retry):
            attempt.inference.errors.append(error)
            await self.emit(
                "inference:retry",
                inferenceId=attempt.inference.id,
                model=attempt.inference.request.model,
                attempt=attempt.number,
                delayMs=round(decision.delay_s * 1000),
                error=error.describe(),
                errorKind=error.kind,
            )
            return decision.delay_s
        if isinstance(decision, GiveUp) and decision.error is not None:
            return decision.error
        return error

    async def _backoff(self, attempt: Attempt, delay_s: float) -> Aborted | None:
        """Wait out a retry's delay, announced; a shutdown meanwhile ends the inference."""
        try:
            async with self.waiting("backoff", attempt, None, for_s=delay_s):
                await self.sleep(delay_s)
        except InferenceError as stopped:
            await self._fail_trace(attempt.inference, attempt.number, stopped)
            return Aborted("cancelled", stopped)
        return None

    async def _complete_trace(self, attempt: Attempt, response: Response) -> None:
        inference = attempt.inference
        await self.emit(
            "inference:complete",
            subject=response,
            modelServed=response.model_served,
            attempts=attempt.number,
            **spend_fields(response),
            finishReason=response.stop.reason,
            **_trace_fields(inference),
        )

    async def _fail_trace(
        self, inference: Inference, attempts: int, error: InferenceError, *, refused: bool = False
    ) -> None:
        await self.emit(
            "inference:fail",
            attempts=attempts,
            error=error.describe(),
            errorKind=error.kind,
            refused=refused,
            **_trace_fields(inference),
        )

    async def complete(self, request: Request) -> Response:
        """One whole (non-streamed) inference with every policy applied; raises `InferenceError`."""
        async with aclosing(self._events(request, streamed=False)) as events:
            async for event in events:
                if isinstance(event, Complete):
                    return event.response
                if isinstance(event, Failed | Aborted):
                    raise event.error
        raise AssertionError("an inference ends with a terminal")  # pragma: no cover

    def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        """Stream one inference with every policy applied. Ends with exactly one terminal event.

        Leave early with ``async with contextlib.aclosing(kernel.stream(r))`` to
        close the provider call at once.
        """
        return self._events(request, streamed=True)

    def _events(self, request: Request, streamed: bool) -> AsyncGenerator[StreamEvent, None]:
        if request.turn is None:
            return self._inference(request, streamed, None)
        return self._host_turn(request, streamed)

    async def _host_turn(
        self, request: Request, streamed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """A host turn's events: its ending goes to `on_host_turn_end` before the consumer
        sees the terminal, and a cancellation or an early close is an ``aborted`` end."""
        turn = _HostTurn(self)
        try:
            async with aclosing(self._inference(request, streamed, turn)) as events:
                async for event in events:
                    if isinstance(event, Complete | Failed | Aborted):
                        await turn.end(ending_of(event, tools=bool(request.tools)))
                    yield event
        except (asyncio.CancelledError, GeneratorExit):
            await turn.end(ending_of_error(cancelled()))
            raise

    async def _inference(
        self, request: Request, streamed: bool, turn: _HostTurn | None
    ) -> AsyncGenerator[StreamEvent, None]:
        """The one attempt loop of `complete()` and `stream()`: admit, call, end the attempt, ask
        the policies, back off, end in one terminal; events pass `on_stream_event` inline."""
        try:
            inference, provider = self._begin(request, streamed)
        except InferenceError as error:
            yield Failed(error)
            return
        await self._start_trace(inference)
        ended = False  # set just before the terminal: the inference's last trace is out
        hooks = self.hooks
        call = self._calls.stream if streamed else self._calls.whole
        try:
            if turn is not None:
                await turn.open(inference)
            for number in itertools.count(1):
                attempt = Attempt(inference, number)
                if (refusal := await self._admit_attempt(attempt, turn)) is not None:
                    ended = True
                    yield refusal
                    return
                visible = False
                terminal: Terminal | None = None
                # No coroutine per event when every on_stream_event implementation is sync.
                observe = streamed and hooks.has_stream_observers
                observe_now = hooks.stream_event_sync if observe and hooks.stream_sync else None
                try:
                    async with aclosing(call(provider, attempt)) as events:
                        async for event in events:
                            if observe_now is not None:
                                event = observe_now(attempt, event)
                            elif observe:
                                event = await hooks.stream_event(attempt, event)
                            if type(event) is Token:
                                visible = visible or event.visible
                                attempt.replied = True
                            elif type(event) is UsageUpdate:
                                attempt.usage = event.usage  # what a cut attempt was billed
                            elif isinstance(event, Complete | Failed | Aborted):
                                terminal = event
                                break
                            yield event
                except (asyncio.CancelledError, GeneratorExit):
                    await self._attempt_cancelled(attempt)
                    raise
                ending = await self._end_attempt(attempt, terminal, visible)
                if isinstance(ending, Retrying):
                    yield ending
                    if (stopped := await self._backoff(attempt, ending.delay_s)) is None:
                        continue
                    ending = stopped
                ended = True
                yield ending
                return
        except (asyncio.CancelledError, GeneratorExit):
            if not ended:
                await self._fail_trace(inference, len(inference.errors) + 1, cancelled())
            raise

    async def _admit_attempt(self, attempt: Attempt, turn: _HostTurn | None) -> Failed | None:
        """Admit one attempt; a refusal is the inference's answer (traced here). A host turn
        starts when its first attempt is admitted."""
        try:
            await self._admit(attempt)
        except InferenceError as error:
            await self._fail_trace(attempt.inference, attempt.number, error, refused=True)
            return Failed(error)
        if turn is not None and attempt.number == 1:
            try:
                await turn.start()
            except BaseException:
                self.admission.release(attempt, None, cancelled())
                raise
        return None

    async def _attempt_cancelled(self, attempt: Attempt) -> None:
        await self.hooks.attempt_end(attempt, cancelled())
        self.admission.release(attempt, None, cancelled())

    async def _end_attempt(
        self, attempt: Attempt, terminal: Terminal | None, visible: bool
    ) -> Terminal | Retrying:
        """End one attempt (`on_attempt_end`) and decide: the inference's terminal, or a
        retry. A failure after visible output is never retried."""
        hooks = self.hooks
        if terminal is None:  # an attempt ends with one, but a plugin replaced it
            terminal = Failed(no_terminal(attempt))
        if isinstance(terminal, Complete):
            terminal.response.cost_usd = await self.pricer.cost(attempt.provider, terminal.response)
            await hooks.attempt_end(attempt, None)
            self.admission.release(attempt, terminal.response, None)
            await self._complete_trace(attempt, terminal.response)
            return terminal
        failure = terminal.error
        await hooks.attempt_end(attempt, failure)
        self.admission.release(attempt, None, failure)
        outcome = failure if visible else await self._after_failure(attempt, failure)
        if isinstance(outcome, InferenceError):
            await self._fail_trace(attempt.inference, attempt.number, outcome)
            return terminal if outcome is failure else Failed(outcome)
        return Retrying(attempt.number, outcome, failure)


class _HostTurn:
    """One host turn's way through the kernel: its context added once, `started` once it is
    admitted, and exactly one end per start (SPEC §10.5's pairing, on every path)."""

    __slots__ = ("_ended", "_kernel", "_started", "done", "inference")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.inference: Inference | None = None
        self._started = False
        self._ended = False
        self.done = asyncio.Event()

    async def open(self, inference: Inference) -> None:
        self.inference = inference
        if self._kernel.stopping.is_set():
            return  # the first admission refuses it: nobody needs to add context
        injections = await self._kernel.hooks.host_turn_context(inference)
        if injections:
            inference.request = with_injections(inference.request, injections)

    async def start(self) -> None:
        assert self.inference is not None
        self._started = True
        self._kernel._turns.add(self)
        await self._kernel.hooks.host_turn_start(self.inference)

    async def end(self, ending: TurnEnding) -> None:
        if not self._started or self._ended or self.inference is None:
            return
        self._ended = True
        try:
            await self._kernel.hooks.host_turn_end(self.inference, ending)
        finally:
            self._kernel._turns.discard(self)
            self.done.set()


def as_inference_error(error: PluginError) -> InferenceError:
    return InferenceError("unknown", str(error), retryable=False)


__all__ = ["Kernel", "PluginLoadError", "SettingsError", "split_model"]
