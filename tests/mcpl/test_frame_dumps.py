"""`frames.dumps`, every frame's JSON: the C encoder called directly must write what
``json.dumps(..., separators=(",", ":"), allow_nan=False)`` writes, and fail as it fails."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentcore.mcpl.frames import dumps


def reference(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "method": "inference/chunk", "params": {"requestId": 1, "index": 0}},
        {"text": 'caf\u00e9 \ud800 "quoted" \\ \n\t', "list": [1.5, -0.0, 1e300, None, True]},
        {1: "int key", None: "none key", 2.5: "float key", False: "bool key"},
        "a bare string",
        [],
    ],
)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    assert dumps(value) == reference(value)
    assert dumps(value).isascii()


@pytest.mark.parametrize("value", [{"x": math.nan}, {"x": object()}, {(1, 2): "tuple key"}])
def test_dumps_refuses_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as expected:
        reference(value)
    with pytest.raises(expected.type, match=str(expected.value)):
        dumps(value)


def test_a_circular_frame_is_refused_every_time() -> None:
    """Each call checks for cycles afresh: a refused frame leaves nothing behind that
    would refuse the next."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference"):
            dumps(looped)
        assert dumps({"self": {}}) == '{"self":{}}'
