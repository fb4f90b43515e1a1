"""A stdio MCPL server that tries to exhaust the host (stdlib only), as issue 22 probed.

It answers `initialize` and `featureSets/update`; then (once ``$HOSTILE_GO``, if set,
names a file that exists) it probes, by ``$HOSTILE_MODE``:

- ``flood``: sends ``$HOSTILE_FLOOD`` (300) `push/event`s whose `eventId` is 3 MB each,
  then ``evt-a``, ``evt-a`` again and ``evt-b``, all at once from a thread, while it reads
  every answer; with them all in, it writes ``{"answers": {request id: answer}}`` as JSON to
  ``$HOSTILE_REPORT`` and serves on until its stdin closes.
- ``params``: sends ``$HOSTILE_REQUESTS`` (20) `inference/request`s asking for 10**30
  tokens or a temperature of -7, in turn, and reports their answers the same way.
- ``hog``: writes ``sending`` to ``$HOSTILE_REPORT``, sends ``$HOSTILE_REQUESTS`` streamed
  `inference/request`s (their text says ``hostile-hog``) in one write, and never reads its
  stdin again (it sleeps until a signal ends it).

A session that finds ``$HOSTILE_REPORT`` already written (the host reconnected after an
earlier one probed) writes ``$HOSTILE_REPORT.again`` and only serves. It declares the
feature sets ``alerts`` (`pushEvents`) and ``fs.a`` (streamed inference).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
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


def answer(message: dict[str, Any]) -> bool:
    """Answer what the host asks of any server; True once the policy was accepted."""
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
        return True
    elif method == "ping":
        write({"jsonrpc": "2.0", "id": rid, "result": {}})
    return False


def messages() -> Iterator[dict[str, Any]]:
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def event(rid: int, event_id: str) -> dict[str, Any]:
    params = {
        "featureSet": "alerts",
        "eventId": event_id,
        "timestamp": "2026-01-23T10:30:00Z",
        "payload": {"content": [{"type": "text", "text": "something happened"}]},
    }
    return request(rid, "push/event", params)


def inference(rid: int, text: str, **preferences: Any) -> dict[str, Any]:
    params = {
        "featureSet": "fs.a",
        "stream": True,
        "messages": [{"role": "user", "content": text}],
        "preferences": preferences,
    }
    return request(rid, "inference/request", params)


def flood(count: int) -> Iterator[dict[str, Any]]:
    """The events, each made as it is sent: 3 MB apiece, they are not all held at once."""
    for rid in range(100, 100 + count):
        yield event(rid, f"{rid:08d}" + "x" * (EVENT_ID_BYTES - 8))
    yield from (event(90, "evt-a"), event(91, "evt-a"), event(92, "evt-b"))


def params(count: int) -> Iterator[dict[str, Any]]:
    bad: list[dict[str, Any]] = [{"maxTokens": 10**30}, {"temperature": -7}]
    for rid in range(100, 100 + count):
        yield inference(rid, "hostile-params", **bad[rid % 2])


def hog(count: int) -> None:
    report("sending")  # before: a host that stops reading may never take them all
    lines = [
        json.dumps(inference(rid, f"hostile-hog {rid}")) + "\n" for rid in range(100, 100 + count)
    ]
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
    incoming = messages()
    for message in incoming:
        if answer(message):
            break
    probed = os.path.exists(os.environ["HOSTILE_REPORT"])
    if probed:  # a session after the one that probed: say so, and only serve
        with open(os.environ["HOSTILE_REPORT"] + ".again", "w") as again:
            again.write("serving")
    go = os.environ.get("HOSTILE_GO")
    while go and not probed and not os.path.exists(go):
        time.sleep(0.02)
    ids: set[int] = set()
    if not probed and mode == "hog":
        hog(int(os.environ.get("HOSTILE_REQUESTS", "20")))
    elif not probed:
        if mode == "flood":
            count = int(os.environ.get("HOSTILE_FLOOD", "300"))
            ids, probe = {*range(100, 100 + count), 90, 91, 92}, flood(count)
        else:
            count = int(os.environ.get("HOSTILE_REQUESTS", "20"))
            ids, probe = set(range(100, 100 + count)), params(count)

        # From a thread, so that answers are read meanwhile.
        def send_all(messages: Iterator[dict[str, Any]]) -> None:
            for message in messages:
                write(message)

        threading.Thread(target=send_all, args=(probe,), daemon=True).start()
    answers: dict[int, Any] = {}
    for message in incoming:
        rid = message.get("id")
        if "method" in message:
            answer(message)
        elif rid in ids:
            answers[rid] = message.get("result", message.get("error"))
            if len(answers) == len(ids):
                report(json.dumps({"answers": answers}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
