"""``[mcpl] request_timeout_s``: how long the host waits for a server's answer to a request
of its own (here ``initialize``), read from the settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentcore._constants import MCPL_REQUEST_TIMEOUT_S
from agentcore.kernel import Kernel
from agentcore.mcpl.host import McplHost
from agentcore.settings import load_settings

SILENT_SERVER = [sys.executable, "-c", "import sys; sys.stdin.read()"]
"""Reads every request and answers none."""


def test_the_default_is_the_one_written_in_constants() -> None:
    assert load_settings().settings.mcpl.request_timeout_s == MCPL_REQUEST_TIMEOUT_S


# Without the setting the host would wait the default 30 s for the answer: past this
# mark's limit, so the test fails rather than passes late.
@pytest.mark.timeout(15)
async def test_a_server_that_never_answers_initialize_is_given_up_on(tmp_path: Path) -> None:
    settings = tmp_path / "agentcore.toml"
    settings.write_text(
        "[mcpl]\nrequest_timeout_s = 0.2\n\n"
        f"[mcpl.servers.silent]\ncommand = {json.dumps(SILENT_SERVER)}\n"
    )
    kernel = Kernel.load(settings, discover_plugins=False)
    await kernel.start()
    host = McplHost(kernel)
    try:
        await host.start()
        assert list(host.connections) == []  # did not start: no answer within 0.2 s
    finally:
        await host.close()
        await kernel.stop()
