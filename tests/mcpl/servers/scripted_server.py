"""A small MCPL server over stdio for the connection tests (stdlib only).

Configured by the JSON in $MCPL_TEST_CONFIG:

- ``manifest``: its ``experimental.mcpl`` object, or null for a plain MCP server
- ``tools``: also advertise MCP's ``tools`` capability
- ``receipt``: the ``featureSets/update`` result (default: accepted, full)
- ``early``: requests ``[method, params]`` sent on receiving ``featureSets/update``;
  their answers are awaited before the receipt is sent
- ``after_receipt``: requests ``[method, params]`` written in the same write as the receipt
- ``hook_calls``: requests sent on receiving ``context/beforeInference``, awaited
  before the hook is answered
- ``after_hook``: requests written in the same write as the hook's answer
- ``log``: a file that gets every line this server reads, as it reads it
- ``ignore_term``: ignore SIGTERM (the host must SIGKILL it)

The host drives it with its own requests:

- ``test/observed``: what it has seen (initialize and featureSets/update
  params, answers to its requests by id)
- ``test/call {method, params}``: send that request to the host; the answer
  to ``test/call`` is the host's whole response message
- ``test/raw {frames, await_count}``: write each frame (a string, or
  ``{"repeat", "count", "prefix", "suffix"}`` for a big one) as a line, then
  answer with the first ``await_count`` responses that arrive after them
- ``test/wait {ids}``: answer once responses for all these ids have arrived
- ``test/exit``: exit at once, unanswered (a lost session)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

CONFIG: dict[str, Any] = json.loads(os.environ.get("MCPL_TEST_CONFIG", "{}"))
LOG = CONFIG.get("log")

state: dict[str, Any] = {
    "initialize": None,
    "initialized": False,
    "featureSetsUpdate": None,
    "answers": {},  # str(id) -> response
}
responses: list[dict[str, Any]] = []
deferred: list[dict[str, Any]] = []  # waiting test requests
next_id = [1000]
out = sys.stdout.buffer


def write(*messages: Any) -> None:
    """Write messages in one write: frames that must arrive back to back."""
    data = b""
    for message in messages:
        text = message if isinstance(message, str) else json.dumps(message)
        data += text.encode() + b"\n"
    out.write(data)
    out.flush()


def new_request(method: str, params: Any) -> dict[str, Any]:
    next_id[0] += 1
    return {"jsonrpc": "2.0", "id": next_id[0], "method": method, "params": params}


def result(rid: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def capabilities() -> dict[str, Any]:
    caps: dict[str, Any] = {}
    if CONFIG.get("tools"):
        caps["tools"] = {}
    if CONFIG.get("manifest") is not None:
        caps["experimental"] = {"mcpl": CONFIG["manifest"]}
    return caps


def frame_text(frame: Any) -> str:
    if isinstance(frame, str):
        return frame
    if "repeat" in frame:
        return str(
            frame.get("prefix", "") + frame["repeat"] * frame["count"] + frame.get("suffix", "")
        )
    return json.dumps(frame)


def settle() -> None:
    """Answer every deferred request whose condition now holds."""
    for item in list(deferred):
        kind = item["kind"]
        if kind == "wait_ids":
            if all(str(i) in state["answers"] for i in item["ids"]):
                deferred.remove(item)
                answers = [state["answers"][str(i)] for i in item["ids"]]
                item["then"](answers)
        elif kind == "count":
            got = responses[item["start"] :]
            if len(got) >= item["count"]:
                deferred.remove(item)
                item["then"](got[: item["count"]])


def after_answers(ids: list[Any], then: Any) -> None:
    deferred.append({"kind": "wait_ids", "ids": ids, "then": then})
    settle()


def handle_request(message: dict[str, Any]) -> None:
    rid = message["id"]
    method = message["method"]
    params = message.get("params") or {}
    if method == "initialize":
        state["initialize"] = params
        write(
            result(
                rid,
                {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": capabilities(),
                    "serverInfo": {"name": "scripted", "version": "1"},
                },
            )
        )
    elif method == "featureSets/update":
        state["featureSetsUpdate"] = params
        receipt = CONFIG.get(
            "receipt", {"accepted": True, "mode": "full", "unavailableFeatures": [], "notes": []}
        )
        early = [new_request(m, p) for m, p in CONFIG.get("early", [])]
        after = [new_request(m, p) for m, p in CONFIG.get("after_receipt", [])]

        def send_receipt(_: Any) -> None:
            write(result(rid, receipt), *after)

        if early:
            write(*early)
        after_answers([r["id"] for r in early], send_receipt)
    elif method == "context/beforeInference":
        calls = [new_request(m, p) for m, p in CONFIG.get("hook_calls", [])]
        after = [new_request(m, p) for m, p in CONFIG.get("after_hook", [])]
        state["hookCallIds"] = [r["id"] for r in calls]
        state["afterHookIds"] = [r["id"] for r in after]

        def answer_hook(_: Any) -> None:
            write(result(rid, {"featureSet": "memory.retrieval", "contextInjections": []}), *after)

        if calls:
            write(*calls)
        after_answers([r["id"] for r in calls], answer_hook)
    elif method == "test/observed":
        write(result(rid, state))
    elif method == "test/call":
        request = new_request(params["method"], params.get("params"))
        write(request)
        after_answers([request["id"]], lambda answers: write(result(rid, answers[0])))
    elif method == "test/raw":
        start = len(responses)
        data = b"".join(frame_text(f).encode() + b"\n" for f in params["frames"])
        out.write(data)
        out.flush()
        deferred.append(
            {
                "kind": "count",
                "start": start,
                "count": params.get("await_count", 0),
                "then": lambda got: write(result(rid, got)),
            }
        )
        settle()
    elif method == "test/exit":
        sys.exit(0)
    elif method == "test/wait":
        after_answers(params["ids"], lambda answers: write(result(rid, answers)))
    else:
        write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})


def main() -> None:
    if CONFIG.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        # Exit on stdin EOF rather than on SIGTERM, so that everything the
        # host wrote before closing (the shutdown answers) is read and logged.
        signal.signal(signal.SIGTERM, lambda *_: None)
    if CONFIG.get("announce"):
        write({"jsonrpc": "2.0", "method": "test/ready"})
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n")
        if LOG:
            with open(LOG, "ab") as log:
                log.write(line + b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if "method" in message and "id" in message:
            handle_request(message)
        elif "method" in message:
            if message["method"] == "notifications/initialized":
                state["initialized"] = True
        else:
            responses.append(message)
            state["answers"][str(message.get("id"))] = message
            settle()
    if CONFIG.get("ignore_term"):
        # Keep running after EOF, as a stuck server would.
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
