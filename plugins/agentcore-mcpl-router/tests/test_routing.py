"""Routing precedence, params parsing and the plain-completion rule, without a connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcore_mcpl_router import (
    McplRouter,
    RoutingSettings,
    parse_messages,
    route,
    wildcard_matches,
)

from agentcore.api import (
    INVALID_PARAMS,
    McplError,
    Response,
    SettingsError,
    StopInfo,
    TextBlock,
    ToolUseBlock,
    Usage,
    completion_problem,
)
from agentcore.testing import Kernel

ROUTING = RoutingSettings(
    default="d:default",
    by_feature={"memory.consolidation": "f:feature"},
    wildcards={"memory.*": "w:wild", "a.*.c": "w:middle"},
    overrides={"conv_1": "o:override"},
)


@pytest.mark.parametrize(
    ("feature", "conversation", "expected"),
    [
        ("memory.consolidation", "conv_1", "o:override"),  # override beats every other rule
        ("memory.consolidation", "conv_2", "f:feature"),  # by_feature beats wildcards
        ("memory.extraction", None, "w:wild"),
        ("memory.deep.nested", None, "d:default"),  # * is exactly one segment
        ("memory", None, "d:default"),  # equal segment counts
        ("a.b.c", None, "w:middle"),
        ("other", None, "d:default"),
    ],
)
def test_route_precedence(feature: str, conversation: str | None, expected: str) -> None:
    assert route(ROUTING, feature, conversation) == expected


def test_no_rule_routes_without_default() -> None:
    assert route(RoutingSettings(), "x", None) is None


def load_routing(tmp_path: Path, routing: str) -> Kernel:
    path = tmp_path / "agentcore.toml"
    path.write_text(f'[providers.local]\nkind = "openai-compatible"\n\n[mcpl.routing]\n{routing}\n')
    return Kernel.load(
        path, environ={}, discover_plugins=False, plugins={"mcpl-router": McplRouter}
    )


@pytest.mark.parametrize(
    ("routing", "key"),
    [
        ('default = "locl:m"', "default"),
        ('by_feature = { "memory.consolidation" = "locl:m" }', 'by_feature."memory.consolidation"'),
        ('wildcards = { "memory.*" = "locl:m" }', 'wildcards."memory.*"'),
        ('overrides = { conv_1 = "locl:m" }', "overrides.conv_1"),
    ],
)
def test_a_routing_target_naming_no_configured_provider_is_refused_at_load(
    tmp_path: Path, routing: str, key: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_routing(tmp_path, routing)
    assert caught.value.problems == [
        f"{tmp_path / 'agentcore.toml'}: mcpl.routing.{key}: names provider 'locl', "
        "which is not configured (did you mean 'local'?) (configured: echo, local)"
    ]


def test_routing_targets_are_model_references(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_routing(tmp_path, 'default = "local"')
    assert caught.value.problems == [
        f"{tmp_path / 'agentcore.toml'}: mcpl.routing.default: 'local' is not of the form "
        "NAME:MODEL"
    ]
    kernel = load_routing(tmp_path, 'default = "local:m"\nwildcards = { "a.*" = "echo:e" }')
    routing = kernel.settings.section("mcpl.routing")
    assert (routing.default, routing.wildcards) == ("local:m", {"a.*": "echo:e"})


def test_wildcard_segments() -> None:
    assert wildcard_matches("*", "memory")
    assert not wildcard_matches("*", "memory.x")
    assert not wildcard_matches("memory.*", "memory")


def test_parse_messages_accepts_strings_blocks_and_system() -> None:
    messages, system = parse_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}],
            },
            {"role": "user", "content": {"type": "text", "text": "Again"}},
        ]
    )
    assert system == "Be brief."
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Hi"),
        ("assistant", "Hello"),
        ("user", "Again"),
    ]


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        (None, "non-empty array"),
        ([], "non-empty array"),
        (["hi"], "messages[0] must be an object"),
        ([{"role": "tool", "content": "x"}], "messages[0].role is 'tool'"),
        ([{"role": "user", "content": 3}], "string or text blocks"),
        ([{"role": "user", "content": [{"type": "image"}]}], "not text"),
        ([{"role": "system", "content": "only system"}], "no user or assistant"),
        # Valid JSON escapes, but no provider body can carry them (tests/mcpl/test_fuzz.py).
        ([{"role": "user", "content": "hi \ud800"}], "messages[0].content holds a lone"),
        ([{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}], "lone surrogate"),
    ],
)
def test_parse_messages_rejects_with_invalid_params(messages: object, fragment: str) -> None:
    with pytest.raises(McplError) as caught:
        parse_messages(messages)
    assert caught.value.code == INVALID_PARAMS
    assert fragment in caught.value.message


def _response(
    reason: str, *, raw: str | None = None, tool: bool = False, mapped: bool = True
) -> Response:
    content: list[TextBlock | ToolUseBlock] = [TextBlock("Hello")]
    if tool:
        content.append(ToolUseBlock("t1", "lookup", {}))
    stop = StopInfo(reason, raw, mapped=mapped)  # type: ignore[arg-type]
    return Response(content, stop, Usage(3, 4), "m", "m-served")


@pytest.mark.parametrize("reason", ["end_turn", "max_tokens", "stop_sequence"])
def test_named_stops_are_plain_completions(reason: str) -> None:
    assert completion_problem(_response(reason)) is None


@pytest.mark.parametrize(
    ("response", "fragment"),
    [
        (_response("refusal"), "refused"),
        (_response("pause_turn"), "pause_turn"),
        (_response("abort"), "stop reason 'abort'"),
        (_response("end_turn", raw="error"), "finish_reason 'error'"),
        (_response("tool_use", tool=True), "called a tool (lookup)"),
        (_response("max_tokens", tool=True), "inside a call to a tool (lookup)"),
        # unknown_stop = "end_turn" lets the kernel end it end_turn; MCPL has no name for it.
        (_response("end_turn", raw="weird", mapped=False), "with stop token 'weird', which"),
    ],
)
def test_every_other_ending_is_a_problem(response: Response, fragment: str) -> None:
    problem = completion_problem(response)
    assert problem is not None and fragment in problem
