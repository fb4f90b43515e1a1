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

`fuzz()` runs N generated scenarios, `play()` given ones; `test_fuzz.py` runs a few
thousand frames in `make test`, `bench/fuzz.py` the full count. A failure prints the
frames (Hypothesis's falsifying example, and a blob that `@reproduce_failure` replays);
the seed is fixed, so a run repeats exactly.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcore_mcpl_router import McplRouter
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from loguru import logger

from agentcore.inference import InferenceError, Request, Response, StopInfo, TextBlock, Usage
from agentcore.kernel import Kernel
from agentcore.mcpl.connection import ServerConnection
from agentcore.mcpl.host import McplHost
from agentcore.mcpl.protocol import (
    CAPABILITY_DENIED,
    FEATURE_SET_NOT_ENABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNKNOWN_FEATURE_SET,
)
from agentcore.mcpl.transports import StdioTransport
from agentcore.testing import STALL, Partial, ScriptedProvider, scripted_kind
from agentcore.traces import JsonlTraceSink

MAX_FRAME_BYTES = 16 * 1024  # small, so oversized frames cost little to make
WAIT_S = 30.0  # a bound on waiting for answers, never a measured time

# -- the server this test plays ------------------------------------------------------

MANIFEST: dict[str, Any] = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "pushEvents": True,
    "contextHooks": {"beforeInference": True},
    "featureSets": {
        "fuzz.whole": {"uses": ["inferenceRequest"]},
        "fuzz.streamed": {"uses": ["inferenceRequest", "inferenceRequest.streaming"]},
        "fuzz.push": {"uses": ["pushEvents"]},
        "fuzz.off": {"uses": ["inferenceRequest"]},  # disabled by the host's settings
        "fuzz.ungranted": {"uses": ["channels.publish"]},  # needs what is not granted
    },
}
GRANT = [
    "inferenceRequest",
    "inferenceRequest.streaming",
    "modelInfo",
    "pushEvents",
    "contextHooks.beforeInference.observe",
]
DISABLED = ("fuzz.off",)
# What each feature set's `uses` covers, as the oracle reads §6.4 (None: not enabled).
SET_USES: dict[str, frozenset[str] | None] = {
    "fuzz.whole": frozenset({"inferenceRequest"}),
    "fuzz.streamed": frozenset({"inferenceRequest", "inferenceRequest.streaming"}),
    "fuzz.push": frozenset({"pushEvents"}),
    "fuzz.off": None,
    "fuzz.ungranted": None,
}
GRANTED_METHODS = {"inference/request", "model/info", "push/event"}
UNGRANTED_METHODS = {
    "channels/register",
    "channels/changed",
    "channels/list",
    "channels/incoming",
    "channels/acknowledge",
    "channels/typing",
}

# The provider answers by the request's last message (`answer_for`); "stall" never ends.
FAILING_TEXTS = ("fail", "partial", "refuse")
QUICK_TEXTS = ("hello", "hello there", *FAILING_TEXTS)


def answer_for(request: Request) -> Any:
    text = request.messages[-1].text if request.messages else ""
    if text == "stall":
        return STALL
    if text == "fail":
        return InferenceError("server", "scripted failure", status=500)
    if text == "partial":
        return Partial(InferenceError("network", "scripted cut"), text="par")
    if text == "refuse":
        return Response([TextBlock("no")], StopInfo("refusal", "refusal"), Usage(1, 1), "m1", "m1")
    return None  # the default: "hello", end_turn


SETTINGS_TOML = """\
[providers.fake]
kind = "scripted"

[providers.fake.models.m1]  # model/info answers every §12.2 field or an error
vendor = "acme"
context_window = 8192
capabilities = []

[mcpl.routing]
default = "fake:m1"

[traces]
jsonl = "{traces}"
"""


class InProcessChild:
    """What `StdioTransport` needs of a child process, with this test as the child.

    `stdout` is a `StreamReader` the test feeds (`feed`), as asyncio's subprocess protocol
    feeds a real child's; `stdin` is a `StreamWriter` on a real pipe whose far end the
    test reads (`host_frames`). The child "exits" when the transport has closed its stdin.
    """

    pid = -1
    stderr = None

    def __init__(self) -> None:
        self.stdout = asyncio.StreamReader()
        self.stdin: asyncio.StreamWriter
        self.host_frames: asyncio.StreamReader
        self.returncode: int | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        self.host_frames = asyncio.StreamReader(limit=4 * MAX_FRAME_BYTES)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self.host_frames), os.fdopen(read_fd, "rb", 0)
        )
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
            os.fdopen(write_fd, "wb", 0),
        )
        self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)

    def feed(self, data: bytes) -> None:
        self.stdout.feed_data(data)

    async def wait(self) -> int:
        self.returncode = 0
        return 0

    def send_signal(self, sig: int) -> None:  # never reached: wait() returns at once
        raise AssertionError("the in-process child was signalled")


# -- frames ------------------------------------------------------------------------


