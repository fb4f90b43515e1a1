"""MCPL's RFC-006 event-coalescing vectors (`tests/mcpl/conformance/`), each `"kind":
"host"` case variant one test id, run through the real connection: a real host
(`McplHost`, every default plugin, `[mcpl.events] enabled` on), the scripted server
over stdio and WebSocket sending each step's unmodified JSON-RPC `method` and `params`,
and the loopback provider whose received requests the checks read.

The adapter plays the application around agentcore's kernel: `assemble` and `turn` run
one host turn (`Request.turn`; `startTurn`/`joinTurn` one in the background), and the
application keeps its conversation, so each turn carries the previous request's messages
as sent (injected events included) and the model's reply. The server answers
`push/render` as the last `render` plan says (immediate, empty, error, held until
`releaseRender`, or sending an `inference/request` first); `renders` is every
`push/render` it received, with its params. Profile (RFC-006 §14): `initial`
establishes known `none`; an untracked subject is `unknown`; one shared context. A step
whose op this adapter cannot construct (channels, compression, restarts, reconnects,
wake timing) or a variant whose `requires` the profile lacks is skipped with the
reason: unexercised, never a pass.
"""

from __future__ import annotations

import asyncio
import copy
import json
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_rig import Rig, RigFactory
from e2e_support import FULL_GRANT, MANIFEST, TIMEOUT_S, ServerScript, ServerSession

from agentcore import hookimpl
from agentcore.inference import Complete, Failed, HostTurn, Message, Request
from agentcore.testing import Scenario

VECTORS = Path(__file__).parents[1] / "mcpl" / "conformance" / "event-coalescing-vectors.json"
PROFILE = frozenset({"initial-history-none", "untracked-history-unknown"})
OPS = frozenset(
    {"send", "assemble", "turn", "failNextModel", "render", "startTurn", "waitRender"}
    | {"releaseRender", "joinTurn"}
)
PLANS = frozenset({"immediate", "empty", "error", "held", "inference-request"})
PATHS = ("reply.", "requestText", "allRequestText", "modelCalls", "modelFailures", "renders")
RENDER_TIMEOUT_S = 1.5  # [mcpl.events] render_timeout_s: the held-render cases wait it out


def variants() -> list[Any]:
    cases = json.loads(VECTORS.read_text())["cases"]
    return [
        pytest.param(case, variant, id=f"{case['id']}-{variant['name']}")
        for case in cases
        if case["kind"] == "host"
        for variant in case["variants"]
    ]


def unexercised(case: dict[str, Any], variant: dict[str, Any]) -> str | None:
    """Why this adapter cannot run the variant as written, or None."""
    missing = sorted(set(variant["requires"]) - PROFILE)
    if missing:
        return f"profile lacks {missing}"
    setup = {k: v for k, v in variant["setup"].items() if k != "errorPolicy"}
    if setup:
        return f"setup {sorted(setup)} is not constructed by this adapter"
    for step in variant["steps"]:
        if step["op"] not in OPS:
            return f"op {step['op']!r} is not constructed by this adapter"
        if step["op"] == "send" and step["method"] != "push/event":
            return f"{step['method']} is not implemented by this host (no channels)"
        if step["op"] == "render" and step["plan"]["mode"] not in PLANS:
            return f"render plan {step['plan']['mode']!r} is not played by this adapter"
        for check in step.get("checks", []):
            if not str(check.get("path", "")).startswith(PATHS):
                return f"observation {check.get('path')!r} is not made by this adapter"
    return None


