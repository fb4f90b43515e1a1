"""MCPL §18 endpoint URIs (RFC-004): the 20 test vectors of RFC-004 §8, through the
resolver, the settings that accept a server's `url`, and `agentcore mcpl uri` as a user
runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from agentcore.mcpl.endpoint import EndpointError, resolve
from agentcore.settings_mcpl import McplServerSettings

# RFC-004 §8.1: input, canonicalUri, resolvedTransport.
RESOLUTION = [
    ("mcpl://example.com", "mcpl://example.com/", "wss://example.com/"),
    ("mcpl://example.com/path", "mcpl://example.com/path", "wss://example.com/path"),
    ("mcpl://example.com:8443/x", "mcpl://example.com:8443/x", "wss://example.com:8443/x"),
    (
        "mcpl://eidoverse.animalabs.ai?world=abc",
        "mcpl://eidoverse.animalabs.ai/?world=abc",
        "wss://eidoverse.animalabs.ai/?world=abc",
    ),
    ("MCPL://Example.COM/x", "mcpl://example.com/x", "wss://example.com/x"),
    (
        "mcpl://EIDOVERSE.Animalabs.AI:443/x",
        "mcpl://eidoverse.animalabs.ai/x",
        "wss://eidoverse.animalabs.ai/x",
    ),
    (
        "mcpl://ünicode.example/x",
        "mcpl://xn--nicode-2ya.example/x",
        "wss://xn--nicode-2ya.example/x",
    ),
    ("mcpl://[2001:DB8::1]:8443/x", "mcpl://[2001:db8::1]:8443/x", "wss://[2001:db8::1]:8443/x"),
    ("mcpl://localhost/x", "mcpl://localhost/x", "wss://localhost/x"),
    ("mcpl://h/p?b=2&a=1", "mcpl://h/p?b=2&a=1", "wss://h/p?b=2&a=1"),
    ("mcpl://h/x?a=1&a=2", "mcpl://h/x?a=1&a=2", "wss://h/x?a=1&a=2"),
    ("mcpl://h/a%2fb", "mcpl://h/a%2fb", "wss://h/a%2fb"),
    ("mcpl://h/%7Euser", "mcpl://h/%7Euser", "wss://h/%7Euser"),
]
# RFC-004 §8.2: input, and what the refusal names.
REJECTION = [
    ("mcpl:///x", "empty authority"),
    ("mcpl://u:p@h/x", "userinfo"),
    ("mcpl://h/x#frag", "fragment"),
    ("mcpl://h/a/../b", "path segment"),
    ("mcpl://h/a/%2e%2e/b", "path segment"),
    ("mcpl://h/a/./b", "path segment"),
    ("mcpl://h:99999/x", "port outside 0-65535"),
]


@pytest.mark.parametrize(("uri", "canonical", "resolved"), RESOLUTION, ids=range(1, 14))
def test_resolution(uri: str, canonical: str, resolved: str) -> None:
    endpoint = resolve(uri)
    assert (endpoint.configured, endpoint.canonical, endpoint.resolved) == (
        uri,
        canonical,
        resolved,
    )


@pytest.mark.parametrize(("uri", "said"), REJECTION, ids=range(14, 21))
def test_rejection(uri: str, said: str) -> None:
    with pytest.raises(EndpointError, match=said) as refused:
        resolve(uri)
    assert uri not in str(refused.value)  # never repeated: it may hold a credential
    with pytest.raises(ValidationError, match=said):
        McplServerSettings(url=uri)


def test_ws_and_wss_are_accepted_and_dialled_as_written() -> None:
    secure = resolve("wss://Example.COM:443/x")
    assert (secure.canonical, secure.resolved) == (
        "mcpl://example.com/x",
        "wss://Example.COM:443/x",
    )
    plain = resolve("ws://127.0.0.1:9000/mcpl")
    assert (plain.canonical, plain.resolved) == ("ws://127.0.0.1:9000/mcpl", plain.configured)
    # What §18 refuses in an mcpl:// URI a ws:// URL may still carry, as before.
    assert resolve("ws://u:p@h/x").resolved == "ws://u:p@h/x"
    assert McplServerSettings(url="mcpl://h/x").url == "mcpl://h/x"


def uri(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcore", "mcpl", "uri", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_prints_the_three_values() -> None:
    done = uri("mcpl://EIDOVERSE.Animalabs.AI?world=abc")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "configuredUri": "mcpl://EIDOVERSE.Animalabs.AI?world=abc",
        "canonicalUri": "mcpl://eidoverse.animalabs.ai/?world=abc",
        "resolvedTransport": "wss://eidoverse.animalabs.ai/?world=abc",
    }


def test_the_cli_refuses_an_empty_authority() -> None:
    done = uri("mcpl:///evil")
    assert (done.returncode, done.stdout) == (1, "")
    assert "empty authority" in done.stderr and "evil" not in done.stderr
