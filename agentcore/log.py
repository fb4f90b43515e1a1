"""Logging to stderr with loguru, every line through the redaction boundary.

Secrets (API keys, Authorization headers) never reach logs: every record is
scrubbed by `agentcore.redaction.redact_log` (registered secrets, and
header-shaped text) before it is written. `register_secret`, `redact` (the log
form) and `REDACTED` are re-exported here for the callers that import them
from this module.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from loguru import logger

from agentcore.redaction import REDACTED, register_secret
from agentcore.redaction import redact_log as redact

if TYPE_CHECKING:
    from loguru import Message

LEVEL_ENV = "AGENTCORE_LOG_LEVEL"

__all__ = ["LEVEL_ENV", "REDACTED", "configure_logging", "redact", "register_secret"]


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
