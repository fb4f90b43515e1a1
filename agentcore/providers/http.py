"""What every HTTP adapter shares: the pooled client, stated waits, and error classification.

Each step is a small function so it can be tested on its own, the way a
retry policy's inputs deserve: `retry_after_from_headers` and
`retry_after_from_body` read the provider's stated wait, `parse_error_body`
finds code, type and message in any of the error shapes we meet,
`classify` turns those into an error kind, and `error_from_response`,
`error_from_exception` and `error_from_payload` build the `InferenceError`.
Nothing here retries: that is the retry plugin's job.
"""

from __future__ import annotations

import email.utils
import functools
import ipaddress
import json
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from agentcore.inference import (
    NO_RESULT_MESSAGE,
    NO_TERMINAL,
    BlockStart,
    BlockStop,
    Complete,
    ErrorKind,
    Failed,
    InferenceError,
    Response,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    Usage,
    UsageUpdate,
)
from agentcore.providers.transport import StreamTransport
from agentcore.redaction import redact, register_secret
from agentcore.settings import ProviderSettings

__all__ = [
    "MID_STREAM",
    "ErrorBody",
    "ProviderClient",
    "body_chunks",
    "build_client",
    "classify",
    "drain",
    "ended_early",
    "error_from_exception",
    "error_from_payload",
    "error_from_response",
    "fast_loads",
    "is_event_stream",
    "not_json",
    "open_stream",
    "open_transport",
    "parse_duration",
    "parse_error_body",
    "post_json",
    "proxy_mounts",
    "read_usage",
    "replay",
    "replay_body",
    "resolve_key",
    "retry_after_from_body",
    "retry_after_from_headers",
    "unreadable",
]

# -- the client -------------------------------------------------------------------------


class ProviderClient:
    """A provider's HTTP: one httpx client, and a short way past it for our own calls.

    Every call is a POST of JSON to a path under the provider's base URL, so the
    request is built here from a URL parsed once per path and the client's merged
    headers, then handed to the transport: httpx's request building and its cookie
    jar (which API providers do not use) were a third of a streamed call's setup
    at 1000 concurrent streams. When the environment names a proxy, every call goes
    through `client.send`, so httpx picks the proxy as it always does.
    """

    def __init__(self, client: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None):
        self.client = client
        self._transport = transport
        self._base = str(client.base_url).rstrip("/")
        self._headers = httpx.Headers({**client.headers, "content-type": "application/json"})
        self._timeout = client.timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}

    async def post(self, path: str, body: Mapping[str, Any], *, stream: bool) -> httpx.Response:
        client, transport = self.client, self._transport
        if transport is None:
            request = client.build_request("POST", path, json=body)
            return await client.send(request, stream=stream)
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self._base + "/" + path.lstrip("/"))
        request = httpx.Request(
            "POST",
            url,
            headers=self._headers,
            content=_json_body(body),
            extensions={"timeout": self._timeout},
        )
        response = await transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def aclose(self) -> None:
        await self.client.aclose()


_json_body = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def build_client(
    config: ProviderSettings, base_url: str, headers: Mapping[str, str]
) -> ProviderClient:
    """The provider's one pooled client, with the settings' connect and read timeouts.

    The whole-request and progress timeouts are the kernel's, around any provider;
    here we only bound each network step. Extra `[providers.NAME] headers` come last,
    so a deployment can override anything but cannot lose the auth header by accident.
    Connections are `StreamTransport`'s (its docstring says why not httpcore's).
    """
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.read_timeout_s,
        write=config.read_timeout_s,
        pool=config.connect_timeout_s,
    )
    transport = open_transport(config)
    mounts = proxy_mounts()
    client = httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers={**headers, **config.headers},
        timeout=timeout,
        transport=transport,
        mounts=mounts,
        follow_redirects=False,
    )
    return ProviderClient(client, None if mounts else transport)


def open_transport(config: ProviderSettings) -> httpx.AsyncBaseTransport:
    """The connections under a provider's client, capped as `[providers.NAME]` says."""
    return StreamTransport(
        ssl_context=_ssl_context(),
        max_connections=config.max_connections,
        max_keepalive_connections=config.max_keepalive_connections,
    )


