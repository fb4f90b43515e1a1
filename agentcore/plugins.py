"""Plugin discovery: entry points in `agentcore.plugins`, disabled or replaced by name.

The contract (DESIGN.md, "Plugins"):

- The entry point's name is the plugin's identity (``retry``, ``provider-hold``...).
- ``[plugins] disabled`` or ``AGENTCORE_DISABLE_PLUGINS=a,b`` blocks plugins by name.
- A third-party distribution registering a name a bundled default also registers
  replaces it: the default is not imported. Two third-party distributions
  claiming one name is an error naming both.
- The entry point's object is a module, an object, or a class (instantiated
  once per kernel, with no arguments) carrying `agentcore.hookimpl` functions.
- A plugin that fails to import or start is reported by name with its error.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from agentcore.fleet import FleetStore
    from agentcore.inference.calls import Attempt, Wait, WaitReason
    from agentcore.kernel import Kernel

GROUP = "agentcore.plugins"
BUNDLED_DISTRIBUTIONS = frozenset(
    {
        "agentcore",
        "agentcore-retry",
        "agentcore-provider-hold",
        "agentcore-waiting-trace",
        "agentcore-mcpl-router",
        "agentcore-rate-limit",
    }
)

PluginState = Literal["active", "disabled", "replaced", "failed"]


@dataclass(frozen=True)
class SettingsSection:
    """What a plugin's `agentcore_settings` hook returns: its section and the model for it."""

    path: str
    model: type[BaseModel]


@dataclass
class PluginRecord:
    """One plugin as `agentcore plugins` reports it."""

    name: str
    distribution: str
    version: str
    state: PluginState
    replaced_by: str | None = None
    error: str | None = None
    plugin: object | None = field(default=None, repr=False)
    section: SettingsSection | None = None

    def describe_state(self) -> str:
        if self.state == "replaced":
            return f"replaced by {self.replaced_by}"
        if self.state == "failed":
            return f"failed: {self.error}"
        return self.state


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def disabled_names(configured: Iterable[str], environ: Mapping[str, str]) -> set[str]:
    from agentcore.settings import DISABLE_ENV

    names = set(configured)
    names.update(n.strip() for n in environ.get(DISABLE_ENV, "").split(",") if n.strip())
    return names


@dataclass(frozen=True)
class _Claim:
    entry_point: importlib.metadata.EntryPoint
    distribution: str
    version: str

    @property
    def bundled(self) -> bool:
        return canonical(self.distribution) in BUNDLED_DISTRIBUTIONS


def _claims() -> dict[str, list[_Claim]]:
    claims: dict[str, list[_Claim]] = {}
    seen: set[tuple[str, str]] = set()
    for dist in importlib.metadata.distributions():
        dist_name = dist.metadata["Name"] or "?"
        for ep in dist.entry_points:
            if ep.group != GROUP or (ep.name, canonical(dist_name)) in seen:
                continue  # the same distribution found twice on sys.path counts once
            seen.add((ep.name, canonical(dist_name)))
            claims.setdefault(ep.name, []).append(_Claim(ep, dist_name, dist.version))
    return claims


def discover(disabled: Iterable[str] = ()) -> list[PluginRecord]:
    """Find every plugin, decide who wins each name, and import the winners that are enabled."""
    blocked = set(disabled)
    records: list[PluginRecord] = []
    for name, claims in sorted(_claims().items()):
        third_party = [c for c in claims if not c.bundled]
        winner = third_party[0] if third_party else claims[0]
        for loser in claims:
            if loser is not winner and loser.bundled:
                records.append(
                    PluginRecord(
                        name,
                        loser.distribution,
                        loser.version,
                        "replaced",
                        replaced_by=winner.distribution,
                    )
                )
        if len(third_party) > 1 and name in blocked:  # disabled: nobody claims it
            records.extend(
                PluginRecord(name, c.distribution, c.version, "disabled") for c in third_party
            )
            continue
        if len(third_party) > 1:
            names = " and ".join(sorted(c.distribution for c in third_party))
            for claim in third_party:
                records.append(
                    PluginRecord(
                        name,
                        claim.distribution,
                        claim.version,
                        "failed",
                        error=f"the name {name!r} is claimed by both {names}; uninstall one",
                    )
                )
            continue
        record = PluginRecord(name, winner.distribution, winner.version, "active")
        records.append(record)
        if name in blocked:
            record.state = "disabled"
            continue
        try:
            record.plugin = instantiate(winner.entry_point.load())
        except Exception as exc:
            record.state, record.error = "failed", f"import failed: {type(exc).__name__}: {exc}"
    return records


def instantiate(obj: object) -> object:
    """A class entry point gets one instance per kernel; modules and objects are used as is."""
    return obj() if isinstance(obj, type) else obj


class PluginContext:
    """What a plugin gets at `agentcore_start`: its settings, traces, waits, and the kernel."""

    def __init__(self, kernel: Kernel, name: str, settings: Any) -> None:
        self.kernel = kernel
        self.name = name
        self.settings = settings
        """This plugin's validated section (an instance of its model), or None."""

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the kernel begins to stop: waiters should wake and fail."""
        return self.kernel.stopping

    @property
    def fleet(self) -> FleetStore:
        """The ``[fleet]`` store: holds, limits and wake-ups shared with every replica."""
        return self.kernel.fleet

    async def emit(self, type: str, **fields: Any) -> None:
        """Emit a trace event (camelCase fields) through `on_trace`; it never waits."""
        await self.kernel.emit(type, **fields)

    def emit_now(self, type: str, **fields: Any) -> None:
        """`emit` for a plain function: observers never make the emitter wait."""
        self.kernel.emit_now(type, **fields)

    @asynccontextmanager
    async def waiting(
        self, reason: WaitReason, attempt: Attempt, until: float | None
    ) -> AsyncIterator[Wait]:
        """Announce a wait for its whole duration (`on_wait_start`, then `on_wait_end`)."""
        async with self.kernel.waiting(reason, attempt, until) as wait:
            yield wait
