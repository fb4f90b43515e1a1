"""The base of every settings section, and the field types checked at load time against
what validation knows beyond the values (`LoadContext`: the configured providers, the
provider kinds, the settings file's folder). Plugins use them through `agentcore.settings`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from agentcore.mcpl.grants import grant_problem
from agentcore.settings_checks import did_you_mean, invalid, number_or_bool

M = TypeVar("M", bound=BaseModel)


class Section(BaseModel):
    """Base for every settings section: unknown keys are errors, not silently ignored, and
    so are TOML's true and false where a number is expected, and a number for a flag.

    Its validator is built on first use (``defer_build``): the settings are validated by
    the root model `load_settings` grafts, whose validator holds every section's, so a
    section's own is built only where it is used alone (issue 24: `serve`'s idle RSS)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _number_or_bool(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else number_or_bool(value, field.annotation)


def default_of(model: type[M]) -> Callable[[], M]:
    """The default factory of a section left out: its defaults unvalidated
    (``model_construct``) when validating them could change nothing (no required key, no
    model validator, no default validated), so that the section's own validator is never
    built (`Section`); otherwise the model itself, which validates, as ever."""
    config_validates = bool(model.model_config.get("validate_default"))
    fields = model.model_fields.values()
    if (
        config_validates
        or model.__pydantic_decorators__.model_validators
        or any(f.is_required() or f.validate_default for f in fields)
    ):
        return model
    return model.model_construct


@dataclass(frozen=True)
class LoadContext:
    """What validation may know beyond the values themselves (pydantic's validation
    context, given by `load_settings`; absent when a model is built directly)."""

    providers: frozenset[str]
    """The configured ``[providers.NAME]`` names, ``echo`` included."""
    folder: Path | None = None
    """The settings file's folder (absolute), or None when there is no file."""
    kinds: frozenset[str] | None = None
    """The provider kinds the kernel's plugins contribute; None: not checked."""
    kind_settings: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    """Each provider kind's own settings model (a `ProviderSettings` subclass), for the kinds
    that declare keys of their own: a ``[providers.NAME]`` of that kind is validated by it."""


def load_context(info: ValidationInfo) -> LoadContext | None:
    return info.context if isinstance(info.context, LoadContext) else None


def provider_problem(name: str, configured: Collection[str]) -> str | None:
    """Why `name` cannot be used as a provider, or None."""
    if name in configured:
        return None
    known = ", ".join(sorted(configured))
    hint = did_you_mean(name, configured)
    return f"names provider {name!r}, which is not configured{hint} (configured: {known})"


def model_reference_problem(reference: str, configured: Collection[str] | None) -> str | None:
    """Why a ``NAME:MODEL`` reference cannot be used, or None (its provider is not
    checked when `configured` is None)."""
    name, sep, model = reference.partition(":")
    if not sep or not name or not model:
        return f"{reference!r} is not of the form NAME:MODEL"
    return None if configured is None else provider_problem(name, configured)


def _check_provider_name(name: str, info: ValidationInfo) -> str:
    context = load_context(info)
    problem = None if context is None else provider_problem(name, context.providers)
    if problem is not None:
        raise invalid(problem)
    return name


def _check_model_reference(reference: str, info: ValidationInfo) -> str:
    context = load_context(info)
    problem = model_reference_problem(reference, None if context is None else context.providers)
    if problem is not None:
        raise invalid(problem)
    return reference


def _check_provider_kind(kind: str, info: ValidationInfo) -> str:
    context = load_context(info)
    if context is not None and context.kinds is not None and kind not in context.kinds:
        known = ", ".join(sorted(context.kinds))
        hint = did_you_mean(kind, context.kinds)
        raise invalid(f"unknown provider kind {kind!r}{hint}; expected one of {known}")
    return kind


def _check_grant_entry(entry: str) -> str:
    problem = grant_problem(entry)
    if problem is not None:
        raise invalid(problem)
    return entry


GrantEntry = Annotated[str, AfterValidator(_check_grant_entry)]
"""An entry of ``[mcpl.servers.NAME] grant``: it must cover some MCPL capability."""
ProviderName = Annotated[str, AfterValidator(_check_provider_name)]
"""A settings field (or table key) naming a ``[providers.NAME]``: checked at load time."""
ModelReference = Annotated[str, AfterValidator(_check_model_reference)]
"""A settings field holding ``NAME:MODEL``: its form, and its provider, checked at load time."""
ProviderKind = Annotated[str, AfterValidator(_check_provider_kind)]
"""``[providers.NAME] kind``: one the kernel's plugins contribute, checked at load time."""
