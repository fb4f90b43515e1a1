"""``[mcpl]`` and ``[mcpl.servers.NAME]``: the MCPL servers the host connects to, and the
bounds each is held to (docs/settings.md)."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from agentcore._constants import (
    MAX_MCPL_REQUEST_DEADLINE_S,
    MCPL_MAX_FRAME_BYTES,
    MCPL_REQUEST_DEADLINE_S,
    MCPL_REQUEST_TIMEOUT_S,
    MCPL_SHUTDOWN_GRACE_S,
    RECONNECT_CRASH_LOOP_AFTER,
    RECONNECT_INITIAL_DELAY_S,
    RECONNECT_MAX_DELAY_S,
    RECONNECT_RESET_AFTER_S,
)
from agentcore.mcpl.endpoint import EndpointError, resolve
from agentcore.mcpl.limits import McplLimitSettings, ServerLimitSettings
from agentcore.settings_checks import invalid
from agentcore.settings_fields import GrantEntry, Section, load_context
from agentcore.urls import WEBSOCKET_SCHEMES, url_problem

_REACHED = "an MCPL server is reached over ws:// or wss:// or mcpl:// (or set command for stdio)"


def _server_url(url: str) -> str:
    """``url``: an ``mcpl://`` URI as §18 (RFC-004) has it, ``ws://``/``wss://`` as ever."""
    if url[:5].lower() == "mcpl:":
        problem: str | None = None
        try:
            resolve(url)
        except EndpointError as exc:
            problem = str(exc)
    else:
        problem = url_problem(url, WEBSOCKET_SCHEMES, _REACHED)
    if problem is not None:
        raise invalid(problem)
    return url


ServerUrl = Annotated[str, AfterValidator(_server_url)]
"""``[mcpl.servers.NAME] url``: ``mcpl://`` (§18), ``wss://`` or ``ws://``, checked at load."""


class McplServerSettings(Section, ServerLimitSettings):
    """``[mcpl.servers.NAME]``: a stdio server (`command`) or a WebSocket one (`url`), and
    its own bounds (`agentcore.mcpl.limits`; unset: ``[mcpl]``'s)."""

    command: list[str] | None = Field(default=None, min_length=1)
    url: ServerUrl | None = None
    """A WebSocket server: ``mcpl://`` dials the ``wss://`` it resolves to (§18)."""
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: set for the server, over its minimal environment (`agentcore.mcpl.environment`)."""
    env_passthrough: list[Annotated[str, Field(pattern=r"^[^=\x00]+$")]] = Field(
        default_factory=list
    )
    """stdio: variables of the host's environment the server gets too; never a secret."""
    cwd: Path | None = None
    """Where a stdio server starts: by default the settings file's folder."""
    grant: list[GrantEntry] = Field(default_factory=list)
    disabled_feature_sets: list[str] = Field(default_factory=list)
    reconnect: bool = False
    reconnect_initial_delay_s: float = Field(default=RECONNECT_INITIAL_DELAY_S, gt=0)
    """The first wait; each next one doubles (jittered), up to `reconnect_max_delay_s`."""
    reconnect_max_delay_s: float = Field(default=RECONNECT_MAX_DELAY_S, gt=0)
    reconnect_reset_after_s: float = Field(default=RECONNECT_RESET_AFTER_S, ge=0)
    """A session up this long starts the backoff over; shorter ones keep it growing."""
    crash_loop_after: int = Field(default=RECONNECT_CRASH_LOOP_AFTER, ge=1)
    """Reconnects in a row without such a session before it is reported crash-looping."""
    max_frame_bytes: int = Field(default=MCPL_MAX_FRAME_BYTES, ge=1)
    shutdown_grace_s: float = Field(default=MCPL_SHUTDOWN_GRACE_S, ge=0)
    request_deadline_s: float | None = Field(default=None, gt=0, le=MAX_MCPL_REQUEST_DEADLINE_S)
    """How long a request this server sends may take before the host stops working on it
    and answers it -32603; unset: ``[mcpl] request_deadline_s``."""

    @model_validator(mode="after")
    def _one_transport(self, info: ValidationInfo) -> Self:
        if self.command and self.url:
            raise invalid("sets both command (stdio) and url (WebSocket); choose one")
        if self.reconnect_max_delay_s < self.reconnect_initial_delay_s:
            raise invalid("reconnect_max_delay_s is less than reconnect_initial_delay_s")
        if not self.command and not self.url:
            raise invalid("needs command (stdio) or url (WebSocket)")
        context = load_context(info)
        if self.command and self.cwd is None and context is not None:
            self.cwd = context.folder
        return self


Scheme = Literal["https", "http"]


class BulkSettings(Section):
    """``[mcpl.bulk]``: whether and how the host fetches the payload of a §19 bulk
    content reference a server sends. Off by default: the model sees the stub only."""

    fetch: bool = False
    """Fetch a reference whose disposition is ``ref`` or absent, and put the verified
    payload in the turn when it fits (text, or media the turn's provider carries)."""
    schemes: list[Scheme] = Field(default_factory=lambda: list[Scheme](["https"]), min_length=1)
    """The URL schemes ever fetched; nothing else (``file``, ``ftp``...) can be named."""
    allow_networks: list[IPv4Network | IPv6Network] = Field(default_factory=list)
    """Non-public addresses (loopback, private, link-local, ...) fetched anyway, as
    networks (``127.0.0.0/8``); every other non-public address is refused."""
    max_bytes: int = Field(default=1_048_576, ge=1)
    """The most bytes of one payload (decoded): a larger claim is refused without a fetch,
    a transfer is cut the moment it passes this."""
    timeout_s: float = Field(default=10.0, gt=0)
    """One fetch, its redirects included."""
    max_redirects: int = Field(default=3, ge=0, le=10)
    """Same-origin redirects followed; a redirect to another origin is always refused."""
    max_fetches_per_turn: int = Field(default=8, ge=1)
    """References of one server fetched in one turn; the rest stay stubs."""


class McplSettings(Section, McplLimitSettings):
    """``[mcpl]``: the servers, and the bounds each is held to unless it sets its own."""

    servers: dict[str, McplServerSettings] = Field(default_factory=dict)
    request_deadline_s: float = Field(
        default=MCPL_REQUEST_DEADLINE_S, gt=0, le=MAX_MCPL_REQUEST_DEADLINE_S
    )
    """The deadline of every server's requests unless its own table sets one."""
    bulk: BulkSettings = Field(default_factory=BulkSettings.model_construct)
    """``[mcpl.bulk]``: fetching §19 bulk content references (off by default)."""
    request_timeout_s: float = Field(default=MCPL_REQUEST_TIMEOUT_S, gt=0)
    """How long the host waits for a server's answer to a request the host sends
    (``initialize``, ``featureSets/update``, ``mcpl/manifest``) before giving up on it."""
