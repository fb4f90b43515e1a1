"""The manifest revision digest of MCPL SPEC §17.2, as a pure function.

    revision = "sha256:" + base64url_unpadded(SHA-256(JCS(manifest_without_revision)))

Steps, in the order §17.2 fixes them:

1. Strip the root `revision` member, and only the root one.
2. Set semantics for three arrays, and only where the value is an all-string array in
   the object-keyed `featureSets` shape: `featureSets.*.uses`,
   `featureSets.*.tagOntology.coreTags`, `featureSets.*.tagOntology.tags.*.implies` are
   deduplicated and sorted by UTF-8 bytes. Anything else (a wrong-typed `uses`, an
   array-shaped `featureSets`, a non-string member) is hashed verbatim: "the digest is
   total".
3. The identifier check, the one refusal (§17.2): a string in an identifier position
   must be a non-empty match of ``[A-Za-z0-9._:*-]``. Positions are those of MCPL's
   conformance vectors (`identifierPositions`): capability member names at every depth,
   feature-set names, `uses`, `coreTags`, `tags` keys, `implies`, `keyed` keys and their
   `values`, `suggestedTreatment` matchers, a tag's `facet`. Arrays that are not
   all-string are not checked (the second totality corollary).
4. RFC 8785 canonicalization, by the `rfc8785` package (Trail of Bits; typed, and it
   passes every MCPL vector). JSON numbers are IEEE doubles to JCS, as to the JavaScript
   it defers to, so an integer past 2**53 is written as the double it parses to.

The only other refusals are inputs that are not a manifest at all (not an object) or that
JCS cannot write (a number beyond the double range, nesting deeper than it can walk).

`read_json` reads a manifest's bytes as JCS requires its input to be (RFC 8785 §3.1: I-JSON,
RFC 7493): a member name twice in one object is refused, not digested as whichever copy a
parser keeps (the digest of the same bytes would then differ between libraries).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
from collections.abc import Iterable
from typing import Any

import rfc8785

IDENTIFIER = re.compile(r"[A-Za-z0-9._:*-]+")
"""§17.2: capability paths and tag identifiers are ASCII."""

# Members of the manifest root that are not capabilities (§17.1's domain table).
ROOT_NON_CAPABILITY = frozenset({"version", "revision", "featureSets"})

# Paths below the manifest root, "*" for any member name. A list index never matches "*":
# the paths are written against the object-keyed shape (§17.2).
SET_PATHS: tuple[tuple[str, ...], ...] = (
    ("featureSets", "*", "uses"),
    ("featureSets", "*", "tagOntology", "coreTags"),
    ("featureSets", "*", "tagOntology", "tags", "*", "implies"),
)
_ONTOLOGY = ("featureSets", "*", "tagOntology")
IDENTIFIER_ARRAYS: tuple[tuple[str, ...], ...] = (
    *SET_PATHS,
    (*_ONTOLOGY, "keyed", "*", "values"),
    (*_ONTOLOGY, "suggestedTreatment", "*", "tagsAny"),
    (*_ONTOLOGY, "suggestedTreatment", "*", "tagsAll"),
    (*_ONTOLOGY, "suggestedTreatment", "*", "tagsNone"),
)
IDENTIFIER_KEYS: tuple[tuple[str, ...], ...] = (
    ("featureSets",),
    (*_ONTOLOGY, "tags"),
    (*_ONTOLOGY, "keyed"),
)
IDENTIFIER_VALUES: tuple[tuple[str, ...], ...] = ((*_ONTOLOGY, "tags", "*", "facet"),)

_INDEX = object()  # a list position in a path: never matched by "*"
_SAFE_INTEGER = 2**53 - 1


class DigestRefused(ValueError):
    """The digest refuses this input. `code` is the conformance vectors' error code
    (``identifier_charset``, ``manifest_not_object``) or ``number_out_of_range``."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class NotJson(ValueError):
    """Bytes `read_json` refuses, its message saying why."""