def frame(message: Any, *, ascii_only: bool = True) -> bytes:
    return json.dumps(message, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _key(request_id: Any) -> str:
    """One name per JSON-RPC id: 1 and "1" are two ids, 1 and 1.0 are refused."""
    return json.dumps(request_id)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class Reject(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise Reject(name)


def parse(line: bytes) -> tuple[str, Any]:
    """What a line is, as MCP's stdio transport and JSON (RFC 8259) say: ("blank", None),
    ("parse_error", None), or ("json", value)."""
    if len(line) > MAX_FRAME_BYTES:
        return "parse_error", None
    line = line.rstrip(b"\r")
    if not line.strip():
        return "blank", None
    try:
        return "json", json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "parse_error", None


@dataclass
class IdExpectation:
    """How many answers (results, errors, and -32600 refusals naming it as a duplicate)
    one id gets, at least and at most, and which outcomes they may carry."""

    low: int = 0
    high: int = 0
    outcomes: set[int | str] = field(default_factory=set)
    chunked: bool = False  # a streamed request: its chunks come before its answer


class Model:
    """The oracle: walks the frames in wire order and records what each must get.

    `stalled` are the `inference/request`s certainly in flight (their provider never
    answers); `quick` the ids of requests that may or may not be in flight, depending on
    timing: a refusal that hinges on them allows both outcomes.
    """

    def __init__(self, hook_id: int | None) -> None:
        self.ids: dict[str, IdExpectation] = {}
        self.names: dict[str, str] = {}  # repr(id) -> key, to read duplicate refusals
        self.null_low: Counter[int] = Counter()
        self.null_high: Counter[int] = Counter()
        self.stalled: dict[str, Any] = {}  # key -> id
        self.cancelled: dict[str, Any] = {}  # stall ids cancelled, certainly not in flight
        self.quick: set[str] = set()
        self.quick_inference: set[str] = set()
        self.hook_id = hook_id
        self.fresh = 0
        self.lines = 0

    # -- fresh ids, for frames that must not meet another's ------------------------

    def fresh_id(self, kind: str) -> Any:
        self.fresh += 1
        if kind == "int":
            return 10_000_000 + self.fresh
        return f"{kind}-{self.fresh}"

    def _expect(self, request_id: Any, low: int, high: int, outcomes: Iterable[int | str]) -> None:
        key = _key(request_id)
        self.names[repr(request_id)] = key
        slot = self.ids.setdefault(key, IdExpectation())
        slot.low += low
        slot.high += high
        slot.outcomes.update(outcomes)

    def _null(self, code: int, low: int = 1, high: int = 1) -> None:
        self.null_low[code] += low
        self.null_high[code] += high

    # -- walking the wire -----------------------------------------------------------

    def line(self, line: bytes) -> None:
        self.lines += 1
        kind, message = parse(line)
        if kind == "blank":
            return
        if kind == "parse_error":
            self._null(PARSE_ERROR)
            return
        if not isinstance(message, dict):  # an array (a batch) or a bare value
            self._null(INVALID_REQUEST)
            return
        self.message(message)

    def message(self, message: dict[str, Any]) -> None:
        raw_id = message.get("id")
        if "method" not in message and ("result" in message or "error" in message):
            if (
                self.hook_id is not None
                and _valid_id(raw_id)
                and _key(raw_id) == _key(self.hook_id)
            ):
                self.hook_id = None  # the hook's answer: the §10.7 window closes here
            return
        method = message.get("method")
        params = message.get("params")
        malformed = (
            message.get("jsonrpc") != "2.0"
            or not isinstance(method, str)
            or (params is not None and not isinstance(params, dict | list))
        )
        if malformed or not isinstance(method, str):
            self._refusal(raw_id if _valid_id(raw_id) else None)
            return
        if "id" not in message:
            if method == "notifications/cancelled":
                self._cancel(params)
            return
        if not _valid_id(raw_id):
            self._null(INVALID_REQUEST)
            return
        key = _key(raw_id)
        if key in self.stalled:  # a duplicate of a request certainly in flight
            self._expect(raw_id, 1, 1, [])
            return
        outcome = self.predict(method, params)
        if outcome == "stall" and key not in self.quick:
            self.stalled[key] = raw_id
            self.cancelled.pop(key, None)
            # Answered when the connection closes, -32603 (shutting down, or closed).
            self._expect(raw_id, 1, 1, [INTERNAL_ERROR])
        else:
            if outcome == "stall":
                outcome = INTERNAL_ERROR  # duplicate or not, never answered but at close
            self._expect(raw_id, 1, 1, [outcome])
            self.quick.add(key)
            self.cancelled.pop(key, None)
            if method == "inference/request":
                self.quick_inference.add(key)
        if isinstance(params, dict) and params.get("stream") is True:
            self.ids[key].chunked = True

    def _refusal(self, raw_id: Any) -> None:
        """A malformed request: -32600 under its id if it can be read and is not in flight."""
        if raw_id is None:
            self._null(INVALID_REQUEST)
            return
        key = _key(raw_id)
        if key in self.stalled:
            self._null(INVALID_REQUEST)
        elif key in self.quick:
            self._expect(raw_id, 0, 1, [INVALID_REQUEST])
            self._null(INVALID_REQUEST, 0, 1)
        else:
            self._expect(raw_id, 1, 1, [INVALID_REQUEST])

    def _cancel(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not _valid_id(request_id):
            return
        key = _key(request_id)
        if key in self.stalled:
            del self.stalled[key]
            self.cancelled[key] = request_id
            self.ids[key].low -= 1
            self.ids[key].high -= 1
        elif key in self.quick_inference:
            # It may still be in flight, and then it is not answered.
            self.ids[key].low = max(0, self.ids[key].low - 1)

    # -- what a well-formed request is answered ---------------------------------------

    def predict(self, method: str, params: Any) -> int | str:
        """The outcome: "result", "stall" or an error code."""
        if method == "ping":
            return "result"
        if method in UNGRANTED_METHODS:
            return CAPABILITY_DENIED
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return INVALID_PARAMS
        if method == "inference/request":
            return self._predict_inference(params)
        if method == "push/event":
            return _predict_push(params)
        if method == "model/info":
            return "result"
        return METHOD_NOT_FOUND

    def _predict_inference(self, params: dict[str, Any]) -> int | str:
        stream = params.get("stream", False)
        if not isinstance(stream, bool):
            return INVALID_PARAMS
        exercised = (
            {"inferenceRequest", "inferenceRequest.streaming"} if stream else {"inferenceRequest"}
        )
        problem = _feature_set_problem(params.get("featureSet"), exercised)
        if problem is not None:
            return problem
        if self.hook_id is not None:
            return INVALID_REQUEST  # §10.7 (RFC-006 vector 26's code)
        conversation = params.get("conversationId")
        if conversation is not None and not isinstance(conversation, str):
            return INVALID_PARAMS
        text = _last_text(params.get("messages"))
        if text is None or _preferences_problem(params.get("preferences")):
            return INVALID_PARAMS
        if text == "stall":
            return "stall"
        return INTERNAL_ERROR if text in FAILING_TEXTS else "result"


def _feature_set_problem(name: Any, exercised: set[str]) -> int | None:
    if not isinstance(name, str) or not name:
        return INVALID_PARAMS
    if name not in SET_USES:
        return UNKNOWN_FEATURE_SET
    uses = SET_USES[name]
    if uses is None or not exercised <= uses:
        return FEATURE_SET_NOT_ENABLED
    return None


def _predict_push(params: dict[str, Any]) -> int | str:
    problem = _feature_set_problem(params.get("featureSet"), {"pushEvents"})
    if problem is not None:
        return problem
    payload = params.get("payload")
    tags = params.get("tags", [])
    well_formed = (
        isinstance(params.get("eventId"), str)
        and params["eventId"] != ""
        and isinstance(params.get("timestamp"), str)
        and params["timestamp"] != ""
        and isinstance(payload, dict)
        and isinstance(payload.get("content"), list)
        and (params.get("origin") is None or isinstance(params.get("origin"), dict))
        and isinstance(tags, list)
        and all(isinstance(t, str) for t in tags)
    )
    return "result" if well_formed else INVALID_PARAMS  # §9.3: no plugin decides: declined


def _last_text(messages: Any) -> str | None:
    """The text of the last user or assistant message (§11.2), None when malformed."""
    if not isinstance(messages, list) or not messages:
        return None
    last = None
    for item in messages:
        if not isinstance(item, dict):
            return None
        text = _content_text(item.get("content"))
        if text is None or item.get("role") not in ("user", "assistant", "system"):
            return None
        if item["role"] != "system":
            last = text
    return last


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return None if _has_lone_surrogate(content) else content
    blocks = [content] if isinstance(content, dict) else content
    if not isinstance(blocks, list):
        return None
    parts = []
    for block in blocks:
        if not (isinstance(block, dict) and block.get("type") == "text"):
            return None
        if not isinstance(block.get("text"), str):
            return None
        parts.append(block["text"])
    text = "".join(parts)
    return None if _has_lone_surrogate(text) else text


def _has_lone_surrogate(text: str) -> bool:
    """A "\\ud800" escape is valid JSON, but not text: no provider body carries it."""
    return any("\ud800" <= c <= "\udfff" for c in text)


def _preferences_problem(prefs: Any) -> bool:
    prefs = prefs or {}
    if not isinstance(prefs, dict):
        return True
    max_tokens = prefs.get("maxTokens", 1024)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return True
    temperature = prefs.get("temperature")
    if temperature is None:
        return False
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        return True
    try:
        return not math.isfinite(temperature)  # 1e400 reads as inf; no provider takes it
    except OverflowError:  # 10**400: no float holds it
        return True


# -- what Hypothesis generates -----------------------------------------------------

# Ids of quick requests: a small pool, so duplicates are common; 1 and "1" are two ids.
POOL_IDS: list[Any] = [0, 1, 2, -1, 2**64, 10**40, "a", "b", "", "1", "\ud800", "n\x00l", "é"]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
junk = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=4,
)
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": st.sampled_from(QUICK_TEXTS)})
content = st.one_of(
    st.sampled_from(QUICK_TEXTS),
    st.sampled_from(["hello \ud800", "\udfff"]),
    text_block,
    st.lists(text_block, min_size=1, max_size=2),
    junk,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "assistant", "system", "tool"]), "content": content}
)
messages = st.one_of(st.lists(message, min_size=1, max_size=3), junk)
preferences = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "maxTokens": st.one_of(st.integers(-2, 2**70), junk),
            "temperature": st.one_of(st.floats(allow_nan=False, allow_infinity=False), junk),
        },
    ),
    junk,
)
feature_set = st.one_of(st.sampled_from(sorted(SET_USES)), st.just("fuzz.nope"), junk)
inference_params = st.fixed_dictionaries(
    {"featureSet": feature_set, "messages": messages},
    optional={
        "stream": st.one_of(st.booleans(), junk),
        "conversationId": st.one_of(st.text(max_size=4), junk),
        "preferences": preferences,
    },
)
# Requests as a well-behaved server sends them, so that a good share reach the provider
# (streamed ones through their chunks), the provider answering by the last message.
good_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.sampled_from(QUICK_TEXTS)}
)
good_inference_params = st.one_of(
    st.fixed_dictionaries(
        {
            "featureSet": st.just("fuzz.whole"),
            "messages": st.lists(good_message, min_size=1, max_size=2),
        },
        optional={"stream": st.just(False)},
    ),
    st.fixed_dictionaries(
        {
            "featureSet": st.just("fuzz.streamed"),
            "stream": st.booleans(),
            "messages": st.lists(good_message, min_size=1, max_size=2),
        },
        optional={
            "conversationId": st.text(max_size=4),
            "preferences": st.fixed_dictionaries(
                {"maxTokens": st.integers(1, 4096), "temperature": st.floats(0, 2)}
            ),
        },
    ),
)
push_params = st.fixed_dictionaries(
    {"featureSet": feature_set},
    optional={
        "eventId": st.one_of(st.sampled_from(["e1", "e2", ""]), junk),
        "timestamp": st.one_of(st.just("2026-12-01T18:00:00Z"), junk),
        "payload": st.one_of(st.just({"content": [{"type": "text", "text": "hi"}]}), junk),
        "origin": junk,
        "tags": st.one_of(st.lists(st.text(max_size=3), max_size=2), junk),
    },
)
OTHER_METHODS = [
    "ping",
    "model/info",
    "initialize",
    "featureSets/update",
    "context/beforeInference",
    "inference/chunk",
    "notifications/cancelled",
    "mcpl/manifest",
    "tools/call",
    *sorted(UNGRANTED_METHODS),
]


