"""A real ``redis-server`` on loopback, for the fleet tests (ours and plugin authors').

`RedisServer` starts one as a subprocess on a free port, with nothing persisted
(``--save '' --appendonly no``), and can stop and start it again on the same port
(an outage). It never falls back to a fake: without a ``redis-server`` binary it
raises `RedisServerMissing`, saying what to install. The ``redis_server`` fixture
(`agentcore.testing.fixtures`) is one such server for a whole test session.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

START_TIMEOUT_S = 10.0


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` on PATH."""


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RedisServerMissing(
            "redis-server is not installed, and the fleet tests need a real one: run "
            "`make test` as root (it installs Debian's redis-server package), or install it "
            "yourself (`apt-get install redis-server`, `brew install redis`)"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` subprocess on 127.0.0.1; `url` is for ``[fleet] redis_url``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port if port is not None else free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="agentcore-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        """Start it (again, on the same port) and wait until it answers PING."""
        if self.running:
            return self
        command = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers_ping():
            if self._process.poll() is not None:
                error = (self._process.stderr.read() if self._process.stderr else b"").decode()
                code = self._process.returncode
                raise RuntimeError(f"redis-server exited at start ({code}): {error}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL); what it held is gone (nothing is persisted)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["RedisServer", "RedisServerMissing", "free_port", "redis_server_binary"]
