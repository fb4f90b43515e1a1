"""Logging: silent as a library, to stderr with loguru in the command, every line redacted.

A library configures no logging: importing agentcore disables its loggers (loguru's
convention for libraries, ``logger.disable("agentcore")``), and the kernel does the same
for each plugin's module as it loads it, so an application embedding the kernel hears
nothing from either until it calls `enable_logging` (its own loguru handlers then get
agentcore's records). The `agentcore` command and the demo call `configure_logging`,
which enables them and writes them to stderr.

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

__all__ = [
    "LEVEL_ENV",
    "REDACTED",
    "configure_logging",
    "enable_logging",
    "plugin_module",
    "redact",
    "register_secret",
]

_modules: set[str] = {"agentcore"}
"""Whose records are agentcore's: its package and every plugin module the kernel loaded."""
_enabled = False


def plugin_module(name: str) -> None:
    """A plugin's module, about to be imported: its records follow agentcore's, disabled
    until `enable_logging`."""
    _modules.add(name)
    if not _enabled:
        logger.disable(name)


def enable_logging() -> None:
    """Let agentcore's records (its plugins' too, loaded before or after) reach loguru's
    handlers; which handlers, at what level, stays the application's choice."""
    global _enabled
    _enabled = True
    for name in _modules:
        logger.enable(name)


def _write(message: Message) -> None:
    # The whole formatted line, traceback included, is scrubbed before it is written.
    sys.stderr.write(redact(str(message)))
    sys.stderr.flush()


def configure_logging(level: str | None = None) -> None:
    """The command's logging: agentcore's records to stderr at `AGENTCORE_LOG_LEVEL`
    (default INFO), secrets redacted, in place of loguru's default handler."""
    enable_logging()
    logger.remove()
    logger.add(
        _write,
        level=(level or os.environ.get(LEVEL_ENV) or "INFO").upper(),
        format="<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {message}",
        backtrace=False,
        diagnose=False,  # diagnose would print local variables, keys among them
    )
