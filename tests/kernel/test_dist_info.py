"""`agentcore.dist_info`: a distribution's name and version from its METADATA header,
as `importlib.metadata`'s full parse reads them (issue 24: that parse of agentcore's own,
which holds the README, cost `serve` ~0.7 MB)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from agentcore.dist_info import installed_version, name_version
from agentcore.mcpl.compat import client_version


def dist(tmp_path: Path, metadata: str) -> importlib.metadata.Distribution:
    info = tmp_path / "acme_thing-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata)
    return importlib.metadata.PathDistribution(info)


def test_the_header_gives_what_the_full_parse_gives(tmp_path: Path) -> None:
    body = "Version: 9.9 in the README is not the version\n" * 50
    d = dist(tmp_path, f"Metadata-Version: 2.4\nName: acme-thing\nVersion: 2.0\n\n{body}")
    assert name_version(d) == ("acme-thing", "2.0")
    assert name_version(d) == (d.metadata["Name"], d.metadata["Version"])


def test_a_header_without_them_falls_back_to_the_full_parse(tmp_path: Path) -> None:
    d = dist(tmp_path, "Metadata-Version: 2.1\nName: acme-thing\n\n")
    assert name_version(d) == ("acme-thing", d.metadata["Version"])


def test_agentcore_and_the_handshake_report_the_installed_version() -> None:
    assert installed_version("agentcore") == importlib.metadata.version("agentcore")
    assert client_version() == importlib.metadata.version("agentcore")
    assert installed_version("no-such-distribution-here") == "0+unknown"
