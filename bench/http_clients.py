"""The HTTP client's share of a streamed chunk, at many concurrent streams: httpx (on
httpcore) vs aiohttp, the client agentcore's providers use.

`bench/mcpl_router.py` finds the host's CPU per chunk at 1000 concurrent streams
dominated by the HTTP client stack. This isolates that stack: N concurrent SSE
streams from the loopback provider (`agentcore.testing`, on its own thread), each
`--chunks` text chunks `--interval` seconds apart, read on this thread by
(a) one pooled `httpx.AsyncClient` on its default transport (httpcore, `aiter_bytes`),
and (b) one `aiohttp.ClientSession` (`iter_any`; what the providers' driver reads
with), in the same run. (The hand-written HTTP/1.1 transport this once also measured,
at aiohttp's CPU per chunk, is gone: aiohttp replaced it.) It prints the CPU time of
the reading thread per chunk and the ratios to (a).
Only the bytes are read: no SSE decoding, no kernel, so the difference is the clients'.

    .venv/bin/python bench/http_clients.py [--streams 1000] [--chunks 20] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import httpx

from agentcore.testing import LoopbackServer, Scenario

BODY = {
    "model": "m",
    "max_tokens": 64,
    "stream": True,
    "messages": [{"role": "user", "content": "x"}],
}
HEADERS = {"x-api-key": "bench", "anthropic-version": "2023-06-01"}


async def read_with_httpx(client: httpx.AsyncClient, url: str, streams: int) -> int:
    async def one() -> int:
        got = 0
        async with client.stream("POST", url, json=BODY, headers=HEADERS) as response:
            async for chunk in response.aiter_bytes():
                got += len(chunk)
        return got

    async with client:
        return sum(await asyncio.gather(*(one() for _ in range(streams))))


async def with_httpx(url: str, streams: int) -> int:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    return await read_with_httpx(httpx.AsyncClient(limits=limits, timeout=60), url, streams)


async def with_aiohttp(url: str, streams: int) -> int:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            got = 0
            async with session.post(url, json=BODY, headers=HEADERS) as response:
                async for chunk in response.content.iter_any():
                    got += len(chunk)
            return got

        return sum(await asyncio.gather(*(one() for _ in range(streams))))


def measure(
    server: LoopbackServer,
    read: Callable[[str, int], Coroutine[Any, Any, int]],
    args: argparse.Namespace,
) -> float:
    """CPU seconds of this thread per chunk for one round of `args.streams` streams."""
    scenario = Scenario.text(" ".join(["word"] * args.chunks), chunk_delay_s=args.interval)
    server.script(*[scenario] * args.streams)
    start = time.thread_time()
    got = asyncio.run(read(server.url + "/v1/messages", args.streams))
    spent = time.thread_time() - start
    assert got > 0
    return spent / int(args.streams * args.chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    clients = {
        "(a) httpx, httpcore": with_httpx,
        "(b) aiohttp": with_aiohttp,
    }
    server = LoopbackServer().start_in_thread()
    try:
        best = dict.fromkeys(clients, float("inf"))
        for _ in range(args.rounds):  # interleaved, best of each: the machine is shared
            for name, read in clients.items():
                best[name] = min(best[name], measure(server, read, args))
    finally:
        server.stop_in_thread()
    print(
        f"{args.streams} concurrent streams, {args.chunks} chunks each, {args.interval} s apart; "
        f"CPU of the reading thread per chunk, best of {args.rounds}"
    )
    peer = best["(a) httpx, httpcore"]
    for name, spent in best.items():
        print(f"  {name:<28} {spent * 1e6:8.1f} µs   {spent / peer:.2f}x")


if __name__ == "__main__":
    main()