def proxy_mounts() -> dict[str, httpx.AsyncBaseTransport | None]:
    """The environment's proxies as httpx mounts, which it drops once a transport is given.

    ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``ALL_PROXY`` route through httpx's own proxy
    transport; each ``NO_PROXY`` entry maps to None, which is our transport (curl's
    rules: ``.example.com`` spares the subdomains, ``example.com`` the domain too,
    ``*`` every host).
    """
    found = urllib.request.getproxies()
    bypass = [host.strip() for host in found.get("no", "").split(",") if host.strip()]
    if "*" in bypass:
        return {}
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    for scheme in ("http", "https", "all"):
        proxy = found.get(scheme)
        if proxy:
            url = proxy if "://" in proxy else f"http://{proxy}"
            mounts[f"{scheme}://"] = httpx.AsyncHTTPTransport(proxy=url, verify=_ssl_context())
    if not mounts:
        return {}
    for host in bypass:
        if "://" in host:
            mounts[host] = None
        elif host.lower() == "localhost" or _is_ip(host):
            mounts[f"all://[{host}]" if ":" in host else f"all://{host}"] = None
        else:
            mounts[f"all://*{host}"] = None
    return mounts


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("/")[0])
    except ValueError:
        return False
    return True


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every provider: loading the CA bundle costs tens of milliseconds,
    which every client would otherwise pay again (httpx honours SSL_CERT_FILE/_DIR here)."""
    return httpx.create_ssl_context()


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


# -- stated waits ------------------------------------------------------------------------


def parse_duration(value: Any) -> float | None:
    """Seconds from a number or a duration string: ``30``, ``"30"``, ``"30s"``, ``"1.5s"``,
    ``"250ms"``, ``"2m"``. None for anything else, or a negative or non-finite value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        scale = 1.0
        if text.endswith("ms"):
            text, scale = text[:-2], 0.001
        elif text.endswith("s"):
            text = text[:-1]
        elif text.endswith("m"):
            text, scale = text[:-1], 60.0
        try:
            seconds = float(text) * scale
        except ValueError:
            return None
    else:
        return None
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return None
    return seconds


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """The stated wait in seconds: ``retry-after-ms`` first (the more precise), then
    ``retry-after`` as seconds or as an HTTP date (a date in the past means 0)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms)
        except ValueError:
            value = -1.0
        if value >= 0 and value != float("inf"):
            return value / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if 0 <= seconds != float("inf") else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


_BODY_WAIT_KEYS = {
    "retry_after_ms": 0.001,
    "retryAfterMs": 0.001,
    "retry_after": 1.0,
    "retryAfter": 1.0,
    "retryDelay": 1.0,
    "retry_delay": 1.0,
}


def retry_after_from_body(body: Any, _depth: int = 0) -> float | None:
    """A stated wait anywhere in a JSON error body: ``retry_after`` (seconds),
    ``retry_after_ms``, or Google's ``retryDelay`` (``"30s"``) inside ``error.details``."""
    if _depth > 5:
        return None
    if isinstance(body, Mapping):
        for key, scale in _BODY_WAIT_KEYS.items():
            if key in body:
                value = body[key]
                if scale != 1.0 and isinstance(value, int | float) and not isinstance(value, bool):
                    return max(0.0, float(value) * scale)
                seconds = parse_duration(value)
                if seconds is not None:
                    return seconds
        children: Any = body.values()
    elif isinstance(body, list):
        children = body
    else:
        return None
    for child in children:
        if isinstance(child, Mapping | list):
            found = retry_after_from_body(child, _depth + 1)
            if found is not None:
                return found
    return None


# -- error bodies -----------------------------------------------------------------------------


@dataclass(slots=True)
class ErrorBody:
    """What an error body says, whatever its shape."""

    message: str | None = None
    code: str | None = None
    """The provider's code: OpenAI's ``code`` (else ``type``), Anthropic's ``error.type``."""
    type: str | None = None
    status: int | None = None
    """A numeric code inside the body (OpenRouter's ``error.code``, Google's ``error.code``)."""
    retry_after_s: float | None = None
    raw: Any = None


def _excerpt(text: str, limit: int) -> str:
    """The start of a provider's text for a message, redacted before it is cut: a key the
    provider echoed must not survive as a prefix that no longer matches it whole."""
    return redact(text.strip())[:limit]


