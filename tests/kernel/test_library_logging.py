"""Used as a library, agentcore configures no logging: a program that imports it and runs
a kernel call hears nothing on stderr (loguru's default handler logs DEBUG there), until it
turns agentcore's records on itself."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcore.testing import LoopbackServer, Scenario

PROGRAM = """
import asyncio, sys
from agentcore.inference import Message, Request
from agentcore.kernel import Kernel

if sys.argv[2] == "enable":
    from agentcore.log import enable_logging
    enable_logging()


async def main() -> None:
    async with Kernel.load(sys.argv[1]) as kernel:
        reply = await kernel.complete(Request("a:m", [Message.user("hi")], max_tokens=8))
        print(reply.text)


asyncio.run(main())
"""


def run(settings: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(settings), mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("mode", ["library", "enable"])
def test_a_library_kernel_call_prints_nothing_to_stderr_until_enabled(
    loopback_provider: LoopbackServer, loopback_settings: Callable[..., Path], mode: str
) -> None:
    # A 429 first: the retry and the hold run too, every default plugin takes part.
    loopback_provider.script(Scenario.rate_limit(retry_after_ms=10), Scenario.text("Hello."))
    settings = loopback_settings({"a": "anthropic"})
    done = run(settings, mode)
    assert (done.returncode, done.stdout) == (0, "Hello.\n"), done.stderr
    if mode == "library":
        assert done.stderr == ""
    else:  # the records were there all along: the application's handler now gets them
        assert "otel: no endpoint" in done.stderr
