"""Per-deployment settings: a TOML file, `AGENTCORE_*` environment overrides, defaults.

Built on pydantic (pydantic-settings parses the environment). The kernel's own
sections are declared here; each plugin declares its section's model
(`agentcore_settings` hook) and the loader grafts those onto the root model, so one
validation reports every unknown key, wrong type and missing value with where it came
from (file and key path, or the environment variable). Environment wins over the
file; the file wins over defaults.

Validation runs with a `LoadContext` (pydantic's validation context): fields typed
`ProviderName` or `ModelReference` are checked against the configured providers, and a
stdio MCPL server starts in the settings file's folder. Relative paths written in the
file are relative to the file's folder.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Self, Union, cast, get_args, get_origin

from loguru import logger
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource

from agentcore.mcpl.deadline import DEFAULT_REQUEST_DEADLINE_S, MAX_REQUEST_DEADLINE_S
from agentcore.mcpl.grants import grant_problem
from agentcore.mcpl.limits import McplLimitSettings, ServerLimitSettings
from agentcore.redaction import register_secret, settings_secrets
from agentcore.settings_checks import (
    did_you_mean,
    missing_keys,
    number_or_bool,
    referenced_variables,
    unknown_env_sections,
)
from agentcore.settings_checks import invalid as invalid  # plugins raise it too
from agentcore.settings_file import SettingsError as SettingsError
from agentcore.settings_file import read_toml as read_toml
from agentcore.urls import HttpUrl as HttpUrl
from agentcore.urls import RedisUrl, WebSocketUrl

ENV_PREFIX = "AGENTCORE_"
SETTINGS_ENV = "AGENTCORE_SETTINGS"
DISABLE_ENV = "AGENTCORE_DISABLE_PLUGINS"
# Environment variables with our prefix that are not setting overrides.
_RESERVED_ENV = {SETTINGS_ENV, DISABLE_ENV, "AGENTCORE_LOG_LEVEL"}


class Section(BaseModel):
    """Base for every settings section: unknown keys are errors, not silently ignored, and
    so are TOML's true and false where a number is expected, and a number for a flag."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _number_or_bool(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else number_or_bool(value, field.annotation)


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


class TracesSettings(Section):
    jsonl: Path | None = None
    """Write every trace event to this file, one JSON object per line. Its folder must
    exist: a path that names none is a mistake, not a wish for new folders."""

    @field_validator("jsonl")
    @classmethod
    def _in_a_folder(cls, path: Path | None) -> Path | None:
        if path is not None and path.is_dir():
            raise invalid(f"{path} is a folder; name a file in it")
        if path is not None and not path.parent.is_dir():
            raise invalid(f"the folder {path.parent} does not exist; create it first")
        return path


class PluginsSettings(Section):
    disabled: list[str] = Field(default_factory=list)
    strict: bool = True
    """When true, a plugin that fails to import or start stops the host."""


