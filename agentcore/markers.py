"""agentcore's pluggy markers, on the lowest floor so that any module can carry a plugin.

`hookspec` marks the specifications in `agentcore.hookspecs`; `hookimpl` marks a
plugin's implementations (``from agentcore import hookimpl``). They live apart
from the specifications because the specifications name types from every other
module, and a plugin module (the JSONL sink in `agentcore.traces`, the built-in
provider kinds) must not import what imports it.
"""

from __future__ import annotations

import pluggy

PROJECT = "agentcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "hookimpl", "hookspec"]
