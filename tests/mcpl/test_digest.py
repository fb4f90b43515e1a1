"""The §17.2 manifest digest against MCPL's own conformance vectors.

The vectors are read from `conformance/manifest-digest-vectors.json`, a copy of MCPL's
`conformance/manifest-digest-vectors.json` (source and commit in `conformance/README.md`),
and iterated rather than transcribed, as MCPL's CONSUMING.md asks: each vector is asserted
on its canonical JSON, its SHA-256 and its revision, in that order, so a failure names
the step that broke.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from agentcore.mcpl.digest import DigestRefused, canonical_json, manifest_digest, set_order

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "conformance" / "manifest-digest-vectors.json").read_text()
)
BY_NAME = {v["name"]: v for v in VECTORS["vectors"]}
POSITIVE = [v for v in VECTORS["vectors"] if "digest" in v]
NEGATIVE = [v for v in VECTORS["vectors"] if "expectError" in v]


def test_the_file_holds_what_the_issue_counts() -> None:
    assert len(VECTORS["vectors"]) == 25
    assert len(VECTORS["sortVectors"]) == 4
    assert len(POSITIVE) + len(NEGATIVE) == 25


@pytest.mark.parametrize("vector", POSITIVE, ids=[v["name"] for v in POSITIVE])
def test_positive_vector(vector: dict[str, Any]) -> None:
    canonical = canonical_json(vector["input"])
    assert canonical == vector["canonicalJson"]
    assert hashlib.sha256(canonical.encode("utf-8")).hexdigest() == vector["sha256Hex"]
    assert manifest_digest(vector["input"]) == vector["digest"]
    if "sameDigestAs" in vector:
        other = BY_NAME[vector["sameDigestAs"]]["input"]
        assert manifest_digest(vector["input"]) == manifest_digest(other)
    if "differentDigestFrom" in vector:
        other = BY_NAME[vector["differentDigestFrom"]]["input"]
        assert manifest_digest(vector["input"]) != manifest_digest(other)


@pytest.mark.parametrize("vector", NEGATIVE, ids=[v["name"] for v in NEGATIVE])
def test_negative_vector(vector: dict[str, Any]) -> None:
    with pytest.raises(DigestRefused) as refused:
        manifest_digest(vector["input"])
    assert refused.value.code == vector["expectError"]


@pytest.mark.parametrize(
    "vector", VECTORS["sortVectors"], ids=[v["name"] for v in VECTORS["sortVectors"]]
)
def test_sort_vector(vector: dict[str, Any]) -> None:
    assert set_order(vector["input"]) == vector["sorted"]


def test_the_digest_does_not_change_its_input() -> None:
    vector = BY_NAME["key-ordering-and-set-ordering-independence"]
    before = json.dumps(vector["input"])
    manifest_digest(vector["input"])
    assert json.dumps(vector["input"]) == before


@pytest.mark.parametrize(
    ("manifest", "code"),
    [
        ([], "manifest_not_object"),
        ("0.5", "manifest_not_object"),
        ({"version": "0.5", "big": 10**400}, "number_out_of_range"),
        ({"version": "0.5", "nan": float("nan")}, "number_out_of_range"),
        ({"version": "0.5", "x": "\ud800"}, "invalid_string"),
    ],
)
def test_inputs_that_are_no_manifest_are_refused_naming_why(manifest: object, code: str) -> None:
    with pytest.raises(DigestRefused) as refused:
        manifest_digest(manifest)
    assert refused.value.code == code


def test_an_integer_past_two_to_the_53_is_written_as_the_double_it_parses_to() -> None:
    # JSON numbers are doubles to JCS: 2**53 + 1 parses (in JavaScript too) to 2**53.
    assert canonical_json({"n": 2**53 + 1}) == '{"n":9007199254740992}'