@dataclass(frozen=True)
class Call:
    """A request from the pool of quick ids (or a notification, `request_id` None)."""

    method: str
    request_id: Any
    params: Any
    has_id: bool = True

    def render(self, model: Model) -> list[bytes]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": self.method}
        if self.has_id:
            message["id"] = self.request_id
        if self.params is not None:
            message["params"] = self.params
        return [frame(message, ascii_only=hash(self.method) % 2 == 0)]


@dataclass(frozen=True)
class Stall:
    """An `inference/request` the provider never answers: `fresh` id, a `dup` of one in
    flight, or `again` the id of one the server cancelled."""

    mode: str
    pick: int
    stream: bool

    def render(self, model: Model) -> list[bytes]:
        request_id: Any
        if self.mode == "dup" and model.stalled:
            request_id = _pick(model.stalled, self.pick)
        elif self.mode == "again" and model.cancelled:
            request_id = _pick(model.cancelled, self.pick)
        else:
            request_id = model.fresh_id("int" if self.pick % 2 else "s")
        params = {
            "featureSet": "fuzz.streamed" if self.stream else "fuzz.whole",
            "stream": self.stream,
            "messages": [{"role": "user", "content": "stall"}],
        }
        return [
            frame(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "inference/request",
                    "params": params,
                }
            )
        ]


