"""The MCPL fuzz: what Hypothesis generates, one `Scenario` (frames, how they are cut
into reads, how the connection ends) per example."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from agentcore.testing.fuzz.oracle import (
    MAX_FRAME_BYTES,
    QUICK_TEXTS,
    SET_USES,
    UNGRANTED_METHODS,
    Model,
    frame,
)

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
