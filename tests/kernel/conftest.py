"""Fixtures for the kernel's tests: real plugin distributions, scripted providers, kernels.

The plugin distributions are real: small packages written here, built into
wheels by hatchling and installed by pip, once per session, each into its own
directory. A test puts the directories it needs on `sys.path`, so
`importlib.metadata` finds their entry points exactly as it would in a venv.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from uv import find_uv_bin

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("kernel_support")

from kernel_support import FAKE_ENV, MODULE_PREFIX  # noqa: E402

from agentcore.kernel import Kernel  # noqa: E402
from agentcore.testing import ScriptedProvider, scripted_kind  # noqa: E402

# -- real distributions ----------------------------------------------------------

_OBSERVER = """
from pydantic import BaseModel, ConfigDict

from agentcore import hookimpl
from agentcore.plugins import SettingsSection

SEEN = []


class ObserverSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = "unset"


@hookimpl
def agentcore_settings():
    return SettingsSection("acme_observer", ObserverSettings)


@hookimpl
def agentcore_start(context):
    SEEN.append(("start", context.name, context.settings.label))


@hookimpl
async def on_trace(event):
    SEEN.append(("trace", event.type))


@hookimpl
def on_stream_event(event):
    SEEN.append(("event", type(event).__name__))


@hookimpl
def agentcore_stop():
    SEEN.append(("stop",))
"""

_DISABLED = """
from agentcore import hookimpl

SEEN = []


@hookimpl
def on_trace(event):
    SEEN.append(event.type)
"""

_BUNDLED_WAITING = """
from agentcore import hookimpl

SEEN = []


@hookimpl(trylast=True)
def on_wait_start(wait):
    SEEN.append(wait.reason)
"""

_ACME_WAITING = '''
from agentcore import hookimpl

SEEN = []


class AcmeWaiting:
    """A class entry point: one instance per kernel."""

    @hookimpl
    async def on_trace(self, event):
        SEEN.append(event.type)
'''

_CLAIM = """
from agentcore import hookimpl


@hookimpl
def on_trace(event):
    pass
"""

_BROKEN = """
import ackt_missing_dependency  # noqa: F401  (not installed: the import fails)
"""

_BADSTART = """
from agentcore import hookimpl


@hookimpl
def agentcore_start(context):
    raise RuntimeError("no licence for acme-badstart")
"""

_ACME_KINDS = '''
"""A third party's provider kind, ``acme``: it answers with the prompt in capitals."""

from agentcore import hookimpl
from agentcore.inference import (
    BlockStart,
    BlockStop,
    Complete,
    Response,
    StopInfo,
    TextBlock,
    Token,
    Usage,
    UsageUpdate,
)


class AcmeProvider:
    kind = "acme"

    def __init__(self, name, config, inference):
        self.name = name
        self.served = config.headers.get("x-acme-model", "acme-1")

    def _response(self, request, model):
        text = request.messages[-1].text.upper()
        usage = Usage(input_tokens=1, output_tokens=len(text.split()))
        stop = StopInfo("end_turn", "done")
        return Response([TextBlock(text)], stop, usage, model, self.served, self.name)

    async def stream(self, request, model):
        response = self._response(request, model)
        yield BlockStart(0, "text")
        yield Token(response.text, "text", 0, True)
        yield BlockStop(0, response.content[0])
        yield UsageUpdate(response.usage)
        yield Complete(response)

    async def complete(self, request, model):
        return self._response(request, model)

    async def aclose(self):
        return None


@hookimpl
def agentcore_provider_kinds():
    return {"acme": AcmeProvider}
