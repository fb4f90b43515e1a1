"""`agentcore mcpl digest [FILE]` as a user runs it: a real subprocess, from a file or stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = Path(__file__).parents[1] / "mcpl" / "conformance"
VECTORS: dict[str, Any] = json.loads((CONFORMANCE / "manifest-digest-vectors.json").read_text())
BY_NAME = {v["name"]: v for v in VECTORS["vectors"]}


def digest(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", "mcpl", "digest", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_digest_of_a_file(tmp_path: Path) -> None:
    # The unicode vector, written as UTF-8 (not escaped), so the bytes on disk matter.
    vector = BY_NAME["unicode-and-json-escapes"]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(vector["input"], ensure_ascii=False), encoding="utf-8")
    done = digest(str(manifest))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == vector["digest"] + "\n"
    assert done.stderr == b""


def test_digest_of_stdin() -> None:
    vector = BY_NAME["rfc-003-worked-example"]
    done = digest(stdin=json.dumps(vector["input"]).encode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4"


def test_a_refused_manifest_exits_1_naming_the_identifier() -> None:
    vector = BY_NAME["negative-solidus-in-feature-set-name"]
    done = digest(stdin=json.dumps(vector["input"]).encode())
    assert done.returncode == 1
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert "identifier_charset" in stderr
    assert "demo/messaging" in stderr


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b'{"version": ', "the input is not JSON"),
        (b'{"version": NaN}', "NaN is not JSON"),
        (b"[1, 2]", "manifest_not_object"),
    ],
)
def test_input_that_is_not_a_manifest_exits_1_saying_why(stdin: bytes, said: str) -> None:
    done = digest(stdin=stdin)
    assert done.returncode == 1
    assert done.stdout == b""
    assert said in done.stderr.decode()


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b"[" * 100_000, "the input is not JSON: it is nested too deeply to read"),
        (b'{"a":' + b"[" * 900 + b"]" * 900 + b"}", "nesting_too_deep"),
        (
            b'{"version": "0.5", "pushEvents": true, "pushEvents": false}',
            "the member 'pushEvents' appears twice in one object",
        ),
        (
            b'{"featureSets": {"a": {"uses": ["tools"]}, "a": {"uses": []}}}',
            "the member 'a' appears twice in one object",
        ),
        (b'{"n": ' + b"1" * 5000 + b"}", "a number has more than 4300 digits"),
    ],
    ids=["deep-array", "deep-manifest", "duplicate-capability", "duplicate-set", "long-number"],
)
def test_input_a_digest_cannot_be_trusted_on_exits_1_with_the_reason(
    stdin: bytes, said: str
) -> None:
    """Nesting too deep is no RecursionError traceback, and a duplicate member name is refused
    rather than digested as whichever copy the parser kept (JCS takes I-JSON, RFC 8785 §3.1)."""
    done = digest(stdin=stdin)
    assert done.returncode == 1
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert said in stderr
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1
