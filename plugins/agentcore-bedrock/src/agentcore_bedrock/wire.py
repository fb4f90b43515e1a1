"""The Bedrock wire: one provider, two APIs, chosen per model.

Anthropic models go over InvokeModel (``/invoke``, ``/invoke-with-response-stream``)
with Messages bodies, ``anthropic_version`` ``bedrock-2023-05-31`` and any beta flags in
the body, native or XML tool mode as ``tool_mode`` says; they are read by agentcore's
Anthropic translators, each stream event out of a ``chunk`` frame. Every other model
goes over Converse (`agentcore_bedrock.converse`). The model id goes in the path as
given (cross-region inference profiles ``us.``/``eu.``/``apac.``, ARNs), percent-encoded.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from loguru import logger

from agentcore.api import (
    ANTHROPIC_MEDIA_TYPES,
    AnthropicTranslator,
    HttpCall,
    InferenceError,
    InferenceSettings,
    OutputBlock,
    Participants,
    Request,
    Response,
    StopInfo,
    StreamDecoder,
    Translator,
    Wire,
    XmlTranslator,
    anthropic_request_body,
    model_prefills,
    resolve_key,
    xml_request_body,
)
from agentcore_bedrock.auth import SigV4Signer, aws_session
from agentcore_bedrock.converse import MEDIA_TYPES, ConverseTranslator, converse_body, total_input
from agentcore_bedrock.eventstream import EventStreamDecoder
from agentcore_bedrock.settings import API_KEY_ENV, BedrockSettings

ANTHROPIC_VERSION = "bedrock-2023-05-31"
EVENT_STREAM = "application/vnd.amazon.eventstream"


class BedrockWire(Wire):
    media_types = ANTHROPIC_MEDIA_TYPES | MEDIA_TYPES
    stream_type = EVENT_STREAM

    def __init__(self, name: str, config: BedrockSettings, inference: InferenceSettings) -> None:
        self.name = name
        self.config = config
        self.unknown_stop = inference.unknown_stop
        self.xml = config.tool_mode == "xml"
        self.ttl_dropped = False
        names = config.participants
        self.participants = Participants(names.user, names.assistant)
        session = aws_session(config.profile)
        region = config.region or session.get_config_variable("region")
        if not region:
            raise InferenceError(
                "invalid_request",
                f"provider {name!r} has no AWS region: set [providers.{name}] region, "
                "or AWS_REGION",
                retryable=False,
                provider=name,
            )
        self.region = str(region)
        self.base_url = config.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com"
        self.headers = {"accept": "application/json"}
        auth = config.auth
        if auth == "auto":
            auth = "api_key" if config.api_key_env else "sigv4"
        self.signer: SigV4Signer | None = None
        if auth == "api_key":
            # Set by hand: botocore sends a bearer token to HTTPS endpoints only.
            key = resolve_key(name, config, API_KEY_ENV, required=True)
            self.headers["authorization"] = f"Bearer {key}"
        else:
            self.signer = SigV4Signer(name, session, self.region)
            self.signs = True

    def anthropic(self, model: str) -> bool:
        api = self.config.api
        return api == "invoke" or (api == "auto" and "anthropic." in model)

    def call(self, request: Request, model: str, *, stream: bool) -> HttpCall:
        path = "/model/" + urllib.parse.quote(model, safe="")
        if not self.anthropic(model):
            return HttpCall(path + ("/converse-stream" if stream else "/converse"),
                            converse_body(request))  # fmt: skip
        if self.xml:
            prefill = model_prefills(model, self.config.models.get(model))
            body = xml_request_body(
                request, model, stream=stream, participants=self.participants, prefill=prefill
            )
        else:
            body = anthropic_request_body(request, model, stream=stream)
        body = {k: v for k, v in body.items() if k not in ("model", "stream")}
        for key in request.extras:  # only a caller's extras can carry a cache_control
            body[key] = self._without_ttl(body[key])
        body["anthropic_version"] = ANTHROPIC_VERSION
        if self.config.anthropic_beta:
            body["anthropic_beta"] = list(self.config.anthropic_beta)
        return HttpCall(path + ("/invoke-with-response-stream" if stream else "/invoke"), body)

    def _without_ttl(self, value: Any) -> Any:
        """`value` with every ``cache_control`` ``ttl`` left out: Bedrock refuses the whole
        request for one, so it is dropped, and the log says so once per provider."""
        if isinstance(value, list):
            return [self._without_ttl(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {k: self._without_ttl(v) for k, v in value.items()}
        control = out.get("cache_control")
        if isinstance(control, dict) and "ttl" in control:
            out["cache_control"] = {k: v for k, v in control.items() if k != "ttl"}
            if not self.ttl_dropped:
                self.ttl_dropped = True
                logger.warning(
                    "provider {!r}: Bedrock takes no cache_control ttl ({!r}): left out, "
                    "the default cache lifetime applies",
                    self.name,
                    control["ttl"],
                )
        return out

    def translator(self, request: Request, model: str) -> Translator:
        if not self.anthropic(model):
            return ConverseTranslator(self.name, model, self.unknown_stop)
        kind = InvokeXmlTranslator if self.xml else InvokeTranslator
        return kind(self.name, model, self.unknown_stop)

    def decoder(self) -> StreamDecoder:
        return EventStreamDecoder()

    def sign(self, url: str, body: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
        assert self.signer is not None  # `signs` is set with it
        return self.signer.sign(url, body, headers)


_TOTALLED = hasattr(AnthropicTranslator, "take_usage")
"""Whether agentcore's Anthropic translator already states ``input_tokens`` as the total,
cached tokens included (the spend work's `take_usage`); until it does, the Bedrock
translators add them, so the count is the same either way and never added twice."""


class InvokeTranslator(AnthropicTranslator):
    """An Anthropic reply through InvokeModel: input tokens counted with the cached ones."""

    __slots__ = ()

    def response(self, content: list[OutputBlock], stop: StopInfo) -> Response:
        if not _TOTALLED:
            total_input(self.usage)
        return super().response(content, stop)


class InvokeXmlTranslator(XmlTranslator):
    __slots__ = ()

    def response(self, content: list[OutputBlock], stop: StopInfo) -> Response:
        if not _TOTALLED:
            total_input(self.usage)
        return super().response(content, stop)