class ModelSettings(Section):
    """``[providers.NAME.models.MODEL]``: what the host tells MCPL servers about a model
    (SPEC §12 `model/info`, and `model` in `context/beforeInference`). Each field left
    out falls back to agentcore's built-in knowledge of well-known models, else is omitted."""

    vendor: str | None = Field(default=None, min_length=1)
    """The model's maker ("anthropic", "openai", "google", "meta"...), not the provider kind."""
    context_window: int | None = Field(default=None, ge=1)
    """Tokens the model takes in, prompt and output together."""
    capabilities: list[str] | None = None
    """E.g. ["vision", "tools"]."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """The most tokens the model writes in one reply: a ceiling on an MCPL `maxTokens`."""


class ParticipantNames(Section):
    """``[providers.NAME.participants]``: who is who in an XML-mode transcript."""

    user: str = "User"
    assistant: str = "Assistant"

    @field_validator("user", "assistant")
    @classmethod
    def _a_plain_name(cls, name: str) -> str:
        if not name.strip() or any(c in name for c in ":\r\n"):
            raise ValueError(f"{name!r} is not a participant name: one line, no colon")
        return name


class ProviderSettings(Section):
    kind: ProviderKind
    """A provider kind some plugin contributes (`agentcore plugins` lists them)."""
    base_url: HttpUrl | None = None
    """anthropic and gemini: the root (POST {base_url}/v1/messages; {base_url}/v1beta/models/
    MODEL:streamGenerateContent); openai-family and openai-responses: the API base (…/v1)."""
    api_key_env: str | None = None
    """The environment variable that holds the key; the key itself never goes in a file."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=300.0, gt=0)
    """The longest wait for the provider's next bytes; time the consumer holds a stream
    does not count."""
    headers: dict[str, str] = Field(default_factory=dict)
    max_connections: int | None = Field(default=None, ge=1)
    """Concurrent HTTP connections to this provider; None: no cap."""
    max_keepalive_connections: int = Field(default=20, ge=0)
    delay_s: float = Field(default=0.0, ge=0)
    """echo only: the pause before each word."""
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    """Metadata of the models served under this name, keyed by the MODEL of ``NAME:MODEL``."""
    tool_mode: Literal["native", "xml"] = "native"
    """anthropic only. ``xml``: the conversation goes as a prefill transcript, tools are
    described in the system prompt and the model writes calls as XML markup."""
    participants: ParticipantNames = Field(default_factory=lambda: ParticipantNames())
    """``tool_mode = "xml"``: the names the transcript gives the two sides."""

    @field_validator("tool_mode")
    @classmethod
    def _xml_needs_anthropic(cls, mode: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if mode == "xml" and kind is not None and kind != "anthropic":
            raise ValueError(
                f'tool_mode = "xml" is for kind = "anthropic" only; this provider is {kind!r}'
            )
        return mode

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


UnknownStop = Literal["end_turn", "error"]
DEFAULT_UNKNOWN_STOP: UnknownStop = "error"
"""``[inference] unknown_stop`` unless set: the one place it is written (the translators
and `normalize_stop` default to it too)."""


class InferenceSettings(Section):
    progress_timeout_s: float = Field(default=120.0, gt=0)
    """A stream that brings no new visible text this long is cut with a timeout error."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """One attempt, whole, may take at most this long."""
    unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    """How a provider stop token with no mapping is handled: the attempt fails with an
    error naming it, or (``end_turn``) the response ends ``end_turn`` marked unmapped,
    which `agentcore infer` and the MCPL router still refuse, naming the token."""
    max_stated_wait_s: float = Field(default=600.0, ge=0)
    """The longest wait a provider may ask for (Retry-After and friends) that a call will
    honour: a longer one fails the call at once. One limit for every policy that waits."""


class FleetSettings(Section):
    """``[fleet]``: where the state the policies share lives (holds, limits). `agentcore.fleet`."""

    backend: Literal["memory", "redis"] = "memory"
    """``memory``: this process only (the embedded default); ``redis``: every replica that
    names the same Redis and `key_prefix` shares one hold and one limit."""
    redis_url: RedisUrl = "redis://127.0.0.1:6379/0"
    """redis-py's URL form (``redis://[[user]:password@]host:port/db``, ``rediss://``,
    ``unix://``); a password in it is masked wherever the URL is shown."""
    on_store_error: Literal["closed", "open"] = "closed"
    """Redis unreachable: ``closed``: a call waits (announced), then fails once the policy's
    ``max_wait_s`` passes; ``open``: the call is admitted, with a warning trace."""
    key_prefix: str = Field(default="agentcore", min_length=1)
    """Every Redis key and channel starts with this: fleets sharing one Redis keep apart."""
    timeout_s: float = Field(default=1.0, gt=0)
    """How long one Redis command may take before the store counts as unreachable."""


class McplServerSettings(Section, ServerLimitSettings):
    """``[mcpl.servers.NAME]``: a stdio server (`command`) or a WebSocket one (`url`), and
    its own bounds (`agentcore.mcpl.limits`; unset: ``[mcpl]``'s)."""

    command: list[str] | None = Field(default=None, min_length=1)
    url: WebSocketUrl | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    """Where a stdio server starts: by default the settings file's folder."""
    grant: list[GrantEntry] = Field(default_factory=list)
    disabled_feature_sets: list[str] = Field(default_factory=list)
    reconnect: bool = False
    max_frame_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    shutdown_grace_s: float = Field(default=5.0, ge=0)
    request_deadline_s: float | None = Field(default=None, gt=0, le=MAX_REQUEST_DEADLINE_S)
    """How long a request this server sends may take before the host stops working on it
    and answers it -32603; unset: ``[mcpl] request_deadline_s``."""

    @model_validator(mode="after")
    def _one_transport(self, info: ValidationInfo) -> Self:
        if self.command and self.url:
            raise invalid("sets both command (stdio) and url (WebSocket); choose one")
        if not self.command and not self.url:
            raise invalid("needs command (stdio) or url (WebSocket)")
        context = load_context(info)
        if self.command and self.cwd is None and context is not None:
            self.cwd = context.folder
        return self


class McplSettings(Section, McplLimitSettings):
    """``[mcpl]``: the servers, and the bounds each is held to unless it sets its own."""

    servers: dict[str, McplServerSettings] = Field(default_factory=dict)
    request_deadline_s: float = Field(
        default=DEFAULT_REQUEST_DEADLINE_S, gt=0, le=MAX_REQUEST_DEADLINE_S
    )
    """The deadline of every server's requests unless its own table sets one."""


def _default_providers() -> dict[str, ProviderSettings]:
    return {"echo": ProviderSettings(kind="echo")}


class Settings(Section):
    """The kernel's sections. Plugin sections are grafted on by `load_settings`, which
    reads the file and the environment and validates their values with a `LoadContext`.
    (A plain model, not pydantic-settings' `BaseSettings`: that one's constructor runs its
    own sources, and validating through it loses the context.)"""

    traces: TracesSettings = Field(default_factory=TracesSettings)
    plugins: PluginsSettings = Field(default_factory=PluginsSettings)
    providers: dict[str, ProviderSettings] = Field(default_factory=_default_providers)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    mcpl: McplSettings = Field(default_factory=McplSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)

    @model_validator(mode="after")
    def _keep_echo(self) -> Settings:
        # The embedded provider is always there, so a fresh install runs with no key.
        self.providers.setdefault("echo", ProviderSettings(kind="echo"))
        return self

    def section(self, path: str) -> Any:
        """The validated section at a dotted path (``"mcpl.routing"``), or None."""
        node: Any = self
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                return None
        return node


def settings_path(explicit: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """`--settings PATH` wins over `AGENTCORE_SETTINGS`; neither means defaults only."""
    value = explicit if explicit is not None else environ.get(SETTINGS_ENV)
    return Path(value) if value else None


def _env_values(settings_cls: type[BaseModel], environ: Mapping[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in environ.items() if k.upper() not in _RESERVED_ENV}
    source = EnvSettingsSource(
        cast(type[BaseSettings], settings_cls),  # it reads only the fields and our options
        case_sensitive=False,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
    )
    source.env_vars = {k.lower(): v for k, v in env.items()}
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
    for attempt in (values, {"disabled": values.get("disabled", [])}):
        try:  # a bad `strict` does not lose `disabled`: a blocked plugin is never imported
            return PluginsSettings.model_validate(attempt)
        except ValidationError:
            continue
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
    kinds: frozenset[str] | None = None
    """The provider kinds `kind` was checked against (None: not checked)."""

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


def load_settings(
    path: Path | None = None,
    *,
    sections: Mapping[str, type[BaseModel] | None] | None = None,
    environ: Mapping[str, str] | None = None,
    kinds: Collection[str] | None = None,
    root: type[Settings] | None = None,
) -> LoadedSettings:
    """Read and validate the deployment's settings.

    `sections` maps each plugin's section path to its model (None: a known
    section that nobody will read, such as a disabled plugin's). `kinds` are the
    provider kinds the kernel's plugins contribute: ``[providers.NAME] kind`` must
    name one (None: not checked here). `root` is a model already built from them
    (`reload_settings` passes the one the host loaded with).
    """
    environ = os.environ if environ is None else environ
    root = _graft(Settings, sections or {}) if root is None else root
    file_values = read_toml(path) if path is not None else {}
    env_values = _env_values(root, environ)
    # Before anything is reported or run: every credential the file or the environment
    # configures (keys, header values, URL userinfo and ?key=, a server's secret env) is
    # masked in every output from here on, a settings error's own message included.
    for source in (file_values, env_values):
        for secret in settings_secrets(source, environ):
            register_secret(secret)
    # A misspelt override is an error, as the same section in the file is.
    ignored = _RESERVED_ENV | referenced_variables(file_values, env_values)
    known = {name.lower() for name in root.model_fields}
    problems = list(unknown_env_sections(environ, known, ignored))
    folder = None if path is None else path.absolute().parent
    from_file = file_values if folder is None else _anchored(file_values, root, folder)
    values = _merged(from_file, env_values)
    known_kinds = None if kinds is None else frozenset(kinds)
    context = LoadContext(providers=_provider_names(values), folder=folder, kinds=known_kinds)
    try:
        settings = root.model_validate(values, context=context)
    except ValidationError as exc:
        problems += _describe(exc, path, root, file_values, env_values, kinds)
    if problems:
        raise SettingsError(problems) from None
    for secret in _declared_secrets(settings):
        register_secret(secret)
    for provider in settings.providers.values():
        provider._environ = environ  # a key is read from the environment the settings came from
    for warning in missing_keys(settings.providers, environ):
        logger.warning(warning)
    return LoadedSettings(settings, path, file_values, env_values, known_kinds)


def _declared_secrets(value: Any) -> Iterator[str]:
    """Every `SecretStr` in validated settings: how a plugin's section declares a credential
    that no name rule (`settings_secrets`) finds, such as ``[vault] token``."""
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _declared_secrets(getattr(value, name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _declared_secrets(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _declared_secrets(item)


def reload_settings(
    loaded: LoadedSettings, environ: Mapping[str, str] | None = None
) -> LoadedSettings:
    """Read `loaded`'s file again and validate it as it was validated at load, with the
    same plugins' sections (`agentcore serve` on SIGHUP). Raises `SettingsError`."""
    return load_settings(
        loaded.path, environ=environ, kinds=loaded.kinds, root=type(loaded.settings)
    )


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` laid on `base`, table by table (the environment's values on the file's)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = (
            _merged(below, value)
            if isinstance(below, Mapping) and isinstance(value, Mapping)
            else value
        )
    return out


def _anchored(
    values: Mapping[str, Any], root: type[BaseModel], folder: Path, loc: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The file's values with each relative path (a `Path` field) taken from `folder`,
    so a settings file works from any working directory."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        here = (*loc, key)
        if isinstance(value, Mapping):
            out[key] = _anchored(value, root, folder, here)
        elif isinstance(value, str) and _annotation_at(root, here) is Path:
            out[key] = str(folder / value)  # an absolute value stays as it is
        else:
            out[key] = value
    return out


def _provider_names(values: Mapping[str, Any]) -> frozenset[str]:
    providers = values.get("providers")
    names = set(providers) if isinstance(providers, Mapping) else set()
    return frozenset(names | set(_default_providers()))


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
        if loc and loc[-1] == "[key]":  # a table key was refused: name the key itself
            loc = loc[:-1]
        key = dotted(tuple(str(p) for p in loc))
        where = _where(loc, path, file_values, env_values)
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
            allowed = [str(a) for a in get_args(_annotation_at(root, loc))]
            hint = did_you_mean(error["input"], allowed)
            yield f"{where}: {key}: {error['msg']} (got {error['input']!r}){hint}"
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
    """``X | None`` is X, and ``Annotated[X, ...]`` is X, for describing what is expected."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return _unwrap(args[0])
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
