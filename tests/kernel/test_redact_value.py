"""`redact_value`, which every trace's fields pass before an observer reads them: a secret
anywhere in a value (a key, a tuple key, a list in a dict, a tuple) is masked; a value that
holds none comes back as the same object, not rebuilt."""

from __future__ import annotations

from agentcore.redaction import REDACTED, redact_value, register_secret

KEY = "sk-value-7c1e9a5d3b2f4860"


def test_a_secret_anywhere_in_a_value_is_masked() -> None:
    register_secret(KEY)
    value = {
        "plain": "nothing here",
        KEY: 1,
        ("tuple", KEY): 2,
        "list": [1, None, f"Bearer {KEY}", {"deep": (KEY.upper(), 3.5)}],
        "tuple": (True, f"{KEY[:9]} {KEY[9:]}"),
        "number": 7,
    }
    assert redact_value(value) == {
        "plain": "nothing here",
        REDACTED: 1,
        ("tuple", REDACTED): 2,
        "list": [1, None, f"Bearer {REDACTED}", {"deep": (REDACTED, 3.5)}],
        "tuple": (True, REDACTED),
        "number": 7,
    }


def test_a_value_with_no_secret_is_handed_back_as_it_is() -> None:
    register_secret(KEY)
    value = {"inferenceId": "inf_1", "model": "lb:m", "nested": [{"a": ("b", 1)}], 3: None}
    assert redact_value(value) is value
    assert redact_value("plain text") == "plain text"
