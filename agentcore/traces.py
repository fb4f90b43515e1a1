"""The built-in JSONL trace sink.

Every trace goes through `on_trace` (a `TraceEvent`, `agentcore.tracing`); sinks are
ordinary plugins, and this module's JSONL sink is one (entry point ``jsonl-traces``),
configured by ``[traces] jsonl = PATH``: the kernel declares that section, and the sink
reads it as its own. ``agentcore.traces.TraceEvent`` still works, with a
DeprecationWarning: import it from `agentcore.api`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import IO, TYPE_CHECKING

from loguru import logger

from agentcore.markers import hookimpl
from agentcore.plugins import SettingsSection
from agentcore.settings import TracesSettings
from agentcore.tracing import TraceEvent as _TraceEvent

if TYPE_CHECKING:
    from agentcore.plugins import PluginContext


def __getattr__(name: str) -> object:
    """The names that moved out of this module, still importable from it (with a warning)."""
    if name == "TraceEvent":
        warnings.warn(
            "agentcore.traces.TraceEvent moved: import TraceEvent from agentcore.api",
            DeprecationWarning,
            stacklevel=2,
        )
        return _TraceEvent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class JsonlTraceSink:
    """Writes each trace as it happens, one JSON object per line, straight to the file.

    A write that fails (a full disk) loses that one trace and never the inference: the
    first failure is logged, the ones after it are counted, and the count is logged when
    writing works again and at stop. The file is unbuffered: a line that could not be
    written is not kept to be retried with the next one.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._lost = 0

    @hookimpl
    def agentcore_settings(self) -> SettingsSection:
        return SettingsSection("traces", TracesSettings)  # the kernel's own section, read here

    @hookimpl
    def agentcore_start(self, context: PluginContext[TracesSettings]) -> None:
        path = context.settings.jsonl
        if path is not None:  # its folder exists: the settings checked it at load
            self._file = path.open("ab", buffering=0)
            self._path = path

    @hookimpl
    def on_trace(self, event: _TraceEvent) -> None:
        if self._path is None:
            return
        line = (event.to_json() + "\n").encode()
        try:
            if self._file is not None:
                self._file.write(line)
            else:
                # After agentcore_stop: the traces of inferences the shutdown failed (they
                # wake from their waits once the kernel has stopped its plugins) still count.
                with self._path.open("ab") as late:
                    late.write(line)
        except OSError as exc:
            if not self._lost:
                logger.warning(
                    "traces: cannot write to {}: {}; the trace events that cannot be written "
                    "are counted, not logged one by one",
                    self._path,
                    exc.strerror or exc,
                )
            self._lost += 1
            return
        if self._lost:
            self._report("writing again")

    def _report(self, now: str) -> None:
        logger.warning(
            "traces: {} trace events were not written to {}; {}", self._lost, self._path, now
        )
        self._lost = 0

    @hookimpl
    def agentcore_stop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lost:
            self._report("stopping")
