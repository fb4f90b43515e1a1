"""The one module a plugin imports: everything agentcore offers a plugin, in one place.

A plugin's code imports from here only (and its tests from `agentcore.testing` as well);
nothing else of agentcore is public, and the names below keep their meaning from
release to release (docs/plugins.md says what each is for)::

    from agentcore.api import PluginContext, Section, SettingsSection, hookimpl

    class MySettings(Section):
        limit: int = 3

    class MyPlugin:
        @hookimpl
        def agentcore_settings(self) -> SettingsSection:
            return SettingsSection("my_plugin", MySettings)

        @hookimpl
        def agentcore_start(self, context: PluginContext[MySettings]) -> None:
            self.limit = context.settings.limit     # a MySettings: no isinstance check
"""

from __future__ import annotations

from agentcore import __version__
from agentcore.admission import ADMISSION_WAIT_TOO_LONG
from agentcore.fleet import (
    UNAVAILABLE_TRACE,
    FleetStore,
    FleetUnavailable,
    Hold,
    MemoryFleetStore,
    poll_s,
    unavailable_error,
    unavailable_fields,
    wait_for_change,
)
from agentcore.fleet.claims import (
    HOLD,
    SLOTS,
    WINDOW,
    AttemptEnd,
    Claim,
    ClaimCall,
    ClaimKind,
    ClaimRefusal,
    Scalar,
)
from agentcore.inference import (
    NO_RESULT_MESSAGE,
    NO_TERMINAL,
    PROGRESS_TIMEOUT,
    REQUEST_TIMEOUT,
    SHUTTING_DOWN,
    Aborted,
    BlockStart,
    BlockStop,
    CachePoint,
    Complete,
    ContentBlock,
    Failed,
    HostTurn,
    InferenceError,
    MediaBlock,
    Message,
    PluginError,
    Request,
    Response,
    Retrying,
    StopInfo,
    StopReason,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    Token,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageUpdate,
)
from agentcore.inference.calls import Attempt, Decision, GiveUp, Inference, Retry, Wait, WaitReason
from agentcore.inference.errors import shutting_down
from agentcore.inference.outcome import (
    aborted_message,
    completion_problem,
    failure_message,
    result_object,
)
from agentcore.inference.sampling import sampling_range
from agentcore.inference.turns import (
    POSITIONS,
    InjectedBlock,
    Injection,
    Phase,
    Position,
    TurnEnding,
)
from agentcore.markers import hookimpl
from agentcore.mcpl.grants import is_granted
from agentcore.mcpl.jsonrpc import ConnectionClosed, EncodedParams, RemoteError, encode_params
from agentcore.mcpl.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    SHUTDOWN_MESSAGE,
    McplError,
    McplRequest,
    PushAnswer,
    PushEvent,
)
from agentcore.model_info import ModelInfo
from agentcore.plugins import PluginContext, ProviderInfo, ServerHandle, SettingsSection
from agentcore.pricing import Pricer, spend_fields
from agentcore.providers.base import Provider
from agentcore.redaction import StreamRedactor, redact, redact_log, redact_value, register_secret
from agentcore.settings import (
    HttpUrl,
    InferenceSettings,
    ModelReference,
    ProviderName,
    ProviderSettings,
    Section,
    SettingsError,
)
from agentcore.tracing import (
    HOLD_TRACE,
    RELEASE_TRACE,
    SLOTS_TRACE,
    WAITING_TRACE,
    HoldPayload,
    ReleasePayload,
    SlotsPayload,
    TraceEvent,
    WaitingPayload,
    payload,
)
from agentcore.urls import HTTP_SCHEMES, RedisUrl, WebSocketUrl, url_problem

__all__ = [
    "ADMISSION_WAIT_TOO_LONG",
    "HOLD",
    "HOLD_TRACE",
    "HTTP_SCHEMES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "NO_RESULT_MESSAGE",
    "NO_TERMINAL",
    "POSITIONS",
    "PROGRESS_TIMEOUT",
    "RELEASE_TRACE",
    "REQUEST_TIMEOUT",
    "SHUTDOWN_MESSAGE",
    "SHUTTING_DOWN",
    "SLOTS",
    "SLOTS_TRACE",
    "UNAVAILABLE_TRACE",
    "WAITING_TRACE",
    "WINDOW",
    "Aborted",
    "Attempt",
    "AttemptEnd",
    "BlockStart",
    "BlockStop",
    "CachePoint",
    "Claim",
    "ClaimCall",
    "ClaimKind",
    "ClaimRefusal",
    "Complete",
    "ConnectionClosed",
    "ContentBlock",
    "Decision",
    "EncodedParams",
    "Failed",
    "FleetStore",
    "FleetUnavailable",
    "GiveUp",
    "Hold",
    "HoldPayload",
    "HostTurn",
    "HttpUrl",
    "Inference",
    "InferenceError",
    "InferenceSettings",
    "InjectedBlock",
    "Injection",
    "McplError",
    "McplRequest",
    "MediaBlock",
    "MemoryFleetStore",
    "Message",
    "ModelInfo",
    "ModelReference",
    "Phase",
    "PluginContext",
    "PluginError",
    "Position",
    "Pricer",
    "Provider",
    "ProviderInfo",
    "ProviderName",
    "ProviderSettings",
    "PushAnswer",
    "PushEvent",
    "RedisUrl",
    "ReleasePayload",
    "RemoteError",
    "Request",
    "Response",
    "Retry",
    "Retrying",
    "Scalar",
    "Section",
    "ServerHandle",
    "SettingsError",
    "SettingsSection",
    "SlotsPayload",
    "StopInfo",
    "StopReason",
    "StreamEvent",
    "StreamRedactor",
    "TextBlock",
    "ThinkingBlock",
    "Token",
    "Tool",
    "ToolResultBlock",
    "ToolUseBlock",
    "TraceEvent",
    "TurnEnding",
    "Usage",
    "UsageUpdate",
    "Wait",
    "WaitReason",
    "WaitingPayload",
    "WebSocketUrl",
    "__version__",
    "aborted_message",
    "completion_problem",
    "encode_params",
    "failure_message",
    "hookimpl",
    "is_granted",
    "payload",
    "poll_s",
    "redact",
    "redact_log",
    "redact_value",
    "register_secret",
    "result_object",
    "sampling_range",
    "shutting_down",
    "spend_fields",
    "unavailable_error",
    "unavailable_fields",
    "url_problem",
    "wait_for_change",
]
