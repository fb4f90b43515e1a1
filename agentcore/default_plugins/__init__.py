"""agentcore's own plugins: ordinary plugins, loaded in every kernel, listed here and
nowhere else (no entry point of agentcore's declares them).

Each is registered under its name before any installed plugin, whether or not
entry points are searched, and behaves exactly as an installed default plugin would: it
is listed by `agentcore plugins`, ``[plugins] disabled`` blocks it, and a package whose
entry point takes its name replaces it (its section is then accepted, unread).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    """One of agentcore's own plugins."""

    target: str
    """What an entry point's value would say: ``module`` or ``module:object``."""
    section: str | None = None
    """The settings section it reads, accepted (unread) while it is disabled or replaced."""


BUILTIN: dict[str, Builtin] = {
    "providers": Builtin("agentcore.default_plugins.provider_kinds"),
    "jsonl-traces": Builtin("agentcore.traces:JsonlTraceSink", section="traces"),
}
"""Plugin name -> the plugin, in load order."""
