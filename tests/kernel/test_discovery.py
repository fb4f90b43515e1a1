"""Plugin discovery with real installed distributions (see conftest.installed_dists).

Other plugins installed in the venv (agentcore's own, the bundled policies)
are found too; every assertion here looks only at the names the fixture
distributions register.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kernel_support import FAKE_ENV, collect, fixture_module, imported, reply, request

from agentcore.inference import Complete
from agentcore.kernel import Kernel, PluginLoadError
from agentcore.plugins import PluginRecord, discover

OURS = {"acme-observer", "acme-disabled", "waiting-trace", "acme-contested", "acme-broken"}
OURS |= {"acme-badstart"}


def ours(records: list[PluginRecord]) -> dict[tuple[str, str], PluginRecord]:
    """The fixture distributions' records, keyed by (plugin name, distribution)."""
    return {(r.name, r.distribution): r for r in records if r.name in OURS}


@pytest.fixture
def load(scripted_plugins: dict[str, object]) -> Callable[..., Kernel]:
    """`Kernel.load` with discovery, the test's environment and the scripted kind."""

    def load(env: dict[str, str] | None = None, path: Path | None = None) -> Kernel:
        return Kernel.load(path, environ={**FAKE_ENV, **(env or {})}, plugins=scripted_plugins)

    return load


async def test_a_plugin_is_found_and_its_hooks_are_called(use_dists, scripted, tmp_path, load):
    use_dists("acme-observer")
    scripted(reply("hi there"))
    settings = tmp_path / "s.toml"
    settings.write_text('[acme_observer]\nlabel = "from the file"\n')
    kernel = load(path=settings)
    record = ours(kernel.records)[("acme-observer", "acme-observer")]
    assert (record.state, record.version) == ("active", "1.0.0")
    async with kernel:
        events = await collect(kernel.stream(request()))
    assert isinstance(events[-1], Complete)
    seen = fixture_module("ackt_observer").SEEN
    assert seen[0] == ("start", "acme-observer", "from the file")
    assert ("trace", "inference:start") in seen  # async implementation, awaited
    assert ("trace", "inference:complete") in seen
    assert ("event", "Token") in seen  # sync implementation taking a subset of the args
    assert seen[-1] == ("stop",)


def test_disabled_in_settings_is_not_imported(use_dists, tmp_path, load):
    use_dists("acme-observer", "acme-disabled")
    settings = tmp_path / "s.toml"
    settings.write_text(
        '[plugins]\ndisabled = ["acme-disabled"]\n\n'
        # a disabled plugin's section is not an error, even though nobody validates it
        "[acme_disabled]\nanything = 1\n"
    )
    kernel = load(path=settings)
    records = ours(kernel.records)
    assert records[("acme-disabled", "acme-disabled")].state == "disabled"
    assert records[("acme-disabled", "acme-disabled")].describe_state() == "disabled"
    assert records[("acme-observer", "acme-observer")].state == "active"
    assert not imported("ackt_disabled")
    assert imported("ackt_observer")


@pytest.mark.parametrize(
    "env",
    [
        {"AGENTCORE_DISABLE_PLUGINS": "jsonl-traces, acme-disabled"},
        {"AGENTCORE_PLUGINS__DISABLED": '["acme-disabled"]'},
    ],
    ids=["AGENTCORE_DISABLE_PLUGINS", "AGENTCORE_PLUGINS__DISABLED"],
)
def test_disabled_by_environment_is_not_imported(use_dists, env, load):
    use_dists("acme-observer", "acme-disabled")
    kernel = load(env)
    assert ours(kernel.records)[("acme-disabled", "acme-disabled")].state == "disabled"
    assert not imported("ackt_disabled")
    assert imported("ackt_observer")


def test_not_disabled_is_imported(use_dists, load):
    """The control for the two tests above: the same distribution loads when not disabled."""
    use_dists("acme-disabled")
    kernel = load()
    assert ours(kernel.records)[("acme-disabled", "acme-disabled")].state == "active"
    assert imported("ackt_disabled")


def test_a_bundled_default_alone_is_active(use_dists):
    use_dists("agentcore-waiting-trace")
    records = ours(discover())
    assert records[("waiting-trace", "agentcore-waiting-trace")].state == "active"
    assert imported("ackt_bundled_waiting")


