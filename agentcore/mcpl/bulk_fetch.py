"""The host-mediated fetcher of MCPL SPEC §19 bulk content references, under the host's
rules only (``[mcpl.bulk]``, `BulkSettings`); used only when ``fetch = true``.

§19 "Dereference policy" (fail closed), in the order the checks run:

1. The scheme is one of ``schemes`` (``https`` by default; never ``file`` or any other
   local scheme: the setting cannot name one). A URL with userinfo is refused.
2. An expired or unreadable `expiresAt` is refused without a fetch (§19 "Lifetime"); so
   is a claimed `sizeBytes` over ``max_bytes`` (vector 4).
3. The host is resolved once, every address is checked (public, or inside
   ``allow_networks``), and the connection goes to exactly those checked addresses (an
   aiohttp resolver that answers with them): a second lookup, as a DNS rebinding would
   need, never happens. The address the socket is connected to is checked again.
4. Redirects are followed by hand: to the same origin, at most ``max_redirects``; to any
   other origin, refused (vector 12). No credential is ever sent: §19 lets a host apply
   the connection's authentication only to the origin it dialed, and this host applies
   none (a reference is fetched as an anonymous client).
5. The body streams under an actual-byte ceiling, ``max_bytes`` of *decoded* octets
   (aiohttp undoes a content coding first, vector 19); the transfer is cut the moment it
   passes (vector 10), whatever `sizeBytes` claimed.
6. A `digest` is verified over those octets; a mismatch is refused and the bytes dropped
   (vector 5). The media type is sniffed from the bytes (vector 13), and the payload's
   file name is made from the reference id (vector 14: `name` is never a path).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from agentcore.mcpl.bulk import BulkReference
from agentcore.settings_mcpl import BulkSettings

Refusal: TypeAlias = Literal[
    "scheme",
    "credentials",
    "expired",
    "claimed_size",
    "address",
    "redirect",
    "status",
    "size",
    "digest",
    "timeout",
    "network",
]
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Lookup: TypeAlias = Callable[[str, int], Awaitable[list[tuple[Any, ...]]]]

REDIRECTS = frozenset({301, 302, 303, 307, 308})
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one fetch came to: the verified payload, or the refusal that stopped it."""

    reference: BulkReference
    refusal: Refusal | None = None
    detail: str = ""
    data: bytes = b""
    mime_type: str | None = None
    """Observed: sniffed from the bytes, never taken from the server's testimony alone."""
    digest_verified: bool | None = None
    """True: the `digest` matched; None: the reference had none."""
    origin: str = ""
    """``scheme://host:port`` of the URL (never its path or query, which can be a credential)."""

    @property
    def ok(self) -> bool:
        return self.refusal is None

    @property
    def file_name(self) -> str:
        """The host-generated name of the payload: its reference id and an extension from
        the observed type (§19: the server's `name` is a display label, never a path)."""
        return self.reference.id + _EXTENSIONS.get(self.mime_type or "", ".bin")


class _Refused(Exception):
    def __init__(self, refusal: Refusal, detail: str) -> None:
        super().__init__(detail)
        self.refusal: Refusal = refusal
        self.detail = detail


