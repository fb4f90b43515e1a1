"""An MCPL server over stdio that behaves as servers built on mcpl-core-ts do (stdlib only).

anima-research's TypeScript core library (mcpl-core-ts) is what heartbeat-mcpl, discord-mcpl
and most MCPL servers that exist are built on. On each point where that matters to a host,
this server does what they do (heartbeat-mcpl 0.1.3 is the model):

- it announces ``version: "0.4"`` and ``protocolVersion: "2024-11-05"``, with ``tools: {}``;
- it declares ``featureSets`` as a JSON array of declarations each carrying its ``name``
  (mcpl-core-ts's `FeatureSetDeclaration[]`), with ``rollback`` and ``hostState``;
- it answers every request it does not know with -32601 "Method not found: METHOD" (so
  0.5's ``featureSets/update`` Request) and ignores notifications (0.4's update);
- it does not wait for the host's policy: heartbeat-mcpl fires a due reminder as soon as
  it has read ``notifications/initialized`` (``start_on``, the default), before any
  ``featureSets/update`` can have come;
- each of its requests has a client-side timeout (mcpl-core-ts: 30 s by default): when it
  passes, the request is given up **without** `notifications/cancelled`, and a response
  that comes later is dropped (here: recorded as late).

Configured by the JSON in $MCPL_TS_CONFIG:

- ``log``: a file that gets one JSON line per event: ``received`` (every frame from the
  host), ``answer`` / ``timeout`` / ``late`` (per action, by its index), ``done``
- ``version``: what it announces (default "0.4")
- ``feature_sets``: the declarations (default: one, ``heartbeat``, uses ``["tools"]``)
- ``actions``: requests ``[method, params]`` sent one after the other once ``start_on``
  has come, each awaited (answer or timeout) before the next
- ``start_on``: the method from the host that starts them: ``notifications/initialized``
  (default) or ``featureSets/update`` (either form)
- ``timeout_s``: the client-side request timeout (default 30)
"""

from __future__ import annotations

import json
import os
import selectors
import sys
import time
from typing import Any

CONFIG: dict[str, Any] = json.loads(os.environ.get("MCPL_TS_CONFIG", "{}"))
FEATURE_SETS = CONFIG.get("feature_sets") or [
    {
        "name": "heartbeat",
        "description": "Periodic self-wake heartbeats",
        "uses": ["tools"],
        "rollback": False,
        "hostState": False,
    }
]
ACTIONS: list[list[Any]] = CONFIG.get("actions", [])
TIMEOUT_S = float(CONFIG.get("timeout_s", 30.0))
START_ON = CONFIG.get("start_on", "notifications/initialized")


def log(event: str, **fields: Any) -> None:
    path = CONFIG.get("log")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **fields}) + "\n")


def write(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


class Client:
    """The server side of the connection: mcpl-core-ts's `McplConnection` semantics."""

    def __init__(self) -> None:
        self.next_id = 1
        self.pending: dict[int, tuple[int, float]] = {}  # id -> (action index, give-up time)
        self.given_up: dict[int, int] = {}  # id -> action index
        self.action = 0
        self.started = False

    def start_next(self) -> None:
        if self.action >= len(ACTIONS):
            log("done")
            return
        method, params = ACTIONS[self.action]
        rid = self.next_id
        self.next_id += 1
        self.pending[rid] = (self.action, time.monotonic() + TIMEOUT_S)
        write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def on_response(self, message: dict[str, Any]) -> None:
        rid = message.get("id")
        if isinstance(rid, int) and rid in self.pending:
            index, _ = self.pending.pop(rid)
            log("answer", action=index, response=message)
            self.action += 1
            self.start_next()
        elif isinstance(rid, int) and rid in self.given_up:
            log("late", action=self.given_up.pop(rid), response=message)

    def expire(self) -> None:
        now = time.monotonic()
        for rid, (index, give_up) in list(self.pending.items()):
            if now >= give_up:  # rejected locally; no notifications/cancelled is sent
                del self.pending[rid]
                self.given_up[rid] = index
                log("timeout", action=index)
                self.action += 1
                self.start_next()

    def next_wake(self) -> float | None:
        if not self.pending:
            return None
        return max(0.0, min(t for _, t in self.pending.values()) - time.monotonic())


def capabilities(mcpl: bool) -> dict[str, Any]:
    caps: dict[str, Any] = {"tools": {}}
    if mcpl:
        caps["experimental"] = {
            "mcpl": {
                "version": CONFIG.get("version", "0.4"),
                "pushEvents": True,
                "inferenceRequest": {"streaming": True},
                "modelInfo": True,
                "channels": False,
                "rollback": False,
                "featureSets": FEATURE_SETS,
            }
        }
    return caps


def handle(client: Client, message: dict[str, Any]) -> None:
    log("received", message=message)
    method = message.get("method")
    if method is None:
        client.on_response(message)
        return
    if method == START_ON and not client.started:
        # Answered first if it is a request (-32601, as any unknown method); then it starts.
        if "id" in message:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            write({"jsonrpc": "2.0", "id": message["id"], "error": error})
        client.started = True
        client.start_next()
        return
    if "id" not in message:
        return  # a notification: nothing to answer
    rid = message["id"]
    if method == "initialize":
        params = message.get("params") or {}
        mcpl = (params.get("capabilities") or {}).get("experimental", {}).get("mcpl") is not None
        result = {
            "protocolVersion": "2024-11-05",
            "capabilities": capabilities(mcpl),
            "serverInfo": {"name": "ts-core-test-server", "version": "0.1.0"},
        }
        write({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/list":
        write({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}})
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        write({"jsonrpc": "2.0", "id": rid, "error": error})


def main() -> None:
    client = Client()
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.buffer.fileno(), selectors.EVENT_READ)
    buffered = b""
    while True:
        if selector.select(client.next_wake()):
            data = os.read(sys.stdin.buffer.fileno(), 65536)
            if not data:
                return  # stdin closed: the host is done with us
            buffered += data
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if line.strip():
                    handle(client, json.loads(line))
        client.expire()


if __name__ == "__main__":
    main()
