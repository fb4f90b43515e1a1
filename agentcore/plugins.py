"""Plugin discovery, disabling and replacing by name, and loading (what a plugin declares,
the settings validated with its section). The context a plugin is started with is
`agentcore.plugin_context`'s (importable from here too).

The contract (docs/plugins.md):

- The entry point's name (group ``agentcore.plugins``) is the plugin's identity
  (``retry``, ``provider-hold``...). agentcore's own plugins
  (`agentcore.default_plugins`) are loaded first in every kernel, as if found by
  entry point, whether or not entry points are searched.
- ``[plugins] disabled`` or ``AGENTCORE_DISABLE_PLUGINS=a,b`` blocks plugins by name.
- A distribution marks a plugin of its own as a default by naming it in the
  ``agentcore.defaults`` group (value: the settings section it reads). Another
  distribution registering that name replaces the default, which is not imported;
  two non-default distributions claiming one name is an error naming both. A
  default's section is accepted, unread, while the default is disabled or not loaded.
- The entry point's object is a module, an object, or a class (instantiated
  once per kernel, with no arguments) carrying `agentcore.hookimpl` functions.
- A plugin that fails to import, declare or start is reported by name with its error.
- A plugin sees the kernel only through its `PluginContext`.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pluggy
from loguru import logger
from pydantic import BaseModel, PydanticUndefinedAnnotation, PydanticUserError

from agentcore.default_plugins import BUILTIN
from agentcore.dist_info import name_version
from agentcore.inference import PluginError
from agentcore.log import plugin_module
from agentcore.plugin_context import PluginContext as PluginContext  # the old import path
from agentcore.plugin_context import ProviderInfo as ProviderInfo
from agentcore.plugin_context import ServerHandle as ServerHandle
from agentcore.plugin_context import SettingsT as SettingsT
from agentcore.providers import KindClash, ProviderKinds
from agentcore.settings_checks import did_you_mean

if TYPE_CHECKING:
    from agentcore.providers import ProviderFactory
    from agentcore.settings import LoadedSettings

GROUP = "agentcore.plugins"
DEFAULTS_GROUP = "agentcore.defaults"
"""Entries ``plugin-name = "section.path"``: that plugin of this distribution is a default."""
OWN_DISTRIBUTION = "agentcore"

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
    kinds: tuple[str, ...] = ()
    """The provider kinds it contributes."""

    def describe_state(self) -> str:
        if self.state == "replaced":
            return f"replaced by {self.replaced_by}"
        if self.state == "failed":
            return f"failed: {self.error}"
        return self.state

    def fail(self, error: str) -> None:
        self.state, self.error, self.plugin = "failed", error, None


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def disabled_names(configured: Iterable[str], environ: Mapping[str, str]) -> set[str]:
    from agentcore.settings import DISABLE_ENV

    names = set(configured)
    names.update(n.strip() for n in environ.get(DISABLE_ENV, "").split(",") if n.strip())
    return names


def unknown_disabled(
    configured: Iterable[str],
    environ: Mapping[str, str],
    records: Iterable[PluginRecord],
    path: Path | None,
) -> list[str]:
    """One problem per name `disabled_names` blocks that no plugin has (found, registered, or
    installed at all): a misspelt name would leave the plugin it meant running, unsaid.
    `configured` is ``[plugins] disabled`` from the file at `path` or the environment."""
    from agentcore.settings import DISABLE_ENV, ENV_PREFIX

    override = f"{ENV_PREFIX}PLUGINS__DISABLED"
    in_env = any(key.upper() == override for key in environ)
    where = f"environment {override}" if in_env else str(path)
    known = {record.name for record in records}
    from_env = {n.strip() for n in environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    sources = [(name, where) for name in configured] + [
        (name, f"environment {DISABLE_ENV}") for name in sorted(from_env)
    ]
    if all(name in known for name, _ in sources):
        return []
    known |= {claim.name for claim in _installed()[0]}  # not loaded (discover_plugins=False)
    listed = ", ".join(sorted(known))
    return [
        f"{source}: plugins.disabled: no plugin is named {name!r}{did_you_mean(name, known)};"
        f" the plugins are {listed}"
        for name, source in sources
        if name not in known
    ]


# -- discovery -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claim:
    entry_point: importlib.metadata.EntryPoint
    distribution: str
    version: str
    default: bool

    @property
    def name(self) -> str:
        return self.entry_point.name


def _builtin_claims() -> list[_Claim]:
    from agentcore import __version__

    return [
        _Claim(
            importlib.metadata.EntryPoint(name, builtin.target, GROUP),
            OWN_DISTRIBUTION,
            __version__,
            True,
        )
        for name, builtin in BUILTIN.items()
    ]


def _installed() -> tuple[list[_Claim], dict[str, str]]:
    """Every entry point of the group, and the sections the installed defaults declare."""
    claims: list[_Claim] = []
    sections: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    for dist in importlib.metadata.distributions():
        entry_points = dist.entry_points
        if not any(ep.group == GROUP for ep in entry_points):
            # Its METADATA is not read: parsing every installed distribution's (twice per
            # kernel, uncached) was a noticeable part of every `agentcore` start.
            continue
        dist_name, version = name_version(dist)  # its header only (`agentcore.dist_info`)
        defaults = {ep.name: ep.value for ep in entry_points if ep.group == DEFAULTS_GROUP}
        for ep in entry_points:
            if ep.group != GROUP or (ep.name, canonical(dist_name)) in seen:
                continue  # the same distribution found twice on sys.path counts once
            seen.add((ep.name, canonical(dist_name)))
            default = ep.name in defaults
            claims.append(_Claim(ep, dist_name, version, default))
            if default:
                sections.setdefault(ep.name, defaults[ep.name])
    return claims, sections


def default_sections() -> set[str]:
    """The settings sections of agentcore's own plugins and of every installed default
    plugin, loaded or not."""
    own = {builtin.section for builtin in BUILTIN.values() if builtin.section is not None}
    return own | set(_installed()[1].values())


def discover(disabled: Iterable[str] = (), *, entry_points: bool = True) -> list[PluginRecord]:
    """agentcore's own plugins, then (with `entry_points`) every installed plugin: decide
    who wins each name, and import the winners that are enabled."""
    blocked = set(disabled)
    by_name: dict[str, list[_Claim]] = {}
    for claim in _builtin_claims() + (_installed()[0] if entry_points else []):
        by_name.setdefault(claim.name, []).append(claim)
    order = list(BUILTIN)  # agentcore's own first, in their order; then by name
    builtin_first = sorted(
        by_name.items(),
        key=lambda item: (order.index(item[0]) if item[0] in BUILTIN else len(order), item[0]),
    )
    records: list[PluginRecord] = []
    for name, claims in builtin_first:
        records.extend(_decide(name, claims, name in blocked))
    return records


def _decide(name: str, claims: list[_Claim], blocked: bool) -> list[PluginRecord]:
    """The records of one name: the winner, and each claim it replaced or that clashed."""
    third_party = [c for c in claims if not c.default]
    winner = third_party[0] if third_party else claims[0]
    records = [
        PluginRecord(name, c.distribution, c.version, "replaced", replaced_by=winner.distribution)
        for c in claims
        if c is not winner and c.default
    ]
    if len(third_party) > 1:
        if blocked:  # disabled: nobody claims it
            return records + [
                PluginRecord(name, c.distribution, c.version, "disabled") for c in third_party
            ]
        names = " and ".join(sorted(c.distribution for c in third_party))
        error = f"the name {name!r} is claimed by both {names}; uninstall one"
        return records + [
            PluginRecord(name, c.distribution, c.version, "failed", error=error)
            for c in third_party
        ]
    record = PluginRecord(name, winner.distribution, winner.version, "active")
    records.append(record)
    if blocked:
        record.state = "disabled"
        return records
    plugin_module(winner.entry_point.module)
    try:
        record.plugin = instantiate(winner.entry_point.load())
    except Exception as exc:
        record.fail(f"import failed: {type(exc).__name__}: {exc}")
    return records


def instantiate(obj: object) -> object:
    """A class entry point gets one instance per kernel; modules and objects are used as is."""
    return obj() if isinstance(obj, type) else obj


# -- what a plugin declares at load --------------------------------------------------------


def read_section(record: PluginRecord, ask: Callable[[str], object]) -> None:
    """`agentcore_settings`: the section this plugin reads, kept on the record.

    `ask` is `Hooks.settings_section`: the plugin's answer, by the hook's rule."""
    try:
        section = ask(record.name)
    except PluginError as error:
        record.fail(error.reason)
        return
    if section is not None and not isinstance(section, SettingsSection):
        record.fail("agentcore_settings must return a SettingsSection")
        return
    record.section = section


def read_kinds(record: PluginRecord, ask: Callable[[str], object]) -> Mapping[str, ProviderFactory]:
    """`agentcore_provider_kinds`: the provider kinds this plugin contributes.

    `ask` is `Hooks.provider_kinds`: the plugin's answer, by the hook's rule."""
    try:
        kinds = ask(record.name)
    except PluginError as error:
        record.fail(error.reason)
        return {}
    if kinds is None:
        return {}
    if not isinstance(kinds, Mapping):
        record.fail("agentcore_provider_kinds must return a mapping of kind name to factory")
        return {}
    return kinds


# -- loading: discovery, registration, declarations, settings ------------------------------


class PluginLoadError(Exception):
    """The host will not start with a half-loaded policy (``[plugins] strict = true``)."""

    def __init__(self, failed: list[PluginRecord]) -> None:
        lines = "\n".join(f"  {r.name} ({r.distribution}): {r.error}" for r in failed)
        super().__init__(
            "these plugins failed, and [plugins] strict is true:\n"
            + lines
            + "\nfix or disable them, or set [plugins] strict = false"
        )
        self.failed = failed


class Declarations(Protocol):
    """How the load-time hooks are asked, by their rules: `agentcore.hooks.Hooks`, passed in
    rather than imported (the hooks stand on a floor above this module: no circle)."""

    def settings_section(self, plugin: str) -> object: ...

    def provider_kinds(self, plugin: str) -> object: ...


@dataclass(frozen=True)
class LoadedPlugins:
    """What `load_plugins` found: every plugin's record, the kinds and the settings."""

    records: list[PluginRecord]
    kinds: ProviderKinds
    settings: LoadedSettings


