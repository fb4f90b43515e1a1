"""A small MCPL server (stdio) that asks its host for a streamed summary of its memories.

It speaks JSON-RPC 2.0, one message per line, with the standard library only:
it answers `initialize` with its manifest (one feature set,
``memory.consolidation``, that uses ``inferenceRequest``), acknowledges the
host's `featureSets/update`, then sends one `inference/request` with
``stream: true`` and prints each `inference/chunk` and the final answer on
stderr (the host logs a stdio server's stderr). It exits 0 when the answer is a
result, 1 when it is an error.

    agentcore serve --settings examples/echo.toml
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
    "featureSets": {
        "memory.consolidation": {
            "description": "Summarize and consolidate memories using the host's model",
            "uses": ["inferenceRequest", "inferenceRequest.streaming"],
        }
    },
}


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


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {
                        "protocolVersion": "2024-11-05",
                        "capabilities": {"experimental": {"mcpl": MANIFEST}},
                        "serverInfo": {"name": "memory-server", "version": "0.1.0"},
                    },
                }
            )
        elif method == "featureSets/update":
            granted = message.get("params", {}).get("effectiveCapabilities", [])
            say(f"granted: {', '.join(granted) or 'nothing'}")
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"accepted": True}})
            say("asking the host for a streamed summary")
            send(summary_request())
        elif method == "inference/chunk":
            params = message["params"]
            say(f"chunk {params['index']}: {params['delta']!r}")
        elif method is not None and "id" in message:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": f"method not found: {method}"},
                }
            )
        elif message.get("id") == 1:
            if "result" in message:
                result = message["result"]
                say(f"summary ({result['finishReason']}, {result['model']}): {result['content']}")
                return 0
            say(f"the host answered with an error: {message.get('error')}")
            return 1
    say("the host closed the connection before answering")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
