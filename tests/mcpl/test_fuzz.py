"""The MCPL fuzz in `make test` (the rig, its oracle and the rules it checks:
`agentcore.testing.fuzz`), and what the fuzz found, each pinned by a test of its own."""

from __future__ import annotations

from collections import Counter

import pytest

from agentcore.testing.fuzz import (
    CI_EXAMPLES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    TEMPERATURE_1E400,
    TEMPERATURE_HUGE_INT,
    Raw,
    Scenario,
    frame,
    fuzz,
    play,
)


@pytest.mark.parametrize(
    "data",
    [
        TEMPERATURE_1E400,  # was passed on as inf: the provider's body encoder failed
        TEMPERATURE_HUGE_INT,  # was -32603, OverflowError from float()
        # was passed on, and no provider body could encode it: -32603, a traceback logged
        frame(
            {
                "jsonrpc": "2.0",
                "id": "h-s",
                "method": "inference/request",
                "params": {
                    "featureSet": "fuzz.whole",
                    "messages": [{"role": "user", "content": "hello \ud800"}],
                },
            }
        ),
    ],
)
def test_what_the_fuzz_found_is_answered_invalid_params(data: bytes) -> None:
    figures = play([Scenario([Raw(data)], hook=False, chunk_sizes=[], ending="close")])
    assert figures.outcomes == Counter({INVALID_PARAMS: 1, "result": 1})  # and the probe


def _block(i: int) -> bytes:
    """Frames of each kind the reader tells apart, the same length for every `i`."""
    ping = {"jsonrpc": "2.0", "id": f"p{i:03d}-é✓", "method": "ping"}  # multibyte UTF-8
    infer = {
        "jsonrpc": "2.0",
        "id": f"q{i:03d}",
        "method": "inference/request",
        "params": {"featureSet": "fuzz.whole", "messages": [{"role": "user", "content": "hi"}]},
    }
    return b"\n".join(
        [
            frame(ping, ascii_only=False),
            b"{not json",
            frame(infer) + b"\r",  # CRLF
            b"\xff\xfe not UTF-8",
            b"",  # a blank line carries nothing
            b'{"jsonrpc":"2.0","method":"notifications/progress"}',
            b'[{"jsonrpc":"2.0","id":"b","method":"ping"}]',  # a batch: one -32600, none run
        ]
    )


def test_frames_split_at_every_offset_are_read_the_same() -> None:
    length = len(_block(0)) + 1  # with the newline that ends it
    # Copy 0 arrives in one read; copy i in two, split i bytes in; then byte by byte.
    sizes = [length] + [part for i in range(1, length) for part in (i, length - i)]
    copies = [Raw(_block(i)) for i in range(length)]
    bytewise = [Raw(_block(i)) for i in range(900, 903)]
    figures = play(
        [
            Scenario(copies, hook=False, chunk_sizes=sizes, ending="close"),
            Scenario(bytewise, hook=False, chunk_sizes=[1], ending="eof"),
        ]
    )
    blocks = length + len(bytewise)
    # The EOF ending's last frame, unterminated, is read; it races the close that the EOF
    # starts, so it is answered either way.
    last = figures.outcomes.pop(INTERNAL_ERROR, 0)
    assert last <= 1
    probes = 2 + 1 - last
    assert figures.outcomes == Counter(
        {"result": 2 * blocks + probes, PARSE_ERROR: 2 * blocks, INVALID_REQUEST: blocks}
    )


def test_generated_frames_leave_the_connection_up_and_every_request_answered_once() -> None:
    figures = fuzz(CI_EXAMPLES)
    print(figures)
    assert figures.examples == CI_EXAMPLES
    assert figures.frames > 20 * CI_EXAMPLES  # each scenario has 20 frames or more
    for outcome in ("result", INVALID_REQUEST, PARSE_ERROR, INVALID_PARAMS, INTERNAL_ERROR):
        assert figures.outcomes[outcome] > 0, outcome  # each kind of answer was exercised
