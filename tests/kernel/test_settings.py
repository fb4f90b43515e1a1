"""Settings: file, environment and defaults layered; every error names where, which key,
and what was expected; plugin sections validated by the plugin's own model; secrets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from agentcore import hookimpl
from agentcore.inference import Message, Request
from agentcore.kernel import Kernel
from agentcore.plugins import SettingsSection
from agentcore.settings import (
    ModelReference,
    ProviderName,
    ProviderSettings,
    SettingsError,
    early_plugin_settings,
    load_settings,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path | None, environ: dict[str, str] | None = None, **kw) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        load_settings(path, environ=environ or {}, **kw)
    return caught.value.problems


# -- layering -----------------------------------------------------------------------------


def test_defaults_only():
    loaded = load_settings(None, environ={})
    settings = loaded.settings
    assert settings.inference.progress_timeout_s == 120
    assert settings.inference.request_timeout_s == 600
    assert settings.plugins.disabled == []
    assert settings.plugins.strict is True
    assert settings.traces.jsonl is None
    assert settings.providers["echo"].kind == "echo"  # always there, so a fresh install runs
    assert loaded.source_of("inference.request_timeout_s") == "default"


def test_the_file_wins_over_defaults_and_the_environment_over_the_file(tmp_path):
    path = write(
        tmp_path,
        """
        [inference]
        progress_timeout_s = 5
        request_timeout_s = 50

        [providers.local]
        kind = "openai-compatible"
        base_url = "http://127.0.0.1:8080/v1"

        [traces]
        jsonl = "from-file.jsonl"
        """,
    )
    environ = {
        "AGENTCORE_INFERENCE__PROGRESS_TIMEOUT_S": "7",
        "AGENTCORE_PROVIDERS__LOCAL__BASE_URL": "http://10.0.0.1/v1",
        "agentcore_traces__jsonl": "from-env.jsonl",  # case does not matter
    }
    loaded = load_settings(path, environ=environ)
    settings = loaded.settings
    assert settings.inference.progress_timeout_s == 7  # environment over file
    assert settings.inference.request_timeout_s == 50  # file over default
    assert settings.inference.unknown_stop == "error"  # default
    assert settings.providers["local"].kind == "openai-compatible"  # file, merged with env
    assert settings.providers["local"].base_url == "http://10.0.0.1/v1"
    assert settings.traces.jsonl == Path("from-env.jsonl")
    assert "echo" in settings.providers
    assert loaded.source_of("inference.progress_timeout_s") == "environment"
    assert loaded.source_of("inference.request_timeout_s") == f"file {path}"
    assert loaded.source_of("inference.unknown_stop") == "default"


def test_only_the_given_environment_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCORE_INFERENCE__REQUEST_TIMEOUT_S", "1")
    assert load_settings(None, environ={}).settings.inference.request_timeout_s == 600
    assert load_settings(None).settings.inference.request_timeout_s == 1  # os.environ


def test_the_settings_file_comes_from_the_argument_or_agentcore_settings(tmp_path):
    by_env = write(tmp_path, "[inference]\nrequest_timeout_s = 11\n")
    explicit = tmp_path / "explicit.toml"
    explicit.write_text("[inference]\nrequest_timeout_s = 22\n")
    environ = {"AGENTCORE_SETTINGS": str(by_env)}
    assert Kernel.load(None, environ=environ, discover_plugins=False).settings.inference == (
        load_settings(by_env, environ={}).settings.inference
    )
    kernel = Kernel.load(explicit, environ=environ, discover_plugins=False)
    assert kernel.settings.inference.request_timeout_s == 22
    assert kernel.loaded.path == explicit


def test_environment_lists_and_booleans(tmp_path):
    environ = {"AGENTCORE_PLUGINS__DISABLED": '["a", "b"]', "AGENTCORE_PLUGINS__STRICT": "false"}
    settings = load_settings(None, environ=environ).settings
    assert settings.plugins.disabled == ["a", "b"]
    assert settings.plugins.strict is False
    early = early_plugin_settings({"plugins": {"disabled": ["c"]}}, environ)
    assert early.disabled == ["a", "b"]


# -- errors ----------------------------------------------------------------------------


def test_an_unknown_key_in_the_file(tmp_path):
    path = write(tmp_path, "[inference]\nprogress_timeout = 5\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: inference.progress_timeout: unknown key")
    assert "expected one of: progress_timeout_s, request_timeout_s" in problem


def test_an_unknown_section_in_the_file(tmp_path):
    path = write(tmp_path, "[infrence]\nprogress_timeout_s = 5\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: infrence: unknown key")
    assert "inference" in problem and "providers" in problem


def test_an_unknown_key_in_the_environment():
    (problem,) = problems(None, {"AGENTCORE_INFERENCE__PROGRESS_TIMEOUT": "5"})
    assert problem.startswith(
        "environment AGENTCORE_INFERENCE__PROGRESS_TIMEOUT: inference.progress_timeout: unknown key"
    )
    assert "progress_timeout_s" in problem


def test_a_wrong_type_in_the_file(tmp_path):
    path = write(tmp_path, '[inference]\nrequest_timeout_s = "soon"\n')
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: inference.request_timeout_s: ")
    assert "valid number" in problem
    assert "'soon'" in problem


def test_a_wrong_type_in_the_environment_names_the_variable(tmp_path):
    path = write(tmp_path, "[plugins]\nstrict = true\n")
    (problem,) = problems(path, {"AGENTCORE_PLUGINS__STRICT": "perhaps"})
    assert problem.startswith("environment AGENTCORE_PLUGINS__STRICT: plugins.strict: ")
    assert "valid boolean" in problem


def kernel_problems(path: Path | None, environ: dict[str, str] | None = None) -> list[str]:
    """The problems `Kernel.load` reports: kinds are checked against the kernel's plugins'."""
    with pytest.raises(SettingsError) as caught:
        Kernel.load(path, environ=environ or {}, discover_plugins=False)
    return caught.value.problems


def test_a_missing_provider_kind_says_which_kinds_there_are(tmp_path):
    path = write(tmp_path, '[providers.claude]\nbase_url = "http://127.0.0.1:9"\n')
    (problem,) = kernel_problems(path)
    assert problem.startswith(f"{path}: providers.claude.kind: required value missing")
    for kind in ("anthropic", "openai", "openrouter", "openai-compatible", "echo"):
        assert kind in problem


def test_a_missing_provider_kind_in_the_environment():
    (problem,) = kernel_problems(None, {"AGENTCORE_PROVIDERS__X__BASE_URL": "http://h"})
    assert problem.startswith("environment AGENTCORE_PROVIDERS__X__KIND: providers.x.kind: ")
    assert "required value missing (expected one of anthropic" in problem


def test_an_unknown_provider_kind_says_which_kinds_there_are(tmp_path):
    path = write(tmp_path, '[providers.claude]\nkind = "anthropix"\n')
    (problem,) = kernel_problems(path)
    assert problem.startswith(f"{path}: providers.claude.kind: ")
    assert "unknown provider kind 'anthropix'" in problem
    assert "anthropic" in problem.split("expected", 1)[1]


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(
        tmp_path,
        """
        bogus = 1
        [inference]
        request_timeout_s = "never"
        """,
    )
    found = problems(path, {"AGENTCORE_TRACES__NOPE": "x"})
    assert len(found) == 3
    assert "inference.request_timeout_s" in "\n".join(found)


def test_a_file_that_is_missing_or_not_toml(tmp_path):
    (missing,) = problems(tmp_path / "nowhere.toml")
    assert missing == f"{tmp_path / 'nowhere.toml'}: no such settings file"
    broken = write(tmp_path, "[inference\n")
    (problem,) = problems(broken)
    assert problem.startswith(f"{broken}: not valid TOML")


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("not UTF-8", "not UTF-8 text (invalid start byte at byte 18)"),
        ("a directory", "is a directory, not a settings file"),
        ("unreadable", "cannot be read: Too many levels of symbolic links"),
    ],
)
def test_a_file_that_cannot_be_read_is_named_not_a_traceback(tmp_path, case, says):
    path = tmp_path / "agentcore.toml"
    if case == "not UTF-8":
        path.write_bytes(b'[traces]\njsonl = "\xff.jsonl"\n')
    elif case == "a directory":
        path.mkdir()
    else:
        path.symlink_to(path)  # a link to itself: unreadable whoever runs the test, root too
    assert problems(path) == [f"{path}: {says}"]
    with pytest.raises(SettingsError) as caught:  # the same through AGENTCORE_SETTINGS
        Kernel.load(None, environ={"AGENTCORE_SETTINGS": str(path)}, discover_plugins=False)
    assert caught.value.problems == [f"{path}: {says}"]


# -- plugin sections -----------------------------------------------------------------------


class AcmeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpoint: str
    retries: int = 2


class Acme:
    def __init__(self, path: str = "acme") -> None:
        self.path = path
        self.seen: list[object] = []

    @hookimpl
    def agentcore_settings(self):
        return SettingsSection(self.path, AcmeSettings)

    @hookimpl
    def agentcore_start(self, context):
        self.seen.append(context.settings)


def load_with_acme(path: Path | None, environ=None, acme: Acme | None = None) -> Kernel:
    return Kernel.load(
        path, environ=environ or {}, plugins={"acme": acme or Acme()}, discover_plugins=False
    )


async def test_a_plugin_section_is_validated_by_its_model_and_given_to_the_plugin(tmp_path):
    path = write(tmp_path, '[acme]\nendpoint = "http://acme"\n')
    acme = Acme()
    kernel = load_with_acme(path, {"AGENTCORE_ACME__RETRIES": "5"}, acme)
    async with kernel:
        pass
    assert acme.seen == [AcmeSettings(endpoint="http://acme", retries=5)]
    assert kernel.loaded.source_of("acme.retries") == "environment"


async def test_a_dotted_plugin_section_nests(tmp_path):
    path = write(tmp_path, '[mcpl.acme]\nendpoint = "http://acme"\n')
    acme = Acme("mcpl.acme")
    async with load_with_acme(path, acme=acme) as kernel:
        assert kernel.settings.mcpl.servers == {}  # the kernel's own part of [mcpl] is kept
    assert acme.seen == [AcmeSettings(endpoint="http://acme")]


def test_plugin_section_errors_name_the_file_and_key(tmp_path):
    path = write(tmp_path, '[acme]\nendpoint = "http://acme"\nretries = "many"\ncolour = 1\n')
    with pytest.raises(SettingsError) as caught:
        load_with_acme(path)
    found = caught.value.problems
    assert f"{path}: acme.colour: unknown key (expected one of: endpoint, retries)" in found
    assert any(p.startswith(f"{path}: acme.retries: ") and "valid integer" in p for p in found)


def test_a_missing_plugin_value_says_what_was_expected(tmp_path):
    path = write(tmp_path, "[acme]\nretries = 1\n")
    with pytest.raises(SettingsError) as caught:
        load_with_acme(path)
    assert caught.value.problems == [
        f"{path}: acme.endpoint: required value missing (expected a string)"
    ]


def test_a_disabled_plugins_section_is_not_an_error(tmp_path):
    path = write(tmp_path, '[plugins]\ndisabled = ["acme"]\n\n[acme]\nwhatever = "x"\n')
    kernel = load_with_acme(path)
    (record,) = [r for r in kernel.records if r.name == "acme"]  # beside agentcore's own
    assert record.state == "disabled"
    assert record.plugin is None


def test_an_enabled_plugins_unknown_section_is_an_error(tmp_path):
    """The control for the test above: the same file, the plugin not disabled."""
    path = write(tmp_path, '[acme]\nwhatever = "x"\n')
    with pytest.raises(SettingsError, match=r"acme\.whatever: unknown key"):
        load_with_acme(path)


# -- secrets -----------------------------------------------------------------------------


def test_api_key_env_resolves_a_secret_that_never_prints(tmp_path):
    key = "sk-ant-test-0123456789abcdef"
    path = write(tmp_path, '[providers.claude]\nkind = "anthropic"\napi_key_env = "ACME_KEY"\n')
    settings = load_settings(path, environ={}).settings
    provider = settings.providers["claude"]
    secret = provider.api_key({"ACME_KEY": key})
    assert isinstance(secret, SecretStr)
    assert secret.get_secret_value() == key
    assert key not in str(secret)
    assert key not in repr(secret)
    assert key not in f"{secret}"

    class Resolved(BaseModel):
        api_key: SecretStr

    resolved = Resolved(api_key=secret)
    assert key not in resolved.model_dump_json()
    assert key not in repr(resolved)
    assert key not in str(resolved.model_dump())
    assert key not in settings.model_dump_json()  # the file holds the variable's name only
    assert provider.api_key({}) is None
    assert ProviderSettings(kind="echo").api_key({"ACME_KEY": key}) is None


def test_a_key_is_read_from_the_environment_the_settings_came_from(tmp_path, monkeypatch):
    monkeypatch.delenv("ACME_KEY", raising=False)
    path = write(tmp_path, '[providers.claude]\nkind = "anthropic"\napi_key_env = "ACME_KEY"\n')
    provider = load_settings(path, environ={"ACME_KEY": "sk-from-given-env"}).settings.providers[
        "claude"
    ]
    secret = provider.api_key()
    assert secret is not None and secret.get_secret_value() == "sk-from-given-env"
    assert provider.model_copy().api_key() is not None  # adapters resolve through a copy
    monkeypatch.setenv("ACME_KEY", "sk-from-process")
    fresh = load_settings(path).settings.providers["claude"].api_key()
    assert fresh is not None and fresh.get_secret_value() == "sk-from-process"


def test_an_environment_variable_naming_no_section_is_an_error_as_in_the_file():
    """As ``[retryy]`` in the file is: a misspelt override is never silently ignored."""
    (problem,) = problems(
        None,
        {"AGENTCORE_RETRYY__MAX_ATTEMPTS": "6", "AGENTCORE_LOG_LEVEL": "DEBUG"},
        sections={"retry": None},
    )
    assert problem.startswith(
        "environment AGENTCORE_RETRYY__MAX_ATTEMPTS: names no settings section "
        "(did you mean 'retry'?); the sections are "
    )


def test_a_variable_the_settings_name_as_a_source_is_no_override(tmp_path):
    """``token_env = "AGENTCORE_CONSOLE_TOKEN"`` (the README's example) holds a value."""
    environ = {"AGENTCORE_CONSOLE_TOKEN": "t" * 20}
    path = write(tmp_path, '[acme]\ntoken_env = "AGENTCORE_CONSOLE_TOKEN"\n')
    assert load_settings(path, environ=environ, sections={"acme": None}).env_values == {}
    (problem,) = problems(None, environ, sections={"acme": None})
    assert problem.startswith("environment AGENTCORE_CONSOLE_TOKEN: names no settings section")


def test_a_default_policys_section_is_accepted_when_its_plugin_is_not_loaded(tmp_path):
    path = write(
        tmp_path,
        '[mcpl.routing]\ndefault = "echo:x"\n[retry]\nmax_attempts = 2\n'
        "[provider_hold]\nmax_wait_s = 1\n[waiting_trace]\ninterval_s = 1\n",
    )
    kernel = Kernel.load(path, environ={}, discover_plugins=False)
    assert kernel.settings.section("mcpl.routing") == {"default": "echo:x"}
    bogus = write(tmp_path, "[mcpl.routin]\ndefault = 1\n")
    with pytest.raises(SettingsError, match=r"mcpl\.routin: unknown key"):
        Kernel.load(bogus, environ={}, discover_plugins=False)


def test_keys_holding_dots_keep_their_source(tmp_path):
    from agentcore.settings import dotted, flatten

    path = write(tmp_path, '[mcpl.servers."mem.v2"]\ncommand = ["python3", "m.py"]\n')
    loaded = load_settings(path, environ={})
    leaves = {dotted(p): loaded.source_of(p) for p, _ in flatten(loaded.settings.model_dump())}
    assert leaves['mcpl.servers."mem.v2".command'] == f"file {path}"
    assert leaves['mcpl.servers."mem.v2".grant'] == "default"


def test_a_plugin_sections_environment_override_is_applied_without_an_error():
    """Plugin sections are known only after discovery: reading `[plugins]` early must not
    refuse a plugin section's variable, since it is then applied."""
    acme = Acme()
    kernel = load_with_acme(None, {"AGENTCORE_ACME__ENDPOINT": "http://acme"}, acme)
    assert kernel.settings.section("acme").endpoint == "http://acme"
    with pytest.raises(SettingsError) as caught:
        load_with_acme(None, {"AGENTCORE_ACME__ENDPOINT": "x", "AGENTCORE_ACMEE__ENDPOINT": "y"})
    (problem,) = caught.value.problems
    assert problem.startswith(
        "environment AGENTCORE_ACMEE__ENDPOINT: names no settings section (did you mean 'acme'?)"
    )


# -- values that can never work are refused at load time -----------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("progress_timeout_s", -5), ("request_timeout_s", 0)],
)
def test_a_timeout_must_be_positive(tmp_path, key, value):
    path = write(tmp_path, f"[inference]\n{key} = {value}\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: inference.{key}: Input should be greater than 0")


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("connect_timeout_s", 0, "Input should be greater than 0"),
        ("read_timeout_s", -1.5, "Input should be greater than 0"),
        ("delay_s", -1, "Input should be greater than or equal to 0"),
    ],
)
def test_a_provider_duration_is_refused_below_its_bound(tmp_path, key, value, says):
    path = write(tmp_path, f'[providers.p]\nkind = "openai-compatible"\n{key} = {value}\n')
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: providers.p.{key}: {says}")
    # From the environment: the variable is named.
    env = {f"AGENTCORE_PROVIDERS__P__{key.upper()}": str(value)}
    path = write(tmp_path, '[providers.p]\nkind = "openai-compatible"\n')
    (problem,) = problems(path, env)
    assert f"AGENTCORE_PROVIDERS__P__{key.upper()}" in problem
    assert says in problem


