"""The error names vendors put in a body, a header or a stream frame, and the error kind
each means: one table, read by `agentcore.providers.errors.classify`."""

from __future__ import annotations

from agentcore.inference import ErrorKind

TYPE_KINDS: dict[str, ErrorKind] = {
    # Anthropic's error.type values, as named in an `event: error` or an error body.
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limit",
    "api_error": "server",
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_request_error": "invalid_request",
    "not_found_error": "invalid_request",
    "request_too_large": "invalid_request",
    "timeout_error": "timeout",
    # OpenAI-family codes that arrive without a status (mid-stream).
    "server_error": "server",
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "quota",
    "invalid_api_key": "auth",
    "context_length_exceeded": "context_length",
    # Google's status names.
    "RESOURCE_EXHAUSTED": "rate_limit",
    "UNAVAILABLE": "overloaded",
    "INTERNAL": "server",
    "UNAUTHENTICATED": "auth",
    "PERMISSION_DENIED": "auth",
    "INVALID_ARGUMENT": "invalid_request",
    "DEADLINE_EXCEEDED": "timeout",
}
_AWS_KINDS: dict[str, ErrorKind] = {
    "ThrottlingException": "rate_limit",
    "ServiceQuotaExceededException": "quota",
    "ModelStreamErrorException": "server",
    "InternalServerException": "server",
    "ServiceUnavailableException": "overloaded",
    "ModelNotReadyException": "overloaded",
    "ModelTimeoutException": "timeout",
    "ValidationException": "invalid_request",
    "ModelErrorException": "server",
    "ResourceNotFoundException": "invalid_request",
    "AccessDeniedException": "auth",
    "UnrecognizedClientException": "auth",
}
"""Amazon Bedrock's exception names: an HTTP error's ``x-amzn-ErrorType`` header, and (first
letter lower-cased) an event stream's exception frame."""
for _name, _kind in _AWS_KINDS.items():
    TYPE_KINDS[_name] = TYPE_KINDS[_name[0].lower() + _name[1:]] = _kind
