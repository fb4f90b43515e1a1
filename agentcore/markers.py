"""agentcore's pluggy markers and hook rules, on the lowest floor so that any module can use them.

`hookimpl` marks a plugin's implementations (``from agentcore import hookimpl``).
`spec(kind, result)` marks each specification in `agentcore.hookspecs` with its
rule: when it is called, how its implementations' results combine and what an
exception does. `agentcore.hooks` calls every hook as its rule says, and the
docs' table of hooks is checked against the rules. They live apart from the
specifications because the specifications name types from every other module,
and a plugin module (the JSONL sink in `agentcore.traces`, the built-in provider
kinds) must not import what imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TypeVar

import pluggy

PROJECT = "agentcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Kind(Enum):
    """When a hook is called, and what waits for it."""

    LOAD = "load"
    """A plain function, called as the kernel (or an `McplHost`) is made, where nothing
    may be awaited: an `async def` implementation fails like an exception."""
    LIFECYCLE = "lifecycle"
    """Awaited in load order as the kernel starts or stops."""
    OBSERVER = "observer"
    """Never makes an inference wait. A plugin whose observers are all plain functions
    is called inline; a plugin with any `async def` observer gets all its observer calls,
    in order, through a bounded backlog and a task of its own (`agentcore.hooks`)."""
    IN_PATH = "in-path"
    """Awaited in order on the inference's (or the turn's) path: the inference waits for
    it, so keep it quick."""
    DECISION = "decision"
    """Awaited in order on the path; what it returns or raises decides what happens."""


class Result(Enum):
    """How the implementations' results make the hook's result."""

    NONE = "none"
    """Results are ignored."""
    FIRST = "first non-None"
    """Stops at the first non-None result, which is the hook's; None when there is none
    (held for `async def` implementations too)."""
    CHAIN = "chain"
    """A non-None result replaces the last argument, for the implementations after it
    and for the caller."""
    COLLECT = "collect"
    """Every non-None result, with its plugin's name, in call order."""


class Failure(Enum):
    """What an exception raised by an implementation does."""

    LOGGED = "logged"
    """Logged with the plugin's name and traceback; the call goes on without it."""
    DECIDES = "decides"
    """An `InferenceError` (or `McplError`) is the answer and propagates; any other
    exception becomes a `PluginError` naming the plugin."""
    FAILS_PLUGIN = "fails the plugin"
    """Raised as a `PluginError` naming the plugin, which is then reported by name and
    not loaded (unless ``[plugins] strict = false``, the host does not start)."""


@dataclass(frozen=True, slots=True)
class HookRule:
    """One hook's rule, as its spec declares it."""

    kind: Kind
    result: Result
    failure: Failure


KIND_FAILURE: Mapping[Kind, Failure] = MappingProxyType(
    {
        Kind.LOAD: Failure.FAILS_PLUGIN,
        Kind.LIFECYCLE: Failure.FAILS_PLUGIN,
        Kind.OBSERVER: Failure.LOGGED,
        Kind.IN_PATH: Failure.LOGGED,
        Kind.DECISION: Failure.DECIDES,
    }
)
"""Each kind's failure rule, unless its spec says otherwise."""

RULE_ATTRIBUTE = f"{PROJECT}_rule"
SPEC_ATTRIBUTE = f"{PROJECT}_spec"
"""Where pluggy's `hookspec` marker leaves its options on a specification."""

F = TypeVar("F", bound=Callable[..., object])


def spec(
    kind: Kind, result: Result = Result.NONE, *, failure: Failure | None = None
) -> Callable[[F], F]:
    """Mark a hook specification with its rule (and as pluggy's `hookspec`).

    The failure rule is the kind's unless given. pluggy's ``firstresult`` follows
    `Result.FIRST`, so the two never disagree.
    """
    rule = HookRule(kind, result, KIND_FAILURE[kind] if failure is None else failure)
    if kind is Kind.OBSERVER and (rule.result, rule.failure) != (Result.NONE, Failure.LOGGED):
        raise ValueError("an observer's result is ignored and its failure is logged")
    marker = hookspec(firstresult=result is Result.FIRST)

    def mark(function: F) -> F:
        setattr(function, RULE_ATTRIBUTE, rule)
        return marker(function)

    return mark


def rules_of(namespace: Mapping[str, object]) -> Mapping[str, HookRule]:
    """The rule of every hook specification in `namespace` (a module's globals).

    A specification marked with pluggy's bare `hookspec` states no rule: that is an
    error naming it, so no hook is ever called by a rule nobody wrote down.
    """
    rules: dict[str, HookRule] = {}
    for name, value in namespace.items():
        if not callable(value) or not hasattr(value, SPEC_ATTRIBUTE):
            continue
        rule = getattr(value, RULE_ATTRIBUTE, None)
        if not isinstance(rule, HookRule):
            raise TypeError(
                f"hook specification {name!r} declares no kind: mark it with "
                "agentcore.markers.spec(Kind..., Result...) instead of hookspec"
            )
        rules[name] = rule
    return MappingProxyType(rules)


__all__ = [
    "PROJECT",
    "Failure",
    "HookRule",
    "Kind",
    "Result",
    "hookimpl",
    "hookspec",
    "rules_of",
    "spec",
]