@dataclass(frozen=True)
class Cancel:
    """`notifications/cancelled`: for a request in flight, a near miss of one (its id as
    another type), an unknown id, or malformed params; `as_request` sends it with an id."""

    mode: str
    pick: int
    reason: Any
    as_request: bool = False

    def render(self, model: Model) -> list[bytes]:
        target: Any = model.fresh_id("c")
        if model.stalled and self.mode in ("stalled", "near_miss"):
            target = _pick(model.stalled, self.pick)
            if self.mode == "near_miss":
                target = _near_miss(target, self.pick)
        params: Any = {"requestId": target, "reason": self.reason}
        if self.mode == "malformed":
            params = [None, [], {}, {"requestId": None}, {"requestId": [target]}, "x"][
                self.pick % 6
            ]
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": params,
        }
        if self.as_request:
            message["id"] = model.fresh_id("cr")
        return [frame(message)]


@dataclass(frozen=True)
class Reply:
    """A response: to the host's pending context hook (closing the §10.7 window), or to a
    request the host never sent (or already had answered: 1 and 2 are the handshake's)."""

    to_hook: bool
    request_id: Any
    body: dict[str, Any]

    def render(self, model: Model) -> list[bytes]:
        request_id = self.request_id
        if self.to_hook and model.hook_id is not None:
            request_id = model.hook_id
        return [frame({**self.body, "id": request_id})]


