"""Per-deployment settings: a TOML file, `AGENTCORE_*` environment overrides, defaults.

Built on pydantic-settings. The kernel's own sections are declared here; each
plugin declares its section's model (`agentcore_settings` hook) and the loader
grafts those onto the root model, so one validation reports every unknown key,
wrong type and missing value with where it came from (file and key path, or the
environment variable). Environment wins over the file; the file wins over defaults.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from loguru import logger
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agentcore.redaction import register_secret, settings_secrets

ENV_PREFIX = "AGENTCORE_"
SETTINGS_ENV = "AGENTCORE_SETTINGS"
DISABLE_ENV = "AGENTCORE_DISABLE_PLUGINS"
# Environment variables with our prefix that are not setting overrides.
_RESERVED_ENV = {SETTINGS_ENV, DISABLE_ENV, "AGENTCORE_LOG_LEVEL"}


class Section(BaseModel):
    """Base for every settings section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class TracesSettings(Section):
    jsonl: Path | None = None
    """Write every trace event to this file, one JSON object per line."""


class PluginsSettings(Section):
    disabled: list[str] = Field(default_factory=list)
    strict: bool = True
    """When true, a plugin that fails to import or start stops the host."""


class ProviderSettings(Section):
    kind: str
    """A provider kind some plugin contributes (`agentcore plugins` lists them); the
    kernel validates it against its own registry (`load_settings(..., kinds=)`)."""
    base_url: str | None = None
    """anthropic: the root (POST {base_url}/v1/messages); openai-family: the API base."""
    api_key_env: str | None = None
    """The environment variable that holds the key; the key itself never goes in a file."""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    headers: dict[str, str] = Field(default_factory=dict)
    max_connections: int | None = Field(default=None, ge=1)
    """Concurrent HTTP connections to this provider; None: no cap."""
    max_keepalive_connections: int = Field(default=20, ge=0)
    delay_s: float = 0.0
    """echo only: the pause before each word."""

    _environ: Mapping[str, str] | None = PrivateAttr(default=None)
    """The environment these settings were loaded from, where the key is read too."""

    def api_key(self, environ: Mapping[str, str] | None = None) -> SecretStr | None:
        if not self.api_key_env:
            return None
        if environ is None:
            environ = os.environ if self._environ is None else self._environ
        value = environ.get(self.api_key_env)
        if not value:
            return None
        register_secret(value)  # whoever resolves a key, it never reaches a log or a trace
        return SecretStr(value)


class InferenceSettings(Section):
    progress_timeout_s: float = 120.0
    """A stream that brings no new visible text this long is cut with a timeout error."""
    request_timeout_s: float = 600.0
    """One attempt, whole, may take at most this long."""
    unknown_stop: Literal["end_turn", "error"] = "error"
    """How a provider stop token with no mapping is handled: the attempt fails with an
    error naming it, or (``end_turn``) the response ends ``end_turn`` marked unmapped,
    which `agentcore infer` and the MCPL router still refuse, naming the token."""
    max_stated_wait_s: float = Field(default=600.0, ge=0)
    """The longest wait a provider may ask for (Retry-After and friends) that a call will
    honour: a longer one fails the call at once. One limit for every policy that waits."""


class McplServerSettings(Section):
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    grant: list[str] = Field(default_factory=list)
    disabled_feature_sets: list[str] = Field(default_factory=list)
    reconnect: bool = False
    max_frame_bytes: int = 4 * 1024 * 1024
    shutdown_grace_s: float = 5.0


class McplSettings(Section):
    servers: dict[str, McplServerSettings] = Field(default_factory=dict)


def _default_providers() -> dict[str, ProviderSettings]:
    return {"echo": ProviderSettings(kind="echo")}


class Settings(BaseSettings):
    """The kernel's sections. Plugin sections are grafted on by `load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        case_sensitive=False,
    )
    toml_path: ClassVar[Path | None] = None

    traces: TracesSettings = Field(default_factory=TracesSettings)
    plugins: PluginsSettings = Field(default_factory=PluginsSettings)
    providers: dict[str, ProviderSettings] = Field(default_factory=_default_providers)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    mcpl: McplSettings = Field(default_factory=McplSettings)

    @model_validator(mode="after")
    def _keep_echo(self) -> Settings:
        # The embedded provider is always there, so a fresh install runs with no key.
        self.providers.setdefault("echo", ProviderSettings(kind="echo"))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win. `load_settings` reads the environment it is given (not
        # necessarily os.environ) and passes those values as init arguments, so they
        # win over the file; pydantic-settings' own env source is left out on purpose.
        return (init_settings, _FileSource(settings_cls, cls.toml_path))

    def section(self, path: str) -> Any:
        """The validated section at a dotted path (``"mcpl.routing"``), or None."""
        node: Any = self
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                return None
        return node


class _FileSource(PydanticBaseSettingsSource):
    """The deployment's TOML file; a read or parse failure is a `SettingsError` naming it."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.data = read_toml(path) if path is not None else {}

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


