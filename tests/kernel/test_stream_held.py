"""`StreamRedactor`'s held tail (`redaction._held_length`): the quick answer for a chunk
whose last two characters start no secret must be the answer the fold gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentcore import redaction
from agentcore.redaction import register_secret, registered_secrets, restore_secrets

SECRETS = ("sk-loopback-not-a-real-key-0000", "Zz9_secret ΣΑΣ", 'p"ss\\wörd-12345')


def folded_length(text: str) -> int:
    """`_held_length` as it was before its quick answer: always through the fold."""
    last = text[-1:]
    if not last or not (last.isspace() or last.lower() in redaction._secret_characters):
        return 0
    folded = redaction._fold(text[-2 * redaction._longest :])[-redaction._longest :]
    n = 0
    for form, length in redaction._starts_by_end.get(folded[-2:], ()):
        if length <= len(folded) and form.startswith(folded[-length:]):
            n = length
            break
    else:
        if folded[-1:] in redaction._starts_by_end:
            n = 1
    if not n:
        return 0
    i = len(text)
    while n:
        i -= 1
        n -= not text[i].isspace()
    if last.isspace() and i and text[i - 1].isalnum():
        return 0
    return len(text) - i


@pytest.fixture(autouse=True)
def secrets() -> Iterator[None]:
    saved = registered_secrets()
    for secret in SECRETS:
        register_secret(secret)
    yield
    restore_secrets(saved)


PIECES = st.sampled_from(
    [*'sk-lopbacZz9_ ΣΑσςİı"\\wö0\n\t', "w0 ", "sk-loop", "SK-LOOP", "  \n", "ΣΑΣ", "İ"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PIECES, max_size=12).map("".join))
def test_the_quick_answer_is_the_folds(text: str) -> None:
    assert redaction._held_length(text) == folded_length(text)


@pytest.mark.parametrize(
    "text", ["w0 ", "w1 w2 ", "a sk", "a sk-", "x SK-LOOPBACK ", "ends ΣΑ", "é0"]
)
def test_the_quick_answer_on_chunks_like_a_stream(text: str) -> None:
    assert redaction._held_length(text) == folded_length(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(PIECES, max_size=6).map("".join), max_size=8))
@example(["xk ", "a sk "])  # "k " starts nothing after "x"; after " s" it ends a start
def test_a_remembered_end_gets_the_folds_answer(texts: list[str]) -> None:
    """Ends that started no secret are remembered (`_no_start_ends`): every chunk, after
    the ones before it were remembered, gets the fold's answer."""
    for text in texts:
        assert redaction._held_length(text) == folded_length(text)


def test_a_secret_registered_later_is_held_where_a_remembered_end_was_not() -> None:
    """The remembered ends are forgotten when the secrets change."""
    assert redaction._held_length("say jq") == 0
    assert redaction._held_length("say jq") == 0  # remembered
    register_secret("jqx-registered-later-9")
    assert redaction._held_length("say jq") == folded_length("say jq") == 2


def fed(chunks: list[str]) -> list[str]:
    redactor = redaction.StreamRedactor()
    return [redactor.feed(chunk) for chunk in chunks] + [redactor.flush()]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(PIECES, max_size=4).map("".join), max_size=8))
@example(["sk-loop", "back-not-a-real-key-0000 "])
@example(["İ", "İ", "zZ9", "_sEcReT", " σας"])
@example(["Zz9_secret ΣΑΣ", "zz9_SECRET σας"])
def test_a_text_too_short_for_a_secret_is_handed_back_as_redact_would(
    chunks: list[str],
) -> None:
    """`redact` and `feed` hand back a text shorter than `_short` at once: the same
    text, and the same chunks, as without that test."""
    quick = [redaction.redact(chunk) for chunk in chunks], fed(chunks)
    short, redaction._short = redaction._short, 0
    try:
        assert quick == ([redaction.redact(chunk) for chunk in chunks], fed(chunks))
    finally:
        redaction._short = short