@dataclass(frozen=True)
class Hostile:
    """A JSON object with any of a message's members, right or wrong. Its id is `fresh`
    (so no other frame meets it), one `stalled` in flight, or a given wrong one."""

    members: dict[str, Any]
    id_kind: str
    pick: int

    def render(self, model: Model) -> list[bytes]:
        message = dict(self.members)
        if self.id_kind == "fresh":
            message["id"] = model.fresh_id("int" if self.pick % 2 else "h")
        elif self.id_kind == "stalled" and model.stalled:
            message["id"] = _pick(model.stalled, self.pick)
        return [frame(message, ascii_only=self.pick % 3 != 0)]


@dataclass(frozen=True)
class Raw:
    """Bytes as they are: garbage, blank lines, CRLF, a line split into several."""

    data: bytes

    def render(self, model: Model) -> list[bytes]:
        return self.data.split(b"\n")

    def __repr__(self) -> str:
        shown = self.data if len(self.data) <= 120 else self.data[:100] + b"..."
        return f"Raw({shown!r}, {len(self.data)} bytes)"


def _pick(ids: dict[str, Any], pick: int) -> Any:
    return list(ids.values())[pick % len(ids)]


def _near_miss(request_id: Any, pick: int) -> Any:
    if isinstance(request_id, int):
        return [str(request_id), float(request_id), [request_id]][pick % 3]
    return [request_id.upper(), f" {request_id}", True][pick % 3]


def _big_request(size: int) -> bytes:
    """A ping padded to `size` bytes, over or under the frame limit."""
    head = b'{"jsonrpc":"2.0","method":"ping","params":{"pad":"'
    tail = b'"}}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


def _nested(depth: int, shape: str) -> bytes:
    if shape == "list":
        return b"[" * depth + b"]" * depth
    if shape == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    if shape == "params":  # a valid notification, nested deep
        inner = b"[" * depth + b"]" * depth
        return b'{"jsonrpc":"2.0","method":"deep","params":{"d":' + inner + b"}}"
    return b"[" * depth  # never closed


def _infer_with(preferences: str, request_id: str) -> bytes:
    """An `inference/request` whose preferences are JSON text json.dumps cannot write."""
    params = {
        "featureSet": "fuzz.whole",
        "messages": [{"role": "user", "content": "hello"}],
        "preferences": "PREFERENCES",
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "inference/request", "params": params}
    return frame(message).replace(b'"PREFERENCES"', preferences.encode())


TEMPERATURE_1E400 = _infer_with('{"temperature":1e400}', "h-t1")
TEMPERATURE_HUGE_INT = _infer_with('{"temperature":1%s}' % ("0" * 400), "h-t2")

raw_bytes = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(lambda s: s.encode("utf-8")),
    st.sampled_from(
        [
            b"",
            b"   ",
            b"\r",
            b"\t\r",
            b"\x00",
            b"\xef\xbb\xbf{}",  # a byte-order mark
            b"\xed\xa0\x80",  # a lone surrogate, as UTF-8 bytes (not UTF-8)
            b'{"jsonrpc":"2.0","id":"h-x","method":"ping\x00"}',  # a raw NUL in a string
            b'{"jsonrpc":"2.0","id":"h-y","method":"ping\xff"}',  # not UTF-8
            b'{"jsonrpc":"2.0","method":"ping","params":{"s":"\\ud800\\u0000"}}',
            b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":-3,"result":Infinity}',
            b'{"jsonrpc":"2.0","method":"ping"}{"jsonrpc":"2.0","method":"ping"}',
            b'{"jsonrpc":"2.0","id":"h-dup","id":7.5,"method":"ping"}',  # the last key wins
            b"[]",
            b'[{"jsonrpc":"2.0","id":"h-batch","method":"ping"}]',
            b"null",
            b"42",
            b'"ping"',
            b"{",
            b'{"jsonrpc":"2.0","id":"h-crlf","method":"ping"}\r',
            b'{"jsonrpc":"2.0","id":"h-nl","method":"ping"}\n\n',
            b'{"jsonrpc":"2.0","method":"mcpl/manifestChanged","params":{"revision":"r"}}',
            b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}',
            TEMPERATURE_1E400,
            TEMPERATURE_HUGE_INT,
        ]
    ),
    st.integers(MAX_FRAME_BYTES - 64, MAX_FRAME_BYTES + 4096).map(_big_request),
    st.tuples(
        st.sampled_from([1, 50, 150, 5000, 20000]),
        st.sampled_from(["list", "object", "params", "open"]),
    ).map(lambda t: _nested(*t)),
    st.integers(1, 6000).map(
        lambda digits: b'{"jsonrpc":"2.0","id":' + b"7" * digits + b',"method":"ping"}'
    ),
)

hostile_members = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), st.just("2.0"), st.just("1.0"), junk),
        "method": st.one_of(st.sampled_from(OTHER_METHODS), junk),
        "params": junk,
        "result": junk,
        "error": junk,
    },
)
hostile_id = st.sampled_from(["fresh", "fresh", "stalled", "absent"]).flatmap(
    lambda kind: (
        st.just((kind, None))
        if kind != "absent"
        else st.one_of(
            st.none(),
            st.booleans(),
            st.floats(allow_nan=False, allow_infinity=False),
            st.lists(st.integers(), max_size=2),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        ).map(lambda wrong: ("given", wrong))
    )
)


