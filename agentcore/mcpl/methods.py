"""Which MCPL methods cross a session, each way, and the capability each needs.

Tables only: the gate (`agentcore.mcpl.gate`) applies them.
"""

from __future__ import annotations

MCP_PROTOCOL_VERSION = "2025-06-18"
"""The MCP protocol version the host's `initialize` names (MCPL extends MCP, §3.1)."""

# Server→host methods and the capability each needs (§9, §11, §12, §14.1).
INBOUND_CAPABILITY: dict[str, str] = {
    "inference/request": "inferenceRequest",
    "model/info": "modelInfo",
    "push/event": "pushEvents",
    "channels/register": "channels.register",
    "channels/changed": "channels.register",
    "channels/list": "channels.register",
    "channels/incoming": "channels.incoming",
    "channels/acknowledge": "channels.acknowledge",
    "channels/typing": "channels.typing",
}
# Server-initiated methods that must name their feature set (§6.5).
FEATURE_SET_METHODS = frozenset({"inference/request", "push/event"})
# The one server-initiated method the server may cancel (it costs the host tokens).
CANCELLABLE_METHOD = "inference/request"

# Host→server methods and the capabilities of which at least one must be
# granted before the host may send them (§5.4: "MUST NOT deliver").
OUTBOUND_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "context/beforeInference": (
        "contextHooks.beforeInference.observe",
        "contextHooks.beforeInference.inject.system",
        "contextHooks.beforeInference.inject.beforeUser",
        "contextHooks.beforeInference.inject.afterUser",
    ),
    "inference/lifecycle": ("inferenceLifecycle",),
    "push/render": ("pushEvents",),  # RFC-006 §10: the notice's own grant
    "inference/chunk": ("inferenceRequest.streaming",),
    "channels/list": ("channels.register",),
    "channels/open": ("channels.lifecycle",),
    "channels/close": ("channels.lifecycle",),
    "channels/publish": ("channels.publish",),
    "channels/outgoing/chunk": ("channels.streaming",),
    "channels/outgoing/complete": ("channels.streaming",),
}

__all__ = [
    "CANCELLABLE_METHOD",
    "FEATURE_SET_METHODS",
    "INBOUND_CAPABILITY",
    "MCP_PROTOCOL_VERSION",
    "OUTBOUND_CAPABILITIES",
]
