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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from loguru import logger
from pydantic import (
    BaseModel,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from agentcore._constants import (
    FLEET_TIMEOUT_S,
    MAX_KEEPALIVE_CONNECTIONS,
    MAX_STATED_WAIT_S,
    PROGRESS_TIMEOUT_S,
    PROVIDER_CONNECT_TIMEOUT_S,
    PROVIDER_READ_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
)
from agentcore.mcpl.environment import passthrough_problems
from agentcore.redaction import register_secret, settings_secrets
from agentcore.settings_checks import invalid as invalid  # plugins raise it too
from agentcore.settings_checks import (
    missing_keys,
    referenced_variables,
    unknown_env_sections,
)
from agentcore.settings_errors import annotation_at, describe_errors, lookup, where_set
from agentcore.settings_errors import dotted as dotted
from agentcore.settings_fields import GrantEntry as GrantEntry
from agentcore.settings_fields import LoadContext as LoadContext
from agentcore.settings_fields import ModelReference as ModelReference
from agentcore.settings_fields import ProviderKind as ProviderKind

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings
from agentcore.settings_fields import ProviderName as ProviderName
from agentcore.settings_fields import Section as Section
from agentcore.settings_fields import default_of as default_of
from agentcore.settings_fields import load_context as load_context
from agentcore.settings_fields import model_reference_problem as model_reference_problem
from agentcore.settings_fields import provider_problem as provider_problem
from agentcore.settings_file import SettingsError as SettingsError
from agentcore.settings_file import read_toml as read_toml
from agentcore.settings_mcpl import BulkSettings as BulkSettings
from agentcore.settings_mcpl import McplServerSettings as McplServerSettings
from agentcore.settings_mcpl import McplSettings as McplSettings
from agentcore.settings_redis import RedisDeploymentSettings, redis_env_problems
from agentcore.urls import HttpUrl as HttpUrl

ENV_PREFIX = "AGENTCORE_"
SETTINGS_ENV = "AGENTCORE_SETTINGS"
DISABLE_ENV = "AGENTCORE_DISABLE_PLUGINS"
# Environment variables with our prefix that are not setting overrides.
_RESERVED_ENV = {SETTINGS_ENV, DISABLE_ENV, "AGENTCORE_LOG_LEVEL"}


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


class PriceSettings(Section):
    """``price = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }``:
    USD per million tokens. A cache rate left out is charged at the input rate, never 0."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


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
    price: PriceSettings | None = None
    """What the model costs, over genai-prices' table (`agentcore.pricing`)."""
    prefill: bool | None = None
    """Whether the model takes a request that ends with an assistant turn (a prefill); None:
    the built-in table's word, else true. XML tool mode leaves the open assistant turn out
    for a model that does not (docs/settings.md)."""


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
    connect_timeout_s: float = Field(default=PROVIDER_CONNECT_TIMEOUT_S, gt=0)
    read_timeout_s: float = Field(default=PROVIDER_READ_TIMEOUT_S, gt=0)
    """The longest wait for the provider's next bytes; time the consumer holds a stream
    does not count."""
    headers: dict[str, str] = Field(default_factory=dict)
    max_connections: int | None = Field(default=None, ge=1)
    """Concurrent HTTP connections to this provider; None: no cap."""
    max_keepalive_connections: int = Field(default=MAX_KEEPALIVE_CONNECTIONS, ge=0)
    """The most idle connections kept open for reuse (each closes after 15 s unused); a
    connection given back when that many wait is closed. 0: no keep-alive."""
    delay_s: float = Field(default=0.0, ge=0)
    """echo only: the pause before each word."""
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    """Metadata of the models served under this name, keyed by the MODEL of ``NAME:MODEL``."""
    tool_mode: Literal["native", "xml"] = "native"
    """anthropic only. ``xml``: the conversation goes as a prefill transcript, tools are
    described in the system prompt and the model writes calls as XML markup."""
    participants: ParticipantNames = Field(default_factory=ParticipantNames.model_construct)
    """``tool_mode = "xml"``: the names the transcript gives the two sides."""
    prompt_cache: Literal["off", "auto"] = "off"
    """``auto``: on the wires that need explicit cache breakpoints (anthropic, XML tool
    mode), mark the system prompt and the last user turn (at most 4 with the host's own).
    The other kinds cache on their own; for them it changes nothing."""
    prompt_cache_ttl: Literal["5m", "1h"] = "5m"
    """How long an ``auto`` breakpoint's entry lives: ``5m`` or ``1h`` (priced higher)."""

    xml_tool_mode: ClassVar[bool] = False
    """A kind's settings model (below) sets it when the kind reads ``tool_mode = "xml"``."""

    @field_validator("tool_mode")
    @classmethod
    def _xml_needs_anthropic(cls, mode: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if mode == "xml" and kind is not None and kind != "anthropic" and not cls.xml_tool_mode:
            raise ValueError(
                f'tool_mode = "xml" is for kind = "anthropic" only; this provider is {kind!r}'
            )
        return mode

    @model_validator(mode="wrap")
    @classmethod
    def _kind_settings(
        cls, data: Any, handler: ModelWrapValidatorHandler[ProviderSettings], info: ValidationInfo
    ) -> ProviderSettings:
        """A kind that declares keys of its own (its factory's ``settings_model``, a subclass
        of this class) validates its sections: its keys are known there, and a typo is
        still refused, as everywhere."""
        context = load_context(info)
        if context is not None and isinstance(data, Mapping):
            model = context.kind_settings.get(str(data.get("kind")))
            if model is not None and not issubclass(cls, model):
                return cast(ProviderSettings, model.model_validate(data, context=info.context))
        return handler(data)

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
    progress_timeout_s: float = Field(default=PROGRESS_TIMEOUT_S, gt=0)
    """A stream that brings no new visible text this long is cut with a timeout error."""
    request_timeout_s: float = Field(default=REQUEST_TIMEOUT_S, gt=0)
    """One attempt, whole, may take at most this long."""
    unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    """How a provider stop token with no mapping is handled: the attempt fails with an
    error naming it, or (``end_turn``) the response ends ``end_turn`` marked unmapped,
    which `agentcore infer` and the MCPL router still refuse, naming the token."""
    max_stated_wait_s: float = Field(default=MAX_STATED_WAIT_S, ge=0)
    """The longest wait a provider may ask for (Retry-After and friends) that a call will
    honour: a longer one fails the call at once. One limit for every policy that waits."""


class FleetSettings(RedisDeploymentSettings):
    """``[fleet]``: where the state the policies share lives (holds, limits). `agentcore.fleet`.
    Which Redis, and how to reach it: `agentcore.settings_redis`."""

    on_store_error: Literal["closed", "open"] = "closed"
    """Redis unreachable: ``closed``: a call waits (announced), then fails once the policy's
    ``max_wait_s`` passes; ``open``: the call is admitted, with a warning trace."""
    key_prefix: str = Field(default="agentcore", min_length=1)
    """Every Redis key and channel starts with this: fleets sharing one Redis keep apart."""
    timeout_s: float = Field(default=FLEET_TIMEOUT_S, gt=0)
    """How long one Redis command may take before the store counts as unreachable."""


def _default_providers() -> dict[str, ProviderSettings]:
    return {"echo": _echo()}


def _echo() -> ProviderSettings:
    """The embedded provider's section: defaults, unvalidated (as `Settings`'s sections)."""
    return ProviderSettings.model_construct(kind="echo")


class Settings(Section):
    """The kernel's sections. Plugin sections are grafted on by `load_settings`, which
    reads the file and the environment and validates their values with a `LoadContext`.
    A section left out holds its defaults unvalidated (``model_construct``: they are valid,
    tests/cli/test_settings_defaults.py checks it), so its own validator is never built.
    (A plain model, not pydantic-settings' `BaseSettings`: that one's constructor runs its
    own sources, and validating through it loses the context.)"""

    traces: TracesSettings = Field(default_factory=TracesSettings.model_construct)
    plugins: PluginsSettings = Field(default_factory=PluginsSettings.model_construct)
    providers: dict[str, ProviderSettings] = Field(default_factory=_default_providers)
    inference: InferenceSettings = Field(default_factory=InferenceSettings.model_construct)
    mcpl: McplSettings = Field(default_factory=McplSettings.model_construct)
    fleet: FleetSettings = Field(default_factory=FleetSettings.model_construct)

    @model_validator(mode="after")
    def _keep_echo(self) -> Settings:
        # The embedded provider is always there, so a fresh install runs with no key.
        self.providers.setdefault("echo", _echo())
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
    if not any(k.upper().startswith(ENV_PREFIX) for k in env):
        return {}  # nothing to parse: pydantic-settings (several MB) stays unimported
    from pydantic_settings import EnvSettingsSource

    source = EnvSettingsSource(
        cast("type[BaseSettings]", settings_cls),  # it reads only the fields and our options
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
            direct[head] = (model, Field(default_factory=default_of(model)))
    for head, children in nested.items():
        field = base.model_fields.get(head)
        parent = field.annotation if field is not None else Section
        if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
            raise TypeError(f"settings section {head!r} cannot hold plugin sections")
        model = _graft(parent, children)
        direct[head] = (model, Field(default_factory=default_of(model)))
    return create_model(base.__name__, __base__=base, **direct)


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    path: Path | None
    file_values: dict[str, Any]
    env_values: dict[str, Any]
    kinds: frozenset[str] | None = None
    """The provider kinds `kind` was checked against (None: not checked)."""
    kind_settings: Mapping[str, type[BaseModel]] | None = None
    """The kinds' own settings models the providers were validated with."""

    def source_of(self, key: str | tuple[str, ...]) -> str:
        """Where a key's effective value came from: environment, file, or default.

        `key` is dotted (``"retry.max_attempts"``) or, for keys that hold dots
        themselves (feature-set names), the tuple of its parts.
        """
        if lookup(self.env_values, key):
            return "environment"
        if lookup(self.file_values, key):
            return f"file {self.path}"
        return "default"


def load_settings(
    path: Path | None = None,
    *,
    sections: Mapping[str, type[BaseModel] | None] | None = None,
    environ: Mapping[str, str] | None = None,
    kinds: Collection[str] | None = None,
    root: type[Settings] | None = None,
    kind_settings: Mapping[str, type[BaseModel]] | None = None,
) -> LoadedSettings:
    """Read and validate the deployment's settings.

    `sections` maps each plugin's section path to its model (None: a known
    section that nobody will read, such as a disabled plugin's). `kinds` are the
    provider kinds the kernel's plugins contribute: ``[providers.NAME] kind`` must
    name one (None: not checked here), and a kind with keys of its own validates its
    sections with its model (`kind_settings`). `root` is a model already built from them
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
    context = LoadContext(_provider_names(values), folder, known_kinds, kind_settings or {})
    try:
        settings = root.model_validate(values, context=context)
    except ValidationError as exc:
        problems += describe_errors(exc, path, root, file_values, env_values, kinds)
    if problems:
        raise SettingsError(problems) from None
    for secret in _declared_secrets(settings):
        register_secret(secret)
    refused = [
        *passthrough_problems(settings.model_dump(mode="json"), environ),
        *redis_env_problems(settings.fleet, environ),  # a fleet that cannot log in
    ]
    if refusals := [
        f"{where_set(loc, path, file_values, env_values)}: {dotted(loc)}: {why}"
        for loc, why in refused
    ]:
        raise SettingsError(refusals)  # no configured secret reaches an MCPL server
    for provider in settings.providers.values():
        provider._environ = environ  # a key is read from the environment the settings came from
    settings.fleet._environ = environ  # and so is a Redis password
    for warning in missing_keys(settings.providers, environ):
        logger.warning(warning)
    return LoadedSettings(settings, path, file_values, env_values, known_kinds, kind_settings)


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
        loaded.path,
        environ=environ,
        kinds=loaded.kinds,
        root=type(loaded.settings),
        kind_settings=loaded.kind_settings,
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
        elif isinstance(value, str) and annotation_at(root, here) is Path:
            out[key] = str(folder / value)  # an absolute value stays as it is
        else:
            out[key] = value
    return out


def _provider_names(values: Mapping[str, Any]) -> frozenset[str]:
    providers = values.get("providers")
    names = set(providers) if isinstance(providers, Mapping) else set()
    return frozenset(names | set(_default_providers()))


def flatten(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The key paths and leaf values of a settings dump, for `agentcore settings`."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from flatten(v, (*prefix, str(k)))
    else:
        yield prefix, value