def _hostile(members: dict[str, Any], id_spec: tuple[str, Any], pick: int) -> Hostile:
    kind, wrong = id_spec
    if kind == "given":
        members = {**members, "id": wrong}
    return Hostile(members, kind, pick)


pool_id = st.sampled_from(POOL_IDS)
frames = st.one_of(
    st.builds(Call, st.just("inference/request"), pool_id, good_inference_params),
    st.builds(Call, st.just("inference/request"), pool_id, good_inference_params),
    st.builds(Call, st.just("inference/request"), pool_id, inference_params),
    st.builds(Call, st.just("push/event"), pool_id, push_params),
    st.builds(Call, st.sampled_from(OTHER_METHODS), pool_id, st.one_of(st.none(), junk)),
    st.builds(
        Call,
        st.sampled_from(["inference/request", "push/event", "ping", "mcpl/manifestChanged"]),
        st.none(),
        st.one_of(st.none(), inference_params),
        st.just(False),
    ),
    st.builds(Stall, st.sampled_from(["fresh", "dup", "again"]), st.integers(0, 99), st.booleans()),
    st.builds(
        Cancel,
        st.sampled_from(["stalled", "stalled", "near_miss", "unknown", "malformed"]),
        st.integers(0, 99),
        st.one_of(st.none(), st.text(max_size=5), junk),
        st.sampled_from([False, False, False, True]),
    ),
    st.builds(
        Reply,
        st.booleans(),
        st.sampled_from([1, 2, 10**6, "r-1", None]),
        st.sampled_from(
            [
                {"jsonrpc": "2.0", "result": {"inject": []}},
                {"jsonrpc": "2.0", "result": None},
                {"jsonrpc": "2.0", "error": {"code": -32000, "message": "no"}},
                {"jsonrpc": "2.0", "error": "not an object"},
                {"jsonrpc": "2.0", "result": 1, "error": {"code": 1, "message": "both"}},
                {"jsonrpc": "1.0", "result": {}},
            ]
        ),
    ),
    st.builds(_hostile, hostile_members, hostile_id, st.integers(0, 99)),
    st.builds(Raw, raw_bytes),
)


@dataclass(frozen=True)
class Scenario:
    frames: list[Any]
    hook: bool  # the host has a context/beforeInference pending when the frames begin
    chunk_sizes: list[int]  # how the bytes are split into reads, cycled
    ending: str  # "close": the host shuts down; "eof": the server closes its stdout


scenarios = st.builds(
    Scenario,
    st.lists(frames, min_size=20, max_size=120),
    st.booleans(),
    st.lists(st.one_of(st.integers(1, 80), st.integers(80, 3 * MAX_FRAME_BYTES)), max_size=8),
    st.sampled_from(["close", "eof"]),
)


# -- running one --------------------------------------------------------------------


@dataclass
class Figures:
    examples: int = 0
    frames: int = 0
    answers: int = 0
    cancelled: int = 0
    seconds: float = 0.0
    outcomes: Counter[int | str] = field(default_factory=Counter)

    def __str__(self) -> str:
        rate = self.frames / self.seconds if self.seconds else 0.0
        return (
            f"{self.examples} examples, {self.frames} frames, {self.answers} answers checked, "
            f"{self.cancelled} requests cancelled (no answer), {self.seconds:.1f} s "
            f"({rate:.0f} frames/s)\nanswers by outcome: "
            + ", ".join(f"{k}: {n}" for k, n in self.outcomes.most_common())
        )


class Rig:
    """One kernel, host and scripted provider, serving one connection per example."""

    def __init__(self, kernel: Kernel, provider: ScriptedProvider, traces: Path) -> None:
        self.kernel = kernel
        self.host = McplHost(kernel)
        self.provider = provider
        self.traces = traces
        # Bad input is answered, never a traceback: an error logged is a finding.
        self.errors: list[str] = []
        self._sink = logger.add(self._on_error, level="ERROR", format="{message}")

    def _on_error(self, message: Any) -> None:
        self.errors.append(str(message))

    @classmethod
    async def open(cls, directory: Path) -> Rig:
        path = directory / "agentcore.toml"
        traces = directory / "traces.jsonl"
        path.write_text(SETTINGS_TOML.format(traces=traces))
        provider = ScriptedProvider(answer_for=answer_for)
        kernel = Kernel.load(
            path,
            environ={},
            discover_plugins=False,
            plugins={
                "mcpl-router": McplRouter(),
                "scripted": scripted_kind(provider),
                "jsonl-traces": JsonlTraceSink(),  # as serve loads it, by its entry point
            },
        )
        await kernel.start()
        return cls(kernel, provider, traces)

    async def close(self) -> None:
        await self.kernel.stop()
        logger.remove(self._sink)

    async def play(self, scenario: Scenario, figures: Figures) -> None:
        self.provider.calls.clear()
        self.provider.log.clear()
        self.provider.endings.clear()
        self.errors.clear()
        self.traces.write_text("")
        session = Session(self.host, scenario)
        await session.run()
        assert not self.errors, "the host logged errors:\n" + "\n".join(self.errors)
        self._check_traces(session)
        figures.examples += 1
        figures.frames += session.model.lines
        figures.answers += session.checked
        figures.outcomes.update(session.outcomes)
        figures.cancelled += len(session.model.cancelled)

    def _check_traces(self, session: Session) -> None:
        """Every trace reached the JSONL file whole (SPEC §13.2: the audit trail), one
        `mcpl:inference_start` for each call the provider took."""
        starts = 0
        # Split on "\n" only: JSON text may hold U+2028 or U+0085, which splitlines() splits on.
        for line in self.traces.read_text(encoding="utf-8").split("\n")[:-1]:
            trace = json.loads(line)
            starts += trace.get("type") == "mcpl:inference_start"
        assert starts == len(self.provider.calls), (
            f"{len(self.provider.calls)} provider calls, {starts} mcpl:inference_start traces"
        )


