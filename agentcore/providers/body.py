"""A streamed body's pieces around the driver's read loop (`HTTPProvider.watched_stream`):
the response that keeps only its body while it streams (`StreamedResponse`), the read
timeout (`Silence`), a JSON body where a stream was asked for (`replay_body`), and the
drain that hands a connection back to the pool."""

from __future__ import annotations

import asyncio
import json
import math
from time import monotonic
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from multidict import CIMultiDict, CIMultiDictProxy

from agentcore.inference import InferenceError, StreamEvent
from agentcore.inference.watchdog import TIMER_CONTEXT
from agentcore.providers.transport_errors import TRANSPORT_ERRORS, transport_error
from agentcore.providers.wire import Translator, replay

__all__ = ["Silence", "StreamedResponse", "drained", "replay_body"]

_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
_SET_IN_INIT = (
    "method",
    "_real_url",
    "_url",
    "_request_info",
    "_timer",
    "_cache",
    "_traces",
    "_loop",
)
"""What `ClientResponse.__init__` always sets and the class gives no default for: slots in
`StreamedResponse` (an open response: ~0.6 KB less than in its instance dict)."""
_SET_LATER = (
    "version",
    "status",
    "reason",
    "content",
    "_headers",
    "_raw_headers",
    "_connection",
    "_protocol",
    "_history",
    "_closed",
    "_session",
    "_output_size",
    "_resolve_charset",
    "_stream_writer",
    "_ClientResponse__writer",
    "_body",  # these two once a body is read whole (an error reply, a JSON reply)
    "_released",
)
"""What else an open response sets, in `__init__` or as its head is read, most of it with a
class default: slots too (its instance dict, 15 names, was ~0.3 KB), each starting at the
class's default (`_DEFAULTS`, set before `ClientResponse.__init__` runs), so a slot never
hides a default. A name the class makes a descriptor of (``_resolve_charset``, a function)
is left to the dict."""
_SLOTTED_LATER = tuple(
    name
    for name in _SET_LATER
    if not hasattr(getattr(aiohttp.ClientResponse, name, None), "__get__")
)
_DEFAULTS = tuple(
    (name, getattr(aiohttp.ClientResponse, name))
    for name in _SLOTTED_LATER
    if hasattr(aiohttp.ClientResponse, name)
)