def load_plugins(
    pm: pluggy.PluginManager,
    calling_layer: Callable[[pluggy.PluginManager], Declarations],
    path: str | Path | None,
    *,
    environ: Mapping[str, str],
    plugins: Mapping[str, object],
    discover_plugins: bool,
    strict: bool | None,
) -> LoadedPlugins:
    """Discover the plugins, register the active ones on `pm`, read what they declare,
    and validate the settings with their sections and kinds (`Kernel.load`'s arguments).
    `calling_layer` is `agentcore.hooks.Hooks`, built once the plugins are registered."""
    from agentcore.settings import early_plugin_settings, read_toml, settings_path

    file = settings_path(path, environ)
    raw = read_toml(file) if file is not None else {}
    early = early_plugin_settings(raw, environ)  # the full validation reports its errors
    blocked = disabled_names(early.disabled, environ)
    records = discover(blocked, entry_points=discover_plugins)
    _register_extra(records, plugins, blocked)
    for record in records:
        if record.state == "active" and record.plugin is not None:
            _register(pm, record)  # validates the hook implementations
    kinds = ProviderKinds()
    declarations = calling_layer(pm)
    for record in records:
        if record.state == "active":
            _declare(pm, declarations, record, kinds)
    unknown = unknown_disabled(early.disabled, environ, records, file)
    try:
        loaded = _validated_settings(file, environ, records, kinds, unknown)
    except (PydanticUserError, PydanticUndefinedAnnotation):
        if not _fail_unbuildable(pm, records):
            raise
        loaded = _validated_settings(file, environ, records, kinds, unknown)
    failed = [r for r in records if r.state == "failed"]
    if failed and (loaded.settings.plugins.strict if strict is None else strict):
        raise PluginLoadError(failed)
    for record in failed:
        logger.error("plugin {!r} failed and is not loaded: {}", record.name, record.error)
    return LoadedPlugins(records, kinds, loaded)