def parse_error_body(body: Any) -> ErrorBody:
    """Read Anthropic ``{"type": "error", "error": {"type", "message"}}``, OpenAI
    ``{"error": {"message", "type", "code"}}``, OpenRouter ``{"error": {"code": 429, ...}}``,
    Google ``[{"error": {"code", "status", "message", "details"}}]``, bare strings and bytes."""
    if isinstance(body, bytes | bytearray):
        text = bytes(body).decode("utf-8", errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            return ErrorBody(message=_excerpt(text, 500) or None, raw=text)
    elif isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return ErrorBody(message=_excerpt(body, 500) or None, raw=body)
    raw = body
    if isinstance(body, list) and body and isinstance(body[0], Mapping):
        body = body[0]
    if not isinstance(body, Mapping):
        return ErrorBody(message=None if body is None else _excerpt(str(body), 500), raw=raw)
    error = body.get("error", body)
    if isinstance(error, str):
        return ErrorBody(message=error, raw=raw, retry_after_s=retry_after_from_body(body))
    if not isinstance(error, Mapping):
        error = body
    message = error.get("message") or body.get("message")
    etype = error.get("type") or error.get("status")
    code_value = error.get("code")
    status: int | None = None
    code: str | None = None
    if isinstance(code_value, int) and not isinstance(code_value, bool):
        status = code_value
    elif isinstance(code_value, str) and code_value:
        if code_value.isdigit():
            status = int(code_value)
        else:
            code = code_value
    if code is None and isinstance(etype, str):
        code = etype
    return ErrorBody(
        message=str(message) if message is not None else None,
        code=code,
        type=str(etype) if etype is not None else None,
        status=status,
        retry_after_s=retry_after_from_body(body),
        raw=raw,
    )


# -- classification ---------------------------------------------------------------------------

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "input is too long",
    "reduce the length of the messages",
)
_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "billing_error",
        "billing_hard_limit_reached",
        "billing_not_active",
        "insufficient_credits",
        "payment_required",
        "quota_exceeded",
    }
)
_QUOTA_PHRASES = ("insufficient_quota", "billing", "credit", "exceeded your current quota")
_TYPE_KINDS: dict[str, ErrorKind] = {
    # Anthropic's error.type values, as named in an `event: error` or an error body.
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limit",
    "api_error": "server",
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_request_error": "invalid_request",
    "not_found_error": "invalid_request",
    "request_too_large": "invalid_request",
    "timeout_error": "timeout",
    # OpenAI-family codes that arrive without a status (mid-stream).
    "server_error": "server",
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "quota",
    "invalid_api_key": "auth",
    "context_length_exceeded": "context_length",
    # Google's status names.
    "RESOURCE_EXHAUSTED": "rate_limit",
    "UNAVAILABLE": "overloaded",
    "INTERNAL": "server",
    "UNAUTHENTICATED": "auth",
    "PERMISSION_DENIED": "auth",
    "INVALID_ARGUMENT": "invalid_request",
    "DEADLINE_EXCEEDED": "timeout",
}


def _is_context_length(message: str, code: str | None) -> bool:
    if code == "context_length_exceeded":
        return True
    lowered = message.lower()
    return any(p in lowered for p in _CONTEXT_PHRASES)


def _is_quota(message: str, code: str | None, etype: str | None, stated_wait: bool) -> bool:
    if code in _QUOTA_CODES or etype in _QUOTA_CODES:
        return True
    # A message alone ("exceeded your current quota") is a quota failure only when no
    # wait is stated: Google says the same words for per-minute limits, with a retryDelay.
    lowered = message.lower()
    return not stated_wait and any(p in lowered for p in _QUOTA_PHRASES)


