"""`frames.loads`, every inbound frame's reading: what ``json.loads`` reads, refused where
it refuses (and NaN/Infinity too), with an `inference/request`'s param keys shared across
frames rather than copied into each (an open stream holds its params as read)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentcore.mcpl.frames import loads, parse_problem


def request_frame(i: int) -> str:
    params = {
        "featureSet": "bench.summaries",
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": f"item {i}"}]}],
        "preferences": {"maxTokens": 256, "temperature": 0.5},
        "conversationId": f"c{i}",
    }
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "inference/request", "params": params})


@pytest.mark.parametrize(
    "text",
    [
        request_frame(7),
        '{"b": 1, "a": {"role": [1, {"text": null}]}, "b": 2}',  # a repeated key: the last
        '[{"x": {}}, "s", 1.5e300, -0, true]',
        '"a bare string"',
        '{"caf\\u00e9": "\\ud800"}',
    ],
)
def test_loads_reads_what_json_loads_reads(text: str) -> None:
    read = loads(text)
    assert read == json.loads(text)
    assert json.dumps(read) == json.dumps(json.loads(text))  # the same key order too


@pytest.mark.parametrize("text", ['{"x": NaN}', "[Infinity]", "\ufeff{}", '{"a": 1', "{} {}"])
def test_loads_refuses_what_a_frame_may_not_be(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        loads(text)
    if "NaN" not in text and "Infinity" not in text:
        with pytest.raises(ValueError) as expected:
            json.loads(text)
        assert parse_problem(refused.value) == str(expected.value)


def keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for k, v in value.items() for k in (k, *keys(v))]
    if isinstance(value, list):
        return [k for item in value for k in keys(item)]
    return []


def test_two_requests_share_their_param_keys() -> None:
    first, second = loads(request_frame(1))["params"], loads(request_frame(2))["params"]
    pairs = list(zip(keys(first), keys(second), strict=True))
    assert len(pairs) == 11
    assert all(a == b and a is b for a, b in pairs)
