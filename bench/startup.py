"""What it costs to start `agentcore`: `agentcore plugins` and one `agentcore infer` on
an echo provider, each a fresh process, as a ratio to a floor measured in the same run.

The floor is a process that imports what every agentcore command needs and cannot do
without: pydantic-settings' `BaseSettings` (the settings are validated on every start,
and it pulls in pydantic), click (the command line), pluggy (the hooks) and loguru (the
log). Nothing agentcore does can start faster than that, so the ratio is agentcore's own
cost: its modules, the plugins it imports, and the work of loading the settings and the
plugins. The bare interpreter (``python -c pass``) is shown for scale. The machine may be
busy: the commands are run in turns, round after round, and each figure is the median of
the wall time, with the process's CPU time (user + system), which a busy machine disturbs
less.

aiohttp is not in the floor: only a provider that speaks HTTP needs it, and echo does not.
What remains above the floor is mostly agentcore's settings models, the plugins' own
modules and pluggy's registration. On a busy 2-core machine (2026-12-01) lazy imports took
`plugins` from x3.5 to x1.7 and `infer` from x3.2 to x1.8 (1.4 s to 0.75 s).

Each process runs in the environment this script runs in (its ``sys.executable``, its
PYTHONPATH), with every installed plugin found. Run: ``python bench/startup.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = "import click, pluggy, loguru; from pydantic_settings import BaseSettings"
SETTINGS = '[providers.echo]\nkind = "echo"\n'


def commands(settings: Path) -> dict[str, list[str]]:
    agentcore = [sys.executable, "-m", "agentcore"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "floor": [sys.executable, "-c", FLOOR],
        "agentcore plugins": [*agentcore, "plugins", "--settings", str(settings)],
        "agentcore infer": [
            *agentcore,
            "infer",
            "--settings",
            str(settings),
            "--model",
            "echo:any",
            "--no-stream",
            "hello there",
        ],
    }


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `argv`."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv} exited {process.returncode}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    with tempfile.TemporaryDirectory() as directory:
        settings = Path(directory) / "agentcore.toml"
        settings.write_text(SETTINGS)
        to_run = commands(settings)
        for argv in to_run.values():  # warm the page cache and the bytecode caches
            run_once(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in to_run}
        for _ in range(options.rounds):
            for name, argv in to_run.items():
                times[name].append(run_once(argv, env))
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {options.rounds} rounds")
    print(f"load average {os.getloadavg()[0]:.1f}; medians, and their ratio to the floor's")
    floor_wall = statistics.median(wall for wall, _ in times["floor"])
    floor_cpu = statistics.median(cpu for _, cpu in times["floor"])
    print(f"  {'':<18} {'wall':>8}  {'ratio':>6}  {'cpu':>8}  {'ratio':>6}")
    for name, samples in times.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(
            f"  {name:<18} {wall * 1000:5.0f} ms  x{wall / floor_wall:5.2f}"
            f"  {cpu * 1000:5.0f} ms  x{cpu / floor_cpu:5.2f}"
        )


if __name__ == "__main__":
    main()