class SettingsError(Exception):
    """Settings that cannot be used; each problem names where it came from and what was expected."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SettingsError([f"{path}: no such settings file"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError([f"{path}: not valid TOML: {exc}"]) from None


def settings_path(explicit: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """`--settings PATH` wins over `AGENTCORE_SETTINGS`; neither means defaults only."""
    value = explicit if explicit is not None else environ.get(SETTINGS_ENV)
    return Path(value) if value else None


def _env_values(settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in environ.items() if k.upper() not in _RESERVED_ENV}
    source = EnvSettingsSource(
        settings_cls,
        case_sensitive=False,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
    )
    source.env_vars = {k.lower(): v for k, v in env.items()}
    sections = {name.lower() for name in settings_cls.model_fields}
    for key in env:
        if key.upper().startswith(ENV_PREFIX):
            section = key[len(ENV_PREFIX) :].split("__", 1)[0].lower()
            if section not in sections:
                logger.warning(
                    "environment variable {} names no settings section ({}); it is ignored",
                    key,
                    ", ".join(sorted(sections)),
                )
    return source()


def early_plugin_settings(
    file_values: Mapping[str, Any], environ: Mapping[str, str]
) -> PluginsSettings:
    """The ``[plugins]`` section as discovery needs it, before plugin sections are known:
    the file's, overridden by the environment (``AGENTCORE_PLUGINS__DISABLED``). A bad
    value falls back to the default here; the full validation reports it."""
    section = file_values.get("plugins")
    values = dict(section) if isinstance(section, Mapping) else {}
    try:
        env = _env_values(Settings, environ).get("plugins")
    except Exception:  # unparsable environment values: `load_settings` reports them
        env = None
    if isinstance(env, Mapping):
        values.update(env)
    try:
        return PluginsSettings.model_validate(values)
    except ValidationError:
        return PluginsSettings()


def _graft(base: type[BaseModel], sections: Mapping[str, type[BaseModel] | None]) -> type[Any]:
    """A subclass of `base` with each plugin section added as a field (nested by dots)."""
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, type[BaseModel] | None]] = {}
    for path, model in sections.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = model
        elif model is None:  # a disabled plugin's section: accepted, not read
            if head not in base.model_fields:  # (a kernel's own section stays typed)
                direct[head] = (dict[str, Any], Field(default_factory=dict))
        else:
            direct[head] = (model, Field(default_factory=model))
    for head, children in nested.items():
        field = base.model_fields.get(head)
        parent = field.annotation if field is not None else Section
        if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
            raise TypeError(f"settings section {head!r} cannot hold plugin sections")
        model = _graft(parent, children)
        direct[head] = (model, Field(default_factory=model))
    return create_model(base.__name__, __base__=base, **direct)


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    path: Path | None
    file_values: dict[str, Any]
    env_values: dict[str, Any]

    def source_of(self, key: str | tuple[str, ...]) -> str:
        """Where a key's effective value came from: environment, file, or default.

        `key` is dotted (``"retry.max_attempts"``) or, for keys that hold dots
        themselves (feature-set names), the tuple of its parts.
        """
        if _lookup(self.env_values, key):
            return "environment"
        if _lookup(self.file_values, key):
            return f"file {self.path}"
        return "default"


def _lookup(tree: Mapping[str, Any], key: str | tuple[str, ...]) -> bool:
    node: Any = tree
    for part in key.split(".") if isinstance(key, str) else key:
        if not isinstance(node, Mapping):
            return False
        match = next((k for k in node if str(k).lower() == part.lower()), None)
        if match is None:
            return False
        node = node[match]
    return True


def _with_kinds(base: type[Settings], kinds: Collection[str]) -> type[Settings]:
    """`base` whose ``[providers.NAME] kind`` must be one of `kinds`."""
    known = sorted(kinds)

    def known_kind(cls: type[ProviderSettings], kind: str) -> str:
        if kind not in known:
            raise ValueError(f"unknown provider kind {kind!r}; expected one of {', '.join(known)}")
        return kind

    provider = create_model(
        ProviderSettings.__name__,
        __base__=ProviderSettings,
        __validators__={"known_kind": field_validator("kind")(known_kind)},
    )
    # Validated like a file's table (pydantic-settings validates defaults), so typed alike.
    echo = {"echo": {"kind": "echo"}} if "echo" in known else {}
    field = (dict[str, provider], Field(default_factory=lambda: dict(echo)))  # type: ignore[valid-type]
    return create_model(base.__name__, __base__=base, providers=field)


def load_settings(
    path: Path | None = None,
    *,
    sections: Mapping[str, type[BaseModel] | None] | None = None,
    environ: Mapping[str, str] | None = None,
    kinds: Collection[str] | None = None,
) -> LoadedSettings:
    """Read and validate the deployment's settings.

    `sections` maps each plugin's section path to its model (None: a known
    section that nobody will read, such as a disabled plugin's). `kinds` are the
    provider kinds the kernel's plugins contribute: ``[providers.NAME] kind`` must
    name one (None: not checked here).
    """
    environ = os.environ if environ is None else environ
    root = _graft(Settings, sections or {})
    if kinds is not None:
        root = _with_kinds(root, kinds)
    file_values = read_toml(path) if path is not None else {}
    env_values = _env_values(root, environ)
    loaded_cls = type(root.__name__, (root,), {"toml_path": path})
    # Before anything is reported or run: every credential the file or the environment
    # configures (keys, header values, URL userinfo and ?key=, a server's secret env) is
    # masked in every output from here on, a settings error's own message included.
    for values in (file_values, env_values):
        for secret in settings_secrets(values, environ):
            register_secret(secret)
    try:
        settings = loaded_cls(**env_values)
    except ValidationError as exc:
        problems = _describe(exc, path, root, file_values, env_values, kinds)
        raise SettingsError(list(problems)) from None
    for provider in settings.providers.values():
        provider._environ = environ  # a key is read from the environment the settings came from
    return LoadedSettings(settings, path, file_values, env_values)


def _describe(
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
        key = dotted(tuple(str(p) for p in loc))
        where = _where(loc, path, file_values, env_values)
        kind = error["type"]
        if kind == "extra_forbidden":
            allowed = _keys_at(root, loc[:-1])
            expected = f" (expected one of: {', '.join(allowed)})" if allowed else ""
            yield f"{where}: {key}: unknown key{expected}"
        elif kind == "missing":
            expected = _expected(root, loc, kinds)
            yield f"{where}: {key}: required value missing (expected {expected})"
        else:
            yield f"{where}: {key}: {error['msg']} (got {error.get('input')!r})"


def _env_name(loc: tuple[Any, ...]) -> str:
    return ENV_PREFIX + "__".join(str(p) for p in loc).upper()


def _where(
    loc: tuple[Any, ...],
    path: Path | None,
    file_values: Mapping[str, Any],
    env_values: Mapping[str, Any],
) -> str:
    """The source that set the key, or (for a missing key) set the table that lacks it."""
    for depth in range(len(loc), 0, -1):
        prefix = ".".join(str(p) for p in loc[:depth])
        if _lookup(env_values, prefix):
            return f"environment {_env_name(loc)}"
        if _lookup(file_values, prefix):
            return str(path)
    return str(path) if path is not None else "defaults"


def _unwrap(annotation: Any) -> Any:
    """``X | None`` is X, for describing what is expected."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _annotation_at(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
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
    model = _annotation_at(root, loc)
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
    parent = _annotation_at(root, loc[:-1]) if loc else None
    is_provider = isinstance(parent, type) and issubclass(parent, ProviderSettings)
    if kinds is not None and loc[-1:] == ("kind",) and is_provider:
        return "one of " + ", ".join(sorted(kinds))
    annotation = _annotation_at(root, loc)
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table"
    if get_origin(annotation) is dict:
        return "a table"
    if get_origin(annotation) is list:
        return "a list"
    return _TYPE_NAMES.get(annotation, "a value")


def flatten(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The key paths and leaf values of a settings dump, for `agentcore settings`."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from flatten(v, (*prefix, str(k)))
    else:
        yield prefix, value


def dotted(path: tuple[str, ...]) -> str:
    """A key path as TOML writes it: parts that hold a dot or a space are quoted."""
    return ".".join(f'"{p}"' if not p or any(c in p for c in '. "') else p for p in path)
