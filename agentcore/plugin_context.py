"""The context a plugin is started with (`PluginContext`): all a plugin sees of the kernel,
and the handles it gives out (`ProviderInfo`, `ServerHandle`). Re-exported by
`agentcore.api`; `agentcore.plugins` keeps the old import path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol

from typing_extensions import TypeVar

from agentcore.mcpl.protocol import ServerHandle as RequestServer

if TYPE_CHECKING:
    from agentcore.fleet import FleetStore
    from agentcore.fleet.claims import ClaimKind
    from agentcore.inference import Request, Response, StreamEvent
    from agentcore.inference.calls import Attempt, Wait, WaitReason
    from agentcore.mcpl.jsonrpc import EncodedParams
    from agentcore.model_info import ModelInfo
    from agentcore.pricing import Pricer
    from agentcore.settings import InferenceSettings
    from agentcore.settings_mcpl import BulkSettings


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """One configured ``[providers.NAME]``, as plugins may know it (never its key)."""

    name: str
    kind: str


class ServerHandle(RequestServer, Protocol):
    """One MCPL server the host is connected to, as a plugin may use it
    (`PluginContext.mcpl_servers`): its name, grant and `notify` (what an `McplRequest`'s
    server has too), and what the policies of the host's own turns need besides, no more.
    The sends check the grant at once (§5.4: a denied capability's message is not sent)
    and raise `McplError`, or `ConnectionClosed` when not connected."""

    @property
    def ready(self) -> bool:
        """True once this session's policy exchange completed and MCPL is on."""

    @property
    def sessions(self) -> int:
        """How many sessions it has had: a change means a new session."""

    def request_soon(
        self, method: str, params: dict[str, Any] | EncodedParams | None = None
    ) -> asyncio.Future[Any]:
        """Send a request now; the future is its result (or `RemoteError`)."""

    def notify_soon(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Queue a notification, sent in order without making the caller wait."""


SettingsT = TypeVar("SettingsT", default=Any)
"""The plugin's own settings model (`PluginContext[RetrySettings]`)."""


class PluginContext(Generic[SettingsT]):
    """What a plugin gets at `agentcore_start`, all it sees of the kernel: its settings, the
    ``[inference]`` section, the providers, the shutdown state, the ``[fleet]`` store, the
    prices, and ways to emit traces, announce waits and run inferences. Generic over the
    plugin's settings model: ``PluginContext[MySettings]`` reads ``context.settings`` as one."""

    def __init__(
        self,
        name: str,
        settings: SettingsT,
        *,
        inference: InferenceSettings,
        providers: Mapping[str, ProviderInfo],
        stopping: asyncio.Event,
        emit: Callable[..., None],
        waiting: Callable[[WaitReason, Attempt, float | None], AbstractAsyncContextManager[Wait]],
        complete: Callable[[Request], Awaitable[Response]],
        stream: Callable[[Request], AsyncGenerator[StreamEvent, None]],
        model_info: Callable[[str], ModelInfo],
        media_types: Callable[[str], frozenset[str]],
        mcpl_servers: Callable[[], Sequence[ServerHandle]],
        fleet: Callable[[], FleetStore],
        bulk: BulkSettings | None = None,
        add_claim_kind: Callable[[ClaimKind], None] | None = None,
        pricer: Pricer | None = None,
        command: str | None = None,
    ) -> None:
        self.name = name
        self.settings: SettingsT = settings
        """This plugin's validated section (an instance of its model), or None when it
        declares none."""
        self.inference = inference
        """The kernel's ``[inference]`` section (a copy): the limits every plugin shares."""
        self.providers: Mapping[str, ProviderInfo] = MappingProxyType(dict(providers))
        """The configured providers by name, read-only."""
        self._stopping = stopping
        self._emit = emit
        self._waiting = waiting
        self._complete = complete
        self._stream = stream
        self._model_info = model_info
        self._media_types = media_types
        self._mcpl_servers = mcpl_servers
        self._fleet = fleet
        if bulk is None:
            from agentcore.settings_mcpl import BulkSettings

            bulk = BulkSettings()
        self.bulk: BulkSettings = bulk
        """The kernel's ``[mcpl.bulk]`` section (a copy): whether and how a §19 bulk
        content reference a server sends may be fetched (`agentcore.api.BulkFetcher`)."""
        self._add_claim_kind = add_claim_kind
        self.pricer = pricer  # the kernel's prices (agentcore.pricing): what a call costs
        self.command = command
        """The ``agentcore`` command the kernel runs under: ``serve`` (the host), ``infer``
        (one turn), ``spend`` (a report); None when a host embeds the kernel. A
        one-off command shares the deployment's settings with a running ``serve``: a
        plugin that listens on a port (the console) listens only in the host."""

    def add_claim_kind(self, kind: ClaimKind) -> None:
        """Add an admission claim kind of this plugin's own (in `agentcore_start`); its name
        may not be a built-in one or another plugin's (`ValueError`, failing the plugin)."""
        if self._add_claim_kind is None:
            raise RuntimeError("this context has no admission step")
        self._add_claim_kind(kind)

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the kernel begins to stop: waiters should wake and fail. Read it; the
        kernel sets it."""
        return self._stopping

    @property
    def fleet(self) -> FleetStore:
        """The ``[fleet]`` store (`agentcore.fleet`): holds, limits and wake-ups shared with
        every replica, or kept in this process by default. Made at first use."""
        return self._fleet()

    async def emit(self, type: str, **fields: Any) -> None:
        """Emit a trace event (camelCase fields) through `on_trace`; it never waits."""
        self._emit(type, **fields)

    def emit_now(self, type: str, **fields: Any) -> None:
        """`emit` for a plain function: observers never make the emitter wait."""
        self._emit(type, **fields)

    def waiting(
        self, reason: WaitReason, attempt: Attempt, until: float | None
    ) -> AbstractAsyncContextManager[Wait]:
        """Announce a wait for its whole duration (`on_wait_start`, then `on_wait_end`)."""
        return self._waiting(reason, attempt, until)

    async def complete(self, request: Request) -> Response:
        """Run one whole inference through the kernel, every policy applied."""
        return await self._complete(request)

    def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        """Stream one inference through the kernel (close it with `contextlib.aclosing`)."""
        return self._stream(request)

    def model_info(self, reference: str) -> ModelInfo:
        """What the host knows of the model a ``NAME:MODEL`` reference names: the
        deployment's ``[providers.NAME.models.MODEL]``, then built-in knowledge."""
        return self._model_info(reference)

    def media_types(self, reference: str) -> frozenset[str]:
        """The media types (`agentcore.inference.MediaBlock`) the provider of a ``NAME:MODEL``
        reference carries in a user message, e.g. ``image/png``; none for a text-only wire."""
        return self._media_types(reference)

    def mcpl_servers(self) -> Sequence[ServerHandle]:
        """The MCPL servers the host is connected to now, in settings order (none when no
        `McplHost` runs on this kernel): for the policies of the host's own turns."""
        return self._mcpl_servers()
