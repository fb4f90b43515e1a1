"""The one streaming driver: every HTTP provider's calls, over aiohttp, for any wire.

`HTTPProvider` implements the `Provider` protocol for a `Wire` (see
`agentcore.providers.wire`): it POSTs the wire's `HttpCall`, reads the body as it
arrives, decodes SSE, feeds the call's translator and yields what it makes. It owns
everything a wire should not: the connection pool, timeouts, proxies, a non-2xx
reply (read whole and raised as its typed error), a JSON body where a stream was
asked for (replayed as events), transport failures (connect errors, resets,
timeouts, a body cut mid-stream, mapped by `transport_error`), a body that ends
before the reply is whole (``no_terminal``), a pooled connection the server was closing
(the request sent again on a fresh one, `agentcore.providers.stale`), and closing the
connection on every path: done, failed, or the consumer closed the stream early.

HTTP is aiohttp's client: one `ClientSession` per provider, made on first use (it
must be made inside the event loop), with ``[providers.NAME] max_connections`` as
the connector's limit and ``max_keepalive_connections`` the most it keeps idle (0: no
keep-alive), TLS
verified against the system's CAs (``SSL_CERT_FILE`` honoured), and the connect and
read timeouts from settings (a streamed call's read timeout, head and body, is the
driver's own, `Silence`: one timer per call, where aiohttp's left two cancelled ones).
The whole-request and progress timeouts are the kernel's, around any provider. The
environment's proxy is looked up once, for the base URL, when the provider is made
(aiohttp's ``trust_env`` would look it up on every call, in two trips to a worker thread,
half a millisecond of CPU per call), by the rules httpx and curl follow
(`agentcore.providers.proxy`).

A response whose stream the driver accepts keeps only its body from then on
(`StreamedResponse.body_only`): it lives as long as the reply.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from time import monotonic
from typing import cast

import aiohttp
from aiohttp.helpers import strip_auth_from_url
from loguru import logger
from yarl import URL

from agentcore.inference import (
    InferenceError,
    Request,
    Response,
    StreamEvent,
    Token,
)
from agentcore.inference.watchdog import UNWATCHED, StreamWatch, Watchdog, ending
from agentcore.providers.body import Silence, StreamedResponse, drained, replay_body
from agentcore.providers.errors import error_from_response
from agentcore.providers.proxy import env_proxy
from agentcore.providers.stale import (
    SENDING,
    ReuseAwareConnector,
    Sending,
    closed_unread,
    resent_error,
)
from agentcore.providers.transport_errors import TRANSPORT_ERRORS, transport_error
from agentcore.providers.wire import HttpCall, Translator, Wire
from agentcore.redaction import (
    credential_parts,
    excerpt,
    register_secret,
)
from agentcore.settings import ProviderSettings

__all__ = ["HTTPProvider", "env_proxy", "transport_error"]


_readable_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_ascii_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _json_body(body: object) -> bytes:
    """`body` as UTF-8 JSON. A lone UTF-16 surrogate (valid JSON text, ``"\\ud800"``, so a
    caller's string may hold one) has no UTF-8 form: such a body is sent all-ASCII, with
    the surrogate as that same JSON escape, as the vendors' own SDKs send it; whether the
    provider takes it is the provider's to say."""
    text = _readable_json(body)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _ascii_json(body).encode()


class HTTPProvider:
    """A `[providers.NAME]` that speaks `wire` over HTTP."""

    kind: str

    def __init__(self, name: str, config: ProviderSettings, wire: Wire) -> None:
        self.name = name
        self.wire = wire
        self.media_types = wire.media_types
        self._config = config
        base, url_auth = strip_auth_from_url(URL(wire.base_url))
        self._base = str(base).rstrip("/")
        self._headers = _headers(name, wire.headers, config.headers, url_auth)
        self._urls: dict[str, URL] = {}
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        # A streamed call's: no aiohttp read timeout, `Silence` times it from the send.
        self._streamed_timeout = aiohttp.ClientTimeout(
            total=None, connect=config.connect_timeout_s, sock_connect=config.connect_timeout_s
        )
        self._proxy, self._proxy_headers = env_proxy(URL(self._base), name)
        if self._proxy_headers and URL(self._base).scheme == "http":
            # An http:// request goes to the proxy itself, which reads its credentials
            # there; aiohttp puts `proxy_headers` only on an https:// target's CONNECT.
            self._headers.update(self._proxy_headers)
            self._proxy_headers = None

    def _open_session(self, *, fresh: bool = False) -> aiohttp.ClientSession:
        """The provider's pooled session; with `fresh`, a second one whose every request
        opens a connection of its own (a request sent again after a stale pooled one)."""
        config = self._config
        keep_idle = config.max_keepalive_connections
        keepalive = keep_idle != 0 and not fresh
        # Only a pooled connection can be reused: only then is it told apart (`stale`).
        connector = ReuseAwareConnector(
            pooled=keepalive,
            keep_idle=keep_idle,
            limit=config.max_connections or 0,
            force_close=not keepalive,
        )
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=config.connect_timeout_s,
            sock_connect=config.connect_timeout_s,
            sock_read=config.read_timeout_s,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            headers=self._headers,
            cookie_jar=aiohttp.DummyCookieJar(),
            response_class=StreamedResponse,
        )
        if fresh:
            self._fresh = session
        else:
            self._session = session
        return session

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self._base + "/" + path.lstrip("/"), encoded=True)
        return url

    async def aclose(self) -> None:
        sessions = (self._session, self._fresh)
        self._session = self._fresh = None
        for session in sessions:
            if session is not None:
                await session.close()

    async def _post(
        self, call: HttpCall, model: str, silence: Silence | None = None
    ) -> aiohttp.ClientResponse:
        """POST `call` and read the response head. A failure is raised as its typed error:
        a non-2xx reply read whole, a transport failure before any response byte. A
        reused connection that ended before any byte was a server closing it as idle:
        the request goes again on a fresh connection, within this attempt (`stale`).
        With `silence` (a streamed call), the head's read timeout is its, not aiohttp's."""
        data = _json_body(call.body)
        connected = None if silence is None else silence.connected
        sending = Sending(connected)
        try:
            session = self._session or self._open_session()
            response = await self._send(session, call.path, data, sending, silence)
        except TRANSPORT_ERRORS as exc:
            if not closed_unread(exc, sending):
                raise transport_error(exc, provider=self.name, model=model, replying=False) from exc
            try:
                session = self._fresh or self._open_session(fresh=True)
                response = await self._send(session, call.path, data, Sending(connected), silence)
            except TRANSPORT_ERRORS as again:
                error = transport_error(again, provider=self.name, model=model, replying=False)
                raise resent_error(error) from again
        if 200 <= response.status < 300:
            return response
        if silence is not None:
            silence.whole(response)
        try:
            content = await response.read()
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, provider=self.name, model=model) from exc
        finally:
            response.close()
        raise error_from_response(
            response.status, response.headers, content, provider=self.name, model=model
        )

    async def _send(
        self,
        session: aiohttp.ClientSession,
        path: str,
        data: bytes,
        sending: Sending,
        silence: Silence | None,
    ) -> aiohttp.ClientResponse:
        url = self._url(path)
        signed = self.wire.sign(str(url), data, self._headers) if self.wire.signs else None
        task = asyncio.current_task()
        SENDING[task] = sending  # for the connector to tell, and to mark if reused
        try:
            return await session.post(
                url,
                data=data,
                headers=signed,
                allow_redirects=False,
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
                timeout=session.timeout if silence is None else self._streamed_timeout,
            )
        finally:
            del SENDING[task]

    # -- whole ---------------------------------------------------------------------------------

    async def complete(self, request: Request, model: str) -> Response:
        translator = self.wire.translator(request, model)
        response = await self._post(self.wire.call(request, model, stream=False), model)
        try:
            raw = await response.read()
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, provider=self.name, model=model) from exc
        finally:
            response.close()
        try:
            data = json.loads(raw)
        except ValueError:
            text = raw.decode(errors="replace")
            raise InferenceError(
                "server",
                f"The provider's reply is not JSON: {excerpt(text, 200)!r}",
                status=response.status,
                provider=self.name,
                model=model,
            ) from None
        return translator.reply(data)

    # -- streamed --------------------------------------------------------------------------

    def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        return self.watched_stream(request, model, None)

    def stream_is_watched(self) -> bool:
        """Whether `watched_stream` is this provider's stream: not when a subclass
        overrides `stream`, whose events then reach the attempt as they always did."""
        return type(self).stream is HTTPProvider.stream

    async def watched_stream(
        self, request: Request, model: str, watch: StreamWatch | None
    ) -> AsyncGenerator[StreamEvent, None]:
        """`stream` with the attempt's `watch` applied here, as `ProviderCalls.stream` does
        around any other provider: one generator less per event."""
        dog = UNWATCHED if watch is None else watch.start()
        try:
            if dog.expired is not None:
                yield dog.aborted()
                return
            translator = self.wire.translator(request, model)
            dog.waiting = True
            tail = await self._open(translator, request, model)  # the response, or no body
            dog.waiting = False
            if not isinstance(tail, list):
                (response, silence), decoder, clock = tail, self.wire.decoder(), dog.clock
                decode, feed, read = decoder.feed_tuples, translator.feed, response.content.readany
                cut: InferenceError | None = None
                try:
                    while not translator.done:
                        silence.since = monotonic()
                        dog.waiting = True
                        chunk = await read()
                        dog.waiting = False
                        silence.since = math.inf
                        for event in feed(decode(chunk) if chunk else decoder.close_tuples()):
                            if type(event) is Token and event.visible:
                                dog.last = clock()  # `Watchdog.progress`, inline
                            yield event
                            # `Failed` (the translator's) is the last of its batch and ends it.
                            if dog.expired is not None and not translator.failed:
                                yield dog.aborted()
                                return
                        if not chunk:
                            break
                    else:
                        dog.waiting = True
                        await drained(response, translator, silence)
                except TRANSPORT_ERRORS as exc:
                    cut = transport_error(exc, provider=self.name, model=model)
                finally:
                    dog.waiting = False
                    silence.cancel()
                    response.close()  # drained: back in the pool already; else closed
                tail = translator.end(cut)
            for event in tail:  # the last is the terminal
                if type(event) is Token and event.visible:
                    dog.last = dog.clock()
                yield event
                if dog.expired is not None and event is not tail[-1]:
                    yield dog.aborted()
                    return
        except (Exception, asyncio.CancelledError) as exc:
            yield ending(watch, dog, exc)  # or raises it
        finally:
            if watch is not None:
                watch.end(cast("Watchdog", dog))

    async def _open(
        self, translator: Translator, request: Request, model: str
    ) -> tuple[aiohttp.ClientResponse, Silence] | list[StreamEvent]:
        """The streamed call's response, its body not read yet, with its read timeout; or,
        with no stream to read, the events that end the attempt: the failure, or those of
        a whole JSON reply."""
        silence = Silence(self._config.read_timeout_s)
        try:
            response = await self._post(self.wire.call(request, model, stream=True), model, silence)
        except InferenceError as error:
            silence.cancel()
            return [translator.fail(error)]
        except BaseException:
            silence.cancel()
            raise
        if self.wire.stream_type in response.headers.get("content-type", ""):
            if isinstance(response, StreamedResponse):
                response.body_only()  # the head is read: only the body is read from here
            silence.reading(response)
            return response, silence
        silence.whole(response)
        try:
            return await replay_body(response, translator)
        finally:
            response.close()


