"""Settings errors as a person reads them: one line per problem, saying where the value
came from (the file, or which environment variable), its key path as TOML writes it, and
what was expected, with the closest known name for a misspelt one (docs/settings.md,
"Validation")."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError

from agentcore.settings_checks import ENV_PREFIX, did_you_mean


def describe_errors(
    exc: ValidationError,
    path: Path | None,
    root: type[BaseModel],
    file_values: Mapping[str, Any],
    env_values: Mapping[str, Any],
    kinds: Collection[str] | None,
) -> Iterator[str]:
    """One line per problem: where it came from, the key path, and what was expected."""
    for error in exc.errors():
        loc = tuple(error["loc"])
        if loc and loc[-1] == "[key]":  # a table key was refused: name the key itself
            loc = loc[:-1]
        key = dotted(tuple(str(p) for p in loc))
        where = where_set(loc, path, file_values, env_values)
        kind = error["type"]
        if kind == "agentcore":  # `invalid(...)`: the message says it all
            yield f"{where}: {key}: {error['msg']}"
        elif kind == "extra_forbidden":
            allowed = _keys_at(root, loc[:-1])
            hint = did_you_mean(str(loc[-1]), allowed)
            expected = f" (expected one of: {', '.join(allowed)})" if allowed else ""
            yield f"{where}: {key}: unknown key{hint}{expected}"
        elif kind == "missing":
            expected = _expected(root, loc, kinds)
            yield f"{where}: {key}: required value missing (expected {expected})"
        elif kind == "literal_error" and isinstance(error.get("input"), str):
            allowed = [str(a) for a in get_args(annotation_at(root, loc))]
            hint = did_you_mean(error["input"], allowed)
            yield f"{where}: {key}: {error['msg']} (got {error['input']!r}){hint}"
        else:
            yield f"{where}: {key}: {error['msg']} (got {error.get('input')!r})"


def _env_name(loc: tuple[Any, ...]) -> str:
    return ENV_PREFIX + "__".join(str(p) for p in loc).upper()


def where_set(
    loc: tuple[Any, ...],
    path: Path | None,
    file_values: Mapping[str, Any],
    env_values: Mapping[str, Any],
) -> str:
    """The source that set the key, or (for a missing key) set the table that lacks it."""
    for depth in range(len(loc), 0, -1):
        prefix = ".".join(str(p) for p in loc[:depth])
        if lookup(env_values, prefix):
            return f"environment {_env_name(loc)}"
        if lookup(file_values, prefix):
            return str(path)
    return str(path) if path is not None else "defaults"


def _unwrap(annotation: Any) -> Any:
    """``X | None`` is X, and ``Annotated[X, ...]`` is X, for describing what is expected."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return _unwrap(args[0])
    return annotation


def annotation_at(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    node: Any = root
    for part in loc:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return None
            node = field.annotation
        elif get_origin(node) in (dict, list):
            node = get_args(node)[-1]  # a table's values, a list's items
        else:
            return None
    return _unwrap(node)


def _keys_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    model = annotation_at(root, loc)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


_TYPE_NAMES: dict[Any, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    Path: "a path",
    SecretStr: "a string",
}


def _expected(root: type[BaseModel], loc: tuple[Any, ...], kinds: Collection[str] | None) -> str:
    is_provider_kind = len(loc) == 3 and loc[0] == "providers" and loc[2] == "kind"
    if kinds is not None and is_provider_kind:
        return "one of " + ", ".join(sorted(kinds))
    annotation = annotation_at(root, loc)
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table"
    if get_origin(annotation) is dict:
        return "a table"
    if get_origin(annotation) is list:
        return "a list"
    return _TYPE_NAMES.get(annotation, "a value")


def lookup(tree: Mapping[str, Any], key: str | tuple[str, ...]) -> bool:
    node: Any = tree
    for part in key.split(".") if isinstance(key, str) else key:
        if not isinstance(node, Mapping):
            return False
        match = next((k for k in node if str(k).lower() == part.lower()), None)
        if match is None:
            return False
        node = node[match]
    return True


def dotted(path: tuple[str, ...]) -> str:
    """A key path as TOML writes it: parts that hold a dot or a space are quoted."""
    return ".".join(f'"{p}"' if not p or any(c in p for c in '. "') else p for p in path)
