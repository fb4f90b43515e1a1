"""A server whose session is lost while its `inference/request` waits for admission (a
`max_in_flight` slot held by another call), end to end over a real stdio subprocess and a
real WebSocket, with the fleet store on a real Redis.

The session's requests are cancelled with it: the waiting one never reaches the provider
and holds no slot. After the reconnect the server's request ids start again, and a new
request with the old one's id gets exactly its own chunks and answer (found by the soak,
issue 16: the old request's chunks went to the new session)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from e2e_rig import MODELS, Rig, RigFactory
from e2e_support import TIMEOUT_S, ServerSession

from agentcore.inference import Message, Request
from agentcore.testing import Scenario
from agentcore.testing.redis import RedisServer

RID = 7  # the id both sessions use


def streamed(text: str) -> dict[str, Any]:
    return {"featureSet": "fs.a", "stream": True, "messages": [{"role": "user", "content": text}]}


async def until(condition: Any) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not condition():
            await asyncio.sleep(0.005)


def limit_waits(r: Rig) -> list[dict[str, Any]]:
    return [e for e in r.traces.of("inference:waiting") if e.get("reason") == "limit"]


async def test_a_lost_sessions_waiting_request_is_cancelled_and_its_id_is_the_new_sessions(
    rig: RigFactory, redis_server: RedisServer
) -> None:
    fleet = {"backend": "redis", "redis_url": redis_server.url, "key_prefix": uuid.uuid4().hex}
    r = await rig(
        server_options={"srv": {"reconnect": True}},
        inference={"progress_timeout_s": 30.0, "request_timeout_s": 30.0},
        extra={"fleet": fleet, "rate_limit": {"providers": {"a": {"max_in_flight": 1}}}},
    )
    # The host's own call takes provider a's only slot and stalls there.
    r.provider.script(Scenario.stall(), provider="a")
    holder = asyncio.create_task(r.kernel.complete(Request(MODELS["a"], [Message.user("hold")])))
    await until(lambda: r.provider.in_flight == 1)

    first = r.server
    await first.request("inference/request", streamed("old"), id=RID)
    await until(lambda: limit_waits(r))  # waiting for the slot
    await first.close()  # the server goes away...
    second: ServerSession = await r.hub.next_session()  # ...and comes back
    await second.ready.wait()

    # The lost session's request was cancelled while it waited: traced as failed, with
    # the wait over, and it never reached the provider.
    await until(lambda: [e["type"] for e in r.traces.mcpl(RID)][-1:] == ["mcpl:inference_fail"])
    assert r.traces.mcpl(RID)[-1]["error"] == "The inference was cancelled"
    assert len(r.provider.calls) == 1
    # It held no slot: only the holder's was ever taken.
    assert [e["change"] for e in r.traces.of("rate_limit:slots")] == ["taken"]

    # The slot comes back when the holder ends, and the new request gets it.
    r.provider.script(Scenario.text(chunks=["new ", "answer"]), provider="a")
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    answer = await second.answer(await second.request("inference/request", streamed("new"), id=RID))
    assert answer.result["content"] == "new answer"
    assert second.transcript(RID) == [
        ("chunk", 0, "new "),
        ("chunk", 1, "answer"),
        ("result", answer.result),
    ]
    assert len(r.provider.calls) == 2  # the holder's and the new request's: none for the old
    changes = [e["change"] for e in r.traces.of("rate_limit:slots")]
    assert changes == ["taken", "released", "taken", "released"]
    assert first.transcript(RID) == []  # it left before anything was sent for it