def _register_extra(
    records: list[PluginRecord], plugins: Mapping[str, object], blocked: set[str]
) -> None:
    """Plugins registered by name (tests, embedding hosts) replace a discovered one."""
    for name, obj in plugins.items():
        for record in records:
            if record.name == name and record.state == "active":
                record.state, record.replaced_by, record.plugin = "replaced", "(registered)", None
        state: PluginState = "disabled" if name in blocked else "active"
        plugin = instantiate(obj) if state == "active" else None
        records.append(PluginRecord(name, "(registered)", "", state, plugin=plugin))


def _register(pm: pluggy.PluginManager, record: PluginRecord) -> None:
    try:
        pm.register(record.plugin, name=record.name)
    except Exception as exc:  # pluggy's validation of the hook implementations
        record.fail(f"{type(exc).__name__}: {exc}")
        return
    try:
        pm.check_pending()  # a hookimpl whose name no spec has: a typo
    except pluggy.PluginValidationError as exc:
        pm.unregister(name=record.name)
        record.fail(f"unknown hook: {exc}")
        return
    wrappers = sorted(
        caller.name
        for caller in pm.get_hookcallers(record.plugin) or ()
        for impl in caller.get_hookimpls()
        if impl.plugin_name == record.name and (impl.hookwrapper or impl.wrapper)
    )
    if wrappers:
        pm.unregister(name=record.name)
        record.fail(f"hook wrappers are not supported ({', '.join(wrappers)})")