def _headers(
    provider: str,
    wire: Mapping[str, str],
    configured: Mapping[str, str],
    url_auth: aiohttp.BasicAuth | None,
) -> dict[str, str]:
    """Every call's headers: the wire's (its key), ``content-type``, ``[providers.NAME]
    headers`` over them, with one ``Authorization`` at most. Credentials in the base URL
    (``http://user:password@host/v1``) are HTTP Basic auth, as for any HTTP client; where
    the wire sends its key in that same header (the openai family, openai-responses) they
    take its place, and a configured ``Authorization`` header wins over both: each loser
    is logged, never sent alongside (two credentials in one header reach no server)."""

    def named(headers: Mapping[str, str]) -> str | None:
        return next((k for k in headers if k.lower() == "authorization"), None)

    explicit = named(configured)
    headers = {k: v for k, v in wire.items() if k.lower() != "authorization" or not explicit}
    if url_auth is not None:
        if explicit:
            logger.warning(
                "provider {!r}: the credentials in base_url are not sent: its headers set {}",
                provider,
                explicit,
            )
        else:
            keyed = named(headers)
            if keyed:
                del headers[keyed]
                logger.warning(
                    "provider {!r}: the credentials in base_url go as HTTP Basic auth in "
                    "the Authorization header, where the API key would go: the key is not sent",
                    provider,
                )
            header = url_auth.encode()
            for secret in (url_auth.password or url_auth.login, *credential_parts(header)):
                register_secret(secret)
            headers["authorization"] = header
    return {**headers, "content-type": "application/json", **configured}