class Conversation:
    """The application's record: each host turn's messages as the model was shown them."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    @hookimpl
    def on_host_turn_start(self, inference: Any) -> None:
        self.sent = list(inference.request.messages)


class Renderer:
    """The server's side of `push/render`, as the vectors' `render` plans say."""

    def __init__(self) -> None:
        self.plan: dict[str, Any] = {"mode": "immediate", "text": "RENDERED"}
        self.renders: list[dict[str, Any]] = []
        self.held: list[asyncio.Future[str]] = []

    async def __call__(self, session: ServerSession, params: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"params": params}
        self.renders.append(record)
        mode, text = self.plan["mode"], self.plan["text"]
        if mode == "error":
            return {"error": {"code": -32603, "message": "render failed"}}
        if mode == "empty":
            return {"result": {"content": []}}
        if mode == "held":
            held = asyncio.get_running_loop().create_future()
            self.held.append(held)
            text = await held
        if mode == "inference-request":
            request = {"featureSet": "fs.plain", "messages": [{"role": "user", "content": "x"}]}
            record["inferenceResponse"] = (await session.infer(request)).message
        return {"result": {"content": [{"type": "text", "text": text}]}}


@dataclass
class Run:
    rig: Rig
    conversation: Conversation
    renderer: Renderer
    history: list[Message] = field(default_factory=list)
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_next: bool = False
    background: asyncio.Task[dict[str, Any]] | None = None

    def texts(self, since: int = 0) -> list[str]:
        return [json.dumps(c.body["messages"]) for c in self.rig.provider.calls[since:]]

    async def step(self, step: dict[str, Any]) -> dict[str, Any]:
        observed = await self._step(step)
        return {**observed, "renders": list(self.renderer.renders)}

    async def _step(self, step: dict[str, Any]) -> dict[str, Any]:
        op, renderer = step["op"], self.renderer
        if op == "failNextModel":
            self.fail_next = True
        elif op == "render":
            renderer.plan = step["plan"]
        elif op == "send":
            answer = await self.rig.server.call(step["method"], step["params"])
            return {"reply": answer.message}
        elif op == "startTurn":
            self.background = asyncio.ensure_future(self.turn())
        elif op == "joinTurn":
            assert self.background is not None
            return await self.background
        elif op == "waitRender":
            async with asyncio.timeout(TIMEOUT_S):
                while len(renderer.renders) < step["count"]:
                    await asyncio.sleep(0.01)
        elif op == "releaseRender":
            renderer.held.pop(0).set_result(step["text"])
        else:
            return await self.turn()
        return {}

    async def turn(self) -> dict[str, Any]:
        r = self.rig
        before = len(r.provider.calls)
        # A 400 is not retried: the turn fails once, after assembly (vector 4).
        r.provider.script(Scenario.http_error(400, "no") if self.fail_next else Scenario.text("ok"))
        failing, self.fail_next = self.fail_next, False
        index = len(self.history)
        request = Request(
            "a:claude-e2e",
            [*self.history, Message.user(f"turn {index}")],
            turn=HostTurn("conv", index, f"turn {index}"),
        )
        async with aclosing(r.kernel.stream(request)) as stream:
            events = [event async for event in stream]
        assert isinstance(events[-1], Failed if failing else Complete), events[-1]
        self.history = [*self.conversation.sent, *([] if failing else [Message.assistant("ok")])]
        texts = self.texts(before)
        return {
            "modelCalls": len(texts),
            "modelFailures": len(texts) if failing else 0,
            "requestText": texts[-1] if texts else "",
            "allRequestText": "\n".join(self.texts()),
        }


def lookup(observed: dict[str, Any], path: str) -> Any:
    value: Any = observed
    for part in path.split("."):
        if isinstance(value, list):
            value = len(value) if part == "length" else value[int(part)]
        else:
            value = value[part]
    return value


def check(run: Run, observed: dict[str, Any], c: dict[str, Any]) -> None:
    value = lookup(observed, c["path"])
    if "eq" in c:
        assert value == c["eq"], (c, value)
    if "oneOf" in c:
        assert value in c["oneOf"], (c, value)
    if "sameAs" in c:
        step_id, _, rest = c["sameAs"].partition(".")
        assert value == lookup(run.observed[step_id], rest), c
    for text in c.get("includes", []):
        assert text in value, (c, value)
    for text in c.get("excludes", []):
        assert text not in value, (c, value)
    for text, count in c.get("counts", {}).items():
        assert value.count(text) == count, (c, value)
    if "order" in c:
        at = [value.find(text) for text in c["order"]]
        assert -1 not in at and at == sorted(at), (c, value)


def manifest() -> dict[str, Any]:
    m = copy.deepcopy(MANIFEST)
    m["pushEvents"] = True
    m["featureSets"]["doc"] = {"description": "the vectors' feature set", "uses": ["pushEvents"]}
    return m


@pytest.mark.parametrize(("case", "variant"), variants())
async def test_vector(rig: RigFactory, case: dict[str, Any], variant: dict[str, Any]) -> None:
    reason = unexercised(case, variant)
    if reason is not None:
        pytest.skip(f"unexercised: {reason}")
    conversation, renderer = Conversation(), Renderer()
    r = await rig(
        {"srv": ServerScript(manifest=manifest(), handlers={"push/render": renderer})},
        grants={"srv": [*FULL_GRANT, "pushEvents"]},
        extra={"mcpl": {"events": {"enabled": True, "render_timeout_s": RENDER_TIMEOUT_S}}},
        plugins={"conversation": conversation},
    )
    run = Run(r, conversation, renderer)
    for step in variant["steps"]:
        observed = await run.step(step)
        run.observed[step["id"]] = observed
        for c in step.get("checks", []):
            check(run, observed, c)
