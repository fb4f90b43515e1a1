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

from typing import TYPE_CHECKING, Any

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
    OutputBlock,
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
from agentcore.mcpl.chunks import ChunkStream
from agentcore.mcpl.grants import is_granted
from agentcore.mcpl.jsonrpc import ConnectionClosed, EncodedParams, RemoteError, encode_params
from agentcore.mcpl.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    SHUTDOWN_MESSAGE,
    Coalesce,
    CoalesceOutcome,
    CoalesceResult,
    McplError,
    McplRequest,
    PushAnswer,
    PushEvent,
)
from agentcore.model_info import ModelInfo, model_prefills
from agentcore.plugin_context import PluginContext, ProviderInfo, ServerHandle
from agentcore.plugins import SettingsSection
from agentcore.pricing import Pricer, spend_fields
from agentcore.providers.base import Provider
from agentcore.redaction import StreamRedactor, redact, redact_log, redact_value, register_secret
from agentcore.settings import (
    BulkSettings,
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

# The streaming driver and the wires on it bring aiohttp: loaded when a plugin first uses
# one (a provider kind's factory, at its first provider), not when a plugin imports this.
# So are the wire-side helpers and the bulk fetcher, which an idle host never runs (their
# modules hold ~0.4 MB), and §19's reading of bulk references (`agentcore.mcpl.bulk`).
if TYPE_CHECKING:
    from agentcore.mcpl.bulk import BulkReference
    from agentcore.mcpl.bulk import is_reference as is_bulk_reference
    from agentcore.mcpl.bulk import read_reference as read_bulk_reference
    from agentcore.mcpl.bulk import withheld as withheld_block
    from agentcore.mcpl.bulk_fetch import BulkFetcher, Fetched
    from agentcore.providers.anthropic import MEDIA_TYPES as ANTHROPIC_MEDIA_TYPES
    from agentcore.providers.anthropic import AnthropicTranslator
    from agentcore.providers.anthropic import request_body as anthropic_request_body
    from agentcore.providers.anthropic_xml import XmlTranslator
    from agentcore.providers.driver import HTTPProvider
    from agentcore.providers.errors import MID_STREAM, error_from_payload
    from agentcore.providers.sse import EventTuple
    from agentcore.providers.wire import (
        HttpCall,
        StreamDecoder,
        Translator,
        Wire,
        fast_loads,
        not_carried,
        read_usage,
        resolve_key,
    )
    from agentcore.providers.xml_transcript import Participants
    from agentcore.providers.xml_transcript import format_request as xml_request_body

_LAZY = {
    "ANTHROPIC_MEDIA_TYPES": ("agentcore.providers.anthropic", "MEDIA_TYPES"),
    "AnthropicTranslator": ("agentcore.providers.anthropic", "AnthropicTranslator"),
    "anthropic_request_body": ("agentcore.providers.anthropic", "request_body"),
    "XmlTranslator": ("agentcore.providers.anthropic_xml", "XmlTranslator"),
    "HTTPProvider": ("agentcore.providers.driver", "HTTPProvider"),
    "BulkFetcher": ("agentcore.mcpl.bulk_fetch", "BulkFetcher"),
    "BulkReference": ("agentcore.mcpl.bulk", "BulkReference"),
    "is_bulk_reference": ("agentcore.mcpl.bulk", "is_reference"),
    "read_bulk_reference": ("agentcore.mcpl.bulk", "read_reference"),
    "withheld_block": ("agentcore.mcpl.bulk", "withheld"),
    "Fetched": ("agentcore.mcpl.bulk_fetch", "Fetched"),
    "MID_STREAM": ("agentcore.providers.errors", "MID_STREAM"),
    "error_from_payload": ("agentcore.providers.errors", "error_from_payload"),
    "EventTuple": ("agentcore.providers.sse", "EventTuple"),
    "HttpCall": ("agentcore.providers.wire", "HttpCall"),
    "StreamDecoder": ("agentcore.providers.wire", "StreamDecoder"),
    "Translator": ("agentcore.providers.wire", "Translator"),
    "Wire": ("agentcore.providers.wire", "Wire"),
    "fast_loads": ("agentcore.providers.wire", "fast_loads"),
    "not_carried": ("agentcore.providers.wire", "not_carried"),
    "read_usage": ("agentcore.providers.wire", "read_usage"),
    "resolve_key": ("agentcore.providers.wire", "resolve_key"),
    "Participants": ("agentcore.providers.xml_transcript", "Participants"),
    "xml_request_body": ("agentcore.providers.xml_transcript", "format_request"),
}


def __getattr__(name: str) -> Any:
    """The driver-side names, the bulk fetcher and §19's reading (`_LAZY`), imported on
    first use."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # once: later reads do not come here
    return value


__all__ = [
    "ADMISSION_WAIT_TOO_LONG",
    "ANTHROPIC_MEDIA_TYPES",
    "HOLD",
    "HOLD_TRACE",
    "HTTP_SCHEMES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "MID_STREAM",
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
    "AnthropicTranslator",
    "Attempt",
    "AttemptEnd",
    "BlockStart",
    "BlockStop",
    "BulkFetcher",
    "BulkReference",
    "BulkSettings",
    "CachePoint",
    "ChunkStream",
    "Claim",
    "ClaimCall",
    "ClaimKind",
    "ClaimRefusal",
    "Coalesce",
    "CoalesceOutcome",
    "CoalesceResult",
    "Complete",
    "ConnectionClosed",
    "ContentBlock",
    "Decision",
    "EncodedParams",
    "EventTuple",
    "Failed",
    "Fetched",
    "FleetStore",
    "FleetUnavailable",
    "GiveUp",
    "HTTPProvider",
    "Hold",
    "HoldPayload",
    "HostTurn",
    "HttpCall",
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
    "OutputBlock",
    "Participants",
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
    "StreamDecoder",
    "StreamEvent",
    "StreamRedactor",
    "TextBlock",
    "ThinkingBlock",
    "Token",
    "Tool",
    "ToolResultBlock",
    "ToolUseBlock",
    "TraceEvent",
    "Translator",
    "TurnEnding",
    "Usage",
    "UsageUpdate",
    "Wait",
    "WaitReason",
    "WaitingPayload",
    "WebSocketUrl",
    "Wire",
    "XmlTranslator",
    "__version__",
    "aborted_message",
    "anthropic_request_body",
    "completion_problem",
    "encode_params",
    "error_from_payload",
    "failure_message",
    "fast_loads",
    "hookimpl",
    "is_bulk_reference",
    "is_granted",
    "model_prefills",
    "not_carried",
    "payload",
    "poll_s",
    "read_bulk_reference",
    "read_usage",
    "redact",
    "redact_log",
    "redact_value",
    "register_secret",
    "resolve_key",
    "result_object",
    "sampling_range",
    "shutting_down",
    "spend_fields",
    "unavailable_error",
    "unavailable_fields",
    "url_problem",
    "wait_for_change",
    "withheld_block",
    "xml_request_body",
]
