"""``agentcore serve`` under tracemalloc: what the host holds at its peak that it no longer
holds at its end, by line and by traceback (``bench/mcpl_router.py --tracemalloc DIR``).

    .venv/bin/python bench/traced_serve.py REPORT serve --settings PATH

A thread snapshots the traced memory whenever it has grown (every 250 ms); at exit the
largest snapshot is compared with the last and the top lines written to REPORT. With N
streams in flight at the peak, a line's size over N is what each stream holds there.
Tracing makes the host several times slower: read its report, not its timings.
``TRACED_FRAMES`` (8) and ``TRACED_TOP`` (30) set the frames kept and lines written;
``TRACED_DUMP=1`` also writes both snapshots beside REPORT (``.peak``, ``.end``), to
load with `tracemalloc.Snapshot.load`. A SIGUSR1 takes the snapshot reported instead
of the largest one (send it while every stream is open); with ``TRACED_DUMP`` each one
is kept too (``.mark1``, ``.mark2``...), to compare two moments of the same streams.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import tracemalloc

FRAMES = int(os.environ.get("TRACED_FRAMES", "8"))
TOP = int(os.environ.get("TRACED_TOP", "30"))


def main() -> int:
    report = sys.argv[1]
    tracemalloc.start(FRAMES)
    peak: list[tracemalloc.Snapshot] = []
    largest = marks = 0
    done = threading.Event()

    def mark(*_: object) -> None:
        """SIGUSR1: this moment is the one to report (say, every stream open mid-way),
        not the largest: a peak can be work that ends bunched, not what streams hold."""
        nonlocal largest, marks
        done.set()
        largest = tracemalloc.get_traced_memory()[0]
        peak[:] = [tracemalloc.take_snapshot()]
        marks += 1
        if os.environ.get("TRACED_DUMP"):  # each mark, to compare two moments of a stream
            peak[0].dump(f"{report}.mark{marks}")

    signal.signal(signal.SIGUSR1, mark)

    def watch() -> None:
        nonlocal largest
        while not done.wait(0.25):
            traced, _ = tracemalloc.get_traced_memory()
            if traced > largest * 1.02:
                snapshot = tracemalloc.take_snapshot()
                if not done.is_set():
                    largest, peak[:] = traced, [snapshot]

    def write() -> None:
        done.set()  # no snapshot of the report's own work as the peak
        time.sleep(0.3)
        end = tracemalloc.take_snapshot()
        traced, _ = tracemalloc.get_traced_memory()
        if peak and os.environ.get("TRACED_DUMP"):  # for questions the report does not answer
            peak[0].dump(f"{report}.peak")
            end.dump(f"{report}.end")
        with open(report, "w") as out:
            out.write(
                f"traced at the peak {largest / 1e6:.1f} MB, at the end {traced / 1e6:.1f} MB\n"
            )
            if not peak:
                return
            out.write("\n-- held at the peak and not at the end, by line\n")
            for stat in peak[0].compare_to(end, "lineno")[:TOP]:
                out.write(f"{stat}\n")
            out.write("\n-- the same, by file\n")
            for stat in peak[0].compare_to(end, "filename")[:TOP]:
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
