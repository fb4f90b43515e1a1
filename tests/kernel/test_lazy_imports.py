"""A host imports only what its run uses (issue 24: `serve`'s idle memory).

aiohttp (WebSocket MCPL servers, HTTP providers), pydantic-settings (``AGENTCORE_*``
overrides) and the OpenTelemetry API and SDK (an export) are each several MB of a
process's memory; a kernel with every default plugin, started with stdio servers only,
no override and no export, must not have loaded them. Nor the smaller ones a run may never
need: yarl (with idna and multidict, ~1 MB: a ``ws://`` server URL's check), tenacity (the
retry backoff, at a first failed attempt), `html` (its entity table, ~0.4 MB: an
injected resource's label), `unicodedata` (a §19 stub's label) and `difflib` (a misspelt
settings key's suggestion), `email.parser` (`importlib.metadata`'s full parse of a
distribution's METADATA: agentcore's holds the README, ~0.7 MB of heap; the plugins' names
and versions and the handshake's clientInfo read its header only). Each check runs in a fresh
interpreter, as `serve` does: this one has imported all of them already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LAZY = ("aiohttp", "pydantic_settings", "opentelemetry.trace", "opentelemetry.sdk")
LAZY += ("yarl", "tenacity", "html", "unicodedata", "difflib", "email.parser")
# The mcpl-context plugins' wire and push-event inbox: a host turn's, or enabled events'.
LAZY += ("agentcore_mcpl_context.wire", "agentcore_mcpl_context.events")
# §19's bulk references: read with a first push event, injection or fetch.
LAZY += ("agentcore.mcpl.bulk",)
# The console's state, folded only for a console that listens; the OpenTelemetry API's
# header parser, for an OTEL_EXPORTER_OTLP_*HEADERS variable that is set.
LAZY += ("agentcore_console.state", "opentelemetry")
# The budget plugin's enforcement and claim kind: a configured budget's, at start.
LAZY += ("agentcore_budget.enforce", "agentcore_budget.kind")

PROBE = """
import asyncio, json, sys
from agentcore.kernel import Kernel
import agentcore.mcpl.host  # what `serve` imports to run the MCPL host
from agentcore.mcpl.compat import client_version

async def main() -> None:
    kernel = Kernel.load(sys.argv[1])
    await kernel.start()
    client_version()  # an MCPL handshake's clientInfo
    await kernel.stop()

asyncio.run(main())
print(json.dumps(sorted(sys.modules)))
"""


def loaded(settings: Path, environ: dict[str, str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(settings)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.upper().startswith(("AGENTCORE_", "OTEL_"))
    }


def test_a_plain_start_leaves_the_heavy_libraries_unloaded(tmp_path: Path) -> None:
    settings = tmp_path / "agentcore.toml"
    settings.write_text("[inference]\nrequest_timeout_s = 30\n")
    modules = loaded(settings, clean_env())
    assert "agentcore_otel" in modules  # the default plugins did load
    assert not {name for name in LAZY if name in modules}


def test_an_override_still_loads_what_parses_it(tmp_path: Path) -> None:
    """The probe can fail: an ``AGENTCORE_*`` override brings pydantic-settings in."""
    settings = tmp_path / "agentcore.toml"
    settings.write_text("")
    environ = {**clean_env(), "AGENTCORE_INFERENCE__REQUEST_TIMEOUT_S": "30"}
    assert "pydantic_settings" in loaded(settings, environ)


def test_a_listening_console_and_otel_headers_load_what_they_use(tmp_path: Path) -> None:
    """The probe can fail: a console that listens folds traces into its state, and an
    OTLP headers variable is parsed (its values are secrets) though nothing is exported."""
    settings = tmp_path / "agentcore.toml"
    settings.write_text('[console]\nlisten = "127.0.0.1:0"\n')
    environ = {**clean_env(), "OTEL_EXPORTER_OTLP_HEADERS": "x-key=hunter2"}
    modules = loaded(settings, environ)
    assert {"agentcore_console.state", "opentelemetry.util.re"} <= modules


def test_the_command_loads_infer_s_run_for_infer_only() -> None:
    """`agentcore.cli_infer` (the streamed text, the status line, host turns) is not loaded by
    the `agentcore` command's module; `InferStatus` is still importable from it."""
    probe = (
        "import sys, agentcore.cli as cli; print('agentcore.cli_infer' in sys.modules);"
        " cli.InferStatus; print('agentcore.cli_infer' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "True"]
