"""Capability trees, grants and feature-set derivation (MCPL SPEC §5.1, §5.4, §6.2-6.4).

The grant is the security boundary, so every rule here fails closed:

- A capability path is dot-separated; an empty segment, or a server key that
  contains ``.`` or ``*``, makes a path that nothing matches.
- ``*`` in a *pattern* matches exactly one segment; segment counts must be
  equal; a bare parent grants nothing beneath it (``inferenceRequest`` does not
  grant ``inferenceRequest.streaming``); absence is denial.
- Matching is a generic walk over segments, never a list of nestable keys
  (§5.4), so a deeper vocabulary needs no change here.

The one place the vocabulary is consulted is advertisement (§5.1): ``true`` at
a node is shorthand for "every leaf beneath this node", and only the
vocabulary knows which leaves exist beneath, say, ``beforeInference``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentcore.settings_checks import did_you_mean

# §6.2 / Appendix B.2: the only valid `uses` values, and the known leaves that
# `true` expands to in an advertisement.
VOCABULARY: tuple[str, ...] = (
    "pushEvents",
    "tools",
    "modelInfo",
    "inferenceRequest",
    "inferenceRequest.streaming",
    "inferenceLifecycle",
    "contextHooks.beforeInference.observe",
    "contextHooks.beforeInference.inject.system",
    "contextHooks.beforeInference.inject.beforeUser",
    "contextHooks.beforeInference.inject.afterUser",
    "channels.register",
    "channels.lifecycle",
    "channels.publish",
    "channels.incoming",
    "channels.streaming",
    "channels.acknowledge",
    "channels.typing",
)

# Members of `experimental.mcpl` that describe the extension rather than
# advertise a capability.
NON_CAPABILITY_KEYS = frozenset({"version", "featureSets"})

WILDCARD = "*"


def _segments(path: str) -> list[str] | None:
    """Split a path; None when it is not a well-formed path (fails closed)."""
    if not isinstance(path, str) or not path:
        return None
    parts = path.split(".")
    if any(not part for part in parts):
        return None
    return parts


def matches(pattern: str, capability: str) -> bool:
    """True when `pattern` covers `capability` under §5.4.

    `*` in the pattern matches exactly one segment; the capability itself is
    concrete, so a `*` in it is never granted. Anything but two strings (a
    server's manifest can hold anything) matches nothing.
    """
    if not isinstance(pattern, str) or not isinstance(capability, str):
        return False
    return _matches(pattern, capability)


@functools.lru_cache(maxsize=4096)
def _matches(pattern: str, capability: str) -> bool:
    """`matches`, cached: every inbound request asks the same few questions of its grant."""
    want = _segments(pattern)
    have = _segments(capability)
    if want is None or have is None or len(want) != len(have):
        return False
    if WILDCARD in have:
        return False
    return all(w in (WILDCARD, h) for w, h in zip(want, have, strict=True))


def is_granted(grant: Iterable[str], capability: str) -> bool:
    """True when some entry of `grant` covers `capability`; absence is denial."""
    if isinstance(grant, frozenset) and isinstance(capability, str):
        return _granted(grant, capability)
    return any(matches(entry, capability) for entry in grant)


@functools.lru_cache(maxsize=4096)
def _granted(grant: frozenset[str], capability: str) -> bool:
    """`is_granted` for a connection's grant (a frozenset, its hash kept by Python), cached:
    a host turn asks every server's grant the same few questions."""
    return any(matches(entry, capability) for entry in grant)


def grant_problem(entry: str) -> str | None:
    """Why a configured grant entry can never grant anything, or None: a typo
    (``inferenceRequests``, ``modelinfo``), a malformed path, or a bare parent (§5.4: it
    grants nothing beneath it). The entry must cover some path of the vocabulary (§6.2):
    a capability this host does not know, it has no method for either."""
    if _segments(entry) is None:
        return f"{entry!r} is not a capability path (dot-separated names, none empty)"
    if any(matches(entry, leaf) for leaf in VOCABULARY):
        return None
    beneath = sorted(leaf for leaf in VOCABULARY if any(matches(entry, n) for n in _nodes(leaf)))
    if beneath:
        return (
            f"{entry!r} grants nothing: it covers only paths above the capabilities (MCPL "
            f"§5.4: a parent grants nothing beneath it, and * is one segment); name them: "
            + ", ".join(beneath)
        )
    hint = did_you_mean(entry, VOCABULARY)
    if hint:
        return f"{entry!r} is not an MCPL capability{hint}"
    return f"{entry!r} is not an MCPL capability; the capabilities are {', '.join(VOCABULARY)}"


def _nodes(leaf: str) -> list[str]:
    """The interior paths above a vocabulary leaf (``a.b.c``: ``a``, ``a.b``)."""
    parts = leaf.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _valid_key(key: object) -> bool:
    return isinstance(key, str) and bool(key) and "." not in key and WILDCARD not in key


def _vocabulary_beneath(path: str) -> set[str]:
    """Every vocabulary path strictly beneath `path`, with the interior nodes between."""
    found: set[str] = set()
    prefix = path + "."
    for leaf in VOCABULARY:
        if not leaf.startswith(prefix):
            continue
        parts = leaf.split(".")
        depth = path.count(".") + 1
        for end in range(depth + 1, len(parts) + 1):
            found.add(".".join(parts[:end]))
    return found


def flatten_capabilities(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    """The set of dot paths an advertised capability object advertises (§5.1).

    An object advertises its own path and, recursively, what its members
    advertise; `true` advertises its path and every vocabulary leaf beneath
    it; `false`, absence, or any other value advertises nothing. Keys that
    cannot be path segments are skipped, so a server cannot smuggle a wildcard
    or a deeper path through a key.
    """
    advertised: set[str] = set()
    for key, value in tree.items():
        if not _valid_key(key):
            continue
        path = f"{prefix}.{key}" if prefix else key
        if value is True:
            advertised.add(path)
            advertised |= _vocabulary_beneath(path)
        elif isinstance(value, Mapping):
            advertised.add(path)
            advertised |= flatten_capabilities(value, path)
    return advertised


def advertised_capabilities(capabilities: Mapping[str, Any]) -> set[str]:
    """What a server's `initialize` result advertises, as capability paths.

    The MCPL tree is `capabilities.experimental.mcpl` minus its metadata keys;
    MCP's own top-level `tools` capability is also a §6.2 path (`tools`), so it
    counts when present.
    """
    advertised: set[str] = set()
    experimental = capabilities.get("experimental")
    mcpl = experimental.get("mcpl") if isinstance(experimental, Mapping) else None
    if isinstance(mcpl, Mapping):
        tree = {k: v for k, v in mcpl.items() if k not in NON_CAPABILITY_KEYS}
        advertised |= flatten_capabilities(tree)
    tools = capabilities.get("tools")
    if tools is True or isinstance(tools, Mapping):
        advertised.add("tools")
    return advertised


def effective_grant(configured: Iterable[str], advertised: Iterable[str]) -> frozenset[str]:
    """The host's policy intersected with the advertisement (§5.4).

    Each configured entry, exact or with `*`, grants exactly the advertised
    paths it matches; advertisement alone never grants anything.
    """
    patterns = list(configured)
    return frozenset(path for path in advertised if is_granted(patterns, path))


def check_policy(effective: Iterable[str], denied: Iterable[str]) -> None:
    """Fail closed on a policy whose allow and deny lists overlap (§5.4).

    Raises ValueError naming the paths in both.
    """
    both = set(effective) & set(denied)
    if both:
        raise ValueError(f"paths both effective and denied: {sorted(both)}")


# -- feature sets (§6) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureSet:
    """One declared feature set and what the host derived for it."""

    name: str
    uses: tuple[str, ...]
    enabled: bool
    reason: str | None = None  # why it is disabled: invalid_uses, missing_capabilities, disabled
    missing: tuple[str, ...] = field(default=())


def _uses_of(declaration: object) -> tuple[str, ...] | None:
    """The declaration's `uses`, or None when §6.2 calls it invalid."""
    if not isinstance(declaration, Mapping):
        return None
    uses = declaration.get("uses")
    if not isinstance(uses, list) or not uses:
        return None
    if not all(isinstance(u, str) and u in VOCABULARY for u in uses):
        return None
    return tuple(uses)


def derive_feature_sets(
    declared: object,
    grant: Iterable[str],
    disabled: Iterable[str] = (),
) -> dict[str, FeatureSet]:
    """Enable each declared set whose `uses` the grant covers, unless configured off (§6.4).

    Fails closed: an absent, empty or unrecognized `uses` disables the set with
    reason `invalid_uses`; a set is disabled by a `disabled` entry that names
    it or matches it with `*` (one segment, as for capabilities).
    """
    result: dict[str, FeatureSet] = {}
    if not isinstance(declared, Mapping):
        return result
    grant_set = frozenset(grant)
    off = list(disabled)
    for name, declaration in declared.items():
        if not isinstance(name, str) or not name:
            continue
        uses = _uses_of(declaration)
        if uses is None:
            result[name] = FeatureSet(name, (), False, "invalid_uses")
            continue
        missing = tuple(u for u in uses if not is_granted(grant_set, u))
        if missing:
            result[name] = FeatureSet(name, uses, False, "missing_capabilities", missing)
        elif any(matches(pattern, name) for pattern in off):
            result[name] = FeatureSet(name, uses, False, "disabled")
        else:
            result[name] = FeatureSet(name, uses, True)
    return result


__all__ = [
    "VOCABULARY",
    "FeatureSet",
    "advertised_capabilities",
    "check_policy",
    "derive_feature_sets",
    "effective_grant",
    "flatten_capabilities",
    "grant_problem",
    "is_granted",
    "matches",
]
