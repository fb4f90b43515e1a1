"""The kernel's admission step over both stores: a third-party claim kind decided with the
built-in ones, and the release paths that give a slot back (issue 25, "Slots always come
back"): a cancellation in the gap between the store's grant and the caller, and an
attempt that outlives the kernel's stop grace."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from agentcore_provider_hold import HOLD_TOO_LONG, ProviderHold
from agentcore_rate_limit import RateLimit

import agentcore.kernel
from agentcore import hookimpl
from agentcore.admission import ADMISSION_WAIT_TOO_LONG
from agentcore.fleet import FleetStore, open_store
from agentcore.fleet.claims import Claim, ClaimRefusal, Scalar
from agentcore.fleet.redis_store import RedisFleetStore
from agentcore.inference import InferenceError, Message, Request
from agentcore.inference.calls import Attempt, Inference
from agentcore.kernel import Kernel
from agentcore.testing import STALL, ScriptedProvider, TraceRecorder, scripted_kind
from agentcore.testing.claims import QuotaPlugin, used
from agentcore.testing.redis import RedisServer

Load = Callable[..., Kernel]


def req(tag: str) -> Request:
    return Request("fake:m1", [Message.user("hi")], metadata={"tag": tag})


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def load(
    tmp_path: Path,
    backend: str,
    redis_server: RedisServer,
    trace_recorder: TraceRecorder,
    scripted_provider: ScriptedProvider,
) -> Load:
    """``load(sections, plugins=...)``: a kernel (a replica) with the provider hold and the
    rate limit; every kernel of one test shares one Redis prefix."""
    prefix = f"adm-{uuid.uuid4().hex[:8]}"
    made: list[Kernel] = []

    def _load(sections: str = "", plugins: dict[str, Any] | None = None) -> Kernel:
        path = tmp_path / f"agentcore-{len(made)}.toml"
        path.write_text(
            '[providers.fake]\nkind = "scripted"\n'
            f'[fleet]\nbackend = "{backend}"\nredis_url = "{redis_server.url}"\n'
            f'key_prefix = "{prefix}"\n{sections}\n'
        )
        own: dict[str, Any] = {
            "provider-hold": ProviderHold,
            "rate-limit": RateLimit,
            "scripted": scripted_kind(scripted_provider),
        }
        if not made:
            own["rec"] = trace_recorder
        kernel = Kernel.load(
            path, environ={}, discover_plugins=False, plugins={**own, **(plugins or {})}
        )
        made.append(kernel)
        return kernel

    return _load


ONE_SLOT = "[rate_limit]\nmax_wait_s = 5\n[rate_limit.providers.fake]\nmax_in_flight = 1"


async def test_a_third_party_claim_kind_is_decided_with_the_built_in_ones(
    load: Load, scripted_provider: ScriptedProvider, trace_recorder: TraceRecorder
) -> None:
    """The ``quota`` kind (agentcore.testing.claims) lives outside the kernel: a call
    reserves 1.0 of 1.0, settles to its real 0.25; the next reserves 1.0 again and is
    refused at once (its claim waits 0 s), taking no slot."""
    quota = QuotaPlugin({"fake": (1.0, 1.0, 0.25)})
    async with load(ONE_SLOT, plugins={"quota": quota}) as kernel:
        assert (await kernel.complete(req("first"))).text == "hello"
        # The release (the settle to 0.25) runs in a task of its own, a Redis round trip
        # on that backend: wait for it, not a fixed 0.05 s a loaded machine can outrun. Still
        # fails if the settle never lands (the reservation's 1.0 stays).
        deadline = time.monotonic() + 5.0
        while (held := await used(kernel.fleet, "provider:fake")) != 0.25:
            assert time.monotonic() < deadline, f"the settle never landed: {held} used"
            await asyncio.sleep(0.01)
        with pytest.raises(InferenceError) as caught:
            await kernel.complete(req("second"))
    error = caught.value
    assert (error.code, error.retryable) == (ADMISSION_WAIT_TOO_LONG, False)
    assert "the quota claim on 'provider:fake' (quota) refused the call (quota)" in str(error)
    assert "[quota] max_wait_s" in str(error)
    assert [c.request.metadata["tag"] for c in scripted_provider.calls] == ["first"]
    slots = [(s["change"], s["inferenceId"]) for s in trace_recorder.of("rate_limit:slots")]
    assert [change for change, _ in slots] == ["taken", "released"]  # the first call's only


@pytest.mark.parametrize("named", ["", "someone-else", "limits"])
async def test_a_claim_carries_the_name_of_the_plugin_that_made_it(load: Load, named: str) -> None:
    """The kernel fills `Claim.plugin` with the name the plugin is loaded as, whatever the
    plugin put there (nothing, or another name); the in-tree plugins name themselves from
    `PluginContext.name`, so the rate limit loaded as ``limits`` says ``limits``."""

    class Naming(QuotaPlugin):
        @hookimpl
        def on_admission_claims(self, attempt: Any) -> list[Claim] | None:
            claims = super().on_admission_claims(attempt) or []
            return [dataclasses.replace(c, plugin=named) for c in claims]

    seen: list[list[Claim]] = []
    async with load(
        ONE_SLOT.replace("max_wait_s = 5", "max_wait_s = 0"),
        plugins={"rate-limit": None, "limits": RateLimit, "quota": Naming({"fake": (1, 1, 0)})},
    ) as kernel:
        attempt = Attempt(Inference("i1", req("x"), "fake", "m1", False), 1)
        seen.append(await kernel.admission.claims(attempt))
    assert sorted((c.kind, c.plugin) for c in seen[0]) == [
        ("hold", "provider-hold"),  # the attempt's (provider, model), and its provider
        ("hold", "provider-hold"),
        ("quota", "quota"),
        ("slots", "limits"),
    ]


class GrantedReplyLate:
    """The kernel's store, whose first grant then does not reach its caller (a Redis reply
    still on its way) until the caller is cancelled."""

    def __init__(self, store: FleetStore) -> None:
        self._store = store
        self.granted = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def admit(self, claims: Sequence[Claim], holder: str) -> ClaimRefusal | list[Scalar]:
        answer = await self._store.admit(claims, holder)
        if not self.granted.is_set():
            self.granted.set()
            await asyncio.Event().wait()
        return answer


async def test_a_call_cancelled_between_the_grant_and_its_caller_gives_its_slot_back(
    load: Load, scripted_provider: ScriptedProvider
) -> None:
    kernel = load(ONE_SLOT)
    late = GrantedReplyLate(open_store(kernel.settings.fleet))
    kernel.fleet = late  # type: ignore[assignment]
    async with kernel:
        cancelled = asyncio.create_task(kernel.complete(req("cancelled")))
        await late.granted.wait()  # granted by the store; the reply has not arrived
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        # max_in_flight = 1: the slot came back, or this waits its lease (30 s) out and fails
        # at max_wait_s (5 s) first. 10 s, not 1 s: a loaded machine's round trips are no
        # reason to fail, and the bound still sits far below the 30 s lease.
        response = await asyncio.wait_for(kernel.complete(req("next")), 10.0)
    assert response.text == "hello"
    assert [c.request.metadata["tag"] for c in scripted_provider.calls] == ["next"]


class DeafProvider(ScriptedProvider):
    """A provider whose stalled call ignores cancellation until `let_go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = asyncio.Event()

    async def _stall(self, stall: Any) -> None:
        self.stalled.set()
        while not self.let_go.is_set():
            try:
                await self.let_go.wait()
            except asyncio.CancelledError:
                continue  # deaf


@pytest.mark.parametrize("backend", ["redis"])
async def test_a_slot_held_past_the_stop_grace_comes_back_to_another_replica_at_stop(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setattr(agentcore.kernel, "STOP_GRACE_S", 0.2)
    deaf, fine = DeafProvider(), ScriptedProvider()
    deaf.script = [STALL]
    path = tmp_path / "agentcore.toml"
    path.write_text(
        '[providers.fake]\nkind = "scripted"\n'
        f'[fleet]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
        f'key_prefix = "deaf-{uuid.uuid4().hex[:8]}"\n{ONE_SLOT}\n'
    )

    def replica(provider: ScriptedProvider) -> Kernel:
        plugins = {"rate-limit": RateLimit, "scripted": scripted_kind(provider)}
        return Kernel.load(path, environ={}, discover_plugins=False, plugins=plugins)

    stopping, other = replica(deaf), replica(fine)
    async with other:
        await stopping.start()
        stuck = asyncio.create_task(stopping.complete(req("deaf")))
        await deaf.stalled.wait()
        waiting = asyncio.create_task(other.complete(req("waiting")))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the one slot is the deaf call's
        try:
            await stopping.stop()
            stopped = time.monotonic()
            # The slot's lease is 30 s and the waiting call's max_wait_s 5 s: a slot given
            # back only by its lease would fail the call at 5 s. Under 4 s proves it came
            # back at the stop, with room for a loaded machine's round trips (1 s had none).
            response = await asyncio.wait_for(waiting, 10.0)
            assert time.monotonic() - stopped < 4.0
        finally:
            deaf.let_go.set()
            await asyncio.gather(stuck, return_exceptions=True)
    assert response.text == "hello"


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("backend", ["redis"])
async def test_no_hold_costs_no_round_trip_and_a_hold_set_elsewhere_is_seen(
    load: Load, redis_server: RedisServer, backend: str
) -> None:
    """The common case, no hold, is answered from the replica's view (kept by pub/sub);
    a hold another replica sets reaches it, and a lost subscription falls back to asking."""
    kernel, other = load("[provider_hold]\nmax_wait_s = 1"), load()
    async with kernel, other:
        store = kernel.fleet
        assert isinstance(store, RedisFleetStore)
        await kernel.complete(req("first"))  # asks; the subscription comes up meanwhile
        await until(lambda: store.holds.live)
        await kernel.complete(req("learns"))  # asks once more: no hold, believed now
        sends = store.sends
        for i in range(5):
            await kernel.complete(req(f"call {i}"))
        assert store.sends == sends  # not one round trip for the hold
        await other.fleet.set_hold("fake:m1", 30.0, "rate_limit", 60.0)
        await until(lambda: not store.holds.unheld("fake:m1"))  # the hold's publication
        with pytest.raises(InferenceError) as held:
            await kernel.complete(req("held"))
        assert held.value.code == HOLD_TOO_LONG
        admin = aioredis.Redis.from_url(redis_server.url)
        try:
            await admin.delete(store._key("hold", "fake:m1"))  # the hold, gone by hand
            store.holds.forget("fake:m1")
            await kernel.complete(req("asks again"))
            await kernel.complete(req("knows again"))
            sends = store.sends
            await admin.client_kill_filter(_type="pubsub")  # the subscription is lost
        finally:
            await admin.aclose()
        await until(lambda: store.sends > sends or not store.holds.live)
        await kernel.complete(req("after the loss"))
        assert store.sends > sends  # asked: the view went with the subscription
