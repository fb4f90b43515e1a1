"""Live policy changes (MCPL SPEC §6.7), end to end over stdio and WebSocket: the settings
file is edited and the host re-reads it (`McplHost.reload`, what SIGHUP runs in
`agentcore serve`; `test_serve_sighup.py` sends the real signal).

The orderings are the point. A narrowing is in force before the `featureSets/update`
Request reaches the server, so a request the server sends while its receipt is still
outstanding is already refused; a widening is refused until the server's receipt, allowed
after it, and never allowed without one (an error answer, or a refusal).
"""

from __future__ import annotations

import asyncio
from typing import Any

from e2e_rig import RigFactory
from e2e_support import (
    FULL_GRANT,
    MANIFEST,
    hold_policy_updates,
    rewrite_settings,
    routed_model_info,
    until,
)

from agentcore.testing import Scenario

USER = [{"role": "user", "content": "Hello?"}]
DENIED_MODEL_INFO = {
    "code": -32002,
    "message": "Capability denied: modelInfo",
    "data": {"capability": "modelInfo"},
}


def set_server(name: str, **values: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["mcpl"]["servers"][name].update(values)

    return change


def updates(session: Any) -> list[dict[str, Any]]:
    return session.requests_of("featureSets/update")


def policy_changes(r: Any) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in e.items() if k != "timestamp"} for e in r.traces.of("mcpl:policy_change")
    ]


async def test_a_narrowed_grant_is_refused_before_the_servers_receipt(rig: RigFactory) -> None:
    r = await rig()
    assert routed_model_info(await r.server.call("model/info", {}))
    release = hold_policy_updates(r.server)
    rewrite_settings(r.settings_path, set_server("srv", grant=["inferenceRequest"]))
    reload = asyncio.ensure_future(r.host.reload())
    await until(lambda: len(updates(r.server)) == 2)
    # The Request is out and its receipt held: the narrowing is already in force.
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    assert updates(r.server)[1]["effectiveCapabilities"] == ["inferenceRequest"]
    assert "modelInfo" in updates(r.server)[1]["deniedCapabilities"]
    release.set()
    assert await reload is True
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    assert policy_changes(r) == [
        {
            "type": "mcpl:policy_change",
            "serverId": "srv",
            "cause": "settings",
            "added": [],
            "removed": ["inferenceRequest.streaming", "modelInfo"],
            "featureSetsEnabled": [],
            # Every set that uses streaming, which went.
            "featureSetsDisabled": sorted(
                name
                for name, fs in MANIFEST["featureSets"].items()
                if "inferenceRequest.streaming" in fs["uses"]
            ),
            "receipt": "pending",
        }
    ]


async def test_a_widened_grant_is_allowed_only_after_the_servers_receipt(rig: RigFactory) -> None:
    r = await rig(grants={"srv": ["inferenceRequest", "inferenceRequest.streaming"]})
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    release = hold_policy_updates(r.server)
    rewrite_settings(r.settings_path, set_server("srv", grant=FULL_GRANT))
    reload = asyncio.ensure_future(r.host.reload())
    await until(lambda: len(updates(r.server)) == 2)
    assert "modelInfo" in updates(r.server)[1]["effectiveCapabilities"]
    # Told, not yet acknowledged: still refused.
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    release.set()
    assert await reload is True
    assert routed_model_info(await r.server.call("model/info", {}))
    assert policy_changes(r) == [
        {
            "type": "mcpl:policy_change",
            "serverId": "srv",
            "cause": "settings",
            "added": ["modelInfo"],
            "removed": [],
            "featureSetsEnabled": [],
            "featureSetsDisabled": [],
            "receipt": "accepted",
        }
    ]


async def test_a_widening_without_a_receipt_never_activates(rig: RigFactory) -> None:
    r = await rig(grants={"srv": ["inferenceRequest", "inferenceRequest.streaming"]})
    r.server.script.receipt_error = {"code": -32603, "message": "not now"}
    rewrite_settings(r.settings_path, set_server("srv", grant=FULL_GRANT))
    assert await r.host.reload() is True
    assert len(updates(r.server)) == 2
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    [change] = policy_changes(r)
    assert (change["added"], change["receipt"], change["withheld"]) == (
        [],
        "unanswered",
        ["modelInfo"],
    )
    # MCPL itself stays on with the policy that was in force.
    r.provider.script(Scenario.text("Still on."), provider="a")
    plain = {"featureSet": "fs.plain", "messages": USER}
    assert (await r.server.call("inference/request", plain)).result["content"] == "Still on."


async def test_a_refusal_is_logged_with_its_fallback_and_widens_nothing(
    rig: RigFactory, log_lines: list[str]
) -> None:
    r = await rig(grants={"srv": ["inferenceRequest", "inferenceRequest.streaming"]})
    r.server.script.receipt = {
        "accepted": False,
        "fallback": "mcp-only",
        "missingCapabilities": ["contextHooks.beforeInference.inject.system"],
        "reason": "I want more",
    }
    rewrite_settings(r.settings_path, set_server("srv", grant=FULL_GRANT))
    assert await r.host.reload() is True
    assert (await r.server.call("model/info", {})).error["data"] == {
        "capability": "modelInfo",
        "reason": "policy_refused",
    }
    plain = {"featureSet": "fs.plain", "messages": USER}
    refused = await r.server.call("inference/request", plain)
    assert refused.error["data"]["reason"] == "policy_refused"
    assert any("refused the policy (fallback 'mcp-only'" in line for line in log_lines)
    assert r.host.connections["srv"].grant == frozenset()
    [change] = policy_changes(r)
    assert change["receipt"] == "refused"
    assert change["added"] == []
    assert change["removed"] == ["inferenceRequest", "inferenceRequest.streaming"]