@pytest.mark.parametrize(
    ("server", "says"),
    [
        (
            'url = "http://127.0.0.1:9000/mcpl"',
            ".url: has the scheme 'http'; an MCPL server is reached over ws:// or wss://",
        ),
        ('url = "127.0.0.1:9000"', ".url: has no scheme; an MCPL server"),
        (
            'url = "ws://h/m"\ncommand = ["python3", "s.py"]',
            ": sets both command (stdio) and url (WebSocket); choose one",
        ),
        ('grant = ["modelInfo"]', ": needs command (stdio) or url (WebSocket)"),
        ("command = []", ".command: List should have at least 1 item"),
    ],
)
def test_an_mcpl_server_that_cannot_be_reached_is_refused(tmp_path, server, says):
    path = write(tmp_path, f"[mcpl.servers.mem]\n{server}\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}: mcpl.servers.mem{says}"), problem


def test_websocket_urls_are_accepted(tmp_path):
    path = write(
        tmp_path,
        '[mcpl.servers.a]\nurl = "ws://127.0.0.1:9/m"\n[mcpl.servers.b]\nurl = "WSS://h/m"\n',
    )
    servers = load_settings(path, environ={}).settings.mcpl.servers
    assert [s.url for s in servers.values()] == ["ws://127.0.0.1:9/m", "WSS://h/m"]
    assert all(s.cwd is None for s in servers.values())  # cwd is a stdio server's only


