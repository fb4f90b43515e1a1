"""What a user installs: the lock, the built wheels, and agentcore beside the newest SDKs.

The wheels are built from this checkout (`uv build`, as `make dist` does) and installed
into a fresh virtual environment, not editable and not from the source tree, with the
third-party versions the lock pins; every command then runs from a folder outside the
checkout, so nothing can be imported from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from uv import find_uv_bin

from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer, Scenario

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["agentcore", *sorted(p.name for p in (REPO / "plugins").iterdir() if p.is_dir())]
# The SDKs a user runs beside agentcore; google-genai caps tenacity, which agentcore-retry uses.
SDKS = ["anthropic", "openai", "google-genai"]
UV = find_uv_bin()


def uv(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [UV, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, f"uv {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def locked_versions() -> dict[str, str]:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    return {p["name"]: p["version"] for p in lock["package"] if "version" in p}


def test_the_lock_matches_every_pyproject() -> None:
    uv("lock", "--check")


def test_make_bootstraps_the_uv_the_lock_installs() -> None:
    """`make` bootstraps the same uv release the dev group locks, so both agree on uv.lock."""
    makefile = (REPO / "Makefile").read_text()
    (line,) = [x for x in makefile.splitlines() if x.startswith("UV_VERSION :=")]
    assert line.split(":=")[1].strip() == locked_versions()["uv"]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the built wheels of every package and the newest SDKs, as locked."""
    root = tmp_path_factory.mktemp("wheels")
    dist, venv = root / "dist", root / "venv"
    uv("build", "--all-packages", "--wheel", "--out-dir", str(dist))
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == len(PACKAGES), [w.name for w in wheels]
    # Third-party versions exactly as locked (the workspace's own packages come from dist/).
    constraints = root / "constraints.txt"
    constraints.write_text(
        uv("export", "--frozen", "--all-packages", "--no-hashes", "--no-emit-workspace")
    )
    uv("venv", "--python", sys.executable, str(venv))
    python = str(venv / "bin" / "python")
    uv("pip", "install", "--python", python, "-c", str(constraints), *map(str, wheels), *SDKS)
    yield venv


def run(venv: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_wheels_install_every_plugin_with_entry_points_and_versions(
    wheel_venv: Path, tmp_path: Path
) -> None:
    out = run(wheel_venv, "agentcore", "plugins", cwd=tmp_path)
    for name in ["bedrock", "console", "jsonl-traces", "mcpl-context", "mcpl-router", "otel"]:
        assert f"\n{name} " in out, out
    for name in ["provider-hold", "rate-limit", "retry", "waiting-trace"]:
        assert f"\n{name} " in out, out
    for package in PACKAGES:
        assert package in out, out
    probe = """
import importlib.metadata as md, importlib.resources as res, json, sys, agentcore
names = sys.argv[1:]
print(json.dumps({
    "file": agentcore.__file__,
    "versions": {n: md.version(n) for n in names},
    "typed": {n: res.files(n.replace("-", "_")).joinpath("py.typed").is_file() for n in names},
    "page": res.files("agentcore_console").joinpath("page.html").is_file(),
    "example": res.files("agentcore.examples").joinpath("memory_server.py").is_file(),
}))
"""
    seen = json.loads(run(wheel_venv, "python", "-c", probe, *PACKAGES, cwd=tmp_path))
    assert Path(seen["file"]).is_relative_to(wheel_venv), seen["file"]
    assert seen["versions"] == {n: "0.1.0" for n in PACKAGES}
    assert all(seen["typed"].values()), seen["typed"]
    assert seen["page"] and seen["example"]


def test_demo_runs_from_the_installed_wheels(wheel_venv: Path, tmp_path: Path) -> None:
    out = run(wheel_venv, "agentcore", "demo", cwd=tmp_path)
    assert "mannequin" in out


def test_infer_from_the_installed_wheels(wheel_venv: Path, tmp_path: Path) -> None:
    server = LoopbackServer().start_in_thread()
    try:
        server.script(Scenario.text("Hello from the wheel."))
        settings = server.write_settings(tmp_path / "agentcore.toml")
        out = run(
            wheel_venv,
            "agentcore",
            "infer",
            "--settings",
            str(settings),
            "--model",
            "anthropic:claude-x",
            "Hi",
            cwd=tmp_path,
            env={API_KEY_ENV: API_KEY},
        )
        assert "Hello from the wheel." in out
        assert len(server.calls) == 1
    finally:
        server.stop_in_thread()


def test_agentcore_installs_beside_the_newest_sdks(wheel_venv: Path) -> None:
    """The SDKs' own requirements and agentcore-retry's tenacity range hold together."""
    uv("pip", "check", "--python", str(wheel_venv / "bin" / "python"))
    locked = locked_versions()
    # google-genai from 1.20 on caps tenacity below 9.2; the lock holds a newer one with it.
    assert tuple(int(x) for x in locked["google-genai"].split(".")[:2]) >= (1, 20)
    for sdk in SDKS:
        assert sdk in locked
