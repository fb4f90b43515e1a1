"""Manifest changes (MCPL SPEC §17), end to end over stdio and WebSocket.

The server changes its manifest and says `mcpl/manifestChanged`; the host fetches
`mcpl/manifest`, diffs it against what it holds (never trusting the revision), and applies
the consequences fail-closed (§17.5): what is gone is refused at once, before the
`featureSets/update` Request's receipt; what is new or changed waits for that receipt; a
capability newly advertised grants nothing the host's policy does not grant; an invalid
declaration is disabled while the rest still applies. One change receipt (§17.6) per
change, traced as `mcpl:manifest_change`. Notifications are rate-limited (§17.8).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from e2e_rig import Rig, RigFactory
from e2e_support import MANIFEST, ServerScript, ServerSession, hold_policy_updates, until

from agentcore.mcpl.digest import manifest_digest
from agentcore.testing import Scenario

USER = [{"role": "user", "content": "Hello?"}]


def infer(feature_set: str) -> dict[str, Any]:
    return {"featureSet": feature_set, "messages": USER}


async def announce(
    session: ServerSession,
    change: Callable[[dict[str, Any]], None],
    *,
    revision: str | None = None,
    domains: tuple[str, ...] = ("featureSets",),
) -> None:
    """The server changes its manifest and says so; its revision is the honest §17.2
    digest of the new manifest unless `revision` is given."""
    manifest = copy.deepcopy(session.script.manifest)
    change(manifest)
    manifest["revision"] = revision or manifest_digest(manifest)
    session.script.manifest = manifest
    notice = {"revision": manifest["revision"], "domains": list(domains)}
    await session.notify("mcpl/manifestChanged", notice)


def receipts(r: Rig) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in e.items() if k != "timestamp"}
        for e in r.traces.of("mcpl:manifest_change")
    ]


def updates(session: ServerSession) -> list[dict[str, Any]]:
    return session.requests_of("featureSets/update")


async def test_a_new_feature_set_is_enabled_only_after_the_receipt(rig: RigFactory) -> None:
    r = await rig()
    release = hold_policy_updates(r.server)

    def add(manifest: dict[str, Any]) -> None:
        manifest["featureSets"]["fs.new"] = {"description": "new", "uses": ["inferenceRequest"]}

    await announce(r.server, add)
    await until(lambda: len(updates(r.server)) == 2)
    assert len(r.server.requests_of("mcpl/manifest")) == 1
    assert "fs.new" in updates(r.server)[1]["enabled"]
    pending = await r.server.call("inference/request", infer("fs.new"))
    assert pending.error["data"] == {"featureSet": "fs.new", "reason": "pending_receipt"}
    release.set()
    await until(lambda: receipts(r))
    r.provider.script(Scenario.text("New and on."), provider="a")
    answer = await r.server.call("inference/request", infer("fs.new"))
    assert answer.result["content"] == "New and on."
    [receipt] = receipts(r)
    assert receipt["domains"] == ["featureSets"]
    assert receipt["policy"] == "accepted"
    assert receipt["revisionMatches"] is True
    assert receipt["impacts"] == []


async def test_a_removed_feature_set_is_refused_at_once(rig: RigFactory) -> None:
    r = await rig()
    release = hold_policy_updates(r.server)
    await announce(r.server, lambda m: m["featureSets"].pop("fs.plain"))
    await until(lambda: len(updates(r.server)) == 2)
    gone = await r.server.call("inference/request", infer("fs.plain"))
    assert gone.error == {
        "code": -32003,
        "message": "Unknown feature set",
        "data": {"featureSet": "fs.plain"},
    }
    release.set()
    await until(lambda: receipts(r))
    assert receipts(r)[0]["impacts"] == [
        {"impact": "feature-degraded", "disposition": "applied", "featureSet": "fs.plain"}
    ]
    assert r.provider.calls == []


async def test_a_changed_uses_revalidates_and_waits_for_the_receipt(rig: RigFactory) -> None:
    r = await rig()
    release = hold_policy_updates(r.server)

    def widen(manifest: dict[str, Any]) -> None:
        manifest["featureSets"]["fs.plain"]["uses"] = ["inferenceRequest", "modelInfo"]

    await announce(r.server, widen)
    await until(lambda: len(updates(r.server)) == 2)
    pending = await r.server.call("inference/request", infer("fs.plain"))
    assert pending.error["data"] == {"featureSet": "fs.plain", "reason": "pending_receipt"}
    release.set()
    await until(lambda: receipts(r))
    r.provider.script(Scenario.text("Revalidated."), provider="a")
    answer = await r.server.call("inference/request", infer("fs.plain"))
    assert answer.result["content"] == "Revalidated."


async def test_an_invalid_declaration_is_disabled_and_removals_still_apply(
    rig: RigFactory,
) -> None:
    r = await rig()
    release = hold_policy_updates(r.server)

    def break_and_narrow(manifest: dict[str, Any]) -> None:
        manifest["featureSets"]["fs.o"]["uses"] = ["inferenceRequest", "telepathy"]
        del manifest["modelInfo"]

    await announce(r.server, break_and_narrow)
    await until(lambda: len(updates(r.server)) == 2)
    # Before the receipt: the capability the server no longer advertises is revoked, and
    # the set whose declaration is invalid is off (§17.5.1).
    assert (await r.server.call("model/info", {})).error["code"] == -32002
    invalid = await r.server.call("inference/request", infer("fs.o"))
    assert invalid.error["data"] == {"featureSet": "fs.o", "reason": "invalid_uses"}
    assert "modelInfo" not in updates(r.server)[1]["effectiveCapabilities"]
    release.set()
    await until(lambda: receipts(r))
    [receipt] = receipts(r)
    assert receipt["domains"] == ["capabilities", "featureSets"]
    assert receipt["impacts"] == [
        {"impact": "capability-revoked", "disposition": "applied", "capability": "modelInfo"},
        {"impact": "feature-degraded", "disposition": "applied", "featureSet": "fs.o"},
    ]


async def test_a_newly_advertised_capability_grants_nothing_the_policy_does_not(
    rig: RigFactory,
) -> None:
    r = await rig()
    await announce(r.server, lambda m: m.update(pushEvents=True), domains=("capabilities",))
    await until(lambda: receipts(r))
    [receipt] = receipts(r)
    assert receipt["impacts"] == [
        {
            "impact": "capability-expansion-pending",
            "disposition": "decision-needed",
            "capability": "pushEvents",
        }
    ]
    assert "pushEvents" not in r.host.connections["srv"].grant
    assert "pushEvents" in updates(r.server)[-1]["deniedCapabilities"]


async def test_a_revision_that_lies_is_not_believed(rig: RigFactory, log_lines: list[str]) -> None:
    manifest = copy.deepcopy(MANIFEST)
    manifest["revision"] = manifest_digest(manifest)
    r = await rig({"srv": ServerScript(manifest=manifest)})
    unchanged = manifest["revision"]

    await announce(r.server, lambda m: m["featureSets"].pop("fs.plain"), revision=unchanged)
    await until(lambda: receipts(r))
    gone = await r.server.call("inference/request", infer("fs.plain"))
    assert gone.error["code"] == -32003
    [receipt] = receipts(r)
    assert receipt["revision"] == unchanged
    assert receipt["revisionMatches"] is False
    assert receipt["digest"] == manifest_digest(r.server.script.manifest)
    assert any("under an unchanged revision" in line for line in log_lines)
    assert any("is not the §17.2 digest of what it sent" in line for line in log_lines)


async def test_a_wrong_revision_at_initialize_is_logged(
    rig: RigFactory, log_lines: list[str]
) -> None:
    manifest = {**copy.deepcopy(MANIFEST), "revision": "sha256:" + "A" * 43}
    r = await rig({"srv": ServerScript(manifest=manifest)})
    assert r.host.connections["srv"].ready
    assert any(
        "stated revision sha256:AAAA" in line and "(initialize)" in line for line in log_lines
    )


async def test_a_fetch_that_is_not_a_manifest_leaves_the_manifest_standing(
    rig: RigFactory, log_lines: list[str]
) -> None:
    r = await rig()
    r.server.script.manifest_result = ["not", "a", "manifest"]
    await announce(r.server, lambda m: m["featureSets"].pop("fs.plain"))
    await until(lambda: any("not a manifest object" in line for line in log_lines))
    assert len(updates(r.server)) == 1
    r.provider.script(Scenario.text("Still here."), provider="a")
    answer = await r.server.call("inference/request", infer("fs.plain"))
    assert answer.result["content"] == "Still here."
    assert receipts(r) == []


async def test_a_flood_of_change_notifications_is_rate_limited(
    rig: RigFactory, log_lines: list[str]
) -> None:
    r = await rig()
    fetches = r.server.requests_of

    flood = 50
    for _ in range(flood):
        await r.server.notify(
            "mcpl/manifestChanged",
            {"revision": manifest_digest(MANIFEST), "domains": ["featureSets"]},
        )
    # A request behind the flood: once it is answered, the host has read every notice.
    await r.server.call("ping", {})
    await until(lambda: fetches("mcpl/manifest"))
    # One real change after the flood; its receipt ends the test.
    await announce(r.server, lambda m: m["featureSets"].pop("fs.plain"))
    await until(lambda: receipts(r))
    # Without coalescing each notice is a fetch (51); with it the flood shares one or two.
    assert 2 <= len(fetches("mcpl/manifest")) <= 3
    assert any("dropped, one fetch made" in line for line in log_lines)
    assert len(receipts(r)) == 1
