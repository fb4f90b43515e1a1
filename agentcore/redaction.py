"""The one redaction boundary: every string that leaves the process passes `redact`.

A secret is a value, not a place: once registered (`register_secret`), it is
replaced with ``[REDACTED]`` wherever it appears inside a text, as a whole or
inside a longer string (a provider that echoes "Incorrect API key provided:
Bearer sk-..." in its error body), in any case, or split by whitespace in one place
(a model that echoes a key upper-cased, or wraps it at a line's end). The settings
loader registers every secret the settings configure (`settings_secrets`); a
provider registers each key it resolves. The exits call `redact`: CLI output, every
MCPL frame (`JsonRpcPeer._send`; a streamed chunk's frame is written by its stream's
redactor from text it has just redacted, and sealed so it is not redacted twice:
`is_sealed`), trace fields when first read (`TraceEvent.fields`, before any observer
sees them), logs and trace lines (`redact_log`, which also masks
header-shaped credentials nobody registered), and `agentcore settings` (`shown_setting`,
which masks by name too).

`redact` is on the hot path of every MCPL frame: with nothing registered it is
an empty loop; otherwise one substring test per registered form, then one per half
of each (`_anchors`), in the text lowercased. Streamed text (`agentcore infer`'s
output, MCPL ``inference/chunk``) goes through a `StreamRedactor` per stream, so a
secret a provider echoes split across two chunks is masked too.

This module imports nothing of agentcore's, so any module may use it.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

REDACTED = "[REDACTED]"

MIN_SECRET_LENGTH = 8
"""Shorter values are not registered: a key is longer than this, and a short value (an
env var ``AUTH_ENABLED = "true"``) would be masked inside every text, JSON frames included."""

_SECRET_WORDS = ("key", "token", "secret", "auth", "passw", "cookie", "credential", "signature")
_SECRET_NAMES = frozenset({"sig", "pwd"})

_secrets: set[str] = set()
_ordered: tuple[str, ...] = ()
"""Every registered form, longest first (``user:password`` before ``password``)."""
_folded: frozenset[str] = frozenset()
"""Every registered form folded (`_fold`: lowercased, whitespace left out): what a secret
echoed in another case, or split by whitespace, still reads as."""
_anchors: tuple[str, ...] = ()
"""The halves of each folded form: a secret split by whitespace in one place leaves one of
them whole, so a text that holds neither, in any case, holds no such secret, and `_loose`
need not run. (Split in more places it is masked only when a half is still whole: a test
per half costs every frame some 130 ns, and thirds would cost half as much again.)"""
_loose: re.Pattern[str] | None = None
"""Every folded form, its characters with any whitespace between them (a JSON frame's
``\\n`` too), in any case; longest first."""
_starts_by_end: dict[str, tuple[tuple[str, int], ...]] = {}
"""Every proper start of a folded form (``s``, ``sk``, ``sk-``, ...) as the form and the
start's length, by the start's last two characters (its one character for a start of
one), longest first: `StreamRedactor` looks up the folded end of a chunk to find the few
starts of secrets that could end it."""
_secret_characters: frozenset[str] = frozenset()
"""Every character of a folded form: a chunk ending in another (or in whitespace) starts
no secret."""
_longest = 0
"""The longest folded form."""
_short = 0
"""A text shorter than this holds no registered secret: no form fits in it (each is at least
`MIN_SECRET_LENGTH` long), nor any anchor in it lowercased (at most three characters for one:
CPython's bound; Unicode's only expansion is two)."""
_no_start_ends: set[str] = set()
"""Ends of chunks (their last three characters) that `_held_length`'s first tests found to
start no secret: those tests read no further back than three characters, so a chunk ending
the same way starts none either, answered by one lookup. Emptied when the secrets change."""
_NO_START_ENDS = 4096
"""At most this many: a few hundred kilobytes; a stream's text repeats its word endings."""

_sealed: str | None = None
"""The frame `StreamRedactor.feed_json` made last, redacted already: the redaction
boundary's seal (`is_sealed`). Only this module sets it; a secret registered clears it."""

_quoted: Any = encode_basestring_ascii
"""A string as a JSON string, ASCII only: the C escaper `json.dumps` runs for every string
(a lone surrogate escaped, never unencodable)."""

_GAP = r"(?:\s|\\[nrt])*"
"""What may split a secret: whitespace, or its JSON escape inside an encoded frame."""


def _fold(text: str) -> str:
    return "".join(text.lower().split())