'''


@dataclass(frozen=True)
class _Dist:
    name: str
    module: str
    entry_points: dict[str, str]
    source: str
    version: str = "1.0.0"
    defaults: dict[str, str] = field(default_factory=dict)
    """Its ``agentcore.defaults`` entries: the plugins it ships as defaults."""


_DISTS = [
    _Dist("acme-observer", "ackt_observer", {"acme-observer": "ackt_observer"}, _OBSERVER),
    _Dist("acme-disabled", "ackt_disabled", {"acme-disabled": "ackt_disabled"}, _DISABLED),
    # A bundled default, as the real one declares itself: literally its distribution's name,
    # and its plugin named in the agentcore.defaults group.
    _Dist(
        "agentcore-waiting-trace",
        "ackt_bundled_waiting",
        {"waiting-trace": "ackt_bundled_waiting"},
        _BUNDLED_WAITING,
        version="0.0.1",
        defaults={"waiting-trace": "waiting_trace"},
    ),
    _Dist(
        "acme-waiting",
        "ackt_acme_waiting",
        {"waiting-trace": "ackt_acme_waiting:AcmeWaiting"},
        _ACME_WAITING,
        version="2.0.0",
    ),
    _Dist("acme-claim-a", "ackt_claim_a", {"acme-contested": "ackt_claim_a"}, _CLAIM),
    _Dist("acme-claim-b", "ackt_claim_b", {"acme-contested": "ackt_claim_b"}, _CLAIM),
    _Dist("acme-broken", "ackt_broken", {"acme-broken": "ackt_broken"}, _BROKEN),
    _Dist("acme-badstart", "ackt_badstart", {"acme-badstart": "ackt_badstart"}, _BADSTART),
    _Dist("acme-kinds", "ackt_acme_kinds", {"acme-kinds": "ackt_acme_kinds"}, _ACME_KINDS),
]


def _write_project(root: Path, dist: _Dist) -> Path:
    project = root / dist.name
    package = project / "src" / dist.module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(dist.source))
    eps = "\n".join(f'"{name}" = "{target}"' for name, target in dist.entry_points.items())
    if dist.defaults:
        eps += '\n\n[project.entry-points."agentcore.defaults"]\n'
        eps += "\n".join(f'"{name}" = "{section}"' for name, section in dist.defaults.items())
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{dist.name}"
            version = "{dist.version}"

            [project.entry-points."agentcore.plugins"]
            """
        )
        + eps
        + textwrap.dedent(
            f"""

            [tool.hatch.build.targets.wheel]
            packages = ["src/{dist.module}"]
            """
        )
    )
    return project


def _build_wheel(project: Path, out: Path) -> Path:
    # hatchling's own builder, in process: what `pip wheel --no-build-isolation` would
    # run, without a subprocess per package.
    from hatchling.builders.wheel import WheelBuilder

    (wheel,) = WheelBuilder(str(project)).build(directory=str(out), versions=["standard"])
    return Path(wheel)


@pytest.fixture(scope="session")
def installed_dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every fixture distribution, built into a wheel and installed by uv's pip, once per session.

    One `uv pip install --target` installs every wheel (a process per
    distribution would cost seconds); each distribution's files, as its RECORD
    lists them, are then moved into a directory of its own, so that a test can
    put on sys.path exactly the distributions it needs. Maps distribution name
    to that directory.
    """
    root = tmp_path_factory.mktemp("dists")
    wheels = [_build_wheel(_write_project(root / "src", d), root / "wheels") for d in _DISTS]
    staging = root / "staging"
    proc = subprocess.run(
        [find_uv_bin(), "pip", "install", "--quiet", "--python", sys.executable]
        + ["--no-deps", "--no-build-isolation", "--no-index", "--target", str(staging)]
        + [str(w) for w in wheels],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"uv pip install failed:\n{proc.stdout}{proc.stderr}")
    targets: dict[str, Path] = {}
    for dist in _DISTS:
        stem = dist.name.replace("-", "_")
        record = staging / f"{stem}-{dist.version}.dist-info" / "RECORD"
        tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines()}
        target = targets[dist.name] = root / "site" / dist.name
        target.mkdir(parents=True)
        for top in tops:
            (staging / top).rename(target / top)
    return targets


@pytest.fixture
def use_dists(
    installed_dists: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., None]]:
    """Put the named distributions on sys.path (first on it) for this test."""

    def use(*names: str) -> None:
        for name in names:
            monkeypatch.syspath_prepend(str(installed_dists[name]))
        importlib.invalidate_caches()

    yield use
    forget_fixture_modules()
    importlib.invalidate_caches()


def forget_fixture_modules() -> None:
    for module in [m for m in sys.modules if m.startswith(MODULE_PREFIX)]:
        del sys.modules[module]


# -- the environment ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_agentcore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own AGENTCORE_* variables must not leak into a test."""
    for key in list(os.environ):
        if key.upper().startswith("AGENTCORE_"):
            monkeypatch.delenv(key)


@pytest.fixture
def scripted_plugins(scripted_provider: ScriptedProvider) -> dict[str, object]:
    """The plugin through which `kind = "scripted"` is the test's `scripted_provider`, which
    `scripted` sets up: give it to `Kernel.load(plugins=...)`."""
    return {"scripted": scripted_kind(scripted_provider)}


@pytest.fixture
def scripted(scripted_provider: ScriptedProvider) -> Callable[..., ScriptedProvider]:
    """Script the provider that `[providers.fake] kind = "scripted"` resolves to: one list of
    steps per attempt, the last one repeating."""

    def make(*attempts: Iterable[Any]) -> ScriptedProvider:
        *scripted_provider.script, scripted_provider.default = [list(a) for a in attempts]
        return scripted_provider

    return make


@pytest.fixture
def make_kernel(tmp_path: Path, scripted_plugins: dict[str, object]) -> Callable[..., Kernel]:
    """`Kernel.load` with explicit plugins (and the scripted kind) and environment, no
    discovery unless asked."""

    def make(
        *,
        plugins: dict[str, object] | None = None,
        env: dict[str, str] | None = None,
        toml: str | None = None,
        discover: bool = False,
    ) -> Kernel:
        path = None
        if toml is not None:
            path = tmp_path / "settings.toml"
            path.write_text(textwrap.dedent(toml))
        return Kernel.load(
            path,
            environ={**FAKE_ENV, **(env or {})},
            plugins={**scripted_plugins, **(plugins or {})},
            discover_plugins=discover,
        )

    return make


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """Every log record loguru emits during the test, formatted, tracebacks included."""
    from loguru import logger

    lines: list[str] = []
    handler = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    yield lines
    logger.remove(handler)
