"""Test helpers shipped with agentcore: a scripted loopback provider server, a scripted
in-process provider, and pytest fixtures.

Plugin authors test against the same thing agentcore's own tests do. The API
below is stable; it only grows.

The server
----------
`LoopbackServer` is an aiohttp server on 127.0.0.1 (port 0: any free port) that
speaks the Anthropic Messages API (``POST /v1/messages``), OpenAI chat completions
(``POST /v1/chat/completions``), the OpenAI Responses API (``POST /v1/responses``)
and Gemini (``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` and
``:generateContent``), streamed (SSE) or whole, and Amazon Bedrock
(``POST /model/MODEL/invoke``, ``/invoke-with-response-stream``: wire ``bedrock``;
``/converse``, ``/converse-stream``: wire ``bedrock-converse``; AWS's binary event
stream, checked against boto3's ``bedrock-runtime``), and plays one scripted `Scenario`
per call. A Bedrock call must carry a bearer token or a SigV4 signature, which the
server recomputes with botocore for the keys of ``LoopbackServer(aws_credentials={ACCESS:
SECRET})`` (or a function of the access key); a wrong one is answered 403 as AWS
answers it (`agentcore.testing.sigv4`)::

    async with LoopbackServer() as server:          # on the current event loop
        server.script(Scenario.text("Hello there"), Scenario.rate_limit(retry_after=2))
        ...

    with LoopbackServer() as server:                # on a thread of its own
        ...

Scenarios are queued in order, one per call, in a shared queue or per provider:
``server.script(s, provider="NAME")`` feeds only calls under ``/p/NAME/``, which is
where ``server.base_url(wire, "NAME")`` points. A call with nothing queued plays
``server.default`` (e.g. ``LoopbackServer(default=Scenario.echo())``), or gets an
HTTP 400 saying nothing was scripted. For many concurrent calls, whose order no queue
can know, ``LoopbackServer(choose=pick)`` picks each call's scenario from the `Call`
itself (its body, wire, provider); ``pick`` returning None falls back to the queues.
``LoopbackServer(keepalive_timeout_s=5.0)`` closes keep-alive connections idle that
long, as uvicorn does: a request that comes on one is dropped unanswered (the server
closing it just as the request arrives), recorded as a `Call` with ``stale=True``; with
0, every request on a reused connection meets that.

Every scenario plays on every wire (each in its own words, `agentcore.testing.wires`),
streamed or whole as the request asks; one that a wire cannot say is answered 400:

- ``Scenario.text("Hi there")``: a normal end (``end_turn``; openai ``stop``; Responses
  ``completed``; Gemini ``STOP``)
- ``Scenario.trickle("Hi there", every_s=0.05)``: the same, its chunks slow
- ``Scenario.max_tokens()``: ``max_tokens`` (openai ``length``; Responses ``incomplete``
  for ``max_output_tokens``; Gemini ``MAX_TOKENS``)
- ``Scenario.stop_sequence(sequence="END")``: ``stop_sequence`` (openai: vLLM's
  ``stop_reason``; Gemini says only ``STOP``; not on Responses, which has no stop sequences)
- ``Scenario.refusal()``: ``refusal`` (openai ``content_filter``; Responses ``incomplete``
  for ``content_filter``; Gemini ``SAFETY``)
- ``Scenario.pause_turn()``: ``pause_turn`` (anthropic only)
- ``Scenario.tool_use("get_weather", {"city": "Oslo"})``: a tool call;
  ``cut=True`` cuts its input off at max tokens
- ``Scenario.thinking("hmm", "answer")``: thinking (openai ``delta.reasoning``, Responses
  reasoning summaries, Gemini ``thought`` parts) before text
- ``Scenario.stream_error(error_type="overloaded_error")``: anthropic ``event: error``;
  openai an error frame inside the 200 stream; Responses ``error`` and ``response.failed``;
  Gemini an ``{"error": ...}`` chunk
- ``Scenario.finish_error()``: a bare ``finish_reason: "error"`` (openai only)
- ``Scenario.error_body(message, code=502)``: a 200 whose whole body is an error object
- ``Scenario.cut("Partial ")``: the connection closes with no terminal event
  (``clean=True``: the body just ends)
- ``Scenario.reset()``: the connection closes before any response (no status line)
- ``Scenario.stall(keepalive_s=0.05)``: a ping, then nothing until the client leaves
  (Gemini has no ping: nothing at all)
- ``Scenario.http_error(503, body=..., headers=...)``: any status, body and headers
- ``Scenario.rate_limit(retry_after=2)``: 429, the wait stated as ``retry_after=`` (header,
  seconds), ``retry_after_ms=``, ``retry_after_date=`` (HTTP date), ``body_retry_after=``,
  ``body_retry_after_ms=`` or ``retry_delay="30s"`` (Google's ``retryDelay``)
- ``Scenario.overloaded()``, ``server_error()``: 529, 500
- ``Scenario.bad_request()``, ``unauthorized()``: 400, 401
- ``Scenario.quota()``: a 429 that is a quota failure (``insufficient_quota``, Gemini a
  per-day ``QuotaFailure``; not retryable)
- ``Scenario.context_length()``: a 400 for a prompt over the context window
- ``Scenario.echoes_credentials()``: a 401 whose message echoes the request's
  Authorization, ``x-api-key`` and other ``x-*`` headers (``mid_stream=True``: in an
  error frame after some text), as some OpenAI-compatible servers do
- ``Scenario.long(50_000)``: N text chunks, rendered once (benchmarks)
- ``Scenario.echo()``: the last user message back

Options on any scenario (keyword arguments, or ``scenario.replace(...)``):
``model`` (the served model to report), ``input_tokens`` / ``output_tokens``,
``chunks`` (the exact text deltas), ``delay_s`` (before the response),
``chunk_delay_s`` (between chunks), ``timestamps=True`` (each text chunk carries
``"agentcore_emitted_at": time.time()`` and `Call.emitted_at` records it),
``headers`` (extra response headers), ``raw_stop`` (a stop token sent verbatim: Responses
an ``incomplete`` reason, Gemini a ``finishReason``; on openai ``""`` sends
``finish_reason`` null to the end, as a lax compatible server does).

Each class method returns one of the small family types of `agentcore.testing.scenarios`
(``Reply``, ``ToolUse``, ``Echo``, ``Long``, ``StreamError``, ``ErrorBody``, ``Cut``,
``Stall``, ``HttpError``), every one a `Scenario`.

What the server saw: ``server.calls`` (a list of `Call`: wire, provider, path,
headers as received with keys, parsed JSON body, scenario, `emitted_at`,
`disconnected`); `Call`'s repr redacts credentials. ``server.open_connections``
and ``server.in_flight`` count what is open now; ``await server.wait_idle()``
(or ``wait_idle_sync()``) waits until nothing is, and raises AssertionError
saying what is left: the leak check after a test.

Settings: ``server.write_settings(path, providers={"main": "anthropic"},
inference={"progress_timeout_s": 0.2}, sections={"retry": {...}})`` writes a TOML
file whose providers point at the server and read their key from
`API_KEY_ENV` (set it to `API_KEY`; the fixture does).

Fixtures (registered through the ``pytest11`` entry point)
----------------------------------------------------------
``loopback_provider``: a running `LoopbackServer` (on its own thread, so it works
in sync and async tests alike), stopped after the test. ``loopback_settings``: a
function writing a settings file into ``tmp_path`` (same arguments as
`LoopbackServer.settings_toml`) with `API_KEY_ENV` set for the test::

    async def test_rate_limited(loopback_provider, loopback_settings):
        loopback_provider.script(Scenario.rate_limit(retry_after=3))
        async with Kernel.load(loopback_settings(), discover_plugins=False) as kernel:
            with pytest.raises(InferenceError) as info:
                await kernel.complete(Request("anthropic:claude-x", [Message.user("hi")]))
        assert (info.value.kind, info.value.retry_after_s) == ("rate_limit", 3.0)
        await loopback_provider.wait_idle()   # nothing in flight, no connection open

The in-process provider
-----------------------
`ScriptedProvider` implements the `Provider` protocol itself: no server, no wire,
for testing a policy plugin against the kernel. ``provider.script`` is a queue of
answers, one per call; once it is empty every call plays ``provider.default``
(`OK`: ``hello``, ``end_turn``). An answer is:

- `OK`; a `Response` (its text, then `Complete`; what ``complete()`` returns)
- an `InferenceError` (``stream()`` yields `Failed`, ``complete()`` raises it);
  any other exception is raised
- `STALL` (nothing, forever) or ``Stall(seconds)`` (then `OK`)
- ``Partial(error, text="hel")``: visible text, then `Failed`; `NO_TERMINAL`: text,
  then the stream just ends
- a list of steps, played in order: a stream event is yielded, an exception is
  raised, a `Stall` waits (``complete()`` returns a `Response`, or a `Complete`'s)

``answer_for`` (a function of the `Request`) picks a call's answer by its request
whatever the order of concurrent calls (say, by its last message); where it returns
None the script plays. ``latency_s`` is waited at the start of every call. What it
saw: ``calls`` (a list of `ScriptedCall`: model, request, tag (``metadata["tag"]``), streamed,
started_at / ended_at, ending), ``models``, ``log`` (`CallEvent` start and end, in
order; ``starts()``), ``endings`` (how each streamed attempt ended: ``finished``,
``GeneratorExit`` when closed before its terminal, or ``CancelledError``),
``stalled`` (an `asyncio.Event` set when a stall begins) and ``closed``.

Installing it: ``scripted_kind(provider)`` is a plugin that contributes the provider
kind ``"scripted"`` through `agentcore_provider_kinds`, as any plugin does: in a
kernel loaded with it, every ``[providers.NAME] kind = "scripted"`` section resolves
to `provider`. ``ProviderKindsPlugin({kind: factory})`` does the same for any
factory. Kinds belong to the kernel that loaded the plugin, never to the process.
`TraceRecorder` is a plugin keeping every trace (``events``, ``of(type)``: their
fields, ``types``) and every announced wait (``waits``).

Fixtures: ``scripted_provider`` returns a `ScriptedProvider` named ``fake``;
``trace_recorder`` a `TraceRecorder`::

    async def test_retried(scripted_provider, trace_recorder, tmp_path):
        scripted_provider.script = [InferenceError("server", "boom", status=500)]
        path = tmp_path / "agentcore.toml"
        path.write_text('[providers.fake]\nkind = "scripted"\n')
        plugins = {
            "retry": RetryPolicy,
            "traces": trace_recorder,
            "scripted": scripted_kind(scripted_provider),
        }
        async with Kernel.load(path, discover_plugins=False, plugins=plugins) as kernel:
            await kernel.complete(Request("fake:m1", [Message.user("hi")]))
        assert scripted_provider.models == ["m1", "m1"]

The MCPL server side
--------------------
`agentcore.testing.mcpl_server` is a scriptable MCPL server (`ServerSession`) that the
host reaches over a real stdio subprocess (`StdioHub`, through ``relay_server.py``) or a
real WebSocket (`WsHub`); `agentcore.testing.serve` runs ``agentcore serve`` as a
subprocess and waits on it. They are imported by name (not from this module), so a
plugin's tests that need no MCPL server do not load them.
"""

