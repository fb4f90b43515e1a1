"""The MCPL fuzz rig: generated frames, valid, malformed and hostile, through the real
stdio reader, JSON-RPC peer and MCPL admission checks, each request's answers counted.

What runs for real: `StdioTransport` (its newline framing and its batched writes) over
asyncio's own stream and pipe machinery, `JsonRpcPeer`, `ServerConnection` (handshake,
admission checks, cancellation, the context-hook window), `McplHost.handle` (push events
included), the kernel with the mcpl-router plugin, and a `ScriptedProvider`
(`agentcore.testing`) answering by each request's last message. The one stand-in is the
child process: this test is the MCPL server, so the transport's "process" is
`InProcessChild`, whose stdout is a `StreamReader` the test feeds, as asyncio's
subprocess protocol feeds a real child's, and whose stdin is a real `os.pipe` the test
reads. A real child would cost a spawn per example and leave where a read splits a frame
to the OS; the scripted provider, not the loopback HTTP server, keeps 100,000 frames to a
few minutes (the provider wires have their own tests; what is under test here is what
stands between the wire and the kernel).

The oracle (`Model`) walks the frames in wire order and says, from the rules alone, what
each must get; where the answer depends on timing (is a quick request with this id still
in flight?) it allows both and says so. The rules, and where they come from:

- JSON-RPC 2.0, section 5: a frame that is not JSON is answered -32700 and one that is
  not a request object -32600, both with id null when the id cannot be read; a response
  or a notification is never answered.
- MCP base protocol (2025-06-18), Messages: a request id is a string or an integer, never
  null; anything else is answered -32600, id null. The same revision removed JSON-RPC
  batching, so an array is one -32600, id null, and nothing in it runs. MCP's stdio
  transport: one message per line, no embedded newline. Our own limits (DESIGN.md): a
  line over `max_frame_bytes`, or not UTF-8, is -32700 and the connection reads on; a
  duplicate of an id in flight is -32600 with id null (a second answer under that id
  could not be told from the first).
- MCP base protocol, Cancellation: `notifications/cancelled` for a request in flight
  stops it and it gets no answer; one for an unknown, finished or other request is
  ignored (and that request still gets its one answer).
- MCPL SPEC §4.1: a request (it has an id) gets a response, a notification none; §6.6: a
  method never answered MUST be answered with an error; before the answer, §5.3-§5.4 (the
  grant: -32002), §6.5 (`featureSet` named, declared -32003, enabled -32001), §6.4 (its
  `uses` covers what the request exercises, -32001), §10.7 (an `inference/request` while
  the host's context hook is pending is refused -32600), §11.2 (params, -32602: a
  temperature is a finite number, message text is text, no lone surrogate escape).

Beyond the counts, each scenario checks that the connection is still up after its frames
(a probe ping is answered, every frame before it read), that no `inference/chunk` follows
its request's answer, that the host logged no error (bad input is answered, never a
traceback), and that every trace reached the JSONL trace file (SPEC §13.2, audit).

`fuzz()` runs N generated scenarios, `play()` given ones; `tests/mcpl/test_fuzz.py` runs
a few thousand frames in `make test`, `bench/fuzz.py` the full count. The parts: the
server played and the oracle (`oracle`), what Hypothesis generates (`scenarios`), running
and checking (`rig`). It needs Hypothesis (a development dependency): import it by name;
`agentcore.testing` does not. A failure prints the
frames (Hypothesis's falsifying example, and a blob that `@reproduce_failure` replays);
the seed is fixed, so a run repeats exactly.
"""

from agentcore.mcpl.protocol import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from agentcore.testing.fuzz.oracle import Model, frame
from agentcore.testing.fuzz.rig import CI_EXAMPLES, SEED, Figures, fuzz, play
from agentcore.testing.fuzz.scenarios import (
    TEMPERATURE_1E400,
    TEMPERATURE_HUGE_INT,
    Raw,
    Scenario,
)

__all__ = [
    "CI_EXAMPLES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "SEED",
    "TEMPERATURE_1E400",
    "TEMPERATURE_HUGE_INT",
    "Figures",
    "Model",
    "Raw",
    "Scenario",
    "frame",
    "fuzz",
    "play",
]
