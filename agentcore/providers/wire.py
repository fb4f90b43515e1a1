"""What a wire format is: a small synchronous translator, and the pieces every wire shares.

A provider kind speaks one wire format. The wire does no I/O: it says what to send
(`Wire.call`: a path and a JSON body; `Wire.headers`: auth included) and, through a
`Translator` made for each call, turns what comes back into the normalized model:
decoded SSE events into `StreamEvent`s (`Translator.feed`, then `Translator.end`),
or a whole JSON body into a `Response` (`Translator.whole`). The streaming driver
(`agentcore.providers.driver`) does the rest, the same for every wire: it opens
the call, reads the body, decodes SSE, maps transport failures and closes the
connection. So a translator can be tested on recorded SSE bytes with no HTTP at
all (`tests/providers/fixtures/*.sse`).

How to add a wire, say ``kind = "acme"`` (one module, ``providers/acme.py``):

1. ``class AcmeWire(Wire)``: in ``__init__(name, config, inference)`` resolve the key
   (`resolve_key`) and set `base_url` and `headers`; ``call(request, model, stream=)``
   returns the `HttpCall`; ``translator(request, model)`` a fresh ``AcmeTranslator``.
2. ``class AcmeTranslator(Translator)``: ``read(events, out)`` handles a batch of
   decoded ``(event, data, id)`` tuples, building the reply in `self.blocks` (the
   shared `Blocks` assembler, `agentcore.providers.blocks`) and appending stream
   events to `out`; it sets `finished` once the reply is whole (the stop reason came)
   and `done` once nothing more needs reading, and raises `InferenceError` for an
   error the stream reports.
   ``stop()`` maps the stop token (`normalize_stop`); ``whole(data)`` reads a whole
   reply (raising the error object a 200 may hold).
3. ``class AcmeProvider(HTTPProvider)`` whose ``__init__(name, config, inference)``
   passes ``AcmeWire(...)`` on; register the kind.
4. Scenarios for the loopback server (`agentcore.testing`), so every ending is tested
   as for the other wires, and recorded SSE fixtures for the translator.

The hot path is the text delta: a wire handles it inline in `read`, one JSON decode
and a few dict lookups per event, appending to the open block's `parts` itself.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agentcore.inference import (
    NO_RESULT_MESSAGE,
    NO_TERMINAL,
    BlockStart,
    BlockStop,
    Complete,
    Failed,
    InferenceError,
    MediaBlock,
    Message,
    OutputBlock,
    Request,
    Response,
    StopInfo,
    StopReason,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    ToolUseBlock,
    Usage,
    UsageUpdate,
)
from agentcore.providers.base import normalize_stop
from agentcore.providers.blocks import Block, Blocks, json_object
from agentcore.providers.sse import EventTuple, SSEDecoder
from agentcore.redaction import excerpt, register_secret
from agentcore.settings import DEFAULT_UNKNOWN_STOP, ProviderSettings, UnknownStop

__all__ = [
    "Block",
    "Blocks",
    "HttpCall",
    "StreamDecoder",
    "Translator",
    "Wire",
    "carries_credentials",
    "content_parts",
    "fast_loads",
    "json_object",
    "not_carried",
    "read_usage",
    "replay",
    "resolve_key",
]


@dataclass(frozen=True, slots=True)
class HttpCall:
    """One POST: the path under the provider's base URL (a query string may follow) and
    the JSON body."""

    path: str
    body: Mapping[str, Any]


class StreamDecoder(Protocol):
    """Turns a streamed body's bytes into ``(event, data, id)`` tuples for a translator:
    `SSEDecoder` for the SSE wires; a wire with a framing of its own brings its own."""

    def feed_tuples(self, chunk: bytes) -> list[EventTuple]: ...

    def close_tuples(self) -> list[EventTuple]: ...


class Wire:
    """One provider's wire format: where to send, what headers, and a translator per call."""

    media_types: frozenset[str] = frozenset()
    """The media types (`MediaBlock.mime_type`) this wire carries in a user message; a
    request holding any other is refused (`not_carried`). None: text only."""
    base_url: str
    headers: dict[str, str]
    """Sent with every call, the auth header included; ``[providers.NAME] headers`` go on top."""
    stream_type: str = "text/event-stream"
    """The content type of a streamed body; a 2xx of any other type is read as a whole
    reply (`replay`)."""
    signs: bool = False
    """True when each call carries headers made from the call itself (`sign`)."""

    def decoder(self) -> StreamDecoder:
        """A fresh decoder for one streamed body."""
        return SSEDecoder()

    def sign(self, url: str, body: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
        """With `signs`: the headers one call adds, made from its URL, its exact body
        bytes and the headers sent with it (a request signature, a fresh credential)."""
        return {}

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        raise NotImplementedError

    def translator(self, request: Request, model: str) -> Translator:
        raise NotImplementedError


class Translator:
    """One call's reply, read from decoded SSE events or from a whole JSON body.

    `feed` takes the events one network read completed and returns the stream events
    they make; `end` closes the reply once the body is over (or was cut: `cut` is the
    transport's error) and returns the closing events, `Complete` or `Failed` last.
    An error the stream reports (`read` raises `InferenceError`) and a shape the wire
    does not document (a `KeyError`, `TypeError` ... out of `read`) end it at once
    with `Failed`, after whatever the batch had made before.
    """

    __slots__ = (
        "blocks",
        "cut_short",
        "done",
        "failed",
        "finished",
        "model",
        "provider",
        "served",
        "unknown_stop",
        "usage",
    )

    def __init__(
        self, provider: str, model: str, unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    ) -> None:
        self.provider = provider
        self.model = model
        self.unknown_stop = unknown_stop
        """``[inference] unknown_stop``: what `normalized_stop` does with an unmapped token."""
        self.blocks = Blocks()
        self.usage = Usage()
        self.served: str | None = None
        self.finished = False
        """The stop reason came: the reply is whole even if the body is cut from here on."""
        self.done = False
        """Nothing more needs reading: the driver stops feeding (and drains the body)."""
        self.cut_short = False
        """The reply is whole but the provider is still writing (XML tool mode read a call):
        the driver closes the connection instead of draining it."""
        self.failed = False

    # -- what a wire implements ---------------------------------------------------------

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        """Handle decoded SSE events, appending the stream events they make to `out`."""
        raise NotImplementedError

    def stop(self) -> StopInfo:
        """The reply's stop, once `finished` (may raise, as `normalize_stop` does)."""
        raise NotImplementedError

    def whole(self, data: Any) -> Response:
        """A whole (non-streamed) JSON reply; raises the error object it may hold."""
        raise NotImplementedError

    # -- what the driver calls ----------------------------------------------------------

    def feed(self, events: list[EventTuple]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if events and not self.done:
            try:
                self.read(events, out)
            except InferenceError as error:
                out.append(self.fail(error))
            except (AttributeError, TypeError, KeyError, IndexError) as exc:
                out.append(self.fail(self.unreadable(exc)))
        return out

    def end(self, cut: InferenceError | None = None) -> list[StreamEvent]:
        """The closing events: open blocks stopped, then `Complete`; or `Failed` with
        `cut` (or ``no_terminal``) when the body ended before the reply was whole."""
        if self.failed:
            return []
        if not self.finished:
            return [self.fail(cut or self.no_terminal())]
        out: list[StreamEvent] = []
        try:
            stop = self.closing_stop(out)
        except InferenceError as error:
            return [self.fail(error)]
        self.done = True
        self.blocks.close(out)
        out.append(Complete(self.response(self.blocks.content(), stop)))
        return out

    def closing_stop(self, out: list[StreamEvent]) -> StopInfo:
        """`stop`, for a wire that holds text back until the end (XML tool mode): its last
        events go to `out` before the blocks close."""
        return self.stop()

    def reply(self, data: Any) -> Response:
        """`whole`, with a body of a shape the wire does not document raised as typed."""
        try:
            return self.whole(data)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise self.unreadable(exc, "reply") from None

    def fail(self, error: InferenceError) -> Failed:
        self.failed = self.done = True
        return Failed(error)

    # -- shared by the wires --------------------------------------------------------------

    def response(self, content: list[OutputBlock], stop: StopInfo) -> Response:
        served = self.served or self.model
        return Response(content, stop, self.usage, self.model, served, self.provider)

    def normalized_stop(
        self, token: str | None, mapping: Mapping[str, StopReason], sequence: str | None = None
    ) -> StopInfo:
        """`normalize_stop` for this call: the wire's mapping, the settings' unknown-stop rule."""
        return normalize_stop(
            self.provider, token, mapping, unknown_stop=self.unknown_stop, sequence=sequence
        )

    def not_json(self, data: str) -> InferenceError:
        return InferenceError(
            "server",
            f"The provider sent a stream event that is not JSON: {excerpt(data, 200)!r}",
            provider=self.provider,
            model=self.model,
        )

    def unreadable(self, exc: Exception, what: str = "stream event") -> InferenceError:
        """A stream event (or reply) that is JSON but not of the shape the wire documents."""
        return InferenceError(
            "server",
            f"The provider sent a {what} agentcore cannot read ({type(exc).__name__}: {exc})",
            provider=self.provider,
            model=self.model,
        )

    def no_terminal(self) -> InferenceError:
        """The provider's stream ended (cleanly or not) before the inference finished."""
        return InferenceError(
            "network", NO_RESULT_MESSAGE, code=NO_TERMINAL, provider=self.provider, model=self.model
        )


# -- small helpers every wire uses --------------------------------------------------------------

_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def fast_loads(text: str) -> Any:
    """`json.loads` for one stream event, minus its Python-level wrappers.

    ``json.loads`` strips whitespace with two regex matches and goes through two
    Python calls before the C scanner runs; an event's data is a bare JSON value, so
    we call the scanner directly and fall back to ``json.loads`` (same result, same
    errors) only when the text has whitespace around the value or is not JSON.
    """
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def read_usage(data: Any, into: Usage, fields: Mapping[str, str]) -> Usage:
    """Copy each integer a provider's usage object holds, wire key -> `Usage` attribute,
    into `into`, in the order given; anything missing or not an integer is left as it is."""
    if isinstance(data, dict):
        for key, attribute in fields.items():
            value = data.get(key)
            if isinstance(value, int):
                setattr(into, attribute, value)
    return into


def replay(response: Response) -> list[StreamEvent]:
    """Stream events for a reply that came whole although a stream was asked for."""
    events: list[StreamEvent] = []
    for index, block in enumerate(response.content):
        if isinstance(block, ToolUseBlock):
            events.append(BlockStart(index, "tool_use", block.name, block.id))
            events.append(Token(json.dumps(block.input), "tool_use", index, False))
        elif isinstance(block, ThinkingBlock):
            events.append(BlockStart(index, "thinking"))
            events.append(Token(block.thinking, "thinking", index, False))
        elif isinstance(block, TextBlock):
            events.append(BlockStart(index, "text"))
            events.append(Token(block.text, "text", index, True))
        events.append(BlockStop(index, block))
    events.append(UsageUpdate(response.usage))
    events.append(Complete(response))
    return events


def content_parts(
    message: Message,
    wire: str,
    text_part: Callable[[str], dict[str, Any]],
    media_part: Callable[[MediaBlock], dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """A user message's text and media as a wire's content parts, in order, adjacent texts
    joined as the wire joins a message's text; None when it holds no media (the wire then
    sends its text as it always has). Media anywhere but a user message is refused."""
    if not any(isinstance(b, MediaBlock) for b in message.content):
        return None
    parts: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, MediaBlock):
            if message.role != "user":
                raise not_carried(f"{wire} (an {message.role} message)", block)
            if texts:
                parts.append(text_part("".join(texts)))
                texts = []
            parts.append(media_part(block))
    if texts:
        parts.append(text_part("".join(texts)))
    return parts


def not_carried(wire: str, block: MediaBlock) -> InferenceError:
    """The error for a media block `wire` has no place for: the request is refused before
    it is sent, rather than sent without what it asked for."""
    return InferenceError(
        "invalid_request",
        f"The {wire} wire does not carry {block.kind} ({block.mime_type}) in a message",
        retryable=False,
    )


def carries_credentials(url: str) -> bool:
    """Whether `url` has credentials in it (``http://user:password@host``): the driver
    sends them as HTTP Basic auth, in the header a bearer key would take."""
    return "@" in urllib.parse.urlsplit(url).netloc


def resolve_key(
    name: str, config: ProviderSettings, default_env: str | None, *, required: bool
) -> str | None:
    """The provider's API key from its environment variable, registered as a secret at once.

    Raises an auth `InferenceError` naming the variable (never the value) when a
    required key is missing.
    """
    env = config.api_key_env or default_env
    secret = config.model_copy(update={"api_key_env": env}).api_key() if env else None
    key = secret.get_secret_value() if secret is not None else None
    if key:
        register_secret(key)
        return key
    if required:
        where = f"environment variable {env} is not set" if env else "no api_key_env is set"
        raise InferenceError(
            "auth", f"provider {name!r} needs an API key: {where}", retryable=False, provider=name
        )
    return None
