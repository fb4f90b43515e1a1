"""The hook rules the specs declare (`agentcore.hookspecs.RULES`) drive every call.

For each hook, a plugin raises in it and a real Kernel is driven until the hook is
called; what happens must be what the hook's declared failure rule says. The table
itself is checked: every spec declares a rule, pluggy's ``firstresult`` agrees with
it, and docs/architecture.md lists the same hooks with the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kernel_support import Server, collect, reply, server_error, text_of

from agentcore import hookimpl
from agentcore.hooks import plugin_manager
from agentcore.hookspecs import RULES
from agentcore.inference import Failed, HostTurn, InferenceError, Message, PluginError, Request
from agentcore.inference.calls import Attempt, Retry
from agentcore.kernel import Kernel, PluginLoadError, as_inference_error
from agentcore.markers import Failure, Kind, Result, hookspec, rules_of, spec
from agentcore.mcpl.frames import error_object
from agentcore.mcpl.host import McplHost
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError, McplRequest, PushAnswer
from agentcore.plugins import SettingsSection

ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"

MakeKernel = Callable[..., Kernel]
Outcome = BaseException | None
"""What the caller of a hook got: the error it failed with, or None when it went on."""


class RetryOnce:
    """Makes the kernel wait (a ``backoff`` wait) once, so the wait observers are called."""

    @hookimpl(trylast=True)
    def on_inference_error(self, attempt: Attempt) -> Retry | None:
        return Retry(0.001) if attempt.number == 1 else None


# -- how each hook is made to be called, through a real Kernel ----------------------------


async def _load(make_kernel: MakeKernel, plugin: object, scripted: Any) -> Outcome:
    try:
        make_kernel(plugins={"boom": plugin})
    except PluginLoadError as error:
        return error
    return None


async def _lifecycle(make_kernel: MakeKernel, plugin: object, scripted: Any) -> Outcome:
    kernel = make_kernel(plugins={"boom": plugin})
    try:
        async with kernel:
            pass
    except PluginLoadError as error:
        return error
    return None


async def _inference(
    make_kernel: MakeKernel,
    plugin: object,
    scripted: Any,
    *,
    retry: bool = False,
    turn: bool = False,
) -> Outcome:
    plugins: dict[str, object] = {"boom": plugin}
    if retry:  # the first attempt fails, and is retried after a backoff wait
        scripted([server_error()], reply("still here"))
        plugins["retry-once"] = RetryOnce()
    else:
        scripted(reply("still here"))
    kernel = make_kernel(plugins=plugins)
    question = Request("fake:m1", [Message.user("hi")], turn=HostTurn("c", 0) if turn else None)
    async with kernel:
        events = await collect(kernel.stream(question))
    if isinstance(events[-1], Failed):
        return events[-1].error
    assert text_of(events) == "still here"
    return None


async def _capabilities(make_kernel: MakeKernel, plugin: object, scripted: Any) -> Outcome:
    kernel = make_kernel(plugins={"boom": plugin})
    async with kernel:
        host = McplHost(kernel)
    assert host.capabilities  # the connection layer's own, without the failed plugin's
    return None


async def _mcpl(make_kernel: MakeKernel, plugin: object, scripted: Any, *, method: str) -> Outcome:
    params: dict[str, Any] = {"x": 1}
    if method == "push/event":
        params = {
            "featureSet": "acme",
            "eventId": "e-1",
            "timestamp": "2025-01-01T00:00:00Z",
            "payload": {"content": []},
        }
    kernel = make_kernel(plugins={"boom": plugin})
    async with kernel:
        try:
            await McplHost(kernel).handle(McplRequest(Server(), 7, method, params))
        except McplError as error:
            return error
        except PluginError as error:  # answered where every exception becomes an error object
            return McplError(**error_object(error))
    return None


async def _spend(make_kernel: MakeKernel, plugin: object, scripted: Any) -> Outcome:
    """`agentcore spend`'s call; a plugin's failure is what the command reports."""
    kernel = make_kernel(plugins={"boom": plugin})
    async with kernel:
        try:
            await kernel.hooks.spend_report()
        except PluginError as error:
            return as_inference_error(error)
        except InferenceError as error:
            return error
    return None


Scenario = Callable[[MakeKernel, object, Any], Awaitable[Outcome]]
SCENARIOS: dict[str, Scenario] = {
    "agentcore_settings": _load,
    "agentcore_provider_kinds": _load,
    "agentcore_start": _lifecycle,
    "agentcore_stop": _lifecycle,
    "on_admission": _inference,
    "on_admission_claims": _inference,
    "on_stream_event": _inference,
    "on_attempt_end": _inference,
    "on_trace": _inference,
    "on_inference_error": partial(_inference, retry=True),
    "on_wait_start": partial(_inference, retry=True),
    "on_wait_end": partial(_inference, retry=True),
    "on_host_turn_context": partial(_inference, turn=True),
    "on_host_turn_start": partial(_inference, turn=True),
    "on_host_turn_end": partial(_inference, turn=True),
    "agentcore_mcpl_capabilities": _capabilities,
    "on_mcpl_request": partial(_mcpl, method="acme/echo"),
    "on_push_event": partial(_mcpl, method="push/event"),
    "on_spend_report": _spend,
}
"""For each hook, a way to make a real Kernel call it with a plugin registered as ``boom``,
and what the caller got (each is called ``(make_kernel, plugin, scripted)``)."""


def scenario(hook: str) -> Scenario:
    assert hook in SCENARIOS, f"no scenario calls {hook}: add one to SCENARIOS"
    return SCENARIOS[hook]


def raising(hook: str, error: Exception, *, is_async: bool) -> object:
    """A plugin whose only implementation, of `hook`, raises `error`."""

    def implementation() -> None:
        raise error

    async def async_implementation() -> None:
        raise error

    return SimpleNamespace(**{hook: hookimpl(async_implementation if is_async else implementation)})


# -- every hook's failure rule, as declared ------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async-def"])
@pytest.mark.parametrize("hook", sorted(RULES))
async def test_an_exception_does_what_the_hooks_rule_says(
    hook: str, is_async: bool, make_kernel: MakeKernel, scripted: Any, log_lines: list[str]
) -> None:
    rule = RULES[hook]
    broke = RuntimeError(f"{hook} broke")
    outcome = await scenario(hook)(make_kernel, raising(hook, broke, is_async=is_async), scripted)
    if is_async and rule.kind is Kind.LOAD:  # refused uncalled: nothing may be awaited there
        what = f"{hook} must be a plain function: it is called before any loop runs"
    else:
        what = f"{hook} raised RuntimeError: {hook} broke"
    log = "\n".join(log_lines)
    if rule.failure is Failure.LOGGED:
        assert outcome is None  # the call went on
        assert f"plugin 'boom' failed in {hook}" in log
        assert (what if is_async and rule.kind is Kind.LOAD else f"{hook} broke") in log
    elif rule.failure is Failure.DECIDES:
        assert isinstance(outcome, InferenceError | McplError), outcome
        assert f"plugin 'boom': {what}" in str(outcome)
        if isinstance(outcome, McplError):
            assert outcome.code == INTERNAL_ERROR
        assert f"failed in {hook}" not in log
    else:
        assert rule.failure is Failure.FAILS_PLUGIN
        assert isinstance(outcome, PluginLoadError), outcome
        assert f"  boom ((registered)): {what}\n" in str(outcome)


@pytest.mark.parametrize(
    "hook", sorted(h for h, r in RULES.items() if r.failure is Failure.DECIDES)
)
async def test_a_decision_hooks_own_error_is_the_answer(
    hook: str, make_kernel: MakeKernel, scripted: Any
) -> None:
    mcpl = hook in ("on_mcpl_request", "on_push_event")
    error = (
        McplError(-32001, "not for you")
        if mcpl
        else InferenceError("rate_limit", "held for 900 s", retryable=True)
    )
    outcome = await scenario(hook)(make_kernel, raising(hook, error, is_async=True), scripted)
    assert outcome is error


# -- how results combine ------------------------------------------------------------------


async def test_first_non_none_answers_a_push_event_and_no_later_plugin_is_asked(
    make_kernel: MakeKernel,
) -> None:
    asked: list[str] = []

    class Passes:
        @hookimpl(tryfirst=True)
        async def on_push_event(self) -> None:
            asked.append("passes")

    class Answers:
        @hookimpl
        async def on_push_event(self, event: Any) -> PushAnswer:
            asked.append("answers")
            return PushAnswer(True, inference_id=f"inf_{event.event_id}")

    class Late:
        @hookimpl(trylast=True)
        def on_push_event(self) -> PushAnswer:
            asked.append("late")
            return PushAnswer(False, reason="too late")

    kernel = make_kernel(plugins={"late": Late(), "answers": Answers(), "passes": Passes()})
    params = {"featureSet": "acme", "eventId": "e-7", "timestamp": "t", "payload": {"content": []}}
    async with kernel:
        answer = await McplHost(kernel).handle(McplRequest(Server(), 7, "push/event", params))
    assert answer == {"accepted": True, "inferenceId": "inf_e-7"}
    assert asked == ["passes", "answers"]


async def test_collect_keeps_every_answer_in_order_and_skips_none(
    make_kernel: MakeKernel, log_lines: list[str]
) -> None:
    class First:
        @hookimpl(tryfirst=True)
        def agentcore_mcpl_capabilities(self) -> dict[str, Any]:
            return {"contextHooks": {"beforeInference": True}}

    class Nothing:
        @hookimpl
        def agentcore_mcpl_capabilities(self) -> None:
            return None

    class Second:
        @hookimpl(trylast=True)
        def agentcore_mcpl_capabilities(self) -> dict[str, Any]:
            return {"inferenceLifecycle": True}

    kernel = make_kernel(plugins={"second": Second(), "nothing": Nothing(), "first": First()})
    assert kernel.hooks.mcpl_capabilities() == [
        {"contextHooks": {"beforeInference": True}},
        {"inferenceLifecycle": True},
    ]
    assert not [line for line in log_lines if "agentcore_mcpl_capabilities" in line]


# -- the table ---------------------------------------------------------------------------


def test_every_spec_declares_its_rule_and_pluggy_agrees() -> None:
    pm = plugin_manager()
    specs = {
        name
        for name in dir(pm.hook)
        if (caller := getattr(pm.hook, name)) is not None and getattr(caller, "spec", None)
    }
    assert set(RULES) == specs
    for hook, rule in RULES.items():
        assert getattr(pm.hook, hook).spec.opts["firstresult"] is (rule.result is Result.FIRST)


def test_a_spec_without_a_rule_is_refused_by_name() -> None:
    """`agentcore.hookspecs` builds RULES with `rules_of`: such a spec stops its import."""

    @hookspec
    def on_something(attempt: Attempt) -> None:
        """A new hook someone forgot to give a kind."""

    @spec(Kind.IN_PATH)
    def on_other(attempt: Attempt) -> None:
        """Declared."""

    with pytest.raises(TypeError, match="'on_something' declares no kind"):
        rules_of({"on_something": on_something, "on_other": on_other})
    assert dict(rules_of({"on_other": on_other})) == {"on_other": RULES["on_attempt_end"]}


def test_an_observer_can_only_be_an_observer() -> None:
    with pytest.raises(ValueError, match="observer"):
        spec(Kind.OBSERVER, Result.FIRST)
    with pytest.raises(ValueError, match="observer"):
        spec(Kind.OBSERVER, failure=Failure.DECIDES)


def documented_rules() -> dict[str, tuple[str, str, str]]:
    """hook -> (kind, result, failure) cells, from the table under "The hook contracts"."""
    text = ARCHITECTURE.read_text()
    section = text.split("## The hook contracts", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        names, kind, _when, result, failure = (c.strip() for c in line.strip("|").split(" | "))
        for name in re.findall(r"`(\w+)", names):
            assert name not in rows, f"{name} is listed twice"
            rows[name] = (kind, result, failure)
    return rows


def test_the_docs_list_every_hook_with_its_declared_rule() -> None:
    documented = documented_rules()
    assert set(documented) == set(RULES), "docs/architecture.md's hook table != RULES"
    for hook, rule in RULES.items():
        kind, result, failure = documented[hook]
        assert kind == rule.kind.value, hook
        assert result.startswith(rule.result.value), hook
        assert failure.startswith(rule.failure.value), hook


# -- load-time hooks go through pluggy, like every other ----------------------------------


async def test_a_load_time_hook_named_by_specname_is_called(make_kernel: MakeKernel) -> None:
    from pydantic import BaseModel

    class Section(BaseModel):
        level: int = 1

    seen: list[object] = []

    class Renamed:
        @hookimpl(specname="agentcore_settings")
        def my_section(self) -> SettingsSection:
            return SettingsSection("renamed", Section)

        @hookimpl
        def agentcore_start(self, context: Any) -> None:
            seen.append(context.settings)

    kernel = make_kernel(plugins={"renamed": Renamed()}, env={"AGENTCORE_RENAMED__LEVEL": "2"})
    async with kernel:
        pass
    assert seen == [Section(level=2)]
