"""Provider kinds are plugins: each kernel's kinds come from its plugins'
`agentcore_provider_kinds`, agentcore's own included, and nowhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentcore import hookimpl
from agentcore.kernel import Kernel, PluginLoadError
from agentcore.settings import SettingsError
from agentcore.testing import ProviderKindsPlugin, ScriptedProvider

BUILT_IN = [
    "anthropic",
    "echo",
    "gemini",
    "openai",
    "openai-compatible",
    "openai-responses",
    "openrouter",
]


def scripted(*args: Any) -> ScriptedProvider:
    return ScriptedProvider()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentcore.toml"
    path.write_text(text)
    return path


def load(path: Path | None = None, **plugins: object) -> Kernel:
    return Kernel.load(path, environ={}, plugins=plugins, discover_plugins=False)


def test_the_built_in_kinds_come_from_agentcores_own_plugin() -> None:
    kernel = load()
    assert list(kernel.kinds) == BUILT_IN
    (record,) = [r for r in kernel.records if r.name == "providers"]
    assert (record.distribution, record.state, list(record.kinds)) == (
        "agentcore",
        "active",
        BUILT_IN,
    )
    assert {kernel.kinds.plugin(kind) for kind in BUILT_IN} == {"providers"}


def test_a_plugins_kind_is_one_a_provider_section_may_name(tmp_path: Path) -> None:
    path = write(tmp_path, '[providers.a]\nkind = "acme"\n')
    kernel = load(path, acme=ProviderKindsPlugin({"acme": scripted}))
    assert kernel.kinds.plugin("acme") == "acme"
    assert isinstance(kernel.provider("a"), ScriptedProvider)
    with pytest.raises(SettingsError) as caught:
        load(path)  # the same file, without the plugin: a kernel of its own, no such kind
    (problem,) = caught.value.problems
    assert problem.startswith(f"{path}: providers.a.kind: ")
    assert "unknown provider kind 'acme'; expected one of " + ", ".join(BUILT_IN) in problem


def test_the_unknown_kind_error_lists_the_kinds_plugins_added(tmp_path: Path) -> None:
    path = write(tmp_path, '[providers.a]\nkind = "acme-x"\n')
    with pytest.raises(SettingsError) as caught:
        load(path, acme=ProviderKindsPlugin({"acme": scripted}))
    assert "expected one of acme, anthropic, echo, gemini" in caught.value.problems[0]


def test_two_plugins_contributing_one_kind_is_an_error_naming_both() -> None:
    with pytest.raises(PluginLoadError) as caught:
        load(
            first=ProviderKindsPlugin({"acme": scripted}),
            second=ProviderKindsPlugin({"acme": scripted}),
        )
    message = str(caught.value)
    assert "provider kind 'acme' is contributed by both 'first' and 'second'" in message
    assert [r.name for r in caught.value.failed] == ["second"]


def test_a_plugin_cannot_take_a_built_in_kind_without_replacing_the_built_in_plugin() -> None:
    with pytest.raises(
        PluginLoadError, match="'openai' is contributed by both 'providers' and 'rogue'"
    ):
        load(rogue=ProviderKindsPlugin({"openai": scripted}))


def test_not_strict_the_first_contributor_keeps_the_kind(tmp_path: Path) -> None:
    path = write(tmp_path, "[plugins]\nstrict = false\n")
    kernel = load(path, rogue=ProviderKindsPlugin({"openai": scripted, "rogue": scripted}))
    (rogue,) = [r for r in kernel.records if r.name == "rogue"]
    assert rogue.state == "failed" and "'openai' is contributed by both" in str(rogue.error)
    assert kernel.kinds.plugin("openai") == "providers"
    assert "rogue" not in kernel.kinds  # a plugin's kinds are taken all or none


def test_a_plugin_named_like_the_built_in_one_replaces_its_kinds(tmp_path: Path) -> None:
    kernel = load(providers=ProviderKindsPlugin({"openai": scripted, "echo": scripted}))
    assert list(kernel.kinds) == ["echo", "openai"]
    states = {(r.name, r.distribution): r.describe_state() for r in kernel.records}
    assert states["providers", "agentcore"] == "replaced by (registered)"
    path = write(tmp_path, '[providers.a]\nkind = "anthropic"\n')
    with pytest.raises(
        SettingsError, match="unknown provider kind 'anthropic'; expected one of echo, openai"
    ):
        load(path, providers=ProviderKindsPlugin({"openai": scripted, "echo": scripted}))


def test_disabling_the_built_in_plugin_takes_its_kinds_away(tmp_path: Path) -> None:
    path = write(tmp_path, '[plugins]\ndisabled = ["providers"]\n')
    kernel = load(path, acme=ProviderKindsPlugin({"acme": scripted}))
    assert list(kernel.kinds) == ["acme"]


class AsyncKinds:
    @hookimpl
    async def agentcore_provider_kinds(self) -> dict[str, Any]:
        return {"late": scripted}


class NotAMapping:
    @hookimpl
    def agentcore_provider_kinds(self) -> list[str]:
        return ["acme"]


class NotCallable:
    @hookimpl
    def agentcore_provider_kinds(self) -> dict[str, Any]:
        return {"acme": "not a factory"}


@pytest.mark.parametrize(
    ("plugin", "error"),
    [
        (AsyncKinds(), "agentcore_provider_kinds must be a plain function"),
        (NotAMapping(), "must return a mapping of kind name to factory"),
        (NotCallable(), "the factory of provider kind 'acme' is not callable"),
    ],
    ids=["async", "not-a-mapping", "not-callable"],
)
def test_a_bad_contribution_fails_the_plugin_by_name(plugin: object, error: str) -> None:
    with pytest.raises(PluginLoadError) as caught:
        load(bad=plugin)
    assert "bad" in str(caught.value) and error in str(caught.value)


# -- a real third-party package --------------------------------------------------------------


def agentcore_cli(dists: list[Path], *args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([*map(str, dists), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "agentcore", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
    )


def test_an_installed_package_adds_a_kind_that_serves_infer(
    installed_dists: dict[str, Path], tmp_path: Path
) -> None:
    path = write(tmp_path, '[providers.a]\nkind = "acme"\nheaders = { x-acme-model = "acme-7" }\n')
    dists = [installed_dists["acme-kinds"]]
    for stream in ("--stream", "--no-stream"):
        done = agentcore_cli(
            dists, "infer", "--settings", str(path), "--model", "a:m", "--json", stream, "hi there"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "content": "HI THERE",
            "model": "acme-7",
            "finishReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 2},
        }
    listed = agentcore_cli(dists, "plugins")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()}
    assert rows["NAME"][-1] == "KINDS"
    assert rows["acme-kinds"][1:] == ["acme-kinds", "1.0.0", "active", "acme"]
    assert rows["providers"][1:] == [
        "agentcore",
        rows["providers"][2],
        "active",
        ",".join(BUILT_IN),
    ]


def test_without_the_package_the_kind_is_unknown(tmp_path: Path) -> None:
    """The control for the test above: the same settings, the package not installed."""
    path = write(tmp_path, '[providers.a]\nkind = "acme"\n')
    done = agentcore_cli([], "infer", "--settings", str(path), "--model", "a:m", "hi")
    assert done.returncode == 2
    assert f"{path}: providers.a.kind: " in done.stderr
    assert "unknown provider kind 'acme'; expected one of anthropic" in done.stderr
