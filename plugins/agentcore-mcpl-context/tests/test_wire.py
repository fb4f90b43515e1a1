"""The wire side of the host's own turns (SPEC §10): each injection authorized on its own by
its position, content shapes, and the lifecycle notification's fields."""

from __future__ import annotations

from typing import Any

from agentcore_mcpl_context.wire import (
    HOOK_LEAVES,
    authorize_injections,
    lifecycle_params,
    may_observe,
    takes_hooks,
)

BEFORE = "contextHooks.beforeInference.inject.beforeUser"
SYSTEM = "contextHooks.beforeInference.inject.system"


def result(*injections: Any) -> dict[str, Any]:
    return {"featureSet": "memory.retrieval", "contextInjections": list(injections)}


def test_each_injection_is_authorized_by_its_own_position() -> None:
    grant = frozenset({BEFORE})
    answer = authorize_injections(
        result(
            {"namespace": "m", "position": "beforeUser", "content": "ok"},
            {"namespace": "m", "position": "system", "content": "not granted"},
            {"namespace": "m", "position": "afterUser", "content": "not granted either"},
        ),
        grant,
    )
    assert answer.outcome == "ok"
    assert [(i.position, i.text) for i in answer.injections] == [("beforeUser", "ok")]
    assert answer.dropped == [
        f"contextInjections[1]: position system is not granted ({SYSTEM})",
        "contextInjections[2]: position afterUser is not granted "
        "(contextHooks.beforeInference.inject.afterUser)",
    ]


def test_the_feature_set_and_namespace_authorize_nothing() -> None:
    # §5.4: a response's featureSet is the server's word; the grant decides.
    answer = authorize_injections(
        {
            "featureSet": "admin.everything",
            "contextInjections": [{"namespace": "system", "position": "system", "content": "x"}],
        },
        frozenset({BEFORE, "contextHooks.*"}),  # one segment: no depth-4 leaf (§5.4)
    )
    assert answer.injections == []
    assert len(answer.dropped) == 1


def test_content_shapes() -> None:
    grant = frozenset({BEFORE})
    answer = authorize_injections(
        result(
            {
                "namespace": "m",
                "position": "beforeUser",
                "content": [
                    {"type": "text", "text": "one"},
                    {"type": "resource", "uri": "memory://facts/1"},
                    {"type": "text", "text": "two"},
                    "not a block",
                ],
            },
            {"namespace": "m", "position": "beforeUser", "content": 42},
            {"position": "beforeUser", "content": "no namespace"},
            "not an object",
        ),
        grant,
    )
    # §19: a resource by uri is a bulk reference, shown as its stub (never its uri).
    (injection,) = answer.injections
    one, stub, two = injection.text.split("\n\n")
    ((index, reference),) = injection.references
    assert (one, two, index, reference.uri) == ("one", "two", 1, "memory://facts/1")
    assert stub == (
        f"[bulk reference {reference.id}, not shown; from an MCPL server, context injection]"
    )
    assert answer.dropped_content == [
        "contextInjections[0].content[3] is not a content block (text, image, audio or resource)",
    ]
    assert answer.dropped == [
        "contextInjections[1].content must be a string or an array of blocks",
        "contextInjections[2].namespace (a string) is required",
        "contextInjections[3] is not an object",
    ]


PNG = "iVBORw0KGgo="
WAV = "UklGRiQAAABXQVZF"
CARRIED = frozenset({"image/png", "audio/wav", "application/pdf"})


