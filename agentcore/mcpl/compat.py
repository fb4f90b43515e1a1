"""Speaking to an MCPL server in the version it announces, and saying what was negotiated.

This host speaks MCPL 0.5. The servers that exist are mostly built on anima-research's
TypeScript core library (mcpl-core-ts) and announce ``version: "0.4"``; the TypeScript host
(agent-framework) talks to them in 0.4. So does this one, rule by rule, from SPEC's
changelog (0.3.0 and 0.4.0 against 0.5.0):

- ``featureSets/update`` is a **Notification** carrying ``enabled`` / ``disabled`` (0.3.0
  moved the initial configuration there). 0.4 has no degradation receipt: a 0.4 server
  answers the Request form with -32601 (mcpl-core-ts servers) or never. So the policy is in
  force when it is sent, and it is put in force just before, so that a request the server
  writes after reading it is never refused. 0.5's Request, its receipt and §6.7's "an
  expansion activates on the receipt" are for 0.5 servers.
- A request that exercises a capability its feature set's ``uses`` leaves out is refused
  only from 0.5 on (§6.4(2), declaration mismatch); for 0.4 it is served and warned about.
  The grant still decides (§5.4: security never depended on the declaration), and the
  -32003 / -32001 rules of §6.6 hold for both.
- ``featureSets`` as a JSON **array** of declarations each carrying its ``name`` (how
  mcpl-core-ts types it, and what heartbeat-mcpl and discord-mcpl send) is read as the
  §6.1 object keyed by those names, as agent-framework does, with a warning naming the form.

A version this host does not know (absent, 0.2, 0.6, not a string) is spoken to as 0.5,
with a warning. What was negotiated is one `Negotiation`: logged when the server is up and
carried by its ``mcpl:server_state`` trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentcore.dist_info import installed_version
from agentcore.mcpl.protocol import CAPABILITY_DENIED, McplError

CURRENT = "0.5"
MCPL_VERSION = CURRENT
LEGACY = frozenset({"0.3", "0.4"})
"""Versions whose ``featureSets/update`` is a Notification without a receipt."""

OFF_STATES = frozenset({"absent", "refused", "unacknowledged"})
"""Connection states in which MCPL is off for the session (tools etc. still work)."""
STATE_REASONS = {
    "pending": "the initial featureSets/update exchange has not completed",
    "refused": "the server refused the host's policy, so MCPL is disabled",
    "absent": "the server does not speak MCPL",
    "unacknowledged": "the server did not take the host's initial policy, so MCPL is off",
}
"""Why an MCPL method is refused in each state but ready (-32002 `data.reason` below)."""
STATE_CODES = {
    "pending": "policy_pending",
    "refused": "policy_refused",
    "absent": "mcpl_absent",
    "unacknowledged": "policy_unacknowledged",
}


def denied(capability: str, why: str | None = None, **extra: Any) -> McplError:
    """-32002 for a capability (§6.6: `data.capability`), with why when it helps."""
    message = f"Capability denied: {capability}"
    if why:
        message += f" ({why})"
    return McplError(CAPABILITY_DENIED, message, {"capability": capability, **extra})


def refused_in(state: str, capability: str) -> McplError:
    """-32002 for an MCPL method while MCPL is not on; `data.reason` names the state."""
    return denied(capability, STATE_REASONS[state], reason=STATE_CODES[state])


def client_version() -> str:
    """agentcore's version, for `initialize`'s clientInfo (the installed distribution's)."""
    return installed_version("agentcore")


# What the connection layer itself supports, as §5.2 shapes it. The rest of what a host
# advertises comes from the plugins that provide each policy (`host_capabilities`).
HOST_MCPL_CAPABILITIES: dict[str, Any] = {
    "version": MCPL_VERSION,
    "featureSets": True,
}


def host_capabilities(contributed: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`HOST_MCPL_CAPABILITIES` merged with the capabilities plugins provide (objects merged
    member by member, §5.1's nesting; ``true`` wins over an object beneath it)."""
    merged = dict(HOST_MCPL_CAPABILITIES)
    for capabilities in contributed:
        _merge(merged, capabilities)
    return merged


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    for key, value in more.items():
        here = into.get(key)
        if isinstance(here, dict) and isinstance(value, Mapping):
            _merge(here, value)
        elif isinstance(value, Mapping) and here is not True:
            into[key] = {}
            _merge(into[key], value)
        elif here is None or value is True:
            into[key] = value


def _minor(version: object) -> str | None:
    """``"0.4"`` for "0.4" or "0.4.1"; None for anything that is not such a string."""
    if not isinstance(version, str):
        return None
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return f"{int(parts[0])}.{int(parts[1])}"


@dataclass(frozen=True, slots=True)
class Negotiation:
    """What the host and one server agreed on at ``initialize``."""

    announced: object = None
    """The server's ``experimental.mcpl.version``, as sent."""
    spoken: str = CURRENT
    """The MCPL version the host speaks to it: "0.5", or "0.4" for a 0.3/0.4 server."""
    feature_sets_form: str = "object"
    """How it declared its feature sets: object (§6.1), array (mcpl-core-ts), absent, or
    invalid (neither: nothing is declared)."""

    @property
    def policy_as_request(self) -> bool:
        """§5.3/§6.7 (0.5): the policy is a Request whose receipt activates it."""
        return self.spoken == CURRENT

    @property
    def refuses_undeclared_use(self) -> bool:
        """§6.4(2) (0.5): a use its feature set did not declare is refused."""
        return self.spoken == CURRENT

    def problem(self) -> str | None:
        """A warning for a version this host does not speak as announced."""
        if self.spoken != CURRENT:
            return None
        if _minor(self.announced) == CURRENT:
            return None
        return (
            f"announces MCPL {self.announced!r}, a version this host does not know; "
            f"spoken to as {CURRENT}"
        )

    def describe(self) -> str:
        """One line for the log: the versions, how the policy went, the declaration form."""
        policy = (
            "featureSets/update as a Request, in force on its receipt"
            if self.policy_as_request
            else f"featureSets/update as a Notification, in force when sent (MCPL {self.spoken})"
        )
        return (
            f"MCPL {self.announced!r} spoken as {self.spoken}; {policy}; "
            f"feature sets declared as {self.feature_sets_form}"
        )

    def to_fields(self) -> dict[str, Any]:
        """The ``mcpl:server_state`` trace's fields for it."""
        return {
            "mcplVersion": self.announced if isinstance(self.announced, str) else None,
            "spokenAs": self.spoken,
            "policyExchange": "request" if self.policy_as_request else "notification",
            "featureSetsForm": self.feature_sets_form,
        }


def negotiate(mcpl: Mapping[str, Any]) -> Negotiation:
    """The dialect for a server's ``experimental.mcpl`` as sent at ``initialize``."""
    announced = mcpl.get("version")
    spoken = "0.4" if _minor(announced) in LEGACY else CURRENT
    return Negotiation(announced, spoken, _form(mcpl))


def _form(mcpl: Mapping[str, Any]) -> str:
    if "featureSets" not in mcpl:
        return "absent"
    declared = mcpl["featureSets"]
    if isinstance(declared, Mapping):
        return "object"
    return "array" if isinstance(declared, list) else "invalid"


def keyed_feature_sets(declared: object) -> tuple[object, str | None]:
    """The §6.1 object for a ``featureSets`` member, and a warning when it was not one.

    An object is returned as it is. An array (mcpl-core-ts's form) is keyed by each
    entry's ``name``; an entry without a string name cannot be addressed and is left out,
    and a name declared twice is kept as an invalid declaration (disabled, `invalid_uses`):
    which of the two was meant is not for the host to guess. Anything else stays as it is
    (feature-set derivation declares nothing for it).
    """
    if not isinstance(declared, list):
        return declared, None
    keyed: dict[str, object] = {}
    problems: list[str] = []
    for i, entry in enumerate(declared):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name:
            problems.append(f"; entry {i} has no name and is left out")
        elif name in keyed:
            problems.append(f"; {name!r} is declared twice and is disabled")
            keyed[name] = None
        else:
            keyed[name] = {k: v for k, v in entry.items() if k != "name"}
    return keyed, (
        "declares featureSets as a JSON array (mcpl-core-ts's form; SPEC §6.1 says an "
        "object keyed by name): read as keyed by each entry's name" + "".join(problems)
    )


def legacy_policy_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A 0.5 policy's ``featureSets/update`` params in 0.4's shape: enabled and disabled
    only (0.5 forbids grant fields in a Notification, §6.7)."""
    return {"enabled": list(params["enabled"]), "disabled": list(params["disabled"])}


__all__ = [
    "CURRENT",
    "HOST_MCPL_CAPABILITIES",
    "LEGACY",
    "MCPL_VERSION",
    "OFF_STATES",
    "STATE_CODES",
    "STATE_REASONS",
    "Negotiation",
    "client_version",
    "denied",
    "host_capabilities",
    "keyed_feature_sets",
    "legacy_policy_params",
    "negotiate",
    "refused_in",
]