def classify(
    status: int | None,
    *,
    code: str | None = None,
    etype: str | None = None,
    message: str = "",
    stated_wait: bool = False,
) -> ErrorKind:
    """The error kind for an HTTP status (None mid-stream) and what the body says.

    The body can only sharpen a status: a 400 that says the prompt is too long is
    ``context_length``, a 429 that says ``insufficient_quota`` is ``quota`` (not
    retryable), but a 500 never becomes an ``invalid_request`` because of its text.
    """
    if (status is None or (400 <= status < 500 and status != 429)) and _is_context_length(
        message, code
    ):
        return "context_length"
    if status == 402 or (status in (429, None) and _is_quota(message, code, etype, stated_wait)):
        return "quota"
    for name in (code, etype):
        if name is not None and name in _TYPE_KINDS:
            by_type = _TYPE_KINDS[name]
            if status is None or by_type in ("overloaded", "quota", "context_length"):
                return by_type
    if status is None:
        lowered = message.lower()
        if "overloaded" in lowered:
            return "overloaded"
        if "rate limit" in lowered:
            return "rate_limit"
        return "unknown"
    if status == 429:
        return "rate_limit"
    if status == 529 or (status == 503 and "overload" in message.lower()):
        return "overloaded"
    if status in (408, 504):
        return "timeout"
    if status >= 500:
        return "server"
    if status in (401, 403):
        if status == 403 and ("moderation" in message.lower() or "flagged" in message.lower()):
            return "invalid_request"
        return "auth"
    if status in (400, 404, 405, 409, 413, 415, 422):
        return "invalid_request"
    return "unknown"


# -- building errors --------------------------------------------------------------------------


def _status_text(status: int) -> str:
    try:
        from http import HTTPStatus

        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    content: bytes,
    *,
    provider: str,
    model: str,
) -> InferenceError:
    """The typed error for a non-2xx reply: kind, status, code, message and stated wait."""
    parsed = parse_error_body(content)
    wait = retry_after_from_headers(headers)
    if wait is None:
        wait = parsed.retry_after_s
    message = parsed.message or f"HTTP {status} {_status_text(status)}"
    kind = classify(
        status,
        code=parsed.code,
        etype=parsed.type,
        message=message,
        stated_wait=wait is not None,
    )
    return InferenceError(
        kind,
        message,
        status=status,
        code=parsed.code,
        retry_after_s=wait,
        provider=provider,
        model=model,
    )


def error_from_payload(
    payload: Any,
    *,
    provider: str,
    model: str,
    prefix: str = "",
    status: int | None = None,
) -> InferenceError:
    """The typed error for an error object that came inside a 200: a stream frame or a body.

    A numeric code in the body (OpenRouter's ``error.code``) stands in for the status
    when classifying; the error's `status` stays the HTTP status actually received.
    """
    parsed = parse_error_body(payload)
    message = parsed.message or "no message"
    kind = classify(
        parsed.status if parsed.status is not None else None,
        code=parsed.code,
        etype=parsed.type,
        message=message,
        stated_wait=parsed.retry_after_s is not None,
    )
    return InferenceError(
        kind,
        f"{prefix}{message}",
        status=status,
        code=parsed.code if parsed.code is not None else _str_or_none(parsed.status),
        retry_after_s=parsed.retry_after_s,
        provider=provider,
        model=model,
    )


def _str_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)


def error_from_exception(exc: Exception, *, provider: str, model: str) -> InferenceError:
    """The typed error for a failure below HTTP: timeouts are ``timeout``, the rest ``network``."""
    if isinstance(exc, InferenceError):
        return exc
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        step = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for data",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "talking to the provider")
        return InferenceError(
            "timeout",
            f"Timed out {step} ({detail})",
            provider=provider,
            model=model,
        )
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return InferenceError(
            "invalid_request",
            f"Bad provider URL: {detail}",
            retryable=False,
            provider=provider,
            model=model,
        )
    if isinstance(exc, httpx.RemoteProtocolError):
        message = f"The connection to the provider broke mid-reply ({detail})"
    elif isinstance(exc, httpx.ConnectError):
        message = f"Could not connect to the provider ({detail})"
    elif isinstance(exc, httpx.TransportError | OSError):
        message = f"Network error talking to the provider ({detail})"
    else:
        return InferenceError(
            "unknown",
            f"{type(exc).__name__}: {detail}",
            retryable=False,
            provider=provider,
            model=model,
        )
    return InferenceError("network", message, provider=provider, model=model)


# -- one call -----------------------------------------------------------------------------------

MID_STREAM = "The provider reported an error mid-stream: "
"""The prefix of an error that arrived as a frame inside an HTTP 200 stream."""


