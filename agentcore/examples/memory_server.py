"""A small MCPL server (stdio) with a memory, in both directions of MCPL.

It speaks JSON-RPC 2.0, one message per line, with the standard library only,
and prints what it sees on stderr (the host logs a stdio server's stderr).

1. The server asks the host (SPEC §11): after the host's `featureSets/update`
   it sends one `inference/request` with ``stream: true`` for a summary of its
   memories (feature set ``memory.consolidation``), and prints each
   `inference/chunk` and the answer. Without a grant for the host's turns it then
   exits: 0 when the answer is a result, 1 when it is an error.
2. The host's own turns (SPEC §10), when granted: to `context/beforeInference` it
   answers with its summary as a ``beforeUser`` injection (``memory.retrieval``),
   and it watches the turn's `inference/lifecycle` (``memory.extraction``). It
   never sees the user's text unless granted ``…observe``. It exits 0 once a turn
   it watched has ended.

From the repository's root, with the echo provider (no key, no network):

    agentcore serve --settings examples/echo.toml
    agentcore infer --settings examples/memory.toml --model echo:echo-1 --conversation c1 "Hi"

`examples/echo.toml` grants only the summary request (1.); `examples/memory.toml` grants
the host's turns too (2.), so `--conversation` runs a turn this server takes part in.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MEMORIES = [
    "Alice prefers morning meetings.",
    "The mannequin project scales to ten units in March.",
    "Bob owns the DMX lighting rig.",
]

MANIFEST = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "contextHooks": {"beforeInference": {"observe": True, "inject": {"beforeUser": True}}},
    "inferenceLifecycle": True,
    "featureSets": {
        "memory.consolidation": {
            "description": "Summarize and consolidate memories using the host's model",
            "uses": ["inferenceRequest", "inferenceRequest.streaming"],
        },
        "memory.retrieval": {
            "description": "Remind the host's model of what it should remember",
            "uses": ["contextHooks.beforeInference.inject.beforeUser"],
        },
        "memory.extraction": {
            "description": "Learn when the host's turns start and end",
            "uses": ["inferenceLifecycle"],
        },
    },
}
TERMINAL_PHASES = ("completed", "failed", "aborted")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def summary_request() -> dict[str, Any]:
    prompt = os.environ.get("MEMORY_SERVER_PROMPT") or (
        "Summarize these memories in one sentence: " + " ".join(MEMORIES)
    )
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "inference/request",
        "params": {
            "featureSet": "memory.consolidation",
            "conversationId": "conv_demo",
            "stream": os.environ.get("MEMORY_SERVER_STREAM", "1") != "0",
            "messages": [{"role": "user", "content": prompt}],
            "preferences": {"maxTokens": 200},
        },
    }


def remembered(summary: str | None) -> dict[str, Any]:
    """The `context/beforeInference` result: what this server remembers, before the user's text."""
    fact = summary or " ".join(MEMORIES)
    return {
        "featureSet": "memory.retrieval",
        "contextInjections": [
            {
                "namespace": "memory",
                "position": "beforeUser",
                "content": [{"type": "text", "text": f"<memories>{fact}</memories>"}],
            }
        ],
    }


def initialized(request_id: object) -> dict[str, Any]:
    """The answer to ``initialize``: the MCPL manifest under ``experimental``."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"experimental": {"mcpl": MANIFEST}},
            "serverInfo": {"name": "memory-server", "version": "0.1.0"},
        },
    }


def not_found(request_id: object, method: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32601, "message": f"method not found: {method}"},
    }


def say_hook(params: dict[str, Any]) -> None:
    """What a ``context/beforeInference`` call showed this server."""
    seen = params.get("userMessage")
    say(
        f"hook: turn {params['turnIndex']} of {params['conversationId']} "
        f"on {params['model'].get('id')}; the user's text: "
        + (repr(seen) if seen is not None else "not shown (observe not granted)")
    )


def main() -> int:
    granted: list[str] = []
    summary: str | None = None
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        if method == "initialize":
            send(initialized(message["id"]))
        elif method == "featureSets/update":
            granted = message.get("params", {}).get("effectiveCapabilities", [])
            say(f"granted: {', '.join(granted) or 'nothing'}")
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"accepted": True}})
            say("asking the host for a streamed summary")
            send(summary_request())
        elif method == "inference/chunk":
            params = message["params"]
            say(f"chunk {params['index']}: {params['delta']!r}")
        elif method == "context/beforeInference":
            say_hook(message["params"])
            send({"jsonrpc": "2.0", "id": message["id"], "result": remembered(summary)})
        elif method == "inference/lifecycle":
            params = message["params"]
            usage = params.get("usage")
            say(f"lifecycle: {params['phase']}" + (f", usage {usage}" if usage else ""))
            if params["phase"] in TERMINAL_PHASES:
                return 0
        elif method is not None and "id" in message:
            send(not_found(message["id"], method))
        elif message.get("id") == 1:
            if "result" in message:
                result = message["result"]
                summary = result["content"]
                say(f"summary ({result['finishReason']}, {result['model']}): {summary}")
                if "inferenceLifecycle" not in granted:
                    return 0
                say("staying for the host's next turn")
                continue
            say(f"the host answered with an error: {message.get('error')}")
            return 1
    if summary is not None:
        return 0  # answered; the host closed before a turn of its own
    say("the host closed the connection before answering")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
