"""``agentcore serve`` under tracemalloc: what the host holds at its peak that it no longer
holds at its end, by line and by traceback (``bench/mcpl_router.py --tracemalloc DIR``).

    .venv/bin/python bench/traced_serve.py REPORT serve --settings PATH

A thread snapshots the traced memory whenever it has grown (every 250 ms); at exit the
largest snapshot is compared with the last and the top lines written to REPORT. With N
streams in flight at the peak, a line's size over N is what each stream holds there.
Tracing makes the host several times slower: read its report, not its timings.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import tracemalloc

FRAMES = 8
TOP = 30


def main() -> int:
    report = sys.argv[1]
    tracemalloc.start(FRAMES)
    peak: list[tracemalloc.Snapshot] = []
    largest = 0

    def watch() -> None:
        nonlocal largest
        while True:
            time.sleep(0.25)
            traced, _ = tracemalloc.get_traced_memory()
            if traced > largest * 1.02:
                largest = traced
                peak[:] = [tracemalloc.take_snapshot()]

    def write() -> None:
        end = tracemalloc.take_snapshot()
        traced, _ = tracemalloc.get_traced_memory()
        with open(report, "w") as out:
            out.write(
                f"traced at the peak {largest / 1e6:.1f} MB, at the end {traced / 1e6:.1f} MB\n"
            )
            if not peak:
                return
            out.write("\n-- held at the peak and not at the end, by line\n")
            for stat in peak[0].compare_to(end, "lineno")[:TOP]:
                out.write(f"{stat}\n")
            out.write("\n-- the same, by traceback\n")
            for stat in peak[0].compare_to(end, "traceback")[: TOP // 2]:
                out.write(f"\n{stat.size_diff / 1e3:.0f} KB in {stat.count_diff} blocks\n")
                out.write("\n".join(stat.traceback.format()) + "\n")

    threading.Thread(target=watch, daemon=True).start()
    atexit.register(write)
    sys.argv = ["agentcore", *sys.argv[2:]]
    from agentcore.cli import main as agentcore

    agentcore()  # click's: exits with the command's status
    return 0


if __name__ == "__main__":
    sys.exit(main())
