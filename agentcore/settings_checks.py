"""The load-time checks that catch a typo or a value of the wrong kind, beyond what pydantic's
types say by themselves (docs/settings.md, "Validation").

pydantic's lax mode is what lets ``AGENTCORE_RETRY__MAX_ATTEMPTS=6`` (a string) be an
integer, but it also reads TOML's ``max_attempts = true`` as 1 and ``strict = 1`` as true:
`number_or_bool` refuses those. A name that is not known (a key, a section, a plugin, a
capability) is reported with the closest known one (`did_you_mean`, after difflib).

This module imports nothing of agentcore's, so that the settings, the plugin discovery and
the MCPL grants can all use it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic_core import PydanticCustomError

ENV_PREFIX = "AGENTCORE_"


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message says it all: reported as is, without the value."""
    return PydanticCustomError("agentcore", "{message}", {"message": message})


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name `word` most likely misspells: the same name in another case, else
    difflib's closest match; None when nothing is close."""
    candidates = [k for k in known if k != word]
    for candidate in candidates:
        if candidate.lower() == word.lower():
            return candidate
    import difflib  # only for a name that is wrong: a good settings file never loads it

    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``" (did you mean 'retry'?)"``, or nothing when no known name is close."""
    match = closest(word, known)
    return "" if match is None else f" (did you mean {match!r}?)"


# -- true, false and numbers ---------------------------------------------------------------


def scalar_types(annotation: Any) -> set[Any]:
    """The plain types an annotation accepts: ``int | None`` -> {int}; ``Annotated[float,
    ...]`` -> {float}; a container or a model -> {} (its members are checked where they are)."""
    if get_origin(annotation) is Annotated:
        return scalar_types(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        found: set[Any] = set()
        for arg in get_args(annotation):
            found |= scalar_types(arg)
        return found
    if annotation in (bool, int, float):
        return {annotation}
    return set() if annotation is NoneType else {object}


def number_or_bool(value: Any, annotation: Any) -> Any:
    """`value` unless it is TOML's true or false where a number is expected, or a number
    where true or false is; then an error saying what was expected."""
    types = scalar_types(annotation)
    if object in types:
        return value
    if isinstance(value, bool) and bool not in types and types & {int, float}:
        expected = "an integer" if float not in types else "a number"
        raise invalid(f"expected {expected}, got {str(value).lower()}")
    if isinstance(value, int | float) and not isinstance(value, bool) and types == {bool}:
        raise invalid(f"expected true or false, got {value!r}")
    return value


# -- the environment -----------------------------------------------------------------------


def referenced_variables(*trees: Mapping[str, Any]) -> set[str]:
    """The environment variables the settings name as a value's source (``api_key_env``,
    ``token_env``, any key ending ``_env``): an ``AGENTCORE_CONSOLE_TOKEN`` so named holds a
    value, it is no setting override."""
    names: set[str] = set()
    for tree in trees:
        for key, value in _items(tree):
            if key.lower().endswith("_env") and isinstance(value, str):
                names.add(value.upper())
    return names


def _items(tree: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield str(key), value
            yield from _items(value)


def unknown_env_sections(
    environ: Mapping[str, str], sections: Collection[str], ignored: Collection[str]
) -> Iterator[str]:
    """One problem per `AGENTCORE_*` variable that names no settings section, as the same
    section in the file is: so a misspelt override is not silently ignored. `ignored`: the
    variables that are not overrides (``AGENTCORE_SETTINGS``, ``AGENTCORE_LOG_LEVEL``, and
    those the settings name as a value's source)."""
    for key in sorted(environ):
        name = key.upper()
        if not name.startswith(ENV_PREFIX) or name in ignored:
            continue
        section = key[len(ENV_PREFIX) :].split("__", 1)[0].lower()
        if section not in sections:
            hint = did_you_mean(section, sections)
            yield (
                f"environment {key}: names no settings section{hint}; the sections are "
                + ", ".join(sorted(sections))
            )


def missing_keys(providers: Mapping[str, Any], environ: Mapping[str, str]) -> Iterator[str]:
    """Each configured provider whose ``api_key_env`` variable is not set, said once at load.

    Not an error (docs/settings.md): a host with several providers runs the ones it has keys
    for; a call to this one fails with an error naming the variable."""
    for name, provider in sorted(providers.items()):
        variable = getattr(provider, "api_key_env", None)
        if variable and not environ.get(variable):
            yield (
                f"provider {name!r}: the environment variable {variable} (its api_key_env) "
                "is not set; calls to it will fail until it is"
            )


__all__ = [
    "closest",
    "did_you_mean",
    "invalid",
    "missing_keys",
    "number_or_bool",
    "referenced_variables",
    "scalar_types",
    "unknown_env_sections",
]
