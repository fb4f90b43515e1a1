"""§17: one session's watch on its server's manifest.

`mcpl/manifestChanged` is a hint: it only marks the manifest stale. One task per
session fetches `mcpl/manifest` (at most once per `manifest_fetch_interval_s`,
coalescing every notice in between: §17.8), validates it as at `initialize`, diffs it
by domain against the manifest in force without trusting its `revision` (§17.1),
applies the consequences through the live-policy path (§17.5), and records one change
receipt (§17.6), logged and traced as `mcpl:manifest_change`. A fetch that fails or
returns something that is not an object leaves the previous manifest standing (§17.5.1).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger

from agentcore.mcpl.compat import OFF_STATES
from agentcore.mcpl.jsonrpc import ConnectionClosed, JsonRpcPeer, Params, RemoteError
from agentcore.mcpl.manifest import ChangeReceipt, changed_domains, check_revision, impacts
from agentcore.mcpl.policy import Policy

TraceEmitter = Callable[..., Awaitable[None]]
"""`emit(type, **fields)`: the kernel's `Kernel.emit`."""
PolicyChange = Callable[[str], Awaitable[str]]
"""Apply the policy the manifest now implies (cause "manifest"); returns the outcome."""


class ManifestWatch:
    """The manifest watch of one session (see the module docstring)."""

    def __init__(
        self,
        policy: Policy,
        peer: JsonRpcPeer,
        *,
        settled: asyncio.Event,
        interval_s: float,
        timeout_s: float,
        change: PolicyChange,
        emit: TraceEmitter | None,
    ) -> None:
        self._policy, self._peer, self._settled = policy, peer, settled
        self._interval_s, self._timeout_s = interval_s, timeout_s
        self._change, self._emit = change, emit
        self._name = policy.name
        self._stale = asyncio.Event()
        self._notices = 0  # mcpl/manifestChanged seen since the last fetch began
        self.fetcher: Awaitable[None] | None = None
        self.receipts: list[ChangeReceipt] = []

    def changed(self, params: Params) -> bool:
        """§17.3: a hint that the manifest changed. Only marks it stale: the fetch task
        decides, at the rate §17.8 allows. True when that task must be started (`run`)."""
        if self._policy.state in OFF_STATES:
            logger.debug("mcpl server {}: mcpl/manifestChanged ignored (MCPL off)", self._name)
            return False
        fields = params if isinstance(params, dict) else {}
        if not isinstance(fields.get("revision"), str) or not isinstance(
            fields.get("domains"), list
        ):
            logger.warning(
                "mcpl server {}: mcpl/manifestChanged without a revision and domains (§17.3); "
                "fetching the manifest all the same",
                self._name,
            )
        self._notices += 1
        self._stale.set()
        return self.fetcher is None

    async def run(self) -> None:
        """Fetch while stale, at most once per interval (§17.8); ends with the session."""
        last_fetch = -math.inf
        while True:
            await self._stale.wait()
            await self._settled.wait()
            # §17.8: the host bounds the fetch rate; notices in between share one fetch.
            delay = last_fetch + self._interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self._policy.ready or self._peer.closing:
                return
            self._stale.clear()
            notices, self._notices = self._notices, 0
            if notices > 1:
                logger.warning(
                    "mcpl server {}: {} mcpl/manifestChanged notifications within the fetch "
                    "limit (one per {} s); {} dropped, one fetch made (§17.8: a conformance "
                    "defect of the server)",
                    self._name,
                    notices,
                    self._interval_s,
                    notices - 1,
                )
            last_fetch = time.monotonic()
            await self._refresh()

    async def _fetch(self) -> dict[str, Any] | None:
        try:
            fetched = await self._peer.request("mcpl/manifest", {}, timeout=self._timeout_s)
        except (RemoteError, TimeoutError) as exc:
            logger.warning(
                "mcpl server {}: announced a manifest change, but mcpl/manifest failed ({}); "
                "the manifest in force stands",
                self._name,
                exc,
            )
            return None
        except ConnectionClosed:
            return None
        if self._peer.closing or not self._policy.ready:
            return None
        if not isinstance(fetched, dict):
            # §17.5.1: nothing learned, so nothing narrowed: the previous manifest stands.
            logger.warning(
                "mcpl server {}: mcpl/manifest returned {}, not a manifest object; "
                "the manifest in force stands",
                self._name,
                type(fetched).__name__,
            )
            return None
        return fetched

    async def _refresh(self) -> None:
        fetched = await self._fetch()
        if fetched is None:
            return
        policy = self._policy
        before = policy.current_mcpl()
        domains = changed_domains(before, fetched)
        revision = check_revision(fetched)
        if not domains:
            logger.info("mcpl server {}: fetched the manifest; nothing changed", self._name)
            return
        if revision.stated is not None and revision.stated == before.get("revision"):
            # §17.1: the revision is never proof that nothing changed; the diff decides.
            logger.warning(
                "mcpl server {}: the manifest changed ({}) under an unchanged revision {}",
                self._name,
                ", ".join(domains),
                revision.stated,
            )
        advertised_before, grant_before = policy.advertised, policy.grant
        sets_before = dict(policy.feature_sets)
        policy.adopt_manifest(fetched, "mcpl/manifest")
        outcome = await self._change("manifest")
        receipt = ChangeReceipt(
            server=self._name,
            domains=domains,
            revision=revision,
            impacts=impacts(
                advertised_before=advertised_before,
                advertised_after=policy.advertised,
                grant_before=grant_before,
                grant_after=policy.grant,
                sets_before=sets_before,
                sets_after=policy.feature_sets,
                ontology_changed="tagOntology" in domains,
            ),
            policy=outcome,
        )
        self.receipts.append(receipt)
        logger.info("mcpl server {}: manifest changed: {}", self._name, receipt.describe())
        if self._emit is not None:
            await self._emit("mcpl:manifest_change", **receipt.to_fields())


__all__ = ["ManifestWatch", "PolicyChange", "TraceEmitter"]