def test_media_is_kept_where_the_provider_carries_it_and_said_where_not() -> None:
    grant = frozenset({BEFORE, SYSTEM})
    answer = authorize_injections(
        result(
            {
                "namespace": "m",
                "position": "beforeUser",
                "content": [
                    {"type": "image", "data": PNG, "mimeType": "image/png"},
                    {"type": "audio", "data": WAV, "mimeType": "audio/x-wav"},
                    {"type": "audio", "data": WAV, "mimeType": "audio/ogg"},
                    {"type": "image", "uri": "https://example.com/a.png"},
                    {"type": "image", "data": "not base64!", "mimeType": "image/png"},
                    {"type": "image", "data": WAV, "mimeType": "audio/wav"},
                    {
                        "type": "resource",
                        "resource": {"uri": 'memory://a"b', "text": "fact", "mimeType": "text/x"},
                    },
                    {
                        "type": "resource",
                        "resource": {
                            "uri": "memory://docs/plan.pdf",
                            "blob": "JVBERi0=",
                            "mimeType": "application/pdf",
                        },
                    },
                    {"type": "resource_link", "uri": "memory://x", "name": "x"},
                ],
            },
            {
                "namespace": "m",
                "position": "system",
                "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}, "text"],
            },
        ),
        grant,
        CARRIED,
    )
    first, second = answer.injections
    assert [type(b).__name__ for b in first.content] == [
        "MediaBlock",
        "MediaBlock",
        "TextBlock",
        "TextBlock",
        "MediaBlock",
        "TextBlock",
    ]
    image, audio, by_uri, resource, pdf, link = first.content
    # §19: media by uri and an MCP resource_link are bulk references: stubs, no uri.
    assert [r.kind for _, r in first.references] == ["image", "resource_link"]
    assert by_uri.text.startswith("[bulk reference ref_")  # type: ignore[union-attr]
    assert "example.com" not in by_uri.text  # type: ignore[union-attr]
    assert '"x"' in link.text and "memory://" not in link.text  # type: ignore[union-attr]
    assert (image.mime_type, image.data) == ("image/png", PNG)  # type: ignore[union-attr]
    assert audio.mime_type == "audio/wav"  # type: ignore[union-attr]
    assert resource.text == '<resource uri="memory://a&quot;b">\nfact\n</resource>'  # type: ignore[union-attr]
    assert (pdf.mime_type, pdf.name) == ("application/pdf", "plan.pdf")  # type: ignore[union-attr]
    assert second.content == ()
    at = "contextInjections[0].content"
    assert answer.dropped_content == [
        f"{at}[2] (audio audio/ogg): the turn's provider does not carry it",
        f"{at}[4] (image image/png): its data is not base64",
        f"{at}[5]: an image block's mimeType is 'audio/wav'",
        "contextInjections[1].content[0] (image image/png): a system prompt carries text only",
        "contextInjections[1].content[1] is not a content block (text, image, audio or resource)",
    ]
    # A text-only provider (no media types): every media block is said, none is kept.
    text_only = authorize_injections(
        result(
            {
                "namespace": "m",
                "position": "beforeUser",
                "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}],
            }
        ),
        grant,
    )
    assert text_only.injections[0].content == ()
    assert text_only.dropped_content == [
        f"{at}[0] (image image/png): the turn's provider does not carry it"
    ]


def test_a_malformed_result_is_an_error() -> None:
    assert authorize_injections([], frozenset({BEFORE})).outcome == "error"
    bad = authorize_injections({"contextInjections": {}}, frozenset({BEFORE}))
    assert (bad.outcome, bad.error) == ("error", "contextInjections is not an array")
    empty = authorize_injections({"featureSet": "m"}, frozenset({BEFORE}))
    assert (empty.outcome, empty.injections, empty.dropped) == ("ok", [], [])


def test_who_gets_the_hook_and_who_sees_the_user() -> None:
    assert takes_hooks(frozenset({BEFORE}))
    assert not takes_hooks(frozenset({"contextHooks", "contextHooks.beforeInference"}))
    assert all(takes_hooks(frozenset({leaf})) for leaf in HOOK_LEAVES)
    assert not may_observe(frozenset({BEFORE}))
    assert may_observe(frozenset({"contextHooks.beforeInference.*"}))


def test_lifecycle_params_carry_no_content_and_usage_only_when_completed() -> None:
    usage = {"inputTokens": 1, "outputTokens": 2}
    started = lifecycle_params("inf_1", "c", 0, "started", usage=usage)
    assert started == {
        "inferenceId": "inf_1",
        "conversationId": "c",
        "turnIndex": 0,
        "phase": "started",
    }
    failed = lifecycle_params("inf_1", "c", 0, "failed", model={"id": "m"}, usage=usage)
    assert failed == {**started, "phase": "failed", "model": {"id": "m"}}
    completed = lifecycle_params("inf_1", "c", 0, "completed", usage=usage)
    assert completed == {**started, "phase": "completed", "usage": usage}
