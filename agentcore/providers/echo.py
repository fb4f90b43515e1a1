"""The embedded provider, ``kind = "echo"``: no network, no key, a deterministic reply.

It streams the last user message back word by word (with `delay_s` before each
word) and counts words as tokens, so the kernel, the policies and the demo run
out of the box. ``max_tokens`` cuts the reply and ends it with ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from agentcore.inference import (
    BlockStart,
    BlockStop,
    Complete,
    Request,
    Response,
    StopInfo,
    StreamEvent,
    TextBlock,
    Token,
    Usage,
    UsageUpdate,
)
from agentcore.settings import ProviderSettings

_WORD = re.compile(r"\S+\s*")


class EchoProvider:
    kind = "echo"

    def __init__(self, name: str, config: ProviderSettings) -> None:
        self.name = name
        self.delay_s = config.delay_s

    def _reply(self, request: Request, model: str) -> tuple[list[str], Response]:
        last = next((m for m in reversed(request.messages) if m.role == "user"), None)
        words = _WORD.findall(last.text if last else "")
        cut = len(words) > request.max_tokens
        words = words[: request.max_tokens]
        prompt_tokens = sum(len(_WORD.findall(m.text)) for m in request.messages)
        usage = Usage(input_tokens=prompt_tokens, output_tokens=len(words))
        stop = StopInfo("max_tokens", "max_tokens") if cut else StopInfo("end_turn", "end_turn")
        response = Response([TextBlock("".join(words))], stop, usage, model, model, self.name)
        return words, response

    async def stream(self, request: Request, model: str) -> AsyncIterator[StreamEvent]:
        words, response = self._reply(request, model)
        yield BlockStart(0, "text")
        for word in words:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield Token(word, "text", 0, True)
        yield BlockStop(0, response.content[0])
        yield UsageUpdate(response.usage)
        yield Complete(response)

    async def complete(self, request: Request, model: str) -> Response:
        words, response = self._reply(request, model)
        if self.delay_s:
            await asyncio.sleep(self.delay_s * len(words))
        return response

    async def aclose(self) -> None:
        return None