class RoutedSettings(BaseModel):
    """A plugin section whose fields name providers, as the router's and retry's do."""

    model_config = ConfigDict(extra="forbid")
    model: ModelReference | None = None
    fallbacks: dict[str, ModelReference] = {}
    per_provider: dict[ProviderName, int] = {}


class Routed(Acme):
    @hookimpl
    def agentcore_settings(self):
        return SettingsSection("mcpl.routed", RoutedSettings)


def load_routed(path: Path | None, environ: dict[str, str] | None = None) -> Kernel:
    return Kernel.load(
        path, environ=environ or {}, plugins={"routed": Routed()}, discover_plugins=False
    )


def test_a_field_naming_a_provider_is_checked_against_the_configured_ones(tmp_path):
    path = write(
        tmp_path,
        """
        [providers.local]
        kind = "openai-compatible"

        [mcpl.routed]
        model = "locl:llama"
        fallbacks = { "memory.*" = "echo:e", "other" = "gone:m", "bad" = "no-colon" }
        per_provider = { local = 1, echo = 2, nope = 3 }
        """,
    )
    with pytest.raises(SettingsError) as caught:
        load_routed(path)
    configured = "(configured: echo, local)"
    assert sorted(caught.value.problems) == sorted(
        [
            f"{path}: mcpl.routed.model: names provider 'locl', which is not configured "
            f"(did you mean 'local'?) {configured}",
            f"{path}: mcpl.routed.fallbacks.other: names provider 'gone', which is not "
            f"configured {configured}",
            f"{path}: mcpl.routed.fallbacks.bad: 'no-colon' is not of the form NAME:MODEL",
            f"{path}: mcpl.routed.per_provider.nope: names provider 'nope', which is not "
            f"configured {configured}",
        ]
    )


