"""`notifications/cancelled` from the server (MCP's base protocol, Cancellation), end to end
over a real stdio subprocess and a real WebSocket, streamed and whole.

A cancelled `inference/request` in flight: its provider call is closed at once (the
loopback server sees the client leave), no answer is ever sent for its id (the rig's
teardown checks that too, after the host has closed), an `mcpl:inference_fail` trace
says the server cancelled it, and the session goes on serving. A cancel for any other
id changes nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from e2e_rig import MODELS, Rig, RigFactory
from e2e_support import TIMEOUT_S, ServerSession

from agentcore.testing import Scenario

PATIENT = {"progress_timeout_s": 30.0, "request_timeout_s": 30.0}
# A slow stream: it would still be going long after the test is done with it.
SLOW = Scenario.text(chunks=[f"part {n} " for n in range(40)], chunk_delay_s=0.25)


def inference(stream: bool) -> dict[str, Any]:
    return {
        "featureSet": "fs.a",
        "stream": stream,
        "messages": [{"role": "user", "content": "Go on."}],
    }


async def under_way(r: Rig, session: ServerSession, rid: Any, stream: bool) -> None:
    """Until the provider call is open and, streamed, the first chunk has arrived."""
    async with asyncio.timeout(TIMEOUT_S):
        while r.provider.in_flight < 1 or (stream and not session.chunks(rid)):
            await asyncio.sleep(0.005)


async def traced(r: Rig, rid: Any, count: int) -> list[dict[str, Any]]:
    async with asyncio.timeout(TIMEOUT_S):
        while len(r.traces.mcpl(rid)) < count:
            await asyncio.sleep(0.005)
    return list(r.traces.mcpl(rid))


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_cancelled_inference_is_closed_unanswered_and_traced(
    rig: RigFactory, stream: bool
) -> None:
    r = await rig(inference=PATIENT)
    r.provider.script(SLOW if stream else Scenario.stall(), provider="a")
    rid = await r.server.request("inference/request", inference(stream))
    await under_way(r, r.server, rid, stream)

    await r.server.cancel(rid, "the user moved on")

    # The provider call is closed at once, not left to run (and bill) to its end.
    await r.provider.wait_idle()
    assert r.provider.calls[0].disconnected
    start, fail = await traced(r, rid, 2)
    assert start["type"] == "mcpl:inference_start"
    assert fail == {
        "type": "mcpl:inference_fail",
        "serverId": "srv",
        "requestId": rid,
        "model": MODELS["a"],
        "streamed": stream,
        "error": "The server cancelled the request (notifications/cancelled): the user moved on",
    }
    # The session is alive, and answers in order: nothing for the cancelled id came first.
    r.provider.script(Scenario.text("Still here."), provider="a")
    after = await r.server.infer(inference(False))
    assert after.result["content"] == "Still here."
    assert r.server.answers(rid) == []
    assert all(kind == "chunk" for kind, *_ in r.server.transcript(rid))
    await r.close()
    # After the host has closed too: still no answer (not even the shutdown one).
    await r.server.wait_closed()
    assert r.server.answers(rid) == []


async def test_a_cancel_without_a_reason_is_traced_as_the_servers(rig: RigFactory) -> None:
    r = await rig(inference=PATIENT)
    r.provider.script(SLOW, provider="a")
    rid = await r.server.request("inference/request", inference(True))
    await under_way(r, r.server, rid, True)
    await r.server.cancel(rid)
    await r.provider.wait_idle()
    fail = (await traced(r, rid, 2))[-1]
    assert fail["error"] == "The server cancelled the request (notifications/cancelled)"


async def test_a_cancel_for_an_id_not_in_flight_changes_nothing(rig: RigFactory) -> None:
    r = await rig(inference=PATIENT)
    r.provider.script(Scenario.text("First."), provider="a")
    done = await r.server.request("inference/request", inference(False))
    assert (await r.server.answer(done)).result["content"] == "First."
    chunks = ["one ", "two ", "three"]
    r.provider.script(Scenario.text(chunks=chunks, chunk_delay_s=0.05), provider="a")
    rid = await r.server.request("inference/request", inference(True))
    await under_way(r, r.server, rid, True)
    # An id already answered, one never sent, and ones of the wrong type.
    for other in (done, 999, str(rid) if isinstance(rid, int) else 998, None):
        await r.server.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": other}}
        )
    await r.server.send({"jsonrpc": "2.0", "method": "notifications/cancelled"})
    answer = await r.server.answer(rid)
    assert answer.result["content"] == "one two three"
    assert [delta for _, _, delta in r.server.chunks(rid)] == chunks
    assert [t["type"] for t in r.traces.mcpl(rid)] == [
        "mcpl:inference_start",
        "mcpl:inference_complete",
    ]
    assert r.server.answers(done) != [] and len(r.server.answers(done)) == 1


async def test_a_server_that_cancels_every_call_after_its_first_chunk_runs_into_its_budget(
    rig: RigFactory,
) -> None:
    """The provider bills the prompt it read even when the reply is cut: each cancelled
    call settles at the usage the provider reported (100,000 input tokens at $3 a
    million: $0.30), so with $0.50 the third call is refused before the provider."""
    price = {"price": {"input": 3.0, "output": 15.0}}
    r = await rig(
        inference=PATIENT,
        provider_models={"a": {MODELS["a"].split(":", 1)[1]: price}},
        extra={"budget": {"servers": {"srv": {"max_usd": 0.5}}}},
    )
    for _ in range(5):
        r.provider.script(SLOW.replace(input_tokens=100_000), provider="a")
        rid = await r.server.request("inference/request", inference(True))
        async with asyncio.timeout(TIMEOUT_S):  # its first chunk, or its refusal
            while not (r.server.chunks(rid) or r.server.answers(rid)):
                await asyncio.sleep(0.005)
        if r.server.answers(rid):
            break
        await r.server.cancel(rid, "enough")
        await r.provider.wait_idle()
    [refused] = r.server.answers(rid)
    assert len(r.provider.calls) == 2  # two cancelled calls, then the refusal
    error = refused.error
    assert (error["code"], error["data"]["reason"]) == (-32603, "budget")
    assert error["data"]["spentUsd"] == pytest.approx(0.6, rel=0.01)


async def test_a_call_cancelled_before_the_wire_reports_usage_still_spends(
    rig: RigFactory,
) -> None:
    """Chat completions reports usage only in its last chunk: a call its server cancels
    after the first chunk was billed for its prompt all the same, and settles at its
    input's worst case (bytes as tokens at the input price), never at $0."""
    price = {"price": {"input": 3.0, "output": 15.0}}
    r = await rig(
        inference=PATIENT,
        provider_models={"o": {MODELS["o"].split(":", 1)[1]: price}},
        extra={"budget": {"servers": {"srv": {"max_usd": 0.5}}}},
    )
    r.provider.script(SLOW, provider="o")
    rid = await r.server.request("inference/request", {**inference(True), "featureSet": "fs.o"})
    await under_way(r, r.server, rid, True)
    await r.server.cancel(rid, "enough")
    await r.provider.wait_idle()
    while r.kernel.admission._releases:  # the grant given back reaches the store
        await asyncio.wait(set(r.kernel.admission._releases))
    [(_, report)] = [a for a in await r.kernel.hooks.spend_report() if a[1]]
    [row] = report["budgets"]
    assert row["reservedUsd"] == 0.0
    assert 0 < row["spentUsd"] < 0.001  # a short prompt's bytes at $3 a million tokens