class Session:
    """One connection: the handshake, the frames, the answers, the checks."""

    def __init__(self, host: McplHost, scenario: Scenario) -> None:
        self.host = host
        self.scenario = scenario
        self.child = InProcessChild()
        self.received: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.model = Model(None)
        self.checked = 0
        self.outcomes: Counter[int | str] = Counter()

    async def run(self) -> None:
        await self.child.open()
        collector = asyncio.ensure_future(self._collect())
        connection = ServerConnection(
            "fuzz",
            self._transport,
            grant=GRANT,
            handler=self.host.handle,
            disabled_feature_sets=DISABLED,
            request_timeout_s=WAIT_S,
            manifest_fetch_interval_s=0.0,
        )
        try:
            await asyncio.wait_for(connection.start(), WAIT_S)
            assert connection.ready, connection.state
            hook = None
            if self.scenario.hook:
                hook = asyncio.ensure_future(
                    connection.request("context/beforeInference", {"fuzz": True})
                )
                self.model.hook_id = await self._wait_for_request("context/beforeInference")
            wire = self._compile()
            await self._feed(wire)
            await self._settle()
            assert not connection.closed.is_set(), "the connection did not survive the frames"
            if self.scenario.ending == "eof":
                self.child.stdout.feed_eof()
            await asyncio.wait_for(connection.close(), WAIT_S)
            await asyncio.wait_for(collector, WAIT_S)
            if hook is not None:
                await asyncio.gather(hook, return_exceptions=True)
        finally:
            await connection.close()
            collector.cancel()
        self._check()

    async def _transport(self) -> StdioTransport:
        return StdioTransport(
            self.child,  # type: ignore[arg-type]  # see InProcessChild
            name="fuzz",
            max_frame_bytes=MAX_FRAME_BYTES,
        )

    def _compile(self) -> bytes:
        """The frames as bytes on the wire, walked through the oracle in the same order,
        then a probe (a ping each side knows) and, for an EOF ending, a last unterminated
        frame."""
        lines: list[bytes] = []
        for spec in self.scenario.frames:
            for line in spec.render(self.model):
                self.model.line(line)
                lines.append(line)
        probe = frame({"jsonrpc": "2.0", "id": "probe", "method": "ping"})
        self.model.line(probe)
        wire = b"\n".join([*lines, probe]) + b"\n"
        if self.scenario.ending == "eof":
            # MCP stdio: a last line without its newline is still a frame at EOF.
            last = frame({"jsonrpc": "2.0", "id": "last", "method": "ping"})
            self.model.line(last)
            self.model.ids[_key("last")].outcomes.add(INTERNAL_ERROR)  # racing the close
            wire += last
        return wire

    async def _feed(self, wire: bytes) -> None:
        sizes = self.scenario.chunk_sizes or [len(wire)]
        offset, turn = 0, 0
        while offset < len(wire):
            size = sizes[turn % len(sizes)]
            self.child.feed(wire[offset : offset + size])
            offset += size
            turn += 1
            await asyncio.sleep(0)  # the reader takes this read before the next arrives

    async def _collect(self) -> None:
        """Read everything the host writes; answer the handshake as a server does."""
        while True:
            line = await self.child.host_frames.readline()
            if not line:
                return
            assert line.endswith(b"\n"), f"a host frame without its newline: {line[:200]!r}"
            message = json.loads(line)  # the host writes JSON, one message a line
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
            self.received.append(message)
            self.arrived.set()
            method = message.get("method")
            if method == "initialize":
                result = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": MANIFEST}},
                    "serverInfo": {"name": "fuzz", "version": "0"},
                }
                self.child.feed(
                    frame({"jsonrpc": "2.0", "id": message["id"], "result": result}) + b"\n"
                )
            elif method == "featureSets/update":
                receipt = {"accepted": True}
                self.child.feed(
                    frame({"jsonrpc": "2.0", "id": message["id"], "result": receipt}) + b"\n"
                )

    async def _wait_for_request(self, method: str) -> Any:
        async with asyncio.timeout(WAIT_S):
            while True:
                for message in self.received:
                    if message.get("method") == method and "id" in message:
                        return message["id"]
                self.arrived.clear()
                await self.arrived.wait()

    async def _settle(self) -> None:
        """Wait for the probe's answer (every frame before it was read) and for every
        answer due before the end: all but those of requests still stalled."""
        stalled = set(self.model.stalled)

        def due() -> bool:
            counts = self._counts()
            return all(
                counts.get(key, 0) >= expected.low - (key in stalled)
                for key, expected in self.model.ids.items()
                if key != _key("last")
            )

        try:
            async with asyncio.timeout(WAIT_S):
                while not due():
                    self.arrived.clear()
                    await self.arrived.wait()
        except TimeoutError:
            raise AssertionError(self._report("answers still missing before the end")) from None

    def _responses(self) -> list[dict[str, Any]]:
        return [m for m in self.received if "method" not in m]

    def _duplicate_of(self, response: dict[str, Any]) -> str | None:
        error = response.get("error")
        if response.get("id") is not None or not isinstance(error, dict):
            return None
        found = re.fullmatch(
            r"Invalid Request: id (.*) is already in flight", str(error.get("message"))
        )
        if found is None:
            return None
        name = found.group(1)
        assert name in self.model.names, f"a duplicate refused for an id never sent: {name}"
        return self.model.names[name]

    def _counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for response in self._responses():
            if response.get("id") is not None:
                counts[_key(response["id"])] += 1
            else:
                duplicate = self._duplicate_of(response)
                if duplicate is not None:
                    counts[duplicate] += 1
        return counts

    def _check(self) -> None:
        model = self.model
        counts = self._counts()
        nulls: Counter[int] = Counter()
        answered_at: dict[str, int] = {}
        for position, message in enumerate(self.received):
            if message.get("method") == "inference/chunk":
                key = _key(message["params"]["requestId"])
                assert key not in answered_at or model.ids[key].high > 1, self._report(
                    f"a chunk for {key} after its answer"
                )
                continue
            if "method" in message:
                continue
            self.checked += 1
            assert ("result" in message) != ("error" in message), message
            self.outcomes["result" if "result" in message else message["error"]["code"]] += 1
            if "error" in message:
                error = message["error"]
                assert isinstance(error.get("code"), int) and isinstance(
                    error.get("message"), str
                ), message
            if message["id"] is None:
                if self._duplicate_of(message) is None:
                    nulls[message["error"]["code"]] += 1
                continue
            key = _key(message["id"])
            answered_at.setdefault(key, position)
            expected = model.ids.get(key)
            assert expected is not None, self._report(f"an answer for {key}, never a request id")
            outcome = "result" if "result" in message else message["error"]["code"]
            assert outcome in expected.outcomes, self._report(
                f"{key} answered {message}, expected one of {expected.outcomes}"
            )
        for key, expected in model.ids.items():
            assert expected.low <= counts.get(key, 0) <= expected.high, self._report(
                f"{key}: {counts.get(key, 0)} answers, expected {expected.low}..{expected.high}"
            )
        for code in set(nulls) | set(model.null_high):
            assert model.null_low[code] <= nulls[code] <= model.null_high[code], self._report(
                f"{nulls[code]} answers with id null and code {code}, expected "
                f"{model.null_low[code]}..{model.null_high[code]}"
            )

    def _report(self, problem: str) -> str:
        shown = [json.dumps(m)[:300] for m in self._responses()][-40:]
        return f"{problem}\nthe last answers:\n" + "\n".join(shown)


