"""A deadline for every request an MCPL server sends the host.

A client may give up on a request without saying so: mcpl-core-ts rejects a request
after 30 s by default and sends no `notifications/cancelled`, so a host that only stops
on a cancel keeps retrying an `inference/request` nobody waits for, and answers it when
it is long too late. Each request therefore has a deadline, ``[mcpl.servers.NAME]
request_deadline_s``, else ``[mcpl] request_deadline_s``. When it passes, the handler's
task is cancelled (which stops retries and waits, and closes the provider call) and the
request is answered -32603 naming the deadline and its setting: still exactly one answer
(§6.6: a request is never left unanswered).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agentcore._constants import MAX_MCPL_REQUEST_DEADLINE_S as MAX_REQUEST_DEADLINE_S
from agentcore._constants import MCPL_REQUEST_DEADLINE_S as DEFAULT_REQUEST_DEADLINE_S
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError, McplRequest


@dataclass(frozen=True, slots=True)
class Deadline:
    """How long a server's requests may take, and the setting that said so."""

    seconds: float
    setting: str

    def scope(self, request: McplRequest) -> asyncio.Timeout:
        """The timeout to run a request's handler in; sets `request.deadline` first, so
        that a handler cancelled by it can tell why. When it expired, raise `passed()`.
        (A scope and an error, not a context manager of our own: that would be an async
        generator and its wrapper held by every request in flight, ~0.5 KB each.)"""
        request.deadline = asyncio.get_running_loop().time() + self.seconds
        return asyncio.timeout_at(request.deadline)

    def passed(self) -> McplError:
        """The answer to a request whose deadline passed: -32603 naming the setting."""
        return McplError(
            INTERNAL_ERROR,
            f"The request's deadline passed: no answer within {self.seconds:g} s "
            f"({self.setting}); the host stopped working on it",
            {"reason": "deadline", "deadlineS": self.seconds},
        )


__all__ = ["DEFAULT_REQUEST_DEADLINE_S", "MAX_REQUEST_DEADLINE_S", "Deadline"]
