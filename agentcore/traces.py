"""Trace events and the built-in JSONL sink.

A trace is a JSON object with `type`, `timestamp` (milliseconds since the
epoch) and camelCase fields (docs/traces.md). Every trace goes through
`on_trace`; sinks are ordinary plugins, and this module's JSONL sink is one
(entry point ``jsonl-traces``), configured by ``[traces] jsonl = PATH``: the
kernel declares that section, and the sink reads it as its own.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, overload

from loguru import logger

from agentcore.markers import hookimpl
from agentcore.plugins import SettingsSection
from agentcore.redaction import redact_log, redact_value
from agentcore.settings import TracesSettings

if TYPE_CHECKING:
    from agentcore.plugins import PluginContext

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class _RedactedOnRead:
    """`TraceEvent.fields`: kept as given, redacted the first time anyone reads them, once.

    No observer can see a field before it is redacted (every read goes through here), and a
    trace that no observer reads (most, when no sink is configured) costs no redaction;
    one that several read is redacted once, not per observer."""

    @overload
    def __get__(self, event: None, owner: type[TraceEvent]) -> None: ...
    @overload
    def __get__(self, event: TraceEvent, owner: type[TraceEvent]) -> dict[str, Any]: ...
    def __get__(self, event: TraceEvent | None, owner: type[TraceEvent]) -> dict[str, Any] | None:
        if event is None:
            return None  # the dataclass's default: no fields (`__set__` makes it {})
        state = event.__dict__
        redacted: dict[str, Any] | None = state["_redacted"]
        if redacted is None:  # two threads reading at once both redact: the same result
            redacted = state["_redacted"] = redact_value(state["_given"])
        return redacted

    def __set__(self, event: TraceEvent, fields: dict[str, Any] | None) -> None:
        event.__dict__.update(_given={} if fields is None else fields, _redacted=None)


@dataclass
class TraceEvent:
    type: str
    fields: _RedactedOnRead = _RedactedOnRead()
    """The trace's camelCase fields, every secret in them redacted (`_RedactedOnRead`)."""
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    subject: object = field(default=None, repr=False, compare=False)
    """What the trace is about, for in-process observers that opt in to content: the
    `Request` on ``inference:start``, the `Response` on ``inference:complete``. Never
    serialized (not in `to_dict`), never redacted: whoever reads it redacts what it sends."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "timestamp": self.timestamp, **self.fields}

    def to_json(self) -> str:
        """One line of JSON, with any known secret redacted; always encodable as UTF-8.

        Text stays readable (not \\u-escaped), except that a lone surrogate, which a peer
        can send as a valid JSON escape (an MCPL request id ``"\\ud800"``), has no UTF-8
        form: a trace holding one is written all-ASCII, escapes and all, so that it is not
        lost to the sink's write."""
        text = json.dumps(self.to_dict(), default=str, ensure_ascii=False)
        if not text.isascii() and _LONE_SURROGATE.search(text):
            text = json.dumps(self.to_dict(), default=str)
        return redact_log(text)


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
    def agentcore_start(self, context: PluginContext) -> None:
        path: Path | None = getattr(context.settings, "jsonl", None)
        if path is not None:  # its folder exists: the settings checked it at load
            self._file = path.open("ab", buffering=0)
            self._path = path

    @hookimpl
    def on_trace(self, event: TraceEvent) -> None:
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