@asynccontextmanager
async def open_stream(
    client: ProviderClient,
    path: str,
    body: Mapping[str, Any],
    *,
    provider: str,
    model: str,
) -> AsyncIterator[httpx.Response]:
    """POST and hand over the streaming response once its status is a success.

    A non-2xx reply is read whole and raised as its typed error. However the block
    ends (done, failed, or the consumer left early and the generator was closed),
    the response is closed, so its connection is released, never leaked.
    """
    response = await client.post(path, body, stream=True)
    try:
        if not 200 <= response.status_code < 300:
            content = await response.aread()
            raise error_from_response(
                response.status_code, response.headers, content, provider=provider, model=model
            )
        yield response
    finally:
        await response.aclose()


async def post_json(
    client: ProviderClient,
    path: str,
    body: Mapping[str, Any],
    *,
    provider: str,
    model: str,
) -> Any:
    """POST a whole (non-streamed) call and return the decoded JSON reply, or raise its error."""
    try:
        response = await client.post(path, body, stream=False)
    except httpx.HTTPError as exc:
        raise error_from_exception(exc, provider=provider, model=model) from exc
    if not 200 <= response.status_code < 300:
        raise error_from_response(
            response.status_code, response.headers, response.content, provider=provider, model=model
        )
    try:
        return json.loads(response.content)
    except ValueError:
        raise InferenceError(
            "server",
            f"The provider's reply is not JSON: {_excerpt(response.text, 200)!r}",
            status=response.status_code,
            provider=provider,
            model=model,
        ) from None


async def drain(chunks: AsyncIterator[bytes]) -> None:
    """Read a stream's body to its end after the terminal event, as the official SDKs do:
    a response closed with unread bytes takes its connection down with it, one read to
    the end gives the connection back to the pool."""
    async for _ in chunks:
        pass


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """A streamed body's bytes as they arrive.

    Straight off the transport's stream when there is nothing to decode: httpx's
    `aiter_bytes` adds two generator steps and a context manager per chunk, a tenth
    of a chunk's CPU at 1000 streams. A compressed body still goes through httpx.
    """
    stream = response.stream
    if "content-encoding" in response.headers or not isinstance(stream, httpx.AsyncByteStream):
        return response.aiter_bytes()
    return aiter(stream)


def is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def not_json(data: str, *, provider: str, model: str) -> InferenceError:
    return InferenceError(
        "server",
        f"The provider sent a stream event that is not JSON: {_excerpt(data, 200)!r}",
        provider=provider,
        model=model,
    )


def unreadable(exc: Exception, *, provider: str, model: str) -> InferenceError:
    """A stream event that is JSON but not of the shape the wire format documents."""
    return InferenceError(
        "server",
        f"The provider sent a stream event agentcore cannot read ({type(exc).__name__}: {exc})",
        provider=provider,
        model=model,
    )


def ended_early(*, provider: str, model: str) -> InferenceError:
    """The provider's stream ended (cleanly or not) before the inference finished."""
    return InferenceError(
        "network",
        NO_RESULT_MESSAGE,
        code=NO_TERMINAL,
        provider=provider,
        model=model,
    )


# -- shared by the adapters ----------------------------------------------------------------

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


async def replay_body(
    response: httpx.Response, whole: Callable[[Any], Response], *, provider: str, model: str
) -> list[StreamEvent]:
    """The events of a JSON body that came where a stream was asked for: `whole` reads
    it as a reply (or raises the error object it holds); a body that is not JSON fails."""
    raw = await response.aread()
    try:
        data = json.loads(raw)
    except ValueError:
        return [Failed(not_json(raw.decode(errors="replace"), provider=provider, model=model))]
    return replay(whole(data))


def replay(response: Response) -> list[StreamEvent]:
    """Stream events for a reply that came whole although a stream was asked for."""
    events: list[StreamEvent] = []
    for index, block in enumerate(response.content):
        events.append(
            BlockStart(
                index,
                block.type,
                getattr(block, "name", None),
                getattr(block, "id", None),
            )
        )
        if isinstance(block, TextBlock):
            events.append(Token(block.text, "text", index, True))
        elif isinstance(block, ThinkingBlock):
            events.append(Token(block.thinking, "thinking", index, False))
        else:
            events.append(Token(json.dumps(block.input), "tool_use", index, False))
        events.append(BlockStop(index, block))
    events.append(UsageUpdate(response.usage))
    events.append(Complete(response))
    return events
