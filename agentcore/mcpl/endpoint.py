"""MCPL §18 endpoint URIs (RFC-004): `mcpl://` names an MCPL server reached over `wss://`.

An endpoint has three values, kept apart (§18, RFC-004 §5): what was *configured* (as
written), the *canonical* `mcpl://` form (equality: two spellings of one endpoint compare
equal), and the *resolved* transport (what is dialled). Resolution is a pure rewrite:

1. the forms §18 rejects are refused on the string, before anything is parsed: a
   fragment, userinfo, an empty authority (``mcpl:///x`` would otherwise dial host
   ``x``), and ``.`` / ``..`` path segments, percent-encoded ones included;
2. ``mcpl:`` becomes ``wss:`` (never ``ws:``: plaintext is written as ``ws://``);
3. the result is normalized as a WHATWG parser does a special scheme: the host
   lowercased, IDNA-encoded and (IPv6) compressed, the default port 443 elided, an empty
   path made ``/``. The host part is yarl's (aiohttp's parser, the one that dials); the
   path and query are kept verbatim, percent-escapes included, only the characters
   WHATWG would escape escaped (yarl decodes ``%7E`` and upper-cases ``%2f``, which
   §18's vectors forbid). A backslash is refused rather than read as ``/``.
4. the canonical form is that URL with ``wss:`` mapped back to ``mcpl:``.

A ``ws://`` or ``wss://`` URL is accepted as ever and dialled as written; a ``wss://``
one's canonical form is its ``mcpl://`` equivalent (the same endpoint), a ``ws://`` one
has none but itself. Possessing or resolving a URI grants nothing (§18 security): the
grant is decided after `initialize`, as for any server.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

SCHEMES = ("mcpl", "ws", "wss")
_PARTS = re.compile(r"(?P<authority>[^/?]*)(?P<path>[^?]*)(?:\?(?P<query>.*))?\Z", re.DOTALL)
_DOT_SEGMENT = re.compile(r"^(?:\.|%2e){1,2}$", re.IGNORECASE)
# WHATWG's percent-encode sets for a special URL's path and query (plus "%", kept as is).
_PATH_SAFE = "!$%&'()*+,-./:;=@[]^_|~"
_QUERY_SAFE = "!$%&()*+,-./:;=?@[]^_`{|}~\\"


class EndpointError(ValueError):
    """A URI §18 refuses; the message says which rule, never repeats the URI."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    configured: str
    """Exactly as written (provenance)."""
    canonical: str
    """The normalized `mcpl://` form (identity), or for ``ws://`` the normalized URL."""
    resolved: str
    """The transport target dialled."""


def resolve(uri: str) -> Endpoint:
    """`uri`'s three values (§18); EndpointError for a form it refuses."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise EndpointError("is not an mcpl://, wss:// or ws:// URI")
    if scheme != "mcpl":
        # Accepted and dialled as ever (§18: this adds a spelling, refuses nothing old).
        try:
            normalized = _normalize(scheme, rest)
        except EndpointError:
            return Endpoint(uri, uri, uri)
        canonical = "mcpl://" + normalized if scheme == "wss" else f"ws://{normalized}"
        return Endpoint(uri, canonical, uri)
    normalized = _normalize("wss", rest)
    return Endpoint(uri, "mcpl://" + normalized, "wss://" + normalized)


def _normalize(scheme: str, rest: str) -> str:
    """Everything after ``scheme://``, checked (§18's rejected forms) and normalized."""
    if "#" in rest:
        raise EndpointError("has a fragment (#...), which has no meaning for an endpoint")
    if "\\" in rest:
        raise EndpointError("holds a backslash, which a URL parser would read as /")
    match = _PARTS.match(rest)
    assert match is not None  # every string matches
    authority, path, query = match.group("authority", "path", "query")
    if "@" in authority:
        raise EndpointError("has userinfo (user@ or user:password@), which §18 refuses")
    if not authority:
        raise EndpointError("has an empty authority (scheme:///...): it names no host")
    if any(_DOT_SEGMENT.match(segment) for segment in path.split("/")):
        raise EndpointError("has a . or .. path segment, which would retarget it")
    from yarl import URL  # here, not at import: an idle host that dials no URL never loads it

    try:
        url = URL(f"{scheme}://{authority}")
        host = url.raw_host
        port = url.explicit_port
    except ValueError as exc:
        reason = "a port outside 0-65535" if "range" in str(exc) else "a host it cannot parse"
        raise EndpointError(f"has {reason}") from None
    if not host:
        raise EndpointError("has no host")
    if ":" in host:
        host = f"[{host}]"
    default = 443 if scheme == "wss" else 80
    netloc = host if port in (None, default) else f"{host}:{port}"
    normalized = netloc + (urllib.parse.quote(path, safe=_PATH_SAFE) or "/")
    if query is not None:
        normalized += "?" + urllib.parse.quote(query, safe=_QUERY_SAFE)
    return normalized


__all__ = ["SCHEMES", "Endpoint", "EndpointError", "resolve"]
