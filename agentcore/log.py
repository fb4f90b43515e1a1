"""Logging to stderr with loguru, with every known secret redacted.

Secrets (API keys, Authorization headers) never reach logs or traces: a
provider registers each key it resolves with `register_secret`, and every log
record and trace line is scrubbed of those values and of header-shaped text.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    from loguru import Message

LEVEL_ENV = "AGENTCORE_LOG_LEVEL"
REDACTED = "[REDACTED]"

_secrets: set[str] = set()
_HEADER_PATTERN = re.compile(
    r"(?i)(authorization|x-api-key|api-key)(['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+"
)


def register_secret(value: str | None) -> None:
    """Remember a secret value so it is scrubbed from every log line and trace."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _HEADER_PATTERN.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def _write(message: Message) -> None:
    # The whole formatted line, traceback included, is scrubbed before it is written.
    sys.stderr.write(redact(str(message)))
    sys.stderr.flush()


def configure_logging(level: str | None = None) -> None:
    """Send logs to stderr at `AGENTCORE_LOG_LEVEL` (default INFO), secrets redacted."""
    logger.remove()
    logger.add(
        _write,
        level=(level or os.environ.get(LEVEL_ENV) or "INFO").upper(),
        format="<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {message}",
        backtrace=False,
        diagnose=False,  # diagnose would print local variables, keys among them
    )
