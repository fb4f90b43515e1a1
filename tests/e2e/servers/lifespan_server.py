"""A stdio MCPL server with a cleanup of its own, as one built on the MCP SDK has (stdlib only).

It answers `initialize` (an MCPL manifest), `featureSets/update` (accepted) and
`ping`, then writes its pid to ``$LIFESPAN_READY`` so the test knows it is
serving. At stdin EOF its "lifespan cleanup" runs: it takes a moment, writes
``cleaned up`` to ``$LIFESPAN_MARKER`` and exits 0. SIGTERM has its default
action (death at -15, the cleanup lost), as in a server whose cleanup waits for EOF.

With ``$LIFESPAN_STUBBORN=1`` it ignores SIGTERM and keeps running after EOF:
only SIGKILL ends it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

MANIFEST = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "featureSets": {"fs.a": {"description": "d", "uses": ["inferenceRequest"]}},
}


def answer(rid: Any, result: Any) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> int:
    stubborn = os.environ.get("LIFESPAN_STUBBORN") == "1"
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            capabilities = {"experimental": {"mcpl": MANIFEST}}
            info = {"name": "lifespan", "version": "1"}
            answer(
                rid, {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info}
            )
        elif method == "featureSets/update":
            answer(rid, {"accepted": True, "mode": "full", "unavailableFeatures": []})
            with open(os.environ["LIFESPAN_READY"], "w") as ready:
                ready.write(str(os.getpid()))
        elif method == "ping":
            answer(rid, {})
    if stubborn:
        while True:
            signal.pause()
    time.sleep(0.5)  # the cleanup takes a moment: closing files, flushing a store
    with open(os.environ["LIFESPAN_MARKER"], "w") as marker:
        marker.write("cleaned up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