def read_json(data: bytes) -> object:
    """The JSON value of `data` (UTF-8), or `NotJson` saying what is wrong: not JSON, NaN or
    Infinity, a duplicate member name (I-JSON, RFC 7493 §2.3), a number too long to read,
    or nesting too deep to read."""
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_unique_members)
    except RecursionError:
        raise NotJson("it is nested too deeply to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError, NotJson) as exc:
        raise NotJson(str(exc)) from None
    except ValueError:  # Python's int limit, whose own message names interpreter settings
        raise NotJson(f"a number has more than {sys.get_int_max_str_digits()} digits") from None


def _no_constant(name: str) -> Any:
    raise NotJson(f"{name} is not JSON")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for key, value in pairs:
        if key in members:
            raise NotJson(f"the member {key!r} appears twice in one object (I-JSON, RFC 7493)")
        members[key] = value
    return members


def manifest_digest(manifest: object) -> str:
    """The §17.2 revision of `manifest` (an `experimental.mcpl` object): ``sha256:...``.

    Raises `DigestRefused` for an identifier outside ``[A-Za-z0-9._:*-]``, a manifest
    that is not an object, or a number JCS cannot write.
    """
    digest = hashlib.sha256(canonical_json(manifest).encode("utf-8")).digest()
    return "sha256:" + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def canonical_json(manifest: object) -> str:
    """The exact JCS text that `manifest_digest` hashes."""
    if not isinstance(manifest, dict):
        raise DigestRefused("manifest_not_object", f"the manifest is {_kind(manifest)}")
    stripped = {key: value for key, value in manifest.items() if key != "revision"}
    try:
        return rfc8785.dumps(_normalize(stripped, ())).decode("utf-8")
    except RecursionError:
        raise DigestRefused("nesting_too_deep", "the manifest is nested too deeply") from None
    except rfc8785.FloatDomainError as exc:  # NaN or infinity: not JSON
        raise DigestRefused("number_out_of_range", str(exc)) from None
    except rfc8785.CanonicalizationError as exc:  # a lone surrogate from a "\\ud800" escape
        raise DigestRefused("invalid_string", str(exc)) from None


def set_order(values: Iterable[str]) -> list[str]:
    """A set-valued array as §17.2 writes it: duplicates removed, sorted by UTF-8 bytes."""
    return sorted(set(values), key=lambda value: value.encode("utf-8", "surrogatepass"))


def _matches(path: tuple[object, ...], pattern: tuple[str, ...]) -> bool:
    if len(path) != len(pattern):
        return False
    for got, want in zip(path, pattern, strict=True):
        if want == "*":
            if got is _INDEX:
                return False
        elif got != want:
            return False
    return True


def _at(path: tuple[object, ...], patterns: tuple[tuple[str, ...], ...]) -> bool:
    return any(_matches(path, pattern) for pattern in patterns)


def _where(path: tuple[object, ...]) -> str:
    return ".".join("[]" if part is _INDEX else str(part) for part in path)


def _check(value: object, path: tuple[object, ...]) -> None:
    if not isinstance(value, str) or IDENTIFIER.fullmatch(value) is None:
        raise DigestRefused(
            "identifier_charset",
            f"{_where(path)} = {value!r} is not an identifier ([A-Za-z0-9._:*-], non-empty)",
        )


def _names_are_identifiers(path: tuple[object, ...]) -> bool:
    """Member names of the object at `path` are identifiers: capability names at any depth
    (§5.4's generic walk), and the name positions of `featureSets` and its ontology."""
    if not path:
        return True  # the root's capability members (metadata members are skipped)
    if path[0] not in ROOT_NON_CAPABILITY:
        return True
    return _at(path, IDENTIFIER_KEYS)


def _normalize(value: Any, path: tuple[object, ...]) -> Any:
    if isinstance(value, dict):
        check_names = _names_are_identifiers(path)
        out: dict[str, Any] = {}
        for key, member in value.items():
            if check_names and not (not path and key in ROOT_NON_CAPABILITY):
                _check(key, (*path, key))
            out[key] = _normalize(member, (*path, key))
        return out
    if isinstance(value, list):
        items = [_normalize(item, (*path, _INDEX)) for item in value]
        if not all(isinstance(item, str) for item in items):
            return items  # hashed verbatim: no sort, no dedupe, no check (§17.2)
        if _at(path, IDENTIFIER_ARRAYS):
            for item in items:
                _check(item, (*path, _INDEX))
        return set_order(items) if _at(path, SET_PATHS) else items
    if isinstance(value, str):
        if _at(path, IDENTIFIER_VALUES):
            _check(value, path)
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _SAFE_INTEGER:
        try:
            return float(value)
        except OverflowError:
            raise DigestRefused(
                "number_out_of_range", f"{_where(path)} is beyond the range of a double"
            ) from None
    return value


def _kind(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "not JSON")


__all__ = [
    "DigestRefused",
    "NotJson",
    "canonical_json",
    "manifest_digest",
    "read_json",
    "set_order",
]
