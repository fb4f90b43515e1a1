"""The Anthropic wire in XML tool mode: ``kind = "anthropic"``, ``tool_mode = "xml"``.

The request is a prefill transcript (`agentcore.providers.xml_transcript`); the reply
is the model's text, read by the one `XmlParser` whether it streams or comes whole, so
both give the same blocks: prose as text (the only visible tokens), thinking, and the
calls of a ``<function_calls>`` block as tool-use blocks. The reply's `StopInfo` carries
the parser's report: a read call makes the stop ``tool_use`` (as in native mode), and
`unclosed_tool_block`, `tool_markup` and the triggered `sequence` say the rest.

A call ends the reply: at the ``</function_calls>`` stop sequence, the provider's own
end; at a close the model wrote itself, the translator ends the reply there and the
driver closes the connection instead of reading on (`Translator.cut_short`).

Prefilling is not allowed with extended thinking, so no native thinking block can come
back; content blocks other than text are not read.
"""

from __future__ import annotations

from typing import Any

from agentcore.inference import Request, Response, StopInfo, StreamEvent
from agentcore.model_info import model_prefills
from agentcore.providers.anthropic import PATH, AnthropicTranslator, AnthropicWire
from agentcore.providers.driver import HTTPProvider
from agentcore.providers.errors import error_from_payload
from agentcore.providers.prompt_cache import breakpoints, mark_xml_body
from agentcore.providers.sse import EventTuple
from agentcore.providers.wire import HttpCall, fast_loads
from agentcore.providers.xml_parser import XmlParser, xml_stop
from agentcore.providers.xml_transcript import Participants, format_request
from agentcore.settings import (
    DEFAULT_UNKNOWN_STOP,
    InferenceSettings,
    ProviderSettings,
    UnknownStop,
)

__all__ = ["AnthropicXmlProvider", "XmlTranslator", "XmlWire"]


class XmlWire(AnthropicWire):
    """The Messages API with the conversation as a transcript and tools as markup."""

    media_types: frozenset[str] = frozenset()  # a transcript is text

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        super().__init__(name, config, inference)
        names = config.participants
        self.participants = Participants(names.user, names.assistant)
        self.models = config.models

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        prefill = model_prefills(model, self.models.get(model))
        body = format_request(
            request, model, stream=stream, participants=self.participants, prefill=prefill
        )
        points = breakpoints(request, self.prompt_cache, self.cache_ttl)
        if points:
            mark_xml_body(body, points, self.participants.assistant)
        return HttpCall(PATH, body)

    def translator(self, request: Request, model: str) -> XmlTranslator:
        return XmlTranslator(self.name, model, self.unknown_stop)


class XmlTranslator(AnthropicTranslator):
    """One Messages API reply whose text is read by `XmlParser`."""

    __slots__ = ("parser",)

    def __init__(
        self, provider: str, model: str, unknown_stop: UnknownStop = DEFAULT_UNKNOWN_STOP
    ) -> None:
        super().__init__(provider, model, unknown_stop)
        self.parser = XmlParser(self.blocks)

    def read(self, events: list[EventTuple], out: list[StreamEvent]) -> None:
        parse = self.parser.feed
        loads = fast_loads
        for name, data, _ in events:
            try:
                obj = loads(data)
                kind = obj["type"]
            except (ValueError, KeyError, TypeError):
                if name == "ping":
                    continue
                raise self.not_json(data) from None
            if kind == "content_block_delta":
                delta = obj["delta"]
                if delta.get("type") == "text_delta":
                    parse(delta["text"], out)
                    if self.parser.ended is not None:
                        self._ended_by_call()
                        return
                continue
            if kind == "content_block_start":
                item = obj.get("content_block") or {}
                if item.get("type") == "text" and item.get("text"):
                    parse(item["text"], out)
                    if self.parser.ended is not None:
                        self._ended_by_call()
                        return
                continue
            if kind == "content_block_stop":
                continue  # the parser's blocks are its own, not the wire's
            self._event(kind, obj, out)
            if self.done:
                return

    def _ended_by_call(self) -> None:
        """The model closed a block that held a call: the reply is whole, and whatever
        the provider writes after it is not read."""
        self.finished = self.done = self.cut_short = True

    def closing_stop(self, out: list[StreamEvent]) -> StopInfo:
        provider = StopInfo("tool_use") if self.parser.ended is not None else self.stop()
        return xml_stop(provider, self.parser.finish(out, provider.reason, provider.sequence))

    def whole(self, data: Any) -> Response:
        if not isinstance(data, dict) or data.get("type") == "error" or "error" in data:
            raise error_from_payload(data, provider=self.provider, model=self.model, status=200)
        out: list[StreamEvent] = []
        for item in data.get("content") or ():
            if item.get("type") == "text":
                self.parser.feed(item.get("text", ""), out)
        self.stop_reason, self.stop_sequence = data.get("stop_reason"), data.get("stop_sequence")
        self.served = data.get("model")
        self.take_usage(data.get("usage"))
        stop = self.closing_stop(out)
        self.blocks.close(out)
        return self.response(self.blocks.content(), stop)


class AnthropicXmlProvider(HTTPProvider):
    kind = "anthropic"

    def __init__(self, name: str, config: ProviderSettings, inference: InferenceSettings) -> None:
        super().__init__(name, config, XmlWire(name, config, inference))