# -- entry points -------------------------------------------------------------------

settings.register_profile(
    "mcpl-fuzz",
    deadline=None,
    database=None,  # no .hypothesis/ directory; the seed makes each run repeat
    print_blob=True,  # a failure prints @reproduce_failure(...) to replay it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # In make test, a failure is reported as found: shrinking one can take minutes, past
    # pytest's timeout, which would lose the report. The blob replays it to shrink later.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.register_profile(
    "mcpl-fuzz-full", settings.get_profile("mcpl-fuzz"), phases=list(Phase)
)  # bench/fuzz.py --shrink: a failure shrunk to its smallest form (no timeout there)
SEED = 20261201
CI_EXAMPLES = 40
"""In `make test`: a few thousand frames in well under a minute; `bench/fuzz.py` runs 100,000."""


def fuzz(
    examples: int,
    *,
    seed_value: int = SEED,
    figures: Figures | None = None,
    profile: str = "mcpl-fuzz",
) -> Figures:
    """Run `examples` generated scenarios against one kernel; returns the figures."""
    figures = figures if figures is not None else Figures()
    started = time.perf_counter()
    with asyncio.Runner() as runner, tempfile.TemporaryDirectory() as directory:
        rig = runner.run(Rig.open(Path(directory)))
        try:

            @seed(seed_value)
            @settings(settings.get_profile(profile), max_examples=examples)
            @given(scenarios)
            def one(scenario: Scenario) -> None:
                runner.run(rig.play(scenario, figures))

            one()
        finally:
            runner.run(rig.close())
    figures.seconds += time.perf_counter() - started
    return figures


def play(scenarios: Iterable[Scenario]) -> Figures:
    """Play the given scenarios, in order, against one kernel (no generation)."""
    figures = Figures()
    with asyncio.Runner() as runner, tempfile.TemporaryDirectory() as directory:
        rig = runner.run(Rig.open(Path(directory)))
        try:
            for scenario in scenarios:
                runner.run(rig.play(scenario, figures))
        finally:
            runner.run(rig.close())
    return figures
