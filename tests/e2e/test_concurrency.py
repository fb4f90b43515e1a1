"""Many concurrent streamed requests from one server: each answered exactly once, each
request's chunks in order, none mixed up with another's."""

from __future__ import annotations

import asyncio

from e2e_rig import RigFactory

from agentcore.testing import Scenario

N = 50
WORDS = ["alpha ", "beta ", "gamma ", "delta ", "epsilon"]


async def test_fifty_concurrent_streams_each_answered_once_in_order(rig: RigFactory) -> None:
    r = await rig(inference={"progress_timeout_s": 30.0, "request_timeout_s": 30.0})
    # Each call echoes its own prompt back, so a chunk that reached the wrong request shows.
    r.provider.default = Scenario.echo(chunk_delay_s=0.002)
    prompts = {}
    ids = []
    for i in range(N):
        wire = "a" if i % 2 else "o"
        words = [f"r{i} ", *WORDS]
        params = {
            "featureSet": f"fs.{wire}",
            "stream": True,
            "messages": [{"role": "user", "content": "".join(words)}],
        }
        rid = await r.server.request("inference/request", params)
        prompts[rid] = words
        ids.append(rid)
    answers = await asyncio.gather(*(r.server.answer(rid) for rid in ids))
    for rid, answer in zip(ids, answers, strict=True):
        words = prompts[rid]
        assert answer.result["content"] == "".join(words)
        assert answer.result["finishReason"] == "end_turn"
        assert r.server.transcript(rid) == [
            *(("chunk", i, w) for i, w in enumerate(words)),
            ("result", answer.result),
        ]
    assert len(r.provider.calls) == N
    complete = r.traces.of("mcpl:inference_complete")
    assert sorted(e["requestId"] for e in complete) == sorted(ids)
    assert r.traces.of("mcpl:inference_fail") == []
    # Nothing arrived for an id the server never used, and nothing twice.
    for rid in ids:
        assert len(r.server.answers(rid)) == 1
    assert r.server.unanswered_or_twice() == {}
