"""The package registers `mcpl-context` and its ``[mcpl.context]`` section, both checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcore_mcpl_context import ContextSettings, McplContext

from agentcore.api import SettingsError
from agentcore.testing import Kernel


def test_found_by_its_entry_point_and_active() -> None:
    kernel = Kernel.load(None, environ={})
    (record,) = [r for r in kernel.records if r.name == "mcpl-context"]
    assert (record.distribution, record.state) == ("agentcore-mcpl-context", "active")
    assert isinstance(record.plugin, McplContext)
    assert record.section is not None and record.section.path == "mcpl.context"


def test_hook_timeout_comes_from_the_settings_and_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text("[mcpl.context]\nhook_timeout_s = 0.25\n")
    settings = Kernel.load(path, environ={}).settings.section("mcpl.context")
    assert settings == ContextSettings(hook_timeout_s=0.25)
    path.write_text("[mcpl.context]\nhook_timeout_s = 0\n")
    with pytest.raises(SettingsError, match=r"mcpl\.context\.hook_timeout_s"):
        Kernel.load(path, environ={})
    path.write_text("[mcpl.context]\nhook_timeout = 1\n")
    with pytest.raises(SettingsError, match=r"hook_timeout"):
        Kernel.load(path, environ={})


def test_disabled_by_name_its_section_is_still_accepted(tmp_path: Path) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text(
        '[plugins]\ndisabled = ["mcpl-context"]\n\n[mcpl.context]\nhook_timeout_s = 1\n'
    )
    kernel = Kernel.load(path, environ={})
    (record,) = [r for r in kernel.records if r.name == "mcpl-context"]
    assert record.state == "disabled"