def test_a_provider_named_in_the_environment_counts_and_is_checked_there(tmp_path):
    path = write(tmp_path, '[mcpl.routed]\nmodel = "local:llama"\n')
    environ = {"AGENTCORE_PROVIDERS__LOCAL__KIND": "openai-compatible"}
    assert load_routed(path, environ).settings.section("mcpl.routed").model == "local:llama"
    with pytest.raises(SettingsError) as caught:
        load_routed(None, {"AGENTCORE_MCPL__ROUTED__MODEL": "x:y"})
    assert caught.value.problems == [
        "environment AGENTCORE_MCPL__ROUTED__MODEL: mcpl.routed.model: names provider 'x', "
        "which is not configured (configured: echo)"
    ]


def test_a_provider_reference_built_outside_a_load_checks_only_its_form():
    assert RoutedSettings(model="any:thing", per_provider={"any": 1}).model == "any:thing"
    with pytest.raises(ValidationError, match="is not of the form NAME:MODEL"):
        RoutedSettings(model="thing")


# -- relative paths belong to the settings file's folder ------------------------------------


def test_relative_paths_in_the_file_are_relative_to_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "deploy"
    folder.mkdir()
    write(
        folder,
        """
        [traces]
        jsonl = "traces.jsonl"

        [mcpl.servers.local]
        command = ["python3", "server.py"]

        [mcpl.servers.sub]
        command = ["./run.sh"]
        cwd = "servers"

        [mcpl.servers.absolute]
        command = ["python3", "-m", "srv"]
        cwd = "/srv"
        """,
    )
    monkeypatch.chdir(tmp_path)  # elsewhere: what matters is where the file is
    relative = Path("deploy") / "agentcore.toml"
    loaded = load_settings(relative, environ={})
    settings = loaded.settings
    assert settings.traces.jsonl == folder / "traces.jsonl"
    servers = settings.mcpl.servers
    assert servers["local"].cwd == folder  # a stdio server starts in the file's folder
    assert servers["local"].command == ["python3", "server.py"]  # names on PATH stay names
    assert servers["sub"].cwd == folder / "servers"
    assert servers["sub"].command == ["./run.sh"]
    assert servers["absolute"].cwd == Path("/srv")
    assert loaded.source_of("traces.jsonl") == f"file {relative}"
    # A path from the environment is the environment's: relative to the working directory.
    env = load_settings(relative, environ={"AGENTCORE_TRACES__JSONL": "mine.jsonl"})
    assert env.settings.traces.jsonl == Path("mine.jsonl")
    # With no file, paths and servers are as given.
    bare = load_settings(None, environ={"AGENTCORE_MCPL__SERVERS__S__COMMAND": '["srv"]'})
    assert bare.settings.mcpl.servers["s"].cwd is None


async def test_traces_go_next_to_the_settings_file_whatever_the_working_directory(
    tmp_path, monkeypatch
):
    folder = tmp_path / "deploy"
    folder.mkdir()
    path = write(folder, '[traces]\njsonl = "traces.jsonl"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    async with Kernel.load(Path("..") / "deploy" / path.name, environ={}) as kernel:
        await kernel.complete(Request("echo:e", [Message.user("hello")]))
    assert "inference:complete" in (folder / "traces.jsonl").read_text()
    assert list(elsewhere.iterdir()) == []
