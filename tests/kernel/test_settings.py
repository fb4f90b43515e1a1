"""Settings: file, environment and defaults layered; every error names where, which key,
and what was expected; plugin sections validated by the plugin's own model; secrets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from agentcore import hookimpl
from agentcore.kernel import Kernel
from agentcore.plugins import SettingsSection
from agentcore.settings import (
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


def test_an_environment_variable_naming_no_section_is_reported(log_lines):
    load_settings(
        None,
        environ={"AGENTCORE_RETRYY__MAX_ATTEMPTS": "6", "AGENTCORE_LOG_LEVEL": "DEBUG"},
    )
    warned = [line for line in log_lines if "names no settings section" in line]
    assert len(warned) == 1 and "AGENTCORE_RETRYY__MAX_ATTEMPTS" in warned[0]


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
