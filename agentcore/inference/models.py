"""The normalized request and response: what policies and the MCPL router see.

Plain slotted dataclasses, not pydantic models: a streamed inference creates one
event per token, and the hot path has no room for validation nobody asked for.
Providers translate their wire format to and from these types and nothing else
leaks out of `agentcore.providers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["user", "assistant"]
ROLES: frozenset[str] = frozenset({"user", "assistant"})

StopReason: TypeAlias = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "abort"
]
STOP_REASONS: frozenset[str] = frozenset(
    {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "abort"}
)

BlockType: TypeAlias = Literal["text", "thinking", "tool_use"]


@dataclass(slots=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(slots=True)
class ThinkingBlock:
    thinking: str
    signature: str | None = None
    type: Literal["thinking"] = "thinking"
    redacted: str | None = None
    """Reasoning a safety system encrypted (Anthropic's ``redacted_thinking`` block): its
    opaque ``data``, with no text. Sent back as it came, as the signed kind is."""


@dataclass(slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    type: Literal["tool_use"] = "tool_use"
    signature: str | None = field(default=None, compare=False)
    """The provider's opaque signature of the call (Gemini's ``thoughtSignature``), sent
    back with it when the conversation goes on; not part of the call's equality."""


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"


MediaKind: TypeAlias = Literal["image", "audio", "document"]

_MIME_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/x-mp3": "audio/mpeg",
    "audio/mpeg3": "audio/mpeg",
    "audio/x-aiff": "audio/aiff",
    "audio/x-flac": "audio/flac",
}


def canonical_mime(mime_type: str) -> str:
    """`mime_type` lower-cased, without parameters, its common aliases folded
    (``audio/mp3`` is ``audio/mpeg``, ``image/jpg`` is ``image/jpeg``)."""
    bare = mime_type.split(";", 1)[0].strip().lower()
    return _MIME_ALIASES.get(bare, bare)


@dataclass(slots=True)
class MediaBlock:
    """Inline media in a user message: an image, audio, or a document (PDF), as base64
    `data` of `mime_type` (kept canonical, `canonical_mime`). A wire carries the types
    its provider declares in `media_types`; it refuses the rest with a clear error."""

    mime_type: str
    data: str
    name: str | None = None
    """A file name, for the wires that want one with a document (OpenAI's file parts)."""
    type: Literal["media"] = "media"

    def __post_init__(self) -> None:
        self.mime_type = canonical_mime(self.mime_type)

    @property
    def kind(self) -> MediaKind:
        if self.mime_type.startswith("image/"):
            return "image"
        if self.mime_type.startswith("audio/"):
            return "audio"
        return "document"

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.data}"


ContentBlock: TypeAlias = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | MediaBlock
OutputBlock: TypeAlias = TextBlock | ThinkingBlock | ToolUseBlock


@dataclass(slots=True)
class Message:
    role: Role
    content: list[ContentBlock]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", [TextBlock(text)])

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", [TextBlock(text)])

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


@dataclass(slots=True)
class Tool:
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


@dataclass(frozen=True, slots=True)
class HostTurn:
    """Marks a request as one of the host's own turns."""

    conversation_id: str
    turn_index: int
    """0 for the conversation's first turn."""
    user_message: str | None = None
    """The user's input of this turn, as servers allowed to observe it see it; None for a
    continued generation. The request's last user message is where it is, and where
    ``beforeUser`` / ``afterUser`` context goes."""

    def __post_init__(self) -> None:
        if not self.conversation_id:
            raise ValueError("a host turn needs a conversation id")
        if isinstance(self.turn_index, bool) or self.turn_index < 0:
            raise ValueError(f"turn index must be 0 or more, not {self.turn_index!r}")


CacheTtl: TypeAlias = Literal["5m", "1h"]
CACHE_TTLS: tuple[CacheTtl, ...] = ("5m", "1h")


@dataclass(frozen=True, slots=True)
class CachePoint:
    """A prompt-cache breakpoint: the provider may cache the prompt up to and including `at`.

    `at` is ``"tools"``, ``"system"`` or the index of a message in `Request.messages`
    (the breakpoint goes on that message's last block). Wires that need explicit
    breakpoints (Anthropic, XML tool mode) send them; OpenAI, Responses and Gemini cache
    on their own and ignore them.
    """

    at: Literal["tools", "system"] | int
    ttl: CacheTtl = "5m"


@dataclass(slots=True)
class Request:
    """One inference as the host asks for it.

    `model` is a model reference, ``"NAME:MODEL"``: NAME picks `[providers.NAME]`
    from the settings, MODEL is passed to that provider as is.
    `metadata` travels with the inference into traces and hooks (e.g. the MCPL
    server that asked for it); providers never send it.
    """

    model: str
    messages: list[Message]
    system: str | None = None
    max_tokens: int = 1024
    temperature: float | None = None
    stop_sequences: list[str] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    cache: list[CachePoint] = field(default_factory=list)
    """Prompt-cache breakpoints the host marks (`CachePoint`); ``[providers.NAME]
    prompt_cache = "auto"`` adds the system prompt's and the last user turn's."""
    turn: HostTurn | None = None
    """Set when this is one of the host's own turns (`agentcore.inference.turns`): MCPL
    servers granted context hooks and lifecycle take part. None for every other
    inference, an MCPL server's `inference/request` included."""


@dataclass(slots=True)
class Usage:
    """Tokens one inference used, as the provider reported them (None: not reported).

    `input_tokens` is the whole input, on every wire: the cache's reads and writes are
    part of it (Anthropic's own ``input_tokens`` leaves them out; its translator adds them
    back). The uncached part is ``input_tokens - cache_read_tokens - cache_write_tokens``.
    """

    input_tokens: int = 0
    """Every input token, cached or not."""
    output_tokens: int = 0
    cache_read_tokens: int | None = None
    """Of the input, the tokens served from the provider's prompt cache."""
    cache_write_tokens: int | None = None
    """Of the input, the tokens written to the provider's prompt cache."""

    @property
    def cache_creation_tokens(self) -> int | None:
        """Deprecated name of `cache_write_tokens` (Anthropic's word for it)."""
        return self.cache_write_tokens


@dataclass(slots=True)
class StopInfo:
    """Why the model stopped: the normalized reason, the provider's own token, the sequence.

    `mapped` is False when no adapter knows the provider's token (`raw`): `reason`
    is then only the ``[inference] unknown_stop = "end_turn"`` stand-in, and the
    completion rule (`agentcore.inference.outcome`) refuses it as a result.
    """

    reason: StopReason
    raw: str | None = None
    sequence: str | None = None
    mapped: bool = True
    """The stop sequence that triggered (XML tool mode: or the tool-call block's close
    that ended the reply)."""
    unclosed_tool_block: bool = False
    """XML tool mode: the output ended inside a ``<function_calls>`` block."""
    tool_markup: bool = False
    """XML tool mode: the output held tool-call markup (a block, or a stop at its close)."""


@dataclass(slots=True)
class Response:
    content: list[OutputBlock]
    stop: StopInfo
    usage: Usage
    model_requested: str
    model_served: str
    provider: str = ""
    cost_usd: float | None = None
    """What this reply cost in USD, set by the kernel when it completes (`agentcore.pricing`);
    None: no price is known for the model (or it was not priced)."""

    @property
    def text(self) -> str:
        """The visible text: the text blocks joined, thinking and tool calls left out."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]
