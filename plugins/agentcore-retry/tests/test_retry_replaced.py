"""A third-party distribution with an entry point named ``retry`` replaces this plugin."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uv import find_uv_bin

from agentcore.api import InferenceError, Message, Request
from agentcore.testing import API_KEY, API_KEY_ENV, Kernel, scripted_kind

LOOPBACK_ENV = {API_KEY_ENV: API_KEY}  # the key only: no AGENTCORE_* overrides

REPLACEMENT = {
    "pyproject.toml": """
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "acme-retry"
        version = "2.0.0"

        [project.entry-points."agentcore.plugins"]
        retry = "acme_retry:AcmeRetry"

        [tool.hatch.build.targets.wheel]
        packages = ["acme_retry"]
    """,
    "acme_retry/__init__.py": """
        from agentcore.api import hookimpl
        from agentcore.api import GiveUp, Retry


        class AcmeRetry:
            # Retries everything, even a 401 the default never retries, after 12.3 ms.
            @hookimpl
            def on_inference_error(self, attempt, error):
                return Retry(0.0123) if attempt.number < 3 else GiveUp()
    """,
}


@pytest.fixture
def replacement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Build and install acme-retry into a directory put on sys.path for this test only."""
    source, target = tmp_path / "acme-retry", tmp_path / "site"
    for name, text in REPLACEMENT.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(textwrap.dedent(text))
    pip = [find_uv_bin(), "pip", "install", "--quiet", "--python", sys.executable, "--no-deps"]
    offline = ["--no-build-isolation", "--no-index", "--target", str(target)]
    subprocess.run([*pip, *offline, str(source)], check=True)
    monkeypatch.syspath_prepend(str(target))  # also invalidates the import caches
    importlib.invalidate_caches()
    yield
    sys.modules.pop("acme_retry", None)


SETTINGS = """
[providers.fake]
kind = "scripted"

[plugins]
disabled = ["provider-hold", "waiting-trace", "mcpl-router"]
strict = false
"""


@pytest.mark.usefixtures("replacement")
async def test_the_replacement_is_loaded_instead_and_decides(
    tmp_path: Path, provider: Any, traces: Any
) -> None:
    path = tmp_path / "agentcore.toml"
    path.write_text(SETTINGS)
    plugins = {"trace-log": traces, "scripted": scripted_kind(provider)}
    kernel = Kernel.load(path, environ=LOOPBACK_ENV, plugins=plugins)
    records = {(r.name, r.distribution): r for r in kernel.records}
    default = records["retry", "agentcore-retry"]
    assert default.describe_state() == "replaced by acme-retry"
    assert default.plugin is None
    winner = records["retry", "acme-retry"]
    assert (winner.state, winner.version) == ("active", "2.0.0")
    assert type(winner.plugin).__module__ == "acme_retry"

    provider.script = [InferenceError("auth", "bad key", status=401)] * 5
    async with kernel:
        with pytest.raises(InferenceError):
            await kernel.complete(Request("fake:m1", [Message.user("hi")]))
    # The default never retries a 401; the replacement retried twice, after its own delay.
    assert len(provider.calls) == 3
    assert [(r["attempt"], r["delayMs"]) for r in traces.of("inference:retry")] == [
        (1, 12),
        (2, 12),
    ]