def _declare(
    pm: pluggy.PluginManager, hooks: Declarations, record: PluginRecord, kinds: ProviderKinds
) -> None:
    """Read what an active plugin declares at load: its settings section, its provider
    kinds. A plugin that fails here is unregistered, and contributes nothing."""
    read_section(record, hooks.settings_section)
    contributed = read_kinds(record, hooks.provider_kinds) if record.state == "active" else {}
    if record.state == "active":
        try:
            kinds.add(record.name, contributed)
            record.kinds = tuple(sorted(contributed))
        except (KindClash, TypeError) as exc:
            record.fail(str(exc))
    if record.state != "active":
        record.section = None
        pm.unregister(name=record.name)


def _fail_unbuildable(pm: pluggy.PluginManager, records: list[PluginRecord]) -> bool:
    """Fail each plugin whose settings model pydantic cannot build, as an import error was
    reported before section models were built on first use (`agentcore.settings.Section`):
    by the plugin's name, not as the settings root's traceback. True if one was found."""
    found = False
    for record in records:
        if record.state != "active" or record.section is None:
            continue
        model = record.section.model
        try:
            model.model_rebuild(force=True)
        except (PydanticUserError, PydanticUndefinedAnnotation) as exc:
            record.fail(f"settings model {model.__name__}: {type(exc).__name__}: {exc}")
            record.section = None
            pm.unregister(name=record.name)
            found = True
    return found


def _validated_settings(
    file: Path | None,
    environ: Mapping[str, str],
    records: list[PluginRecord],
    kinds: ProviderKinds,
    unknown: list[str],
) -> LoadedSettings:
    """The settings validated with every plugin's section; `unknown` (misspelt disabled
    names) is reported with the settings' own problems."""
    from agentcore.settings import SettingsError, load_settings

    sections: dict[str, Any] = {}
    for record in records:
        if record.section is not None:
            sections[record.section.path] = record.section.model
        elif record.state != "active":  # its section is accepted, not read
            sections.setdefault(record.name.replace("-", "_"), None)
    for path in default_sections():  # a deployment keeps them when it disables one
        if not any(p == path or p.startswith(path + ".") for p in sections):
            sections[path] = None
    try:
        loaded = load_settings(
            file, sections=sections, environ=environ, kinds=kinds, kind_settings=kinds.settings
        )
    except SettingsError as exc:
        raise SettingsError(unknown + exc.problems) from None
    if unknown:
        raise SettingsError(unknown)
    return loaded
