"""N concurrent streamed `inference/request`s through `agentcore serve`, per chunk.

Three processes, as in a deployment:

- the loopback provider (`agentcore.testing`, Anthropic wire by default), on a thread
  of this process, playing each call as `chunks` text chunks `interval` seconds apart,
  each stamped with its emission time (``timestamps=True``: `Call.emitted_at`). The
  calls start spread evenly over one interval, as independent users' streams would;
- ``agentcore serve --settings PATH``, a real subprocess, with every default plugin;
- this file run as a stdlib-only stdio MCPL server (``--server``), spawned by serve:
  it sends N streamed requests at once, and stamps each chunk with the time it read it.

For N in `--sizes` it prints chunks per second (all chunks, over the time from the
first request to the last answer), the added latency per chunk (arrival at the MCPL
server minus the provider's emission, same clock; p50, p99, max), and the host
process's peak RSS (VmHWM). Every request must be answered with a result and
exactly its chunks, in order. Target: N = 1000 answered, p99 added latency under 5 ms.

    .venv/bin/python bench/mcpl_router.py [--sizes 10,100,1000] [--chunks 20]
        [--interval 0.1] [--wire anthropic|openai] [--traces] [--profile DIR]

``--profile DIR`` runs serve under cProfile and writes ``DIR/serve-N.prof``.
Not part of ``make test``.
"""

from __future__ import annotations

import json
import os
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


# -- the benchmark ---------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Unfinished(Exception):
    """A size that did not finish: reported, and the next size is run."""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_size(args: Any, n: int, provider: Any, directory: str) -> dict[str, Any]:
    import signal
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
    out_path = os.path.join(directory, f"result-{n}.json")
    settings = provider.write_settings(
        os.path.join(directory, f"bench-{n}.toml"),
        {"lb": args.wire},
        inference={"progress_timeout_s": 60.0, "request_timeout_s": 600.0},
        sections={
            **(
                {"traces": {"jsonl": os.path.join(directory, f"traces-{n}.jsonl")}}
                if args.traces
                else {}
            ),
            "mcpl": {
                "servers": {
                    "bench": {
                        "command": [sys.executable, os.path.abspath(__file__), "--server"],
                        "env": {"BENCH_N": str(n), "BENCH_OUT": out_path},
                        "grant": ["inferenceRequest", "inferenceRequest.streaming"],
                        "max_frame_bytes": 64 * 1024 * 1024,
                    }
                },
                "routing": {"default": "lb:claude-bench"},
            },
        },
    )
    agentcore = os.path.join(os.path.dirname(sys.executable), "agentcore")
    serve = ["serve", "--settings", str(settings)]
    command = [agentcore, *serve]
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        prof = os.path.join(args.profile, f"serve-{n}.prof")
        command = [sys.executable, "-m", "cProfile", "-o", prof, agentcore, *serve]
    env = {**os.environ, "AGENTCORE_LOG_LEVEL": os.environ.get("AGENTCORE_LOG_LEVEL", "WARNING")}
    log = open(os.path.join(directory, f"serve-{n}.log"), "wb")  # noqa: SIM115
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + args.timeout
    rss = 0
    cpu_start = cpu_end = 0.0
    try:
        while not cpu_start:
            if process.poll() is not None:
                raise SystemExit(
                    f"agentcore serve exited with {process.returncode}; see {log.name}"
                )
            if time.monotonic() > deadline:
                raise SystemExit(f"N={n}: the server did not start in {args.timeout} s")
            if os.path.exists(out_path + ".started"):
                cpu_start = cpu_s(process.pid)
            time.sleep(0.002)
        while not os.path.exists(out_path):
            if process.poll() is not None:
                raise SystemExit(
                    f"agentcore serve exited with {process.returncode}; see {log.name}"
                )
            if time.monotonic() > deadline:
                raise Unfinished(f"not every request was answered within {args.timeout:g} s")
            rss = max(rss, peak_rss_kb(process.pid))
            time.sleep(0.05)
        cpu_end = cpu_s(process.pid)
        rss = max(rss, peak_rss_kb(process.pid))
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    if code != 0:
        raise SystemExit(f"agentcore serve exited {code} after SIGTERM; see {log.name}")

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
        "cpu_us_per_chunk": (cpu_end - cpu_start) / max(1, len(added)) * 1e6,
        "cpu_share": (cpu_end - cpu_start) / wall,
    }


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
    parser.add_argument("--traces", action="store_true", help="write [traces] jsonl too")
    parser.add_argument("--profile", metavar="DIR", help="run serve under cProfile")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    os.environ[API_KEY_ENV] = API_KEY

    print(
        f"agentcore serve, {args.wire} wire, {args.chunks} chunks per stream every "
        f"{args.interval * 1000:g} ms; Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    header = f"{'N':>6} {'chunks':>8} {'chunks/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
    print(
        header + f"{'max ms':>8} {'peak RSS':>9} {'host CPU/chunk':>14} {'host CPU':>8}  answered"
    )
    failed = False
    keep = os.environ.get("BENCH_KEEP")
    with LoopbackServer() as provider, tempfile.TemporaryDirectory(prefix="bench-mcpl-") as tmp:
        if keep:
            os.makedirs(keep, exist_ok=True)
            tmp = keep
        for n in (int(s) for s in args.sizes.split(",")):
            try:
                r = run_size(args, n, provider, tmp)
            except Unfinished as exc:
                print(f"{n:>6}  {exc}")
                failed = True
                continue
            print(
                f"{n:>6} {r['chunks']:>8} {r['chunks_per_s']:>9.0f} {r['p50_ms']:>8.2f} "
                f"{r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} {r['rss_mb']:>6.1f} MB "
                f"{r['cpu_us_per_chunk']:>11.0f} µs {r['cpu_share']:>7.0%}  "
                f"{r['answered']}/{n} in {r['wall_s']:.1f} s"
            )
            if r["problems"]:
                failed = True
                print(
                    f"        {len(r['problems'])} not answered as asked, e.g. {r['problems'][0]}"
                )
            if n >= 1000 and not r["p99_ms"] < 5.0:
                failed = True
    if failed:
        print("target missed: at N=1000 every request answered, p99 added latency under 5 ms")
    return 1 if failed else 0


if __name__ == "__main__":
    if "--server" in sys.argv[1:]:
        raise SystemExit(run_server())
    raise SystemExit(main())