class BulkFetcher:
    """Fetches references under `settings`. `lookup` resolves a host (the event loop's
    ``getaddrinfo`` by default; a test can give another)."""

    def __init__(self, settings: BulkSettings, *, lookup: Lookup | None = None) -> None:
        self.settings = settings
        self._lookup = lookup

    async def fetch(self, reference: BulkReference) -> Fetched:
        """The payload of `reference`, or a refusal saying which rule stopped it. Never raises
        for what the server or the network does."""
        origin = _origin(reference.uri)
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                data, mime_type = await self._get(reference)
        except _Refused as exc:
            return Fetched(reference, exc.refusal, exc.detail, origin=origin)
        except TimeoutError:
            detail = f"no whole answer within {self.settings.timeout_s:g} s (timeout_s)"
            return Fetched(reference, "timeout", detail, origin=origin)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Fetched(reference, "network", _network_detail(exc), origin=origin)
        verified = None
        if reference.digest is not None:
            if sha256_digest(data) != reference.digest:
                detail = "the payload's sha256 is not its digest; the bytes were dropped"
                return Fetched(reference, "digest", detail, origin=origin, digest_verified=False)
            verified = True
        return Fetched(
            reference, data=data, mime_type=mime_type, digest_verified=verified, origin=origin
        )

    def _precheck(self, reference: BulkReference) -> None:
        """The refusals that need no connection (§19: refused without dialing)."""
        self._check_url(reference.uri)
        if reference.expired():
            raise _Refused(
                "expired", f"expiresAt {reference.expires_at!r} has passed or is unreadable"
            )
        claimed, limit = reference.size_bytes, self.settings.max_bytes
        if claimed is not None and claimed > limit:
            raise _Refused("claimed_size", f"sizeBytes {claimed} is over max_bytes {limit}")

    def _check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in self.settings.schemes:
            raise _Refused("scheme", f"scheme {parts.scheme or '(none)'!r} is not in schemes")
        if parts.username is not None or parts.password is not None:
            raise _Refused("credentials", "the URL carries userinfo (a credential)")
        if not parts.hostname:
            raise _Refused("scheme", "the URL names no host")

    async def _get(self, reference: BulkReference) -> tuple[bytes, str | None]:
        self._precheck(reference)
        resolver = _PinnedResolver()
        connector = _CheckedConnector(self._check_peer, resolver=resolver, use_dns_cache=False)
        async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
            url, first = reference.uri, _origin(reference.uri)
            for _hop in range(self.settings.max_redirects + 1):
                await self._pin(url, resolver)
                async with session.get(url, allow_redirects=False) as response:
                    if response.status not in REDIRECTS:
                        return await self._body(response)
                    url = urljoin(url, response.headers.get("Location", ""))
                self._check_url(url)
                if _origin(url) != first:
                    raise _Refused("redirect", f"a redirect to another origin ({_origin(url)})")
            raise _Refused("redirect", f"more than {self.settings.max_redirects} redirects")

    async def _pin(self, url: str, resolver: _PinnedResolver) -> None:
        """Resolve the URL's host once and check every address; the connection may then go
        to those addresses only (the resolver answers with them)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            literal: Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            self._check_address(literal, host)
            return  # aiohttp connects to an address literal as is
        lookup = self._lookup or _getaddrinfo
        infos = await lookup(host, port)
        if not infos:
            raise _Refused("network", f"{host} resolves to no address")
        for info in infos:
            self._check_address(ipaddress.ip_address(info[4][0]), host)
        resolver.pin(host, port, infos)

    def _check_address(self, address: Address, host: str) -> None:
        if not self._allowed(address):
            raise _Refused(
                "address",
                f"{host} is at {address}, not a public address and not in allow_networks",
            )

    def _allowed(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.settings.allow_networks):
            return True
        return address.is_global and not address.is_multicast

    def _check_peer(self, transport: asyncio.BaseTransport, host: str) -> None:
        """The address the socket is actually connected to, checked again before a byte
        is sent on it."""
        peer = transport.get_extra_info("peername")
        if not peer:
            raise _Refused("network", "the connection's peer address is unknown")
        self._check_address(ipaddress.ip_address(str(peer[0]).split("%", 1)[0]), host)

    async def _body(self, response: aiohttp.ClientResponse) -> tuple[bytes, str | None]:
        if response.status != 200:
            raise _Refused("status", f"the server answered HTTP {response.status}")
        limit = self.settings.max_bytes
        if (response.content_length or 0) > limit and not response.headers.get("Content-Encoding"):
            raise _Refused("size", f"Content-Length {response.content_length} is over max_bytes")
        body = bytearray()
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            body += chunk
            if len(body) > limit:
                response.close()  # cut the transfer now (vector 10)
                raise _Refused("size", f"the payload passed max_bytes {limit}; transfer cut")
        data = bytes(body)
        return data, observed_type(data, response.content_type)


class _CheckedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, with each new connection's peer address checked (`check`)
    before the request is written on it; a refused one is closed at once."""

    def __init__(self, check: Callable[[asyncio.BaseTransport, str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._check = check

    async def _wrap_create_connection(
        self, *args: Any, req: aiohttp.ClientRequest, **kwargs: Any
    ) -> tuple[asyncio.Transport, Any]:
        transport, protocol = await super()._wrap_create_connection(*args, req=req, **kwargs)
        try:
            self._check(transport, str(req.url.host))
        except BaseException:
            transport.close()
            raise
        return transport, protocol


class _PinnedResolver(AbstractResolver):
    """Answers aiohttp with the addresses already checked, and never looks anything up."""

    def __init__(self) -> None:
        self._pinned: dict[tuple[str, int], list[ResolveResult]] = {}

    def pin(self, host: str, port: int, infos: list[tuple[Any, ...]]) -> None:
        self._pinned[(host, port)] = [
            ResolveResult(
                hostname=host,
                host=str(info[4][0]),
                port=port,
                family=info[0],
                proto=info[2],
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for info in infos
        ]

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            return self._pinned[(host, port)]
        except KeyError:  # never: every hop is pinned before it is dialed
            raise OSError(f"{host}:{port} was not checked") from None

    async def close(self) -> None:
        self._pinned.clear()


def _network_detail(exc: BaseException) -> str:
    """What went wrong on the network, without the URL (its path or query can be a
    credential, and the detail goes into a trace)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port}: {exc.os_error.strerror or 'failed'}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__


async def _getaddrinfo(host: str, port: int) -> list[tuple[Any, ...]]:
    loop = asyncio.get_running_loop()
    return list(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or {"https": 443, "http": 80}.get(parts.scheme)
    return f"{parts.scheme}://{parts.hostname or ''}:{port}" if parts.scheme else ""


def sha256_digest(data: bytes) -> str:
    """§19's digest encoding (RFC-003's): ``sha256:`` and the unpadded base64url hash."""
    raw = hashlib.sha256(data).digest()
    return "sha256:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# Signatures of the types the providers carry (WHATWG MIME Sniffing §6), first match wins.
_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "image/png"),
    (0, b"\xff\xd8\xff", "image/jpeg"),
    (0, b"GIF87a", "image/gif"),
    (0, b"GIF89a", "image/gif"),
    (0, b"%PDF-", "application/pdf"),
    (0, b"ID3", "audio/mpeg"),
    (0, b"OggS\x00", "audio/ogg"),
    (0, b"fLaC", "audio/flac"),
)
_RIFF = {b"WAVE": "audio/wav", b"WEBP": "image/webp"}
_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "application/pdf": ".pdf",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "audio/wav": ".wav",
    "text/plain": ".txt",
}


def observed_type(data: bytes, declared: str | None) -> str:
    """The payload's media type as the bytes show it (§19: `mimeType` is testimony): a
    known signature, else text when it is UTF-8 (the declared text type kept), else
    ``application/octet-stream``."""
    if data[:4] == b"RIFF" and data[8:12] in _RIFF:
        return _RIFF[data[8:12]]
    for offset, signature, mime_type in _SIGNATURES:
        if data[offset : offset + len(signature)] == signature:
            return mime_type
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    if b"\x00" in data:
        return "application/octet-stream"
    textual = declared is not None and (declared.startswith("text/") or declared.endswith("json"))
    return declared if textual and declared is not None else "text/plain"


__all__ = ["BulkFetcher", "Fetched", "Refusal", "observed_type", "sha256_digest"]
