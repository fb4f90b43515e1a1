"""A real ``redis-server`` on loopback, for the fleet tests (ours and plugin authors').

`RedisServer` starts one as a subprocess on a free port, with nothing persisted
(``--save '' --appendonly no``), and can stop and start it again on the same port
(an outage); given `TlsFiles` it speaks only TLS (and asks clients for a certificate),
and `extra` passes more ``redis-server`` options (``--requirepass``, ``--replicaof``). It
never falls back to a fake: without a ``redis-server`` binary it raises
`RedisServerMissing`, saying what to install. The ``redis_server`` fixture
(`agentcore.testing.fixtures`) is one such server for a whole test session.

The deployments teams run are in `agentcore.testing.redis_deployments`: a TLS server with
a throwaway CA, a three-node cluster, a primary with a replica and three sentinels.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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


def free_port(*, with_bus: bool = False) -> int:
    """A port free on 127.0.0.1 now; `with_bus`: one whose cluster bus port (+10000) is
    free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if not with_bus:
            return port
        if port + 10000 < 65536 and _bindable(port + 10000):
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1 and localhost, and a
    client certificate (`make_tls_files`)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def make_tls_files(folder: Path) -> TlsFiles:
    """A new CA and the certificates it signs, written to `folder` (trustme, over the
    cryptography package: no ``openssl`` run, nothing reused between runs)."""
    try:
        import trustme
    except ImportError as exc:  # a dev dependency of agentcore's, not a runtime one
        raise RuntimeError("make_tls_files needs the trustme package: pip install trustme") from exc

    ca = trustme.CA()
    files = TlsFiles(
        *(folder / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key"))
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(files.server_cert))
    server.private_key_pem.write_to_path(str(files.server_key))
    client = ca.issue_cert("agentcore-client.test")
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    return files


class RedisServer:
    """One ``redis-server`` subprocess on 127.0.0.1; `url` is for ``[fleet] redis_url``."""

    def __init__(
        self,
        port: int | None = None,
        *,
        tls: TlsFiles | None = None,
        extra: Sequence[str] = (),
        config: str | None = None,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.tls = tls
        self.extra = list(extra)
        self.config = config
        """A config file's text, written to the server's folder and named first (a sentinel
        needs one it can rewrite)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="agentcore-redis-")

    @property
    def folder(self) -> Path:
        return Path(self._dir.name)

    @property
    def url(self) -> str:
        scheme = "rediss" if self.tls is not None else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        """Start it (again, on the same port) and wait until it answers PING."""
        if self.running:
            return self
        command = [redis_server_binary()]
        if self.config is not None:
            path = self.folder / "redis.conf"
            if not path.exists():
                path.write_text(self.config)
            command.append(str(path))
        command += [
            *self._port_options(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
            "--logfile",
            "redis.log",
            *self.extra,
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers_ping():
            if self._process.poll() is not None:
                error = (self._process.stderr.read() if self._process.stderr else b"").decode()
                error += self.log()
                code = self._process.returncode
                raise RuntimeError(f"redis-server exited at start ({code}): {error}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)
        return self

    def log(self) -> str:
        """What it logged (its ``redis.log``; empty before it starts)."""
        path = self.folder / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _port_options(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port",
            "0",  # TLS only
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls.server_cert),
            "--tls-key-file",
            str(self.tls.server_key),
            "--tls-ca-cert-file",
            str(self.tls.ca),
            "--tls-auth-clients",
            "yes",
            "--tls-replication",
            "yes",
            "--tls-cluster",
            "yes",
        ]

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
        """It answers PING: with PONG, or by asking for a password first (``-NOAUTH``)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                sock = raw
                if self.tls is not None:
                    sock = self.tls.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))
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


__all__ = [
    "RedisServer",
    "RedisServerMissing",
    "TlsFiles",
    "free_port",
    "make_tls_files",
    "redis_server_binary",
]