@pytest.mark.parametrize(
    "order",
    [("agentcore-waiting-trace", "acme-waiting"), ("acme-waiting", "agentcore-waiting-trace")],
    ids=["default-first-on-path", "replacement-first-on-path"],
)
async def test_a_third_party_package_replaces_the_bundled_default(order, use_dists, scripted, load):
    use_dists(*reversed(order))  # each is put first on sys.path in turn
    scripted(reply("hi"))
    kernel = load()
    records = ours(kernel.records)
    default = records[("waiting-trace", "agentcore-waiting-trace")]
    replacement = records[("waiting-trace", "acme-waiting")]
    assert default.state == "replaced"
    assert default.describe_state() == "replaced by acme-waiting"
    assert (replacement.state, replacement.version) == ("active", "2.0.0")
    assert not imported("ackt_bundled_waiting")
    async with kernel:
        await collect(kernel.stream(request()))
    assert "inference:complete" in fixture_module("ackt_acme_waiting").SEEN


def test_two_third_party_claimants_are_an_error_naming_both(use_dists, load):
    use_dists("acme-claim-a", "acme-claim-b")
    records = ours(discover())
    for dist in ("acme-claim-a", "acme-claim-b"):
        record = records[("acme-contested", dist)]
        assert record.state == "failed"
        assert "acme-claim-a" in str(record.error)
        assert "acme-claim-b" in str(record.error)
    assert not imported("ackt_claim_a")
    assert not imported("ackt_claim_b")
    with pytest.raises(PluginLoadError) as caught:
        load()
    message = str(caught.value)
    assert "acme-contested" in message
    assert "acme-claim-a" in message
    assert "acme-claim-b" in message


def test_two_claimants_of_a_disabled_name_are_not_an_error(use_dists, load):
    use_dists("acme-claim-a", "acme-claim-b")
    kernel = load({"AGENTCORE_DISABLE_PLUGINS": "acme-contested"})
    contested = [r for r in kernel.records if r.name == "acme-contested"]
    assert {(r.distribution, r.state) for r in contested} == {
        ("acme-claim-a", "disabled"),
        ("acme-claim-b", "disabled"),
    }
    assert not imported("ackt_claim_a")


def test_a_plugin_that_fails_to_import_stops_a_strict_load(use_dists, load):
    use_dists("acme-observer", "acme-broken")
    with pytest.raises(PluginLoadError) as caught:
        load()
    message = str(caught.value)
    assert "acme-broken" in message
    assert "ModuleNotFoundError" in message
    assert "ackt_missing_dependency" in message
    assert [r.name for r in caught.value.failed] == ["acme-broken"]


async def test_a_plugin_that_fails_to_import_is_skipped_when_not_strict(use_dists, scripted, load):
    use_dists("acme-observer", "acme-broken")
    scripted(reply("hi"))
    kernel = load({"AGENTCORE_PLUGINS__STRICT": "false"})
    records = ours(kernel.records)
    broken = records[("acme-broken", "acme-broken")]
    assert broken.state == "failed"
    assert "ackt_missing_dependency" in broken.describe_state()
    assert records[("acme-observer", "acme-observer")].state == "active"
    async with kernel:
        await collect(kernel.stream(request()))
    assert ("trace", "inference:complete") in fixture_module("ackt_observer").SEEN


async def test_a_plugin_that_fails_to_start_stops_a_strict_start(use_dists, load):
    use_dists("acme-observer", "acme-badstart")
    kernel = load()
    with pytest.raises(PluginLoadError) as caught:
        await kernel.start()
    message = str(caught.value)
    assert "acme-badstart" in message
    assert "no licence for acme-badstart" in message
    # the plugins that did start are stopped again
    assert fixture_module("ackt_observer").SEEN[-1] == ("stop",)


async def test_a_plugin_that_fails_to_start_is_dropped_when_not_strict(
    use_dists, scripted, tmp_path, load
):
    use_dists("acme-observer", "acme-badstart")
    scripted(reply("hi"))
    settings = tmp_path / "s.toml"
    settings.write_text("[plugins]\nstrict = false\n")
    kernel = load(path=settings)
    async with kernel:
        record = ours(kernel.records)[("acme-badstart", "acme-badstart")]
        assert record.state == "failed"
        assert "no licence for acme-badstart" in record.describe_state()
        assert "acme-badstart" not in kernel.hooks.implementers("agentcore_start")
        await collect(kernel.stream(request()))
    assert ("trace", "inference:complete") in fixture_module("ackt_observer").SEEN
