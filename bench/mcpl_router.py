"""N concurrent streamed `inference/request`s through an MCPL host, per chunk, against a floor.

Three processes, as in a deployment:

- the loopback provider (`agentcore.testing`, Anthropic wire by default), on a thread
  of this process, playing each call as `chunks` text chunks `interval` seconds apart,
  each stamped with its emission time (``timestamps=True``: `Call.emitted_at`). The
  calls start spread evenly over one interval, as independent users' streams would;
- the host under test, a real subprocess reading one generated settings file:
  ``agentcore serve --settings PATH`` with every default plugin, or its peer, the relay;
- this file run as a stdlib-only stdio MCPL server (``--server``), spawned by the host:
  it sends N streamed requests at once, and stamps each chunk with the time it read it.

The peer is this file run as ``--relay PATH``: a minimal stdlib-only asyncio MCPL host
that reads the same settings, spawns the same server over stdio, does the handshake
(``initialize``, ``notifications/initialized``, ``featureSets/update``) and relays each
``inference/request`` over a raw ``asyncio.open_connection`` to the provider: one POST,
SSE split on blank lines, one ``inference/chunk`` per text delta, then the result. No
kernel, no plugins, no HTTP library, no checks: it is the floor of what relaying these
streams costs a Python process on this machine, so agentcore's numbers are read as
multiples of it rather than against an absolute that changes with the machine.

For N in `--sizes` it runs the relay and then agentcore (``--host`` picks one) on the
same scenario and prints, for each, chunks per second (all chunks, over the time from
the first request to the last answer), the added latency per chunk (arrival at the MCPL
server minus the provider's emission, same clock; p50, p99, max), the host process's
peak RSS (VmHWM), its idle RSS (served, handshake done, before the first request), the
RSS each stream adds ((peak - idle) / N), and its CPU time per chunk and share of one CPU;
then agentcore's p99, CPU per chunk and RSS per stream as ratios to the relay's (targets:
CPU 1.1x, RSS per stream 1.5x, idle RSS at most 40 MB, printed with the floor of the
libraries serve starts with, `library_floor_mb`), and, between consecutive sizes, the RSS
per stream from the peaks' difference and the CPU per chunk from the runs' difference,
both free of what a run loads once (`serve` imports aiohttp at its first provider call);
and, with both hosts, the HTTP client's share of a stream: the RSS per open streamed
response of aiohttp as the providers' driver configures it and of a bare
`asyncio.open_connection`, 1,000 at once in fresh processes (``--client-rss``), with the
floor the difference puts under the RSS-per-stream ratio while providers stream over aiohttp
(the relay's per stream plus aiohttp's extra, over the relay's).
The server's bound on requests in
flight (`max_requests_in_flight`) is set to N: the bench sends them all at once. Every
request must be answered with a result and exactly its chunks, in order, by either host.
Each N runs `--rounds` times, the hosts taking turns to go first, and each host's medians
over the rounds are printed and compared: on a shared two-CPU machine one round's p99
swings several-fold. Target:
agentcore at N = 1000, every request answered, median p99 added latency under 5 ms.

    .venv/bin/python bench/mcpl_router.py [--sizes 10,100,1000] [--chunks 20]
        [--interval 0.1] [--wire anthropic|openai] [--host both|agentcore|relay]
        [--rounds 3] [--traces] [--profile DIR | --tracemalloc DIR]

``--profile DIR`` runs serve under cProfile and writes ``DIR/serve-N.prof``;
``--tracemalloc DIR`` runs it under tracemalloc (``bench/traced_serve.py``) and writes
``DIR/serve-N.txt``: what serve held at its peak and not at its end, by line and traceback.
Not part of ``make test``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import statistics
import sys
import time
from typing import Any

# -- the MCPL server (stdlib only: it is spawned by the host under test) ---------------

MANIFEST = {
    "version": "0.5",
    "inferenceRequest": {"streaming": True},
    "featureSets": {
        "bench.summaries": {
            "description": "benchmark streams",
            "uses": ["inferenceRequest", "inferenceRequest.streaming"],
        }
    },
}


def marker(i: int) -> str:
    """The prompt of request i, by which its provider call is found."""
    return f"<bench request {i}>"


def run_server() -> int:
    n = int(os.environ["BENCH_N"])
    out_path = os.environ["BENCH_OUT"]

    def send(message: dict[str, Any]) -> None:
        os.write(1, json.dumps(message).encode() + b"\n")

    buffer = b""
    reads: list[tuple[float, bytes]] = []  # chunk lines and the time of the read
    answers: dict[int, dict[str, Any]] = {}
    sent_at = 0.0
    while True:
        data = os.read(0, 1 << 16)
        now = time.time()
        if not data:
            return 1  # the host went away before answering everything
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b'{"jsonrpc":"2.0","method":"inference/chunk"'):
                reads.append((now, line))  # parsed after the run, off the clock
                continue
            if not line.strip():
                continue
            message = json.loads(line)
            method = message.get("method")
            if method == "initialize":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {
                            "protocolVersion": message["params"]["protocolVersion"],
                            "capabilities": {"experimental": {"mcpl": MANIFEST}},
                            "serverInfo": {"name": "bench", "version": "1"},
                        },
                    }
                )
            elif method == "featureSets/update":
                send({"jsonrpc": "2.0", "id": message["id"], "result": {"accepted": True}})
                sent_at = time.time()
                with open(out_path + ".started", "w"):
                    pass  # the bench samples the host's CPU time from here
                requests = b"".join(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": i,
                            "method": "inference/request",
                            "params": {
                                "featureSet": "bench.summaries",
                                "stream": True,
                                "messages": [{"role": "user", "content": marker(i)}],
                                "preferences": {"maxTokens": 256},
                            },
                        }
                    ).encode()
                    + b"\n"
                    for i in range(n)
                )
                os.write(1, requests)
            elif method is not None and "id" in message:
                error = {"code": -32601, "message": method}
                send({"jsonrpc": "2.0", "id": message["id"], "error": error})
            elif "id" in message and method is None:
                answers[message["id"]] = {"at": now, **message}
        if len(answers) >= n:
            break
    chunks = []
    for at, line in reads:
        params = json.loads(line)["params"]
        chunks.append((params["requestId"], params["index"], params["delta"], at))
    with open(out_path + ".tmp", "w") as out:
        json.dump({"sent_at": sent_at, "answers": answers, "chunks": chunks}, out)
    os.replace(out_path + ".tmp", out_path)
    # Stay until the host closes our stdin (the bench signals serve after reading RSS).
    while os.read(0, 1 << 16):
        pass
    return 0


# -- the peer: a minimal MCPL relay (stdlib only: the floor of a Python host) -----------

# OpenAI finish reasons as the normalized stop reasons MCPL results carry.
OPENAI_STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class Call:
    """One relayed call's state: its request id, text so far, model and stop reason, and
    the SSE bytes read but not yet split into events."""

    def __init__(self, request_id: Any, model: str) -> None:
        self.id = request_id
        self.buffer = b""
        self.text: list[str] = []
        self.model = model
        self.stop: str | None = None

    def result(self) -> dict[str, Any]:
        return {"content": "".join(self.text), "model": self.model, "finishReason": self.stop}


class Relay:
    """What a host must do to relay the bench's streams, and nothing more.

    One task per `inference/request`, one fresh connection per call (as a host
    with no pool would open), frames written to the server's stdin as they are
    made (no drain: the bench server reads at once). A failed call is answered
    -32603 with its cause.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        import urllib.parse

        provider = settings["providers"]["lb"]
        url = urllib.parse.urlsplit(provider["base_url"])  # http://HOST:PORT/p/lb[/v1]
        assert url.hostname is not None and url.port is not None, url
        self.address = (url.hostname, url.port)
        self.anthropic = provider["kind"] == "anthropic"
        key = os.environ.get(provider.get("api_key_env", ""), "")
        if self.anthropic:
            path = "/v1/messages"
            auth = {"x-api-key": key, "anthropic-version": "2023-06-01"}
        else:  # the openai base URL already ends in /v1
            path, auth = "/chat/completions", {"authorization": f"Bearer {key}"}
        self.url = f"http://{url.netloc}{url.path}{path}"
        self.headers = {**auth, "content-type": "application/json", "accept": "text/event-stream"}
        """The request's headers, but for ``host`` and ``content-length``."""
        self.head = f"POST {url.path}{path} HTTP/1.1\r\nhost: {url.netloc}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in self.headers.items()
        )
        self.model = settings["mcpl"]["routing"]["default"].partition(":")[2]
        self.server = settings["mcpl"]["servers"]["bench"]

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        process = await asyncio.create_subprocess_exec(
            *self.server["command"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **self.server.get("env", {})},
            limit=self.server.get("max_frame_bytes", 1 << 24),
        )
        assert process.stdin is not None and process.stdout is not None
        self.stdin = process.stdin
        reading = loop.create_task(self.read(process.stdout))
        waiting = loop.create_task(stopped.wait())
        await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
        # SIGTERM (or the server left): close its stdin, which is its cue to exit.
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 5.0)
        except TimeoutError:
            process.kill()
            await process.wait()
        return 0

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def read(self, stdout: asyncio.StreamReader) -> None:
        tasks: set[asyncio.Task[None]] = set()
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"mcpl": {}}},
                    "clientInfo": {"name": "bench-relay", "version": "1"},
                },
            }
        )
        while line := await stdout.readline():
            if not line.strip():
                continue
            message = json.loads(line)
            method = message.get("method")
            if method == "inference/request":
                task = asyncio.get_running_loop().create_task(
                    self.answer(message["id"], message["params"])
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif method is None and message.get("id") == 0:  # the initialize result
                mcpl = message["result"]["capabilities"]["experimental"]["mcpl"]
                self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                params = {
                    "effectiveCapabilities": sorted(self.server.get("grant", [])),
                    "deniedCapabilities": [],
                    "enabled": sorted(mcpl.get("featureSets", {})),
                    "disabled": [],
                }
                self.send(
                    {"jsonrpc": "2.0", "id": 1, "method": "featureSets/update", "params": params}
                )
            elif method is not None and "id" in message:
                error = {"code": -32601, "message": f"Method not found: {method}"}
                self.send({"jsonrpc": "2.0", "id": message["id"], "error": error})

    async def answer(self, request_id: Any, params: dict[str, Any]) -> None:
        try:
            result = await self.relay(request_id, params)
        except Exception as exc:
            error = {"code": -32603, "message": str(exc) or type(exc).__name__}
            self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
        else:
            self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def body(self, params: dict[str, Any]) -> bytes:
        """The provider request for an `inference/request`'s params: streamed."""
        return json.dumps(
            {
                "model": self.model,
                "max_tokens": params.get("preferences", {}).get("maxTokens", 1024),
                "stream": True,
                "messages": params["messages"],
            }
        ).encode()

    async def relay(self, request_id: Any, params: dict[str, Any]) -> dict[str, Any]:
        """POST the call, and send each text delta of its SSE stream as a chunk."""
        body = self.body(params)
        reader, writer = await asyncio.open_connection(*self.address)
        try:
            writer.write(f"{self.head}content-length: {len(body)}\r\n\r\n".encode() + body)
            status = await reader.readline()
            chunked = False
            while (header := await reader.readline()) not in (b"\r\n", b""):
                chunked = chunked or header.lower() == b"transfer-encoding: chunked\r\n"
            if status.split()[1:2] != [b"200"]:
                raise RuntimeError(f"the provider answered {status.decode().strip()}")
            call = Call(request_id, self.model)
            while True:
                if chunked:  # size line, data, CRLF; a 0 size ends the body
                    size = int(await reader.readline(), 16)
                    data = (await reader.readexactly(size + 2))[:-2]
                else:
                    data = await reader.read(1 << 16)
                if not data:
                    raise RuntimeError("the stream ended without a result")
                if self.feed(call, data):
                    return call.result()
        finally:
            writer.close()

    def feed(self, call: Call, data: bytes) -> bool:
        """Body bytes as read: each SSE event they complete goes to `take`; True at the
        stream's end."""
        *events, call.buffer = (call.buffer + data).split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:") and self.take(call, line[5:].strip()):
                    return True
        return False

    def take(self, call: Call, data: bytes) -> bool:
        """One SSE data field: send its text delta as a chunk; True at the stream's end."""
        if data == b"[DONE]":  # openai's end of stream
            return True
        payload = json.loads(data)
        if "error" in payload:
            raise RuntimeError(f"the provider failed mid-stream: {payload['error']}")
        delta = None
        if self.anthropic:
            kind = payload.get("type")
            if kind == "content_block_delta":
                delta = payload["delta"].get("text")
            elif kind == "message_start":
                call.model = payload["message"].get("model", call.model)
            elif kind == "message_delta":
                call.stop = payload["delta"].get("stop_reason", call.stop)
            elif kind == "message_stop":
                return True
        else:
            call.model = payload.get("model", call.model)
            choice = (payload.get("choices") or [{}])[0]
            delta = (choice.get("delta") or {}).get("content")
            if reason := choice.get("finish_reason"):
                call.stop = OPENAI_STOPS.get(reason, reason)
        if delta:
            chunk = {"requestId": call.id, "index": len(call.text), "delta": delta}
            self.send({"jsonrpc": "2.0", "method": "inference/chunk", "params": chunk})
            call.text.append(delta)
        return False


def run_relay(settings_path: str) -> int:
    import tomllib

    with open(settings_path, "rb") as f:
        settings = tomllib.load(f)
    return asyncio.run(Relay(settings).run())


# -- the benchmark ---------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def rss_kb(pid: int, field: str = "VmHWM") -> int:
    """The process's peak RSS (``VmHWM``) or its RSS now (``VmRSS``), in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


FLOOR_IMPORTS = """
import asyncio, importlib.metadata, tomllib
import click, loguru, pluggy, pydantic

class One(pydantic.BaseModel):  # the first model loads pydantic-core's validators and plugins
    x: int = 0
"""


def library_floor_mb() -> float:
    """The idle RSS of a bare Python process holding the libraries `serve` cannot start
    without (asyncio with its ssl, pydantic with one model, loguru, click, pluggy, the entry
    points' importlib.metadata, tomllib): the floor under serve's idle RSS, in MB."""
    import subprocess

    code = FLOOR_IMPORTS + "\nimport os\nprint(open(f'/proc/{os.getpid()}/status').read())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


CLIENT_STREAMS = 1000


def run_client_rss(kind: str, url: str, n: int) -> int:
    """``--client-rss KIND URL N``: open N streamed POSTs to the loopback provider at once,
    read each one's head and first bytes, and print the RSS they added, in KB a stream:
    with ``asyncio`` a bare `asyncio.open_connection` (the relay's way), with ``aiohttp``
    a `ClientSession` as the providers' driver configures it (its pooled connector that
    tells a reused connection apart, its timeouts, no cookie jar, its response class
    keeping only the body once the stream is accepted)."""
    import urllib.parse

    key = os.environ["LOOPBACK_API_KEY"]
    body = json.dumps(
        {
            "model": "claude-bench",
            "max_tokens": 256,
            "stream": True,
            "messages": [{"role": "user", "content": marker(0)}],
        }
    ).encode()
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    parts = urllib.parse.urlsplit(url)

    async def main() -> float:
        opened: list[Any] = []
        closers: list[Any] = []
        if kind == "aiohttp":
            import aiohttp

            from agentcore.providers.body import StreamedResponse
            from agentcore.providers.stale import ReuseAwareConnector

            session = aiohttp.ClientSession(
                connector=ReuseAwareConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, connect=10),  # a stream's: no sock_read
                headers={**headers, "content-type": "application/json"},
                cookie_jar=aiohttp.DummyCookieJar(),
                response_class=StreamedResponse,
            )

            async def one() -> None:
                response = await session.post(url, data=body, allow_redirects=False)
                assert isinstance(response, StreamedResponse)
                assert response.headers["content-type"].startswith("text/event-stream")
                response.body_only()  # as the driver does once the stream is accepted
                await response.content.readany()
                opened.append(response)
                closers.append(response.close)
        else:
            head = (
                f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                + f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            ).encode()

            async def one() -> None:
                reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
                writer.write(head + body)
                await reader.readuntil(b"\r\n\r\n")
                await reader.read(1 << 16)
                opened.append(reader)
                closers.append(writer.close)

        await asyncio.gather(*(one() for _ in range(20)))  # what the first ones load
        for close in closers:
            close()
        opened.clear()
        closers.clear()
        await asyncio.sleep(0.2)
        before = rss_kb(os.getpid(), "VmRSS")
        await asyncio.gather(*(one() for _ in range(n)))
        added = (rss_kb(os.getpid(), "VmRSS") - before) / n
        for close in closers:
            close()
        return added

    print(f"{asyncio.run(main()):.2f}")
    return 0


def client_rss_kb(provider: Any, kind: str, n: int = CLIENT_STREAMS) -> float:
    """What `run_client_rss` measures, in a fresh process, against calls the loopback
    provider holds open after their first text (a stall, until the client leaves)."""
    import subprocess

    from agentcore.testing import Scenario

    provider.reset()
    for _ in range(n + 20):
        provider.script(Scenario.stall("w0 "), provider="lb")  # then silent until we leave
    url = provider.base_url("anthropic", "lb") + "/v1/messages"
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--client-rss", kind, url, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    provider.reset()
    return float(done.stdout.split()[-1])


def client_kbs(provider: Any) -> dict[str, float]:
    """Each client's RSS per open streamed response, the median of 3 fresh processes."""
    return {
        kind: statistics.median(client_rss_kb(provider, kind) for _ in range(3))
        for kind in ("asyncio", "aiohttp")
    }


def client_floor(clients: dict[str, float], by_size: dict[int, dict[str, dict[str, Any]]]) -> None:
    """The floor under agentcore's RSS per stream while its providers stream over aiohttp:
    the relay's own (between the two largest sizes) plus what aiohttp's client state holds
    per open response beyond the relay's bare connection, as a ratio to the relay's."""
    extra = clients["aiohttp"] - clients["asyncio"]
    text = (
        f"HTTP client per open streamed response ({CLIENT_STREAMS} at once, medians of 3): "
        f"asyncio.open_connection {clients['asyncio']:.1f} KB, aiohttp as the driver "
        f"configures it {clients['aiohttp']:.1f} KB"
    )
    sizes = sorted(n for n in by_size if "relay" in by_size[n])
    if len(sizes) >= 2:
        small, large = by_size[sizes[-2]]["relay"], by_size[sizes[-1]]["relay"]
        relay = (large["rss_mb"] - small["rss_mb"]) * 1024 / (sizes[-1] - sizes[-2])
        if relay > 0:
            text += (
                f"; the relay plus aiohttp's extra {extra:.1f} KB is "
                f"{(relay + extra) / relay:.2f}x the relay's RSS per stream: the floor of that "
                "ratio while providers stream over aiohttp (target 1.5x)"
            )
    print(text)


class Unfinished(Exception):
    """A size that did not finish: reported, and the next size is run."""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_size(args: Any, host: str, n: int, provider: Any, directory: str) -> dict[str, Any]:
    """One run of N streams through `host` ("agentcore" or "relay")."""
    import subprocess

    from agentcore.testing import Scenario

    provider.reset()
    words = tuple(f"w{k} " for k in range(args.chunks))
    for i in range(n):
        provider.script(
            Scenario.text(
                "".join(words),
                chunks=words,
                chunk_delay_s=args.interval,
                delay_s=args.interval * i / n,  # streams spread over one interval
                timestamps=True,
            ),
            provider="lb",
        )
    out_path = os.path.join(directory, f"result-{host}-{n}.json")
    for stale in (out_path, out_path + ".started"):  # an earlier round's
        if os.path.exists(stale):
            os.remove(stale)
    settings = provider.write_settings(
        os.path.join(directory, f"bench-{host}-{n}.toml"),
        {"lb": args.wire},
        inference={"progress_timeout_s": 60.0, "request_timeout_s": 600.0},
        sections={
            **(
                {"traces": {"jsonl": os.path.join(directory, f"traces-{n}.jsonl")}}
                if args.traces and host == "agentcore"
                else {}
            ),
            "mcpl": {
                "servers": {
                    "bench": {
                        "command": [sys.executable, os.path.abspath(__file__), "--server"],
                        "env": {"BENCH_N": str(n), "BENCH_OUT": out_path},
                        "grant": ["inferenceRequest", "inferenceRequest.streaming"],
                        "max_frame_bytes": 64 * 1024 * 1024,
                        "max_requests_in_flight": n,  # all N at once: the bench's point
                    }
                },
                "routing": {"default": "lb:claude-bench"},
                "request_deadline_s": args.timeout,  # valgrind runs are slow (mcpl_instructions)
            },
        },
    )
    agentcore = os.path.join(os.path.dirname(sys.executable), "agentcore")
    serve = ["serve", "--settings", str(settings)]
    command = [agentcore, *serve]
    if host == "relay":
        command = [sys.executable, os.path.abspath(__file__), "--relay", str(settings)]
    elif args.profile:
        os.makedirs(args.profile, exist_ok=True)
        prof = os.path.join(args.profile, f"serve-{n}.prof")
        command = [sys.executable, "-m", "cProfile", "-o", prof, agentcore, *serve]
    elif args.tracemalloc:
        os.makedirs(args.tracemalloc, exist_ok=True)
        report = os.path.join(args.tracemalloc, f"serve-{n}.txt")
        traced = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traced_serve.py")
        command = [sys.executable, traced, report, *serve]
    if command_for := getattr(args, "command_for", None):  # bench/mcpl_instructions.py
        command = command_for(host, n, command)
    name = "agentcore serve" if host == "agentcore" else "the relay"
    env = {**os.environ, "AGENTCORE_LOG_LEVEL": os.environ.get("AGENTCORE_LOG_LEVEL", "WARNING")}
    log = open(os.path.join(directory, f"{host}-{n}.log"), "wb")  # noqa: SIM115
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + args.timeout
    rss = idle = 0
    cpu_start = cpu_end = 0.0
    try:
        while not cpu_start:
            if process.poll() is not None:
                raise SystemExit(f"{name} exited with {process.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise SystemExit(f"N={n}: the server did not start in {args.timeout} s")
            if os.path.exists(out_path + ".started"):
                cpu_start = cpu_s(process.pid)
                idle = rss_kb(process.pid, "VmRSS")  # served, handshake done, no request yet
            time.sleep(0.002)
        while not os.path.exists(out_path):
            if process.poll() is not None:
                raise SystemExit(f"{name} exited with {process.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise Unfinished(f"not every request was answered within {args.timeout:g} s")
            rss = max(rss, rss_kb(process.pid))
            time.sleep(0.05)
        cpu_end = cpu_s(process.pid)
        rss = max(rss, rss_kb(process.pid))
        process.send_signal(signal.SIGTERM)
        slow = args.tracemalloc or getattr(args, "command_for", None)  # a report at exit
        code = process.wait(timeout=120 if slow else 15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    if code != 0:
        raise SystemExit(f"{name} exited {code} after SIGTERM; see {log.name}")

    with open(out_path) as f:
        run = json.load(f)
    by_marker = {}
    for call in provider.calls:
        text = json.dumps(call.body["messages"])
        start = text.index("<bench request ")
        by_marker[text[start : text.index(">", start) + 1]] = call
    chunks: dict[int, list[tuple[int, str, float]]] = {}
    for rid, index, delta, at in run["chunks"]:
        chunks.setdefault(rid, []).append((index, delta, at))
    added: list[float] = []
    problems: list[str] = []
    last = 0.0
    for i in range(n):
        answer = run["answers"].get(str(i))
        if answer is None or "result" not in answer:
            problems.append(f"request {i}: {answer and answer.get('error')}")
            continue
        last = max(last, answer["at"])
        got = chunks.get(i, [])
        if [(idx, d) for idx, d, _ in got] != list(enumerate(words)):
            problems.append(f"request {i}: chunks out of order or missing")
            continue
        emitted = by_marker[marker(i)].emitted_at
        if len(emitted) != len(got):
            problems.append(f"request {i}: {len(emitted)} emitted, {len(got)} arrived")
            continue
        added.extend((at - sent) * 1000 for (_, _, at), sent in zip(got, emitted, strict=True))
    last = max([last, *(a["at"] for a in run["answers"].values())])
    wall = last - run["sent_at"]
    return {
        "n": n,
        "answered": n - len(problems),
        "problems": problems,
        "chunks": len(added),
        "wall_s": wall,
        "chunks_per_s": len(added) / wall,
        "p50_ms": percentile(added, 50),
        "p99_ms": percentile(added, 99),
        "max_ms": max(added, default=float("nan")),
        "rss_mb": rss / 1024,
        "idle_mb": idle / 1024,
        "kb_per_stream": (rss - idle) / n,
        "cpu_us_per_chunk": (cpu_end - cpu_start) / max(1, len(added)) * 1e6,
        "cpu_share": (cpu_end - cpu_start) / wall,
    }


def row(n: int, host: str, r: dict[str, Any], label: str = "") -> str:
    answered = label or f"{r['answered']}/{n} in {r['wall_s']:.1f} s"
    return (
        f"{n:>6} {host:>9} {r['chunks']:>8.0f} {r['chunks_per_s']:>9.0f} "
        f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} "
        f"{r['rss_mb']:>6.1f} MB {r['idle_mb']:>6.1f} MB {r['kb_per_stream']:>7.1f} KB "
        f"{r['cpu_us_per_chunk']:>11.0f} µs "
        f"{r['cpu_share']:>7.0%}  {answered}"
    )


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the rounds (a round's p99 swings several-fold here)."""
    numbers: tuple[str, ...] = ("chunks", "chunks_per_s", "p50_ms", "p99_ms", "max_ms", "rss_mb")
    numbers += ("idle_mb",)
    numbers += ("kb_per_stream",)
    more = ("cpu_us_per_chunk", "cpu_share", "wall_s", "answered")
    return {key: statistics.median(r[key] for r in runs) for key in numbers + more}


def marginal(by_size: dict[int, dict[str, dict[str, Any]]]) -> None:
    """RSS per stream between two sizes, (peak at N2 - peak at N1) / (N2 - N1): what one more
    stream holds, without what a run loads once (aiohttp, at the first provider call)."""
    sizes = sorted(by_size)
    for small, large in itertools.pairwise(sizes):
        kb = {
            host: (by_size[large][host]["rss_mb"] - by_size[small][host]["rss_mb"])
            * 1024
            / (large - small)
            for host in ("agentcore", "relay")
            if host in by_size[small] and host in by_size[large]
        }
        if not kb:
            continue
        text = ", ".join(f"{host} {value:.1f} KB" for host, value in kb.items())
        if len(kb) == 2 and kb["relay"] > 0:
            text += f"; ratio {kb['agentcore'] / kb['relay']:.2f}x (target 1.5x)"
        print(f"RSS per stream from N={small} to N={large} (peaks' difference): {text}")
        marginal_cpu(by_size[small], by_size[large])


def marginal_cpu(small: dict[str, dict[str, Any]], large: dict[str, dict[str, Any]]) -> None:
    """CPU per chunk between two sizes, the runs' CPU difference over their chunks'
    difference: what one more chunk costs, without what a run pays once (serve imports
    aiohttp and builds its TLS contexts at its first provider call). Printed beside, not
    instead of, each size's own CPU per chunk."""
    us: dict[str, float] = {}
    for host in ("agentcore", "relay"):
        if host in small and host in large and large[host]["chunks"] > small[host]["chunks"]:
            spent = [r["cpu_us_per_chunk"] * r["chunks"] for r in (small[host], large[host])]
            us[host] = (spent[1] - spent[0]) / (large[host]["chunks"] - small[host]["chunks"])
    if not us:
        return
    text = ", ".join(f"{host} {value:.0f} µs" for host, value in us.items())
    if len(us) == 2 and us["relay"] > 0:
        text += f"; ratio {us['agentcore'] / us['relay']:.2f}x (target 1.1x)"
    print(f"CPU per chunk between the sizes (runs' difference): {text}")


def main() -> int:
    import argparse
    import platform
    import tempfile

    from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--chunks", type=int, default=20, help="text chunks per stream")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between chunks")
    parser.add_argument("--wire", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument(
        "--host", choices=["both", "agentcore", "relay"], default="both", help="which hosts run"
    )
    parser.add_argument("--traces", action="store_true", help="write [traces] jsonl too")
    parser.add_argument("--profile", metavar="DIR", help="run serve under cProfile")
    parser.add_argument(
        "--tracemalloc", metavar="DIR", help="run serve under tracemalloc (bench/traced_serve.py)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per host and N (medians)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    os.environ[API_KEY_ENV] = API_KEY
    hosts = ["relay", "agentcore"] if args.host == "both" else [args.host]

    print(
        f"agentcore serve against a stdlib relay, {args.wire} wire, {args.chunks} chunks per "
        f"stream every {args.interval * 1000:g} ms; Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    header = f"{'N':>6} {'host':>9} {'chunks':>8} {'chunks/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
    print(
        header + f"{'max ms':>8} {'peak RSS':>9} {'idle RSS':>9} {'RSS/stream':>10} "
        f"{'host CPU/chunk':>14} {'host CPU':>8}  answered"
    )
    failed = missed = False
    floor_mb = min(library_floor_mb() for _ in range(3))
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    keep = os.environ.get("BENCH_KEEP")
    with LoopbackServer() as provider, tempfile.TemporaryDirectory(prefix="bench-mcpl-") as tmp:
        if keep:
            os.makedirs(keep, exist_ok=True)
            tmp = keep
        for n in (int(s) for s in args.sizes.split(",")):
            rows: dict[str, list[dict[str, Any]]] = {host: [] for host in hosts}
            for round_ in range(args.rounds):
                # Alternate who goes first: the machine's noise drifts over a run.
                for host in hosts if round_ % 2 == 0 else hosts[::-1]:
                    try:
                        r = run_size(args, host, n, provider, tmp)
                    except Unfinished as exc:
                        print(f"{n:>6} {host:>9}  {exc}")
                        failed = True
                        continue
                    print(row(n, host, r))
                    if r["problems"]:
                        failed = True
                        print(
                            f"{'':>17}{len(r['problems'])} not answered as asked, "
                            f"e.g. {r['problems'][0]}"
                        )
                    else:
                        rows[host].append(r)
            medians = {host: median_run(runs) for host, runs in rows.items() if runs}
            by_size[n] = medians
            if args.rounds > 1:
                for host, r in medians.items():
                    print(row(n, host, r, label=f"median {len(rows[host])}"))
            if "agentcore" in hosts and n >= 1000:
                ours = medians.get("agentcore")
                if ours is None or not ours["p99_ms"] < 5.0:
                    missed = True
            if len(medians) == 2:
                ours, floor = medians["agentcore"], medians["relay"]
                print(
                    f"{n:>6} {'ratio':>9}  agentcore/relay: p99 "
                    f"{ours['p99_ms'] / floor['p99_ms']:.1f}x, host CPU per chunk "
                    f"{ours['cpu_us_per_chunk'] / floor['cpu_us_per_chunk']:.2f}x, RSS growth "
                    f"per stream {ours['kb_per_stream'] / floor['kb_per_stream']:.2f}x "
                    f"(target 1.5x), idle RSS {ours['idle_mb']:.1f} MB (target 40; "
                    f"the libraries' floor {floor_mb:.1f} MB)"
                )
        clients = client_kbs(provider) if len(hosts) == 2 else None
    marginal(by_size)
    if clients is not None:
        client_floor(clients, by_size)
    if failed:
        print("failed: a host did not answer every request with a result and its chunks")
    if failed or missed:
        print("target missed: agentcore at N=1000 answers every request, p99 under 5 ms")
    return 1 if failed or missed else 0


if __name__ == "__main__":
    if "--server" in sys.argv[1:]:
        raise SystemExit(run_server())
    if sys.argv[1:2] == ["--relay"]:
        raise SystemExit(run_relay(sys.argv[2]))
    if sys.argv[1:2] == ["--client-rss"]:
        raise SystemExit(run_client_rss(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    raise SystemExit(main())
