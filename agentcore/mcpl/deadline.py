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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agentcore._constants import MAX_MCPL_REQUEST_DEADLINE_S as MAX_REQUEST_DEADLINE_S
from agentcore._constants import MCPL_REQUEST_DEADLINE_S as DEFAULT_REQUEST_DEADLINE_S
from agentcore.mcpl.protocol import INTERNAL_ERROR, McplError, McplRequest


@dataclass(frozen=True, slots=True)
class Deadline:
    """How long a server's requests may take, and the setting that said so."""

    seconds: float
    setting: str

    @asynccontextmanager
    async def applied(self, request: McplRequest) -> AsyncIterator[None]:
        """Run a request's handler inside; past the deadline it is cancelled and the
        request answered -32603 (`McplError`). Sets `request.deadline` first, so that a
        handler cancelled by it can tell why."""
        request.deadline = asyncio.get_running_loop().time() + self.seconds
        scope = asyncio.timeout_at(request.deadline)
        try:
            async with scope:
                yield
        except TimeoutError:
            if not scope.expired():
                raise  # the handler's own TimeoutError, not the deadline's
            raise McplError(
                INTERNAL_ERROR,
                f"The request's deadline passed: no answer within {self.seconds:g} s "
                f"({self.setting}); the host stopped working on it",
                {"reason": "deadline", "deadlineS": self.seconds},
            ) from None


__all__ = ["DEFAULT_REQUEST_DEADLINE_S", "MAX_REQUEST_DEADLINE_S", "Deadline"]