class StreamedResponse(aiohttp.ClientResponse):
    """The driver's responses (its sessions' ``response_class``): one whose stream the
    driver has accepted lets go of what only its head needed.

    A streamed response lives as long as its reply, and aiohttp keeps its head twice
    (the parsed headers and the raw lines: a provider sends twenty or more, rate limits
    and request ids) and a copy of the request's headers (the API key among them) for
    errors that a streamed read never raises. Once `body_only` is called, ``headers``
    and ``raw_headers`` are empty and ``request_info`` carries no headers; the status,
    the URL and the body stream stay.
    """

    __slots__ = (
        tuple(n for n in _SET_IN_INIT if not hasattr(aiohttp.ClientResponse, n)) + _SLOTTED_LATER
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for name, value in _DEFAULTS:
            object.__setattr__(self, name, value)
        super().__init__(*args, **kwargs)

    def body_only(self) -> None:
        self._cache.clear()  # what `headers`, `request_info`... read once (aiohttp's reify)
        self._headers = _NO_HEADERS
        self._raw_headers = ()
        info = self._request_info
        self._request_info = aiohttp.RequestInfo(info.url, info.method, _NO_HEADERS, info.real_url)


class Silence:
    """``read_timeout_s`` on a streamed call: the time the driver has waited for bytes,
    from the request's sending (its head) to the body's end.

    aiohttp's own read timeout cancels and makes a timer on every read from the socket;
    at a thousand streams that was a tenth of the host's CPU, and the cancelled timers
    stayed in the loop's heap (for the collector to walk, and until their time: two for
    each head, ~0.35 KB a stream). This is one timer per call, made at the send and
    re-armed only when it fires: the driver pays a clock read per read. `since` is when
    the current wait began (``inf``: not waiting, the consumer has the stream).

    The head: the wait begins when the request has its connection (`connected`, told by
    the connector: connecting is ``connect_timeout_s``'s), and a head not whole by the
    timeout fails the connection as aiohttp's read timeout would (its error, its words).
    While the request's body is still going out (a large one on a slow link: aiohttp's
    writer paused), the wait begins again: like aiohttp, the head is timed from the body's
    end, here seen to within an eighth of the timeout.
    A body read whole (an error reply, a JSON reply) is aiohttp's to time again (`whole`);
    a streamed one is this one's (`reading`): past the timeout, it fails with a timeout.
    """

    __slots__ = ("_content", "_handle", "_loop", "_protocol", "_timeout", "since")

    def __init__(self, timeout: float) -> None:
        self._content: aiohttp.StreamReader | None = None
        self._protocol: ResponseHandler | None = None
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self.since = math.inf
        # > 0: settings refuse 0. The timer calls this object (no bound method held) in
        # `TIMER_CONTEXT` (no copy of the caller's context held).
        self._handle = self._loop.call_later(timeout, self, context=TIMER_CONTEXT)

    def connected(self, protocol: ResponseHandler) -> None:
        """The request goes on `protocol` (`Sending.connected`): its head's wait begins."""
        self._protocol = protocol
        self.since = monotonic()

    def reading(self, response: aiohttp.ClientResponse) -> None:
        """The head is read and the body streams: the driver's reads are timed from here."""
        self._content = response.content
        self.since = math.inf

    def whole(self, response: aiohttp.ClientResponse) -> None:
        """The head is read and the body is read whole: aiohttp's read timeout again."""
        self.cancel()
        connection = response.connection
        if connection is not None and connection.protocol is not None:
            connection.protocol.read_timeout = self._timeout
            connection.protocol.start_timeout()

    def __call__(self) -> None:
        """The timer: re-armed while the wait is shorter than the timeout, else it fails."""
        if self._content is None and self._protocol is not None and self._protocol.writing_paused:
            self.since = monotonic()  # the body is still being sent: the head is not due
            self._handle = self._loop.call_later(self._timeout / 8, self, context=TIMER_CONTEXT)
            return
        waited = monotonic() - self.since
        if waited < self._timeout:
            again = self._timeout - max(waited, 0.0)
            self._handle = self._loop.call_later(again, self, context=TIMER_CONTEXT)
            return
        if self._content is not None:
            self._content.set_exception(
                aiohttp.SocketTimeoutError(
                    f"no bytes from the provider for {self._timeout:g} s: read_timeout_s"
                )
            )
        elif self._protocol is not None:  # what aiohttp's timer does to a head not read
            self._protocol.set_exception(
                aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            )

    def cancel(self) -> None:
        self._handle.cancel()


async def replay_body(
    response: aiohttp.ClientResponse, translator: Translator
) -> list[StreamEvent]:
    """The events of a JSON body that came where a stream was asked for: a whole reply,
    or the error object it holds; a body that is not JSON fails."""
    try:
        raw = await response.read()
    except TRANSPORT_ERRORS as exc:
        error = transport_error(exc, provider=translator.provider, model=translator.model)
        return [translator.fail(error)]
    text = raw.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return [translator.fail(translator.not_json(text))]
    try:
        return replay(translator.reply(data))
    except InferenceError as error:
        return [translator.fail(error)]


async def drained(
    response: aiohttp.ClientResponse, translator: Translator, silence: Silence
) -> None:
    """The reply is whole: read the rest of the body, so that the connection goes back to
    the pool, unless the provider writes on (`cut_short`: closed) or the reply failed."""
    if translator.cut_short:
        response.close()
    elif not translator.failed:
        silence.since = monotonic()
        while await response.content.readany():
            silence.since = monotonic()
