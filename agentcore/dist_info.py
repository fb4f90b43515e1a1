"""An installed distribution's name and version, read from its metadata's header only.

`importlib.metadata`'s ``version()`` and ``Distribution.metadata`` parse the whole METADATA
file with the `email` package; agentcore's holds the README (~75 KB), and that one parse
left ~0.7 MB of heap behind in every `serve` (issue 24, idle RSS). The core metadata
format puts ``Name`` and ``Version`` in the header, before the first blank line: that
part is all this reads. A header without them falls back to the full parse.
"""

from __future__ import annotations

import importlib.metadata


def name_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """(Name, Version) of `dist`, as its metadata states them ("?" for a missing name)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields: dict[str, str] = {}
    for line in text.partition("\n\n")[0].splitlines():
        key, colon, value = line.partition(":")
        if colon and key in ("Name", "Version") and key not in fields:
            fields[key] = value.strip()
    if "Name" not in fields or "Version" not in fields:  # an unusual header: the full parse
        metadata = dist.metadata
        return metadata["Name"] or "?", metadata["Version"]
    return fields["Name"], fields["Version"]


def installed_version(name: str, unknown: str = "0+unknown") -> str:
    """The installed version of the distribution `name`, or `unknown` when not installed."""
    try:
        return name_version(importlib.metadata.distribution(name))[1]
    except importlib.metadata.PackageNotFoundError:
        return unknown