def _halves(form: str) -> tuple[str, str]:
    middle = len(form) // 2
    return form[:middle], form[middle:]


def register_secret(value: str | None) -> None:
    """Remember a secret so every text that leaves the process is scrubbed of it.

    Its JSON-escaped forms are registered too, so it is found inside an encoded frame
    or trace line even when it holds a quote, a backslash or non-ASCII characters; and
    each form is found in any case and split by whitespace (`_loose`).
    """
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    if forms <= _secrets:
        return
    _secrets.update(forms)
    _rebuild()


def registered_secrets() -> frozenset[str]:
    """Every registered form, to hand back to `restore_secrets` later."""
    return frozenset(_secrets)


def restore_secrets(saved: frozenset[str]) -> None:
    """Forget every secret registered since `saved` (a `registered_secrets()`).

    For tests that share one process (pytest-xdist's workers): a secret a test loaded
    must not change how a later test's text is redacted or where its chunks break.
    """
    if saved == _secrets:
        return
    _secrets.clear()
    _secrets.update(saved)
    _rebuild()


def _rebuild() -> None:
    """Derive every lookup structure from `_secrets` (and break the seal: `is_sealed`)."""
    global _ordered, _folded, _anchors, _loose, _starts_by_end, _secret_characters, _longest
    global _short
    global _sealed
    _sealed = None
    _ordered = tuple(sorted(_secrets, key=len, reverse=True))
    _folded = frozenset(f for f in map(_fold, _secrets) if len(f) >= MIN_SECRET_LENGTH)
    by_length = sorted(_folded, key=len, reverse=True)
    _anchors = tuple({half for form in by_length for half in _halves(form)})
    _loose = (
        re.compile(
            "|".join(_GAP.join(re.escape(c) for c in form) for form in by_length),
            re.IGNORECASE,
        )
        if by_length
        else None
    )
    starts = [(form, n) for form in _folded for n in range(1, len(form))]
    by_end: dict[str, list[tuple[str, int]]] = {}
    for secret, n in sorted(starts, key=lambda start: start[1], reverse=True):
        by_end.setdefault(secret[max(0, n - 2) : n], []).append((secret, n))
    _starts_by_end = {end: tuple(found) for end, found in by_end.items()}
    _secret_characters = frozenset("".join(_folded))
    _no_start_ends.clear()
    _longest = len(by_length[0]) if by_length else 0
    shortest_anchor = min(map(len, _anchors), default=3 * MIN_SECRET_LENGTH)
    _short = min(MIN_SECRET_LENGTH, -(-shortest_anchor // 3)) if _secrets else 0


def _held_length(text: str) -> int:
    """How many characters at the end of `text` could be the start of a registered secret,
    in any case and with whitespace in it (0 for none). Trailing whitespace is held with
    such a start, since the secret may go on after it, when the start begins a word."""
    tail = text[-3:]
    if tail in _no_start_ends:
        return 0
    last = text[-1:]
    if not last or not (last.isspace() or last.lower() in _secret_characters):
        if len(_no_start_ends) < _NO_START_ENDS:
            _no_start_ends.add(tail)
        return 0
    # The lookup below, without the fold, when the last two characters that are not
    # whitespace are ASCII (lowercased one to one, no context): no start ends in them.
    end = (text.rstrip() if last.isspace() else text)[-2:].lower()
    if (
        len(end) == 2
        and end.isascii()
        and not end[0].isspace()
        and end not in _starts_by_end
        and end[1] not in _starts_by_end
    ):
        # Read from `tail` alone, unless the whitespace at the end is longer than one.
        if not text[-2:-1].isspace() and len(_no_start_ends) < _NO_START_ENDS:
            _no_start_ends.add(tail)
        return 0
    folded = _fold(text[-2 * _longest :])[-_longest:]
    n = 0
    for form, length in _starts_by_end.get(folded[-2:], ()):
        if length <= len(folded) and form.startswith(folded[-length:]):
            n = length
            break
    else:
        if folded[-1:] in _starts_by_end:
            n = 1
    if not n:
        return 0
    i = len(text)
    while n:  # back over n characters of the start, and the whitespace among them
        i -= 1
        n -= not text[i].isspace()
    if last.isspace() and i and text[i - 1].isalnum():
        return 0  # the end of a word ("dear "), not a secret's start split off by a space
    return len(text) - i


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ``[REDACTED]``, also in another case
    or split by whitespace.

    A substring test per secret (C's fast search, some 60 ns on a chunk frame), not a
    regex alternation, which Python's engine tries at every position: five times slower
    with a handful of secrets. Then one lowercasing and a test per anchor (`_anchors`):
    only a text that holds a piece of a secret goes through the regex (`_loose`). With
    none registered the loops do not run; a text too short for any of them (`_short`: most
    of a stream's chunks) is handed back at once.
    """
    if len(text) < _short:
        return text
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if _loose is not None:
        lowered = text.lower()
        for anchor in _anchors:
            if anchor in lowered:
                return _loose.sub(REDACTED, text)
    return text


class StreamRedactor:
    """`redact` for one stream of text chunks: a secret split across chunks is masked too.

    Each chunk's text goes out at once (redacted), but for its tail when that tail is
    the start of a registered secret (in any case, whitespace and all): held until the
    next chunk shows whether the secret follows, or `flush` ends the stream. A chunk
    whose tail starts no secret is held not at all. With no secret registered, `feed`
    hands the chunk back as it is.
    """

    __slots__ = ("_head", "_head_at", "_head_source", "_held")

    def __init__(self) -> None:
        self._held = ""
        self._head_source = self._head = ""
        self._head_at: tuple[str, ...] | None = None

    def feed(self, text: str) -> str:
        """The part of the stream so far that can go out now, redacted."""
        if not _ordered:
            return text
        text = self._held + text
        if len(text) >= _short:  # `redact`'s first test, without the call
            text = redact(text)
        held = 0 if text[-3:] in _no_start_ends else _held_length(text)  # its first test, inline
        if held:
            self._held = text[-held:]
            return text[:-held]
        self._held = ""
        return text

    def feed_json(self, text: str, head: str, index: int) -> str | None:
        """`feed`, written as a JSON frame whose only text from outside is the part fed:
        ``{head}{index},"delta":"<that part>"}}`` (an MCPL chunk, §11), and sealed
        (`is_sealed`); None when no part of `text` can go now.

        The boundary need not redact a sealed frame again: the part fed is redacted (as
        decoded text, which `redact` covers more widely than the escaped frame: a secret
        upper-cased in non-ASCII, or split by a non-ASCII space), `head` is redacted here
        once per head and per set of secrets, and the index is a number (a secret of eight
        digits would match an index past ten million, which is no echo of it)."""
        delta = self.feed(text)
        return self._seal(delta, head, index) if delta else None

    def flush(self) -> str:
        """The held tail, at the end of the stream: it began a secret that never came."""
        held, self._held = self._held, ""
        return held

    def flush_json(self, head: str, index: int) -> str | None:
        """`flush`, written and sealed as `feed_json` writes a part fed (None: no tail)."""
        tail = self.flush()
        return self._seal(tail, head, index) if tail else None

    def _seal(self, delta: str, head: str, index: int) -> str:
        """The one place a chunk frame is written: `delta` is redacted text (see `feed_json`)."""
        global _sealed
        if head is not self._head_source or self._head_at is not _ordered:
            self._head_source, self._head, self._head_at = head, redact(head), _ordered
        frame = _sealed = f'{self._head}{index},"delta":{_quoted(delta)}}}}}'
        return frame


def is_sealed(text: str) -> bool:
    """Whether `text` is the very frame `StreamRedactor.feed_json` made last, with no secret
    registered since: redacted already, so the boundary may send it as it is.

    A seal, not a type: a str subclass made per frame cost some 1,300 instructions, the seal
    an identity test. A frame sent at once after it is made (`JsonRpcPeer.send_now`) is still
    the sealed one; any other text, or a frame that waited while another was sealed, is not,
    and is redacted as every frame is."""
    return text is _sealed


_HEADER_PATTERN = re.compile(
    r"(?i)(authorization|x-api-key|api-key|x-amz-security-token)"
    r"(['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+"
)
_SIGNATURE_PATTERN = re.compile(r"(?i)(signature=)[0-9a-f]{16,}")
"""An AWS SigV4 signature (``Authorization: AWS4-HMAC-SHA256 ..., Signature=<hex>``), made
per request and never registered: masked wherever a log line quotes one."""


def excerpt(text: str, limit: int) -> str:
    """The start of a provider's text for a message, redacted before it is cut: a key the
    provider echoed must not survive as a prefix that no longer matches it whole."""
    return redact(text.strip())[:limit]


def redact_log(text: str) -> str:
    """`redact`, and header-shaped credentials (``Authorization: ...``) even unregistered:
    for log and trace lines, whose diagnostic text may quote a request."""
    text = _HEADER_PATTERN.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", redact(text))
    return _SIGNATURE_PATTERN.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


def redact_value(value: Any) -> Any:
    """`value` with every string in it (nested in dicts, lists, tuples) redacted; other
    objects as they are. For trace fields, before any observer sees them.

    Every string of `value` is tested at once, joined (`_may_hold_secret`): a value with no
    piece of a secret in it, nearly every trace, is handed back as it is, without a walk
    that rebuilds it string by string."""
    if not _ordered:
        return value
    if isinstance(value, str):
        return redact(value)
    if not _may_hold_secret("\0".join(_strings(value, []))):
        return value
    return _redact_each(value)


def _may_hold_secret(text: str) -> bool:
    """Whether `redact` could change `text`: it holds a registered form or an anchor."""
    for secret in _ordered:  # loops, not `any` over a generator: a frame less per test
        if secret in text:
            return True
    lowered = text.lower()
    for anchor in _anchors:  # noqa: SIM110 (a loop: no generator frame per test)
        if anchor in lowered:
            return True
    return False


_SEQUENCES = (list, tuple)
_CONTAINERS = (dict, list, tuple)
"""Tuples, not ``dict | list | tuple``: `isinstance` with a union is several times slower."""


def _strings(value: Any, into: list[str]) -> list[str]:
    """Every string in `value` (keys too), appended to `into`, in order.

    A string or scalar member is taken inline, without a call: a trace's fields are a flat
    dict of a dozen, and a call per member made this walk most of `redact_value`'s cost."""
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                into.append(key)
            elif isinstance(key, tuple):
                _strings(key, into)
            if isinstance(item, str):
                into.append(item)
            elif isinstance(item, _CONTAINERS):
                _strings(item, into)
    elif isinstance(value, _SEQUENCES):
        for item in value:
            if isinstance(item, str):
                into.append(item)
            elif isinstance(item, _CONTAINERS):
                _strings(item, into)
    return into


def _redact_each(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redact_each(k): _redact_each(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_each(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_each(v) for v in value)
    return value


# -- which configured values are secrets ----------------------------------------------------


def is_secret_name(name: str) -> bool:
    """A header, query parameter, environment variable or settings key whose value is a
    credential: its name holds key, token, secret, auth, password, cookie, credential or
    signature (``Authorization``, ``x-goog-api-key``, ``access_token``, ``DB_PASSWORD``),
    or is ``sig`` (Azure SAS) or ``pwd``."""
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(word in lowered for word in _SECRET_WORDS)


def credential_parts(value: str) -> list[str]:
    """A credential and the parts that may be echoed alone: the token after an auth
    scheme (``Bearer sk-...``), each cookie's value (``a=x; b=y``)."""
    parts = [value]
    scheme, _, token = value.strip().partition(" ")
    if token and scheme.isalpha():
        parts.append(token.strip())
    if "=" in value:
        parts += [p.partition("=")[2].strip() for p in value.split(";") if "=" in p]
    return parts


def url_secrets(url: str) -> list[str]:
    """The secret parts of a URL: its userinfo (whole, its password, or a lone user name,
    which is a token), and the values of key- or token-like query parameters (as written
    and percent-decoded)."""
    parts = _split(url)
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and userinfo:
        user, colon, password = userinfo.partition(":")
        found += [userinfo, password] if colon else [user]
    for _, value, secret in _query(parts.query):
        if secret:
            found += [value, urllib.parse.unquote_plus(value)]
    return found


def redact_url(url: str) -> str:
    """`url` readable, its secret parts masked: ``https://[REDACTED]@host/v1?key=[REDACTED]``."""
    parts = _split(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    pieces = [f"{name}={REDACTED}" if secret else name for name, _, secret in _query(parts.query)]
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query="&".join(pieces)))


def _split(url: str) -> urllib.parse.SplitResult:
    """`urllib.parse.urlsplit`, or the same split by hand for a URL it refuses (``http://u:pw@[::1``,
    a bracket that does not close): its credentials are found and masked all the same, and the
    settings loader then says what is wrong with it."""
    try:
        return urllib.parse.urlsplit(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "", url
        end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
        netloc, rest = rest[:end], rest[end:]
        rest, _, fragment = rest.partition("#")
        path, _, query = rest.partition("?")
        return urllib.parse.SplitResult(scheme, netloc, path, query, fragment)


def _query(query: str) -> Iterator[tuple[str, str, bool]]:
    """Each ``&``-separated piece of a query as written: the piece up to its ``=`` (the
    whole piece when its value is not a secret), its value, and whether it is a secret."""
    for piece in query.split("&"):
        name, _, value = piece.partition("=")
        secret = bool(value) and is_secret_name(urllib.parse.unquote_plus(name))
        yield (name if secret else piece), value, secret


_CREDENTIAL_TABLES = frozenset({"headers", "env"})
"""Settings tables that map a name to a value (HTTP headers, a server's environment):
a value there is a secret when its name is (`is_secret_name`)."""


def settings_secrets(tree: Mapping[str, Any], environ: Mapping[str, str]) -> Iterator[str]:
    """Every secret a settings dump (``model_dump(mode="json")``) configures, by one rule
    for every section, plugins' included: a secret-named entry of a ``headers`` or ``env``
    table (``Authorization``, ``x-api-key``, an MCPL server's ``API_TOKEN``), the value
    of the environment variable a secret-named ``*_env`` key names (``api_key_env``), and
    the secret parts of any URL (``base_url``, a server's ``url``), and the values of a
    command line's secret-named flags (a server's ``command = [..., "--token", "X"]``)."""
    for argv in _lists(tree):
        for secret in argv_secrets(argv):
            yield from credential_parts(secret)
    for path, value in _leaves(tree):
        if not isinstance(value, str) or not path:
            continue
        key = path[-1]
        if _names_a_secret(path):
            yield from credential_parts(value)
        elif key.endswith("_env") and is_secret_name(key[: -len("_env")]):
            if environ.get(value):
                yield from credential_parts(environ[value])
        elif "://" in value:
            yield from url_secrets(value)


def _secret_flag(arg: str) -> bool:
    """``--api-key``, ``--token``, ``-password``: a flag whose name is a secret's."""
    return arg.startswith("-") and is_secret_name(arg.lstrip("-"))


def argv_secrets(argv: list[Any]) -> list[str]:
    """The values a command line passes with secret-named flags: ``--api-key X``,
    ``--token=X``, ``--password X`` (a value that is itself a ``--flag`` is not one)."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            continue
        flag, equals, value = arg.partition("=")
        if equals and _secret_flag(flag) and value:
            found.append(value)
        elif not equals and _secret_flag(arg) and i + 1 < len(argv):
            following = argv[i + 1]
            if isinstance(following, str) and not following.startswith("--"):
                found.append(following)
    return found


def shown_argv(argv: list[Any]) -> list[Any]:
    """`argv` with the values of secret-named flags masked (`argv_secrets`)."""
    secrets = set(argv_secrets(argv))
    shown: list[Any] = []
    for arg in argv:
        flag, equals, value = arg.partition("=") if isinstance(arg, str) else ("", "", "")
        if equals and value in secrets and _secret_flag(flag):
            shown.append(f"{flag}={REDACTED}")
        else:
            shown.append(REDACTED if isinstance(arg, str) and arg in secrets else arg)
    return shown


def shown_setting(path: tuple[str, ...], value: Any) -> Any:
    """What `agentcore settings` prints for a leaf (before `redact` runs over the line): a
    secret-named header or env entry masked whole, a URL with its secret parts masked, a
    command line with the values of its secret-named flags masked."""
    if isinstance(value, list):
        return [shown_setting(path, item) for item in shown_argv(value)]
    if not isinstance(value, str):
        return value
    if _names_a_secret(path):
        return REDACTED
    if "://" in value:
        return redact_url(value)
    return value


def _names_a_secret(path: tuple[str, ...]) -> bool:
    return len(path) >= 2 and path[-2] in _CREDENTIAL_TABLES and is_secret_name(path[-1])


def _lists(tree: Any) -> Iterator[list[Any]]:
    if isinstance(tree, Mapping):
        for value in tree.values():
            yield from _lists(value)
    elif isinstance(tree, list):
        yield tree
        for item in tree:
            yield from _lists(item)


def _leaves(tree: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            yield from _leaves(v, (*path, str(k)))
    elif isinstance(tree, list):
        for item in tree:
            yield from _leaves(item, path)
    else:
        yield path, tree


__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "StreamRedactor",
    "argv_secrets",
    "credential_parts",
    "excerpt",
    "is_sealed",
    "is_secret_name",
    "redact",
    "redact_log",
    "redact_url",
    "redact_value",
    "register_secret",
    "settings_secrets",
    "shown_argv",
    "shown_setting",
    "url_secrets",
]
