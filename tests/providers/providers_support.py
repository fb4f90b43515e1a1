"""Helpers shared by the provider tests: SSE payloads, awkward splits, translating with no
HTTP, raw bodies over the loopback server."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentcore.default_plugins.provider_kinds import agentcore_provider_kinds
from agentcore.inference import (
    Complete,
    Failed,
    InferenceError,
    Message,
    Request,
    StreamEvent,
    Token,
)
from agentcore.providers.base import Provider
from agentcore.providers.sse import SSEDecoder
from agentcore.providers.wire import Translator
from agentcore.settings import InferenceSettings, ProviderSettings
from agentcore.testing import LoopbackServer, Scenario

KEY = "sk-test-secret-key-123456"
KEY_ENV = "PROVIDER_TEST_KEY"

SNOWMAN = "\u2603"  # three bytes in UTF-8
FACE = "\U0001f642"  # four bytes in UTF-8


def create_provider(name: str, config: ProviderSettings, inference: InferenceSettings) -> Provider:
    """A built-in provider made as a kernel makes it: by its kind's factory, from the
    built-in plugin's `agentcore_provider_kinds`."""
    return agentcore_provider_kinds()[config.kind](name, config, inference)


def request(text: str = "hi", **kwargs: Any) -> Request:
    return Request("x:m", [Message.user(text)], **kwargs)


def sse(*events: tuple[str | None, Any], eol: str = "\n") -> bytes:
    """Encode events as an SSE body: (event name or None, JSON value or raw str)."""
    out: list[str] = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        lines = ([f"event: {name}"] if name else []) + [f"data: {text}"]
        out.append(eol.join(lines) + eol + eol)
    return "".join(out).encode()


def splits(payload: bytes, *, every: int = 1) -> Iterator[list[bytes]]:
    """The payload whole, byte by byte, and cut in two at every `every`-th position."""
    yield [payload]
    yield [payload[i : i + 1] for i in range(len(payload))]
    for cut in range(1, len(payload), every):
        yield [payload[:cut], payload[cut:]]


def awkward_cuts(payload: bytes, *markers: bytes) -> list[int]:
    """Positions just inside each marker: mid-line, mid-character, between CR and LF."""
    cuts: list[int] = []
    for marker in markers:
        at = payload.find(marker)
        assert at >= 0, marker
        cuts.extend(range(at, at + len(marker) + 1))
    return sorted(set(cuts))


async def collect(provider: Provider, req: Request | None = None) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    try:
        async for event in provider.stream(req or request(), "m"):
            events.append(event)
    except InferenceError as error:
        events.append(Failed(error))
    return events


def terminal(events: list[StreamEvent]) -> StreamEvent:
    ends = [e for e in events if isinstance(e, Complete | Failed)]
    assert len(ends) == 1, events
    assert events[-1] is ends[0], "the terminal event must be the last"
    return ends[0]


def visible(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Token) and e.visible)


def invisible(events: list[StreamEvent], block: str) -> str:
    return "".join(
        e.text for e in events if isinstance(e, Token) and not e.visible and e.block == block
    )


FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    """A recorded SSE body from ``tests/providers/fixtures``."""
    return (FIXTURES / name).read_bytes()


def translate(
    translator: Translator, chunks: Sequence[bytes], cut: InferenceError | None = None
) -> list[StreamEvent]:
    """What a translator makes of a body delivered in `chunks`, with no HTTP: the driver's
    loop, synchronously (`cut`: the body broke off after the last chunk)."""
    decoder = SSEDecoder()
    events: list[StreamEvent] = []
    for chunk in chunks:
        events += translator.feed(decoder.feed_tuples(chunk))
        if translator.done:
            break
    else:
        if cut is None:
            events += translator.feed(decoder.close_tuples())
    events += translator.end(cut)
    return events


def raw(server: LoopbackServer, body: bytes, status: int = 200, **headers: str) -> None:
    """Have the loopback server answer the next call with exactly `body` (an SSE stream
    unless a ``content_type`` says otherwise)."""
    headers.setdefault("content_type", "text/event-stream")
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    server.script(Scenario.http_error(status, body=body, headers=sent))
