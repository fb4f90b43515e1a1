"""Instructions per relayed chunk, agentcore `serve` against the stdlib relay: a CPU figure
that a shared machine does not move.

`bench/mcpl_router.py` reads each host's CPU time per chunk, and on this machine's two
shared cores that swings by a third between runs of the same code (a neighbour's load
changes caches, clocks and how often a process is descheduled). Instructions executed do
not: `valgrind --tool=callgrind` counts them, the same count for the same work whatever
else runs. This runs mcpl_router's scenario (same provider, same MCPL server, same
settings) with each host under callgrind, at N streams twice, with `--chunks` and then
twice as many chunks per stream, and prints the difference over the difference in
chunks: the instructions one more chunk costs, with everything a run pays once (start,
imports, handshake, N requests and answers, stop) cancelled out. Then agentcore's count as
a ratio to the relay's (issue 24's CPU target: 1.1x).

Valgrind runs Python about 50 times slower, so the chunks are spaced `--interval` apart
for both hosts to keep up at N = 1000 (streams spread over one interval, as in
mcpl_router.py). The relay's count per chunk repeats within a few percent. agentcore's
whole-run count does not when a run falls behind (a p99 of seconds: a loaded machine, or
the start of 1,000 requests under valgrind): work it does once per run then lands at
different moments (genai-prices loads in a thread at the first unpriced call, and calls
ending meanwhile wait for it), so compare runs whose chunks/s and p99 are alike, on a quiet
machine, with a chunk difference large enough to swamp it. Instructions are not time (the
hosts' instruction mixes differ a little); CPU time stays mcpl_router.py's figure.

    .venv/bin/python bench/mcpl_instructions.py [--n 1000] [--chunks 4] [--interval 10]
        [--wire anthropic|openai]

Needs `valgrind`. Takes several minutes. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from typing import Any

import mcpl_router  # bench/ is sys.path[0] when this file runs

TARGET = 1.1
HOSTS = ("relay", "relay-aiohttp", "agentcore")


class AiohttpRelay(mcpl_router.Relay):
    """The relay with aiohttp as its HTTP client (one pooled session, no connection limit)
    and nothing else changed: what the HTTP library alone costs a chunk."""

    async def relay(self, request_id: Any, params: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        if not hasattr(self, "session"):
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        post = self.session.post(self.url, data=self.body(params), headers=self.headers)
        async with post as response:
            if response.status != 200:
                raise RuntimeError(f"the provider answered {response.status}")
            call = mcpl_router.Call(request_id, self.model)
            while data := await response.content.readany():
                if self.feed(call, data):
                    return call.result()
        raise RuntimeError("the stream ended without a result")


def instructions(path: str) -> int:
    """The total instruction count callgrind wrote at the process's exit."""
    with open(path) as report:
        for line in report:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit(f"{path}: no callgrind summary (did the host exit cleanly?)")


def main() -> int:
    from agentcore.testing import API_KEY, API_KEY_ENV, LoopbackServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="concurrent streams")
    parser.add_argument("--chunks", type=int, default=4, help="chunks per stream (and 2x)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between chunks")
    parser.add_argument("--wire", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--hosts", default=",".join(HOSTS), help="which of them to run (the ratios need all)"
    )
    cli = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed")
    os.environ[API_KEY_ENV] = API_KEY
    os.environ["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
    print(
        f"instructions per chunk under callgrind, {cli.wire} wire, N={cli.n} streams, "
        f"{cli.chunks} and {2 * cli.chunks} chunks every {cli.interval:g} s; "
        f"Python {platform.python_version()}"
    )
    hosts = [h for h in HOSTS if h in cli.hosts.split(",")]
    counts: dict[str, dict[int, int]] = {host: {} for host in hosts}
    with LoopbackServer() as provider, tempfile.TemporaryDirectory(prefix="bench-ir-") as tmp:
        if keep := os.environ.get("BENCH_KEEP"):  # keep the logs and reports
            os.makedirs(keep, exist_ok=True)
            tmp = keep

        def command_for(host: str, n: int, command: list[str]) -> list[str]:
            """`command` under callgrind; the aiohttp relay is this file's own."""
            if host == "relay-aiohttp":
                command = [os.path.abspath(__file__), "--relay", command[-1]]
            elif command[0] == sys.executable:
                command = command[1:]
            cg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/{host}.cg"]
            return [*cg, sys.executable, *command]

        def scenario(chunks: int, interval: float, **more: Any) -> Any:
            """mcpl_router.run_size's arguments for one run."""
            return argparse.Namespace(
                chunks=chunks, interval=interval, wire=cli.wire, traces=False, profile=None,
                tracemalloc=None, timeout=cli.timeout, **more,
            )  # fmt: skip

        for host in hosts:  # unmeasured: writes the .pyc files a run imports
            mcpl_router.run_size(scenario(1, 0.01), host, 2, provider, tmp)
        for chunks in (cli.chunks, 2 * cli.chunks):
            for host in hosts:
                args = scenario(chunks, cli.interval, command_for=command_for)
                run = mcpl_router.run_size(args, host, cli.n, provider, tmp)
                if run["problems"]:
                    raise SystemExit(f"{host}: {run['problems'][0]}")
                report = f"{tmp}/{host}-{chunks}.cg"  # kept with BENCH_KEEP, for callgrind_annotate
                os.replace(f"{tmp}/{host}.cg", report)
                counts[host][chunks] = instructions(report)
                print(
                    f"  {host:>9} {chunks:>3} chunks: {counts[host][chunks] / 1e9:8.3f} G "
                    f"instructions, {run['chunks_per_s']:6.0f} chunks/s, "
                    f"p99 {run['p99_ms']:.0f} ms"
                )
    extra = cli.n * cli.chunks
    per_chunk = {host: (by[2 * cli.chunks] - by[cli.chunks]) / extra for host, by in counts.items()}
    print(
        "instructions per chunk (runs' difference): "
        + ", ".join(f"{host} {count:,.0f}" for host, count in per_chunk.items())
    )
    figures: dict[str, Any] = {
        "instructions_per_chunk": {h: round(v) for h, v in per_chunk.items()}
    }
    if len(per_chunk) == len(HOSTS):
        ratio = per_chunk["agentcore"] / per_chunk["relay"]
        client = per_chunk["relay-aiohttp"] / per_chunk["relay"]
        verdict = "met" if ratio <= TARGET else "missed"
        print(
            f"agentcore/relay {ratio:.2f}x (target {TARGET}x: {verdict}); the relay on "
            f"aiohttp/relay {client:.2f}x (what the HTTP client alone adds)"
        )
        figures |= {
            "agentcore_over_relay": round(ratio, 3),
            "aiohttp_relay_over_relay": round(client, 3),
        }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--relay"]:  # the aiohttp relay, as a host process
        import asyncio
        import tomllib

        with open(sys.argv[2], "rb") as f:
            sys.exit(asyncio.run(AiohttpRelay(tomllib.load(f)).run()))
    sys.exit(main())
