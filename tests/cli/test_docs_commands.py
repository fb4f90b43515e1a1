"""Every command the README and docs/ show, run as written (issue 23, "What a new user reads").

The commands are read from the markdown itself (markdown-it-py): every line of a fenced
block marked ``sh``, ``shell``, ``bash`` or ``console``, and every line of an unmarked or
indented block that starts like a command (`COMMAND`). A new command added to the
docs is therefore run here by default; the only ones that are not are listed below, each
with its reason. (Synopses written inline, such as ``agentcore serve --settings PATH``,
are not commands to run: the tables and lists of docs/cli.md are checked by the tests of
each command.)

Each command runs in bash from the repository's root, with this environment's ``bin``
first on PATH (as ``. .venv/bin/activate`` does), and the test provides what a user would:

- a provider that needs a key and the network (any kind but ``echo`` in the settings file
  the command names) is pointed at a loopback server that echoes, and given its key,
  through ``AGENTCORE_PROVIDERS__NAME__BASE_URL`` and the variable its ``api_key_env`` names;
- traces go to a temporary file (``AGENTCORE_TRACES__JSONL``), not beside the examples;
- ``agentcore serve`` must exit by itself (0, once its servers have gone), except with
  ``--console ADDR``, which the docs show as staying up: that one runs until its servers
  are ready and its ``/status`` answers, then gets SIGTERM (Ctrl-C's equivalent) and must
  exit 0. ``ADDR`` is given port 0, so that runs side by side never collide.

Every command must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from agentcore.testing import API_KEY, LoopbackServer, Scenario

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_BLOCKS = {"sh", "shell", "bash", "console"}
COMMAND = re.compile(r"(agentcore|python3?|make|uv|source|\.|\.venv/bin/\S+) ")
"""How a line of an unmarked block starts when it is a command (not ``agentcore/  the kernel``)."""
RUN_BOUND_S = 45
"""The most any one command may take (a bound against a hang, not a measurement; under
pytest-timeout's, so that a hang is reported with the command's output)."""
READY = re.compile(r"mcpl server \S+: ready\b")
"""How `serve` says a server's session is up."""

EXCLUDED: dict[str, str] = {
    "python bench/soak.py [--requests 10000] [--seed 1] [--stdio 3] [--ws 3] [--rounds 5]": (
        "a synopsis ([optional] arguments), and the full soak is minutes of load on a real "
        "redis-server; tests/e2e/test_soak.py runs it with 300 requests"
    ),
}
EXCLUDED_RULES = {
    "make ": (
        "make targets build the environment (uv sync), run the whole suite (make test would "
        "run this test again) or the benchmarks; the agentcore commands they end in (make "
        "demo: agentcore demo) are run here on their own"
    ),
}


@dataclass(frozen=True)
class Command:
    text: str
    where: str  # file:line

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def shown_commands() -> list[Command]:
    """Every command line of the docs' code blocks, backslash continuations joined."""
    parser = MarkdownIt("commonmark")
    found: list[Command] = []
    for path in DOCS:
        for token in parser.parse(path.read_text(encoding="utf-8")):
            if token.type not in ("fence", "code_block") or token.map is None:
                continue
            language = token.info.strip().split(" ")[0].lower()
            if language and language not in SHELL_BLOCKS:
                continue
            every_line = language in SHELL_BLOCKS
            first = token.map[0] + (1 if token.type == "fence" else 0)
            pending = ""
            for offset, raw in enumerate(token.content.splitlines()):
                line = pending + raw.strip()
                if line.endswith("\\"):
                    pending = line[:-1] + " "
                    continue
                pending = ""
                line = line.removeprefix("$ ")
                if not line or line.startswith("#"):
                    continue
                if every_line or COMMAND.match(line):
                    where = f"{path.relative_to(REPO)}:{first + offset + 1}"
                    found.append(Command(line, where))
    return found


def excluded(command: Command) -> str | None:
    if command.text in EXCLUDED:
        return EXCLUDED[command.text]
    return next(
        (why for start, why in EXCLUDED_RULES.items() if command.text.startswith(start)), None
    )


COMMANDS = shown_commands()
TO_RUN = [c for c in COMMANDS if excluded(c) is None]


def test_the_docs_show_commands_and_every_exclusion_is_still_shown() -> None:
    """The extraction finds the README's first steps, and an exclusion that no longer
    matches a command shown is stale (remove it, or the command's new form runs)."""
    texts = {c.text for c in COMMANDS}
    assert "agentcore demo" in texts
    assert any(c.text.startswith("agentcore serve") for c in TO_RUN)
    assert not set(EXCLUDED) - texts, f"stale exclusions: {set(EXCLUDED) - texts}"


@pytest.fixture(scope="module")
def echoing_provider() -> Iterator[LoopbackServer]:
    server = LoopbackServer(default=Scenario.echo()).start_in_thread()
    try:
        yield server
    finally:
        server.stop_in_thread()


def environment(command: str, provider: LoopbackServer, tmp_path: Path) -> dict[str, str]:
    """What a user would have set up for `command`: keys, and a provider that answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["AGENTCORE_TRACES__JSONL"] = str(tmp_path / "traces.jsonl")
    words = shlex.split(command)
    if "--settings" in words:
        settings = tomllib.loads((REPO / words[words.index("--settings") + 1]).read_text())
        for name, provider_settings in settings.get("providers", {}).items():
            kind = provider_settings.get("kind")
            if kind == "echo":
                continue
            key = f"AGENTCORE_PROVIDERS__{name.upper()}__BASE_URL"
            env[key] = provider.base_url(kind)
            if provider_settings.get("api_key_env"):
                env[provider_settings["api_key_env"]] = API_KEY
    return env


def console_option(command: str) -> str:
    """``--console HOST:PORT`` on port 0: a free port, said in the log."""
    return re.sub(r"(--console\s+\S+?):\d+", r"\1:0", command)


@pytest.mark.parametrize("command", TO_RUN, ids=[str(c) for c in TO_RUN])
def test_a_command_the_docs_show_runs_as_written(
    command: Command, echoing_provider: LoopbackServer, tmp_path: Path
) -> None:
    env = environment(command.text, echoing_provider, tmp_path)
    if command.text.startswith("agentcore serve"):
        code, output = run_serve(console_option(command.text), env)
    else:
        done = subprocess.run(
            ["bash", "-c", command.text],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_BOUND_S,
            stdin=subprocess.DEVNULL,
        )
        code, output = done.returncode, done.stdout + done.stderr
    assert code == 0, f"{command} exited {code}:\n{output}"
    assert "Traceback" not in output, output
    assert API_KEY not in output


def run_serve(command: str, env: dict[str, str]) -> tuple[int, str]:
    """`agentcore serve` until it exits; with ``--console``, until a server is ready and the
    console answers ``/status``, then SIGTERM. Its exit code and its output."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    console: str | None = None
    bound = threading.Timer(RUN_BOUND_S, process.kill)  # a hang fails the test, not the run
    bound.start()
    try:
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"console: (http://\S+)", line)
            if found:
                console = found.group(1).rstrip("/")
            if READY.search(line) and console:
                break
        if process.poll() is None:
            if console is not None:
                with urllib.request.urlopen(f"{console}/status", timeout=10) as answer:
                    assert answer.status == 200
                    assert "providers" in json.loads(answer.read())
            process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=RUN_BOUND_S)
        lines.append(rest)
        return process.returncode, "".join(lines)
    finally:
        bound.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
