"""Moved: the wire side of the host's own turns is the `mcpl-context` plugin's
(`agentcore_mcpl_context.wire`), the only code that uses it. Its names are still found
here, with a DeprecationWarning, while that plugin is installed."""

from __future__ import annotations

import importlib
import warnings

_NEW_HOME = "agentcore_mcpl_context.wire"


def __getattr__(name: str) -> object:
    warnings.warn(
        f"agentcore.mcpl.context moved into the mcpl-context plugin: import {name} from "
        f"{_NEW_HOME}",
        DeprecationWarning,
        stacklevel=2,
    )
    try:
        return getattr(importlib.import_module(_NEW_HOME), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
