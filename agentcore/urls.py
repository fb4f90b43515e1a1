"""URL settings, checked at load (docs/settings.md, "Validation").

A URL that cannot be parsed (an IPv6 address whose bracket does not close), has the wrong
scheme, no host, or a port that is not a number is a settings error naming its key, before
anything runs, not a traceback at the first call. The checks are those of the parser every
client here uses underneath (`urllib.parse`: aiohttp's yarl, redis-py and the OTLP exporters
refuse the same inputs). A message never repeats the URL: it may hold a password.

A plugin types its own URL fields with these too (``endpoint: HttpUrl | None``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from typing import Annotated

from pydantic import AfterValidator

from agentcore.settings_checks import invalid

HTTP_SCHEMES = ("http", "https")
WEBSOCKET_SCHEMES = ("ws", "wss")
REDIS_SCHEMES = ("redis", "rediss", "unix")


def url_problem(url: str, schemes: Sequence[str], expected: str | None = None) -> str | None:
    """Why `url` cannot be used as a URL of one of `schemes`, or None. `expected`: what to
    say of a wrong scheme (default: "expected http:// or https://")."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return "is not a URL: it holds a space or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        if "Invalid IPv6 URL" in str(exc):
            return "is not a URL: the bracket of its IPv6 address ([...]) does not close"
        if "IPv4 or IPv6" in str(exc):
            return "is not a URL: its host in brackets ([...]) is not an IP address"
        return "is not a URL: its host part cannot be parsed"
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        said = f"the scheme {scheme!r}" if scheme else "no scheme"
        return f"has {said}; {expected or 'expected ' + _either(schemes)}"
    if scheme == "unix":
        return None if parts.path else "names no socket path (unix:///path/to/redis.sock)"
    try:
        _port = parts.port  # raises for a port that is not a number, or out of range
    except ValueError as exc:
        in_range = "range" not in str(exc)
        return "has a port that is not a number" if in_range else "has a port outside 0-65535"
    if not parts.hostname:
        return "has no host"
    database = parts.path.strip("/")
    if scheme in ("redis", "rediss") and database and not database.isdigit():
        return "names a database (its path) that is not a number"  # redis-py would use 0
    return None


def _either(schemes: Sequence[str]) -> str:
    written = [f"{s}://" for s in schemes]
    return written[0] if len(written) == 1 else ", ".join(written[:-1]) + " or " + written[-1]


def _checked(schemes: Sequence[str], expected: str | None = None) -> Callable[[str], str]:
    def check(url: str) -> str:
        problem = url_problem(url, schemes, expected)
        if problem is not None:
            raise invalid(problem)
        return url

    return check


HttpUrl = Annotated[str, AfterValidator(_checked(HTTP_SCHEMES))]
"""A settings field holding an ``http://`` or ``https://`` URL, checked at load."""
_WEBSOCKET = "an MCPL server is reached over ws:// or wss:// (or set command for stdio)"
WebSocketUrl = Annotated[str, AfterValidator(_checked(WEBSOCKET_SCHEMES, _WEBSOCKET))]
"""``[mcpl.servers.NAME] url``: ``ws://`` or ``wss://``, checked at load."""
RedisUrl = Annotated[str, AfterValidator(_checked(REDIS_SCHEMES))]
"""redis-py's URL form (``redis://[[user]:password@]host:port/db``, ``rediss://``,
``unix://``), checked at load."""

__all__ = [
    "HTTP_SCHEMES",
    "REDIS_SCHEMES",
    "WEBSOCKET_SCHEMES",
    "HttpUrl",
    "RedisUrl",
    "WebSocketUrl",
    "url_problem",
]
