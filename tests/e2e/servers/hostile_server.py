"""A stdio MCPL server that tries to exhaust the host (stdlib only), as issue 22 probed.

It answers `initialize` and `featureSets/update`, then, by ``$HOSTILE_MODE``:

- ``flood``: sends ``$HOSTILE_FLOOD`` (300) `push/event`s whose `eventId` is 3 MB each,
  then ``evt-a``, ``evt-a`` again and ``evt-b``, all at once from a thread, while it reads
  every answer; with them all in, it writes ``{"answers": {request id: answer}}`` as JSON to
  ``$HOSTILE_REPORT`` and serves on until its stdin closes.
- ``hog``: writes ``sending`` to ``$HOSTILE_REPORT``, sends ``$HOSTILE_REQUESTS`` streamed
  `inference/request`s in one write, and never reads its stdin again (it sleeps until a
  signal ends it).

The feature set it declares is ``alerts`` (`pushEvents`) or ``fs.a`` (streamed inference).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

FEATURE_SETS = {
    "alerts": {"description": "pushed events", "uses": ["pushEvents"]},
    "fs.a": {
        "description": "streamed inference",
        "uses": ["inferenceRequest", "inferenceRequest.streaming"],
    },
}
MANIFEST = {
    "version": "0.5",
    "pushEvents": True,
    "inferenceRequest": {"streaming": True},
    "featureSets": FEATURE_SETS,
}
EVENT_ID_BYTES = 3 * 1024 * 1024
LOCK = threading.Lock()


def write(message: dict[str, Any]) -> None:
    with LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def event(rid: int, event_id: str) -> dict[str, Any]:
    params = {
        "featureSet": "alerts",
        "eventId": event_id,
        "timestamp": "2026-01-23T10:30:00Z",
        "payload": {"content": [{"type": "text", "text": "something happened"}]},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "push/event", "params": params}


def flood(count: int) -> dict[int, str]:
    """Send the events from a thread (so that answers are read meanwhile); their ids."""
    ids: dict[int, str] = {}
    for rid in range(100, 100 + count):
        ids[rid] = f"{rid:08d}" + "x" * (EVENT_ID_BYTES - 8)
    for rid, event_id in zip((90, 91, 92), ("evt-a", "evt-a", "evt-b"), strict=True):
        ids[rid] = event_id

    def send() -> None:
        for rid, event_id in ids.items():
            write(event(rid, event_id))

    threading.Thread(target=send, daemon=True).start()
    return ids


def hog(count: int) -> None:
    lines = []
    for rid in range(100, 100 + count):
        params = {
            "featureSet": "fs.a",
            "stream": True,
            "messages": [{"role": "user", "content": f"hog {rid}"}],
        }
        message = {"jsonrpc": "2.0", "id": rid, "method": "inference/request", "params": params}
        lines.append(json.dumps(message) + "\n")
    report("sending")  # before: a host that stops reading may never take them all
    with LOCK:
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
    while True:  # never read stdin again
        time.sleep(3600)


def report(text: str) -> None:
    path = os.environ["HOSTILE_REPORT"]
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


def main() -> int:
    mode = os.environ["HOSTILE_MODE"]
    ids: dict[int, str] = {}
    answers: dict[int, Any] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"experimental": {"mcpl": MANIFEST}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            write({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "featureSets/update":
            receipt = {"accepted": True, "mode": "full", "unavailableFeatures": []}
            write({"jsonrpc": "2.0", "id": rid, "result": receipt})
            if mode == "hog":
                hog(int(os.environ.get("HOSTILE_REQUESTS", "20")))
            elif not ids:
                ids = flood(int(os.environ.get("HOSTILE_FLOOD", "300")))
        elif method is None and rid in ids:
            answers[rid] = message.get("result", message.get("error"))
            if len(answers) == len(ids):
                report(json.dumps({"answers": answers}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
