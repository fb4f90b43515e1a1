"""A section left out of the settings holds its defaults unvalidated (``model_construct``),
so that its own validator is never built (issue 24: `serve`'s idle RSS). These tests hold
that shortcut to what validating an empty table gives, for the kernel's sections and every
installed plugin's, and show where it must not be taken."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, field_validator, model_validator

from agentcore.api import SettingsSection, hookimpl
from agentcore.kernel import Kernel, PluginLoadError
from agentcore.settings import Section, SettingsError, default_of, load_settings


def dumped(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(mode="json")


def sections_of(model: BaseModel, path: str = "") -> dict[str, BaseModel]:
    """Every section model instance reachable from `model`, by dotted path."""
    out: dict[str, BaseModel] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            here = f"{path}{name}"
            out[here] = value
            out.update(sections_of(value, here + "."))
    return out


def test_every_section_left_out_equals_its_validated_defaults() -> None:
    kernel = Kernel.load(None, environ={})  # every installed plugin's section grafted on
    found = sections_of(kernel.settings)
    assert {"fleet", "mcpl.bulk", "traces", "retry.overloaded"} <= set(found)
    for path, value in found.items():
        validated = type(value).model_validate({})
        assert dumped(value) == dumped(validated), path
        assert value.model_fields_set == set(), path


def test_the_embedded_provider_equals_its_validated_section() -> None:
    echo = load_settings(None, environ={}).settings.providers["echo"]
    assert dumped(echo) == dumped(type(echo).model_validate({"kind": "echo"}))


class Plain(Section):
    label: str = "x"
    sizes: list[int] = Field(default_factory=list)


class Required(Section):
    token: str


class Checked(Section):
    limit: int = 3

    @model_validator(mode="after")
    def _noted(self) -> Checked:
        self.limit += 1  # a validator that changes the default: it must run
        return self


class ValidatedDefault(Section):
    name: str = Field(default="  padded ", validate_default=True)

    @field_validator("name")
    @classmethod
    def _strip(cls, name: str) -> str:
        return name.strip()


def test_a_plugin_section_is_defaulted_unvalidated_only_where_validation_changes_nothing() -> None:
    assert default_of(Plain) == Plain.model_construct
    for model in (Required, Checked, ValidatedDefault):
        assert default_of(model) is model


def test_a_plugin_section_whose_validation_matters_keeps_it() -> None:
    sections: dict[str, type[BaseModel] | None] = {
        "plain": Plain,
        "checked": Checked,
        "validated": ValidatedDefault,
    }
    settings = load_settings(None, environ={}, sections=sections).settings
    assert settings.section("plain").label == "x"
    assert settings.section("checked").limit == 4
    assert settings.section("validated").name == "padded"
    with pytest.raises(SettingsError, match="token: required value missing"):  # as before
        load_settings(None, environ={}, sections={"required": Required})


class Opaque:
    """Not a type pydantic can validate."""


class UnbuildableSettings(Section):
    thing: Opaque | None = None


class UnresolvedSettings(Section):
    later: Missing | None = None  # type: ignore[name-defined]  # noqa: F821


def section_plugin(path: str, model: type[BaseModel]) -> type:
    class Plugin:
        @hookimpl
        def agentcore_settings(self) -> SettingsSection:
            return SettingsSection(path, model)

    return Plugin


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (UnbuildableSettings, "PydanticSchemaGenerationError"),
        (UnresolvedSettings, "PydanticUndefinedAnnotation"),
    ],
)
def test_a_section_model_pydantic_cannot_build_fails_its_plugin_by_name(
    model: type[BaseModel], error: str
) -> None:
    """Section models are built at load, not at import (`defer_build`): one pydantic cannot
    build fails its plugin by name, as an import error did, instead of stopping the load."""
    plugins = {"odd": section_plugin("odd", model), "fine": section_plugin("fine", Plain)}
    kernel = Kernel.load(None, environ={}, plugins=plugins, strict=False)
    records = {r.name: r for r in kernel.records}
    assert records["odd"].state == "failed"
    assert records["odd"].error is not None
    assert records["odd"].error.startswith(f"settings model {model.__name__}: {error}")
    assert records["fine"].state == "active"
    assert kernel.settings.section("fine").label == "x"
    with pytest.raises(PluginLoadError, match=f"odd .*settings model {model.__name__}"):
        Kernel.load(None, environ={}, plugins=plugins, strict=True)
