"""pytest fixtures for agentcore, registered through the ``pytest11`` entry point.

Only pytest is imported at load time: this module is loaded into every pytest run
of any environment that has agentcore installed, so it must cost nothing and
need nothing (no pytest-asyncio: the server runs on its own thread, so these are
plain fixtures that sync and async tests can both use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agentcore.testing.redis import RedisServer
    from agentcore.testing.scripted import ScriptedProvider, TraceRecorder
    from agentcore.testing.server import LoopbackServer


@pytest.fixture
def loopback_provider() -> Iterator[LoopbackServer]:
    """A running scripted provider server on 127.0.0.1 (see `agentcore.testing`)."""
    from agentcore.testing.server import LoopbackServer

    server = LoopbackServer().start_in_thread()
    try:
        yield server
    finally:
        server.stop_in_thread()


@pytest.fixture
def loopback_settings(
    loopback_provider: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Path]:
    """A function writing a settings file pointed at `loopback_provider`; returns its path.

    Takes `LoopbackServer.settings_toml`'s arguments, plus ``name`` for the file name.
    The fake key is put in the environment for the test's duration.
    """
    from agentcore.testing.server import API_KEY, API_KEY_ENV

    monkeypatch.setenv(API_KEY_ENV, API_KEY)

    def write(*args: Any, name: str = "agentcore.toml", **kwargs: Any) -> Path:
        return loopback_provider.write_settings(tmp_path / name, *args, **kwargs)

    return write


@pytest.fixture
def scripted_provider() -> ScriptedProvider:
    """A `ScriptedProvider` named ``fake``; a kernel loaded with ``plugins={"scripted":
    scripted_kind(scripted_provider)}`` resolves every ``kind = "scripted"`` section to it
    (see `agentcore.testing`)."""
    from agentcore.testing.scripted import ScriptedProvider

    return ScriptedProvider()


@pytest.fixture
def trace_recorder() -> TraceRecorder:
    """A plugin keeping every trace and every announced wait (`agentcore.testing.TraceRecorder`)."""
    from agentcore.testing.scripted import TraceRecorder

    return TraceRecorder()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real ``redis-server`` on a free loopback port for the whole session, stopped after
    (`agentcore.testing.redis`). Without the binary the test fails, saying what to install:
    the fleet tests never fall back to a fake or a skip. Give each test its own
    ``[fleet] key_prefix`` so that tests do not see each other's keys."""
    from agentcore.testing.redis import RedisServer, RedisServerMissing

    try:
        server = RedisServer().start()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.close()