from agentcore.kernel import Kernel, PluginLoadError
from agentcore.testing.scenarios import WIRES, Scenario, Unplayable, Wire
from agentcore.testing.scripted import (
    NO_TERMINAL,
    OK,
    SCRIPTED_KIND,
    STALL,
    CallEvent,
    Partial,
    ProviderKindsPlugin,
    ScriptedCall,
    ScriptedProvider,
    Stall,
    TraceRecorder,
    scripted_kind,
    text_response,
)
from agentcore.testing.server import (
    API_KEY,
    API_KEY_ENV,
    DEFAULT_PROVIDERS,
    Call,
    LoopbackServer,
    to_toml,
)

__all__ = [
    "API_KEY",
    "API_KEY_ENV",
    "DEFAULT_PROVIDERS",
    "NO_TERMINAL",
    "OK",
    "SCRIPTED_KIND",
    "STALL",
    "WIRES",
    "Call",
    "CallEvent",
    "Kernel",
    "LoopbackServer",
    "Partial",
    "PluginLoadError",
    "ProviderKindsPlugin",
    "Scenario",
    "ScriptedCall",
    "ScriptedProvider",
    "Stall",
    "TraceRecorder",
    "Unplayable",
    "Wire",
    "scripted_kind",
    "text_response",
    "to_toml",
]