async def test_a_refused_policy_is_offered_again_by_a_later_reload(rig: RigFactory) -> None:
    """§6.7: a refusal goes back to a human; the next reload (a SIGHUP) is their new
    decision, and the server may accept it: MCPL comes on in the same session."""
    r = await rig(grants={"srv": ["inferenceRequest", "inferenceRequest.streaming"]})
    accepting = r.server.script.receipt
    r.server.script.receipt = {"accepted": False, "fallback": "mcp-only", "reason": "no"}
    rewrite_settings(r.settings_path, set_server("srv", grant=FULL_GRANT))
    assert await r.host.reload() is True
    plain = {"featureSet": "fs.plain", "messages": USER}
    refused = await r.server.call("inference/request", plain)
    assert refused.error["data"]["reason"] == "policy_refused"

    # A narrower policy, which the server accepts: offered, and in force after the receipt.
    r.server.script.receipt = accepting
    r.provider.script(Scenario.text("Back on."))
    rewrite_settings(r.settings_path, set_server("srv", grant=["inferenceRequest"]))
    assert await r.host.reload() is True
    assert updates(r.server)[-1]["effectiveCapabilities"] == ["inferenceRequest"]
    assert r.host.connections["srv"].state == "ready"
    assert (await r.server.call("inference/request", plain)).result["content"] == "Back on."
    assert (await r.server.call("model/info", {})).error == DENIED_MODEL_INFO
    assert [(c["receipt"], c["added"]) for c in policy_changes(r)] == [
        ("refused", []),
        ("accepted", ["inferenceRequest"]),
    ]


async def test_a_feature_set_enabled_live_waits_for_the_receipt(rig: RigFactory) -> None:
    r = await rig(server_options={"srv": {"disabled_feature_sets": ["fs.off"]}})
    request = {"featureSet": "fs.off", "messages": USER}
    disabled = await r.server.call("inference/request", request)
    assert disabled.error["data"] == {"featureSet": "fs.off", "reason": "disabled"}
    release = hold_policy_updates(r.server)
    rewrite_settings(r.settings_path, set_server("srv", disabled_feature_sets=[]))
    reload = asyncio.ensure_future(r.host.reload())
    await until(lambda: len(updates(r.server)) == 2)
    assert "fs.off" in updates(r.server)[1]["enabled"]
    pending = await r.server.call("inference/request", request)
    assert pending.error["code"] == -32001
    assert pending.error["data"] == {"featureSet": "fs.off", "reason": "pending_receipt"}
    release.set()
    await reload
    r.provider.script(Scenario.text("Now on."), provider="a")
    assert (await r.server.call("inference/request", request)).result["content"] == "Now on."
    assert r.provider.calls and len(r.provider.calls) == 1


async def test_a_feature_set_disabled_live_is_refused_at_once(rig: RigFactory) -> None:
    r = await rig()
    release = hold_policy_updates(r.server)
    rewrite_settings(r.settings_path, set_server("srv", disabled_feature_sets=["fs.plain"]))
    reload = asyncio.ensure_future(r.host.reload())
    await until(lambda: len(updates(r.server)) == 2)
    plain = {"featureSet": "fs.plain", "messages": USER}
    refused = await r.server.call("inference/request", plain)
    assert refused.error["data"] == {"featureSet": "fs.plain", "reason": "disabled"}
    release.set()
    await reload
    assert r.provider.calls == []


async def test_a_file_that_no_longer_validates_changes_nothing(
    rig: RigFactory, log_lines: list[str]
) -> None:
    r = await rig()
    text = r.settings_path.read_text()
    r.settings_path.write_text(text.replace("[mcpl.servers.srv]", "[mcpl.servers.srv]\ngrnat = 1"))
    assert await r.host.reload() is False
    assert any("was not applied, nothing changed" in line and "grnat" in line for line in log_lines)
    assert len(updates(r.server)) == 1
    assert routed_model_info(await r.server.call("model/info", {}))
    r.settings_path.write_text("this is [not toml")
    assert await r.host.reload() is False
    assert len(updates(r.server)) == 1
    assert policy_changes(r) == []


async def test_an_unchanged_file_sends_nothing(rig: RigFactory) -> None:
    r = await rig()
    assert await r.host.reload() is True
    assert len(updates(r.server)) == 1
    assert policy_changes(r) == []


async def test_servers_added_and_removed_in_the_file_are_started_and_closed(
    rig: RigFactory,
) -> None:
    r = await rig()
    first = r.server
    config = r.hub.config("two")
    r.hub.scripts["two"] = type(first.script)()

    def swap(data: dict[str, Any]) -> None:
        data["mcpl"]["servers"] = {"two": config}

    rewrite_settings(r.settings_path, swap)
    reload = asyncio.ensure_future(r.host.reload())
    second = await r.hub.next_session()
    r.sessions["two"] = second
    assert await reload is True
    await first.wait_closed()
    assert second.tag == "two"
    assert list(r.host.connections) == ["two"]
    assert routed_model_info(await second.call("model/info", {}))
