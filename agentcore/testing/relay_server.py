"""The stdio end of the end-to-end tests' MCPL server (stdlib only).

The host runs this as a real stdio MCPL server. It carries every line the host
writes on its stdin to the test, and every line the test sends to its stdout,
unchanged: the MCPL server's logic (handshake, requests, recording) runs in the
test process (`agentcore.testing.mcpl_server.ServerSession`), the same code that plays the server
behind a WebSocket. It connects to the test at ``$MCPL_E2E_RELAY``
(``HOST:PORT``) and first sends ``{"relay": {"pid": PID, "tag": TAG}}``, so the
test can check that the process is gone after shutdown, also when it is a
grandchild (under ``agentcore serve``), and tell sessions apart by ``$MCPL_E2E_TAG``;
the hello also carries the whole environment the process started with (``environ``),
so the test can see what of the host's reached it.

It exits when the test closes the socket, which the test does once the host
has closed the relay's stdin (the relay half-closes the socket then, after
passing on every line read before that). SIGTERM is ignored: the host sends
it only to a child still running `shutdown_grace_s` after its stdin closed,
and dying on the signal could lose the last lines it wrote (the shutdown
answers); the host SIGKILLs a child that outlives SIGTERM too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: None)
    host, _, port = os.environ["MCPL_E2E_RELAY"].rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tag = os.environ.get("MCPL_E2E_TAG", "")
    hello = {"relay": {"pid": os.getpid(), "tag": tag, "environ": dict(os.environ)}}
    sock.sendall(json.dumps(hello).encode() + b"\n")

    def host_to_test() -> None:
        # Whole reads, not lines: the test splits them; order is all that matters.
        try:
            while data := os.read(0, 65536):
                sock.sendall(data)
            # EOF from the host: everything it wrote has been passed on. Half-close,
            # and keep reading until the test closes too (closing a socket with
            # unread data would reset it, and the test could lose those lines).
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=host_to_test, daemon=True).start()
    host_reads = True
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            break
        view = memoryview(data)
        while host_reads and view:
            try:
                view = view[os.write(1, view) :]
            except OSError:  # the host stopped reading: drain the socket, discard
                host_reads = False
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
