"""The environment's proxy for a provider's base URL, by the rules httpx and curl follow,
which users expect: ``HTTP_PROXY`` / ``HTTPS_PROXY`` by the base URL's scheme, else
``ALL_PROXY`` (lower-case names too), ``NO_PROXY`` honoured, a proxy URL with no scheme
taken as ``http://``, an ``https://`` proxy reached over TLS, credentials from the URL or
``.netrc``. A proxy aiohttp cannot speak (``socks5://``) is refused with an error naming
the variable, never skipped for a direct connection.

The driver looks it up once, when the provider is made (aiohttp's ``trust_env`` would look
it up on every call, in two trips to a worker thread).
"""

from __future__ import annotations

import contextlib
import urllib.request

from aiohttp.helpers import basicauth_from_netrc, netrc_from_env, strip_auth_from_url
from yarl import URL

from agentcore.inference import InferenceError
from agentcore.redaction import credential_parts, redact_url, register_secret, url_secrets

PROXY_SCHEMES = ("http", "https")
"""What aiohttp can speak to a proxy: plain HTTP, or HTTP over TLS (TLS in TLS on 3.11+)."""


def env_proxy(url: URL, provider: str) -> tuple[URL | None, dict[str, str] | None]:
    """The environment's proxy for `url`, and the header with its credentials (see this
    module's docstring).

    Raises `InferenceError` (``invalid_request``) naming the variable for a proxy that
    cannot be used: going around it would surprise whoever set it.
    """
    if url.host is None or urllib.request.proxy_bypass(url.host):
        return None, None
    proxies = urllib.request.getproxies()  # scheme -> URL, from *_proxy; "all" for ALL_PROXY
    scheme = url.scheme if url.scheme in proxies else "all"
    value = proxies.get(scheme)
    if not value:
        return None, None
    proxy = URL(value if "://" in value else f"http://{value}")
    for secret in url_secrets(str(proxy)):
        register_secret(secret)
    host = proxy.host
    if proxy.scheme not in PROXY_SCHEMES or not host:
        raise InferenceError(
            "invalid_request",
            f"provider {provider!r}: the proxy {scheme.upper()}_PROXY = "
            f"{redact_url(str(proxy))!r} cannot be used: agentcore speaks to http:// and "
            "https:// proxies only; unset it, or name this host in NO_PROXY",
            retryable=False,
        )
    proxy, auth = strip_auth_from_url(proxy)
    netrc = netrc_from_env() if auth is None else None
    if netrc is not None:
        with contextlib.suppress(LookupError):
            auth = basicauth_from_netrc(netrc, host)
    if auth is None:
        return proxy, None
    header = auth.encode()
    for secret in credential_parts(header):
        register_secret(secret)
    return proxy, {"Proxy-Authorization": header}
