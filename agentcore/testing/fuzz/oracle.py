"""The MCPL fuzz: the server it plays, its frames, and the oracle (`Model`) that says
from the rules alone what each frame must get (the rules: `agentcore.testing.fuzz`)."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentcore.inference import InferenceError, Request, Response, StopInfo, TextBlock, Usage
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
from agentcore.testing import STALL, Partial

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


def id_key(request_id: Any) -> str:
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
        key = id_key(request_id)
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
                and id_key(raw_id) == id_key(self.hook_id)
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
        key = id_key(raw_id)
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
        key = id_key(raw_id)
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
        key = id_key(request_id)
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
