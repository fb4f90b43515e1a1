"""The README's settings reference documents every key a user can set, and no other: the
kernel's sections and every bundled plugin's, compared with the models themselves."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

import annotated_types
from pydantic import BaseModel

from agentcore.kernel import Kernel
from agentcore.plugins import default_sections
from agentcore.settings import load_settings
from agentcore.settings_errors import _unwrap as unwrap  # `X | None`, `Annotated[X, ...]`: X

README = Path(__file__).resolve().parents[2] / "README.md"
BUNDLED_SECTIONS = {
    "traces",
    "retry",
    "provider_hold",
    "waiting_trace",
    "mcpl.routing",
    "mcpl.context",
    "mcpl.events",
    "otel",
    "console",
    "rate_limit",
    "budget",
}


def readme_reference() -> dict[str, Any]:
    """The TOML block under "## Settings reference", parsed."""
    section = README.read_text().split("\n## Settings reference\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the settings reference has no toml block"
    return tomllib.loads(match.group(1))


def settings_model() -> type[BaseModel]:
    """The root model with every bundled plugin's section grafted on, as a deployment has it."""
    records = Kernel.load(None, environ={}).records
    sections = {
        r.section.path: r.section.model
        for r in records
        if r.section is not None and r.section.path in default_sections()
    }
    assert set(sections) == BUNDLED_SECTIONS
    return type(load_settings(None, sections=sections, environ={}).settings)


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def table_of_models(annotation: Any) -> type[BaseModel] | None:
    """The model of a ``dict[NAME, Model]`` field (``[providers.NAME]``), else None."""
    if get_origin(annotation) is dict and is_model(unwrap(get_args(annotation)[1])):
        model: type[BaseModel] = unwrap(get_args(annotation)[1])
        return model
    return None


def settable(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path a user can set; a table keyed by a user's name is ``*``."""
    for name, field in model.model_fields.items():
        annotation = unwrap(field.annotation)
        if field.exclude:  # a moved key, kept only to say where it went
            continue
        if is_model(annotation):
            yield from settable(annotation, f"{prefix}{name}.")
        elif (values := table_of_models(annotation)) is not None:
            yield from settable(values, f"{prefix}{name}.*.")
        else:
            yield f"{prefix}{name}"


def documented(
    tree: Mapping[str, Any], model: type[BaseModel] | None, prefix: str = ""
) -> Iterator[str]:
    """The key paths the README sets, named the way `settable` names them."""
    for key, value in tree.items():
        field = model.model_fields.get(key) if model is not None else None
        annotation = unwrap(field.annotation) if field is not None else None
        if isinstance(value, Mapping) and is_model(annotation):
            yield from documented(value, annotation, f"{prefix}{key}.")
        elif isinstance(value, Mapping) and (values := table_of_models(annotation)):
            for entry in value.values():
                yield from documented(entry, values, f"{prefix}{key}.*.")
        else:
            yield f"{prefix}{key}"


def test_the_readme_documents_every_settable_key_and_no_other() -> None:
    model = settings_model()
    expected = set(settable(model))
    found = set(documented(readme_reference(), model))
    missing, unknown = sorted(expected - found), sorted(found - expected)
    assert not missing, f"settable, but missing from README.md: {missing}"
    assert not unknown, f"in README.md, but no setting: {unknown}"


def test_the_comparison_sees_tables_keyed_by_name() -> None:
    """The control: the walk reaches into ``[providers.NAME]`` and plugin sections."""
    expected = set(settable(settings_model()))
    assert {
        "providers.*.kind",
        "mcpl.servers.*.max_frame_bytes",
        "mcpl.servers.*.cwd",
        "inference.max_stated_wait_s",
        "retry.providers.*.overloaded.jitter_s",
        "mcpl.routing.default",
    } <= expected


def durations(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, list[Any]]]:
    """Every settable key that is a duration (``*_s``), with its field's constraints."""
    for name, field in model.model_fields.items():
        annotation = unwrap(field.annotation)
        if is_model(annotation):
            yield from durations(annotation, f"{prefix}{name}.")
        elif (values := table_of_models(annotation)) is not None:
            yield from durations(values, f"{prefix}{name}.*.")
        elif name.endswith("_s") and not field.exclude:
            yield f"{prefix}{name}", field.metadata


def test_every_duration_refuses_a_negative_and_every_timeout_zero() -> None:
    """A new ``*_s`` key with no bound would take ``-1`` silently: each has one."""
    positive, not_negative = annotated_types.Gt(0), annotated_types.Ge(0)
    found = dict(durations(settings_model()))
    assert {"providers.*.read_timeout_s", "retry.initial_delay_s"} <= set(found)
    for key, metadata in found.items():
        bounds = {m for m in metadata if isinstance(m, annotated_types.Gt | annotated_types.Ge)}
        assert bounds in ({positive}, {not_negative}), f"{key}: {metadata}"
        if "timeout" in key or "interval" in key:
            assert bounds == {positive}, f"{key}: a zero timeout can never work"
