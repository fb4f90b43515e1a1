"""Typed inference errors: one exception type whose `kind` policies decide on.

A provider adapter turns every failure (HTTP status, error frame, broken
connection, bad body) into an `InferenceError`; the kernel turns timeouts and
missing terminals into one too. Retry and hold policies read `kind`,
`retryable` and `retry_after_s`; they never parse a provider's wire format.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from agentcore.redaction import redact

ErrorKind: TypeAlias = Literal[
    "rate_limit",
    "overloaded",
    "server",
    "network",
    "timeout",
    "auth",
    "invalid_request",
    "context_length",
    "quota",
    "cancelled",
    "unknown",
]

RETRYABLE_KINDS: frozenset[str] = frozenset(
    {"rate_limit", "overloaded", "server", "network", "timeout"}
)

# `code` values the kernel itself sets, so policies can tell these cases apart.
NO_TERMINAL = "no_terminal"
PROGRESS_TIMEOUT = "progress_timeout"
REQUEST_TIMEOUT = "request_timeout"
SHUTTING_DOWN = "shutting_down"

NO_RESULT_MESSAGE = "The inference stream ended without a result"
"""What a stream that ends with no terminal event fails with, whoever notices it."""


def unmapped_stop_message(token: str | None) -> str:
    """What an inference that ended with a provider stop token no adapter maps is refused
    with, by the adapter (``unknown_stop = "error"``) or by the completion rule."""
    return (
        f"The provider ended the inference with stop token {token!r}, "
        "which agentcore has no stop reason for"
    )


class InferenceError(Exception):
    """An attempt or an inference failed; `str(error)` is the message a user reads."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        retryable: bool | None = None,
        status: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
        provider: str | None = None,
        model: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        # Redacted at the source: a provider may echo the key in its error body.
        message = redact(message)
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s
        self.provider = provider
        self.model = model
        self.data = data
        """What a policy says of the failure in fields (a budget's scope, spend, limit): the
        MCPL router sends it as the -32603 error's ``data``."""

    def __repr__(self) -> str:
        return (
            f"InferenceError(kind={self.kind!r}, message={self.message!r}, "
            f"status={self.status!r}, code={self.code!r}, retry_after_s={self.retry_after_s!r})"
        )

    def describe(self) -> str:
        """One line for traces and stderr: the kind, the status and the message."""
        status = f" {self.status}" if self.status is not None else ""
        return f"{self.kind}{status}: {self.message}"


def request_timeout(seconds: float) -> InferenceError:
    return InferenceError(
        "timeout",
        f"The attempt took longer than {seconds:g} s ([inference] request_timeout_s)",
        code=REQUEST_TIMEOUT,
    )


def shutting_down() -> InferenceError:
    return InferenceError(
        "cancelled", "The host is shutting down", retryable=False, code=SHUTTING_DOWN
    )


def cancelled() -> InferenceError:
    return InferenceError("cancelled", "The inference was cancelled", retryable=False)


class PluginError(Exception):
    """A plugin failed to import, to start, or raised inside a decision hook."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin!r}: {message}")
        self.plugin = plugin
        self.reason = message
        """What failed, without the plugin's name (a plugin's record names it already)."""
