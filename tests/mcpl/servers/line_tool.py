"""A line-level probe for the stdio transport tests (stdlib only).

argv[1] picks what it does:

- ``env``: print one JSON line with $PROBE_VAR, whether PATH is set, and the cwd;
  write "hello from stderr" to stderr; then echo every stdin line to stdout
- ``big SIZE``: print a line of SIZE bytes, then ``{"after":"big"}``, then echo
- ``tail``: print ``{"no":"newline"}`` with no newline and exit
- ``latin1``: print a line that is not UTF-8, then ``{"ok":1}``, then exit
- ``stubborn``: ignore SIGTERM, print ``ready``, then sleep until killed (stdin EOF
  included)
- ``cleanup PATH``: print ``ready``, read stdin to EOF, then take a moment for its
  cleanup, write ``cleaned up`` to PATH and exit 0; SIGTERM kills it at once (the
  default action), as it does a server built on the MCP SDK before its lifespan cleanup
- ``record PATH``: ignore SIGTERM, print ``ready``; then for each read of stdin, append
  the bytes to PATH and print ``{"read":N}``, N the bytes that read returned; exit at EOF
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

out = sys.stdout.buffer


def echo() -> None:
    for line in sys.stdin.buffer:
        out.write(line)
        out.flush()


def main() -> None:
    mode = sys.argv[1]
    if mode == "env":
        info = {
            "probe": os.environ.get("PROBE_VAR"),
            "path": bool(os.environ.get("PATH")),
            "cwd": os.getcwd(),
        }
        out.write(json.dumps(info).encode() + b"\n")
        out.flush()
        sys.stderr.write("hello from stderr\n")
        sys.stderr.flush()
        echo()
    elif mode == "big":
        size = int(sys.argv[2])
        chunk = b"x" * 65536
        remaining = size
        while remaining > 0:
            out.write(chunk[: min(remaining, len(chunk))])
            remaining -= len(chunk)
        out.write(b'\n{"after":"big"}\n')
        out.flush()
        echo()
    elif mode == "tail":
        out.write(b'{"no":"newline"}')
        out.flush()
    elif mode == "latin1":
        out.write(b'{"name":"\xe9t\xe9"}\n{"ok":1}\n')
        out.flush()
    elif mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out.write(b"ready\n")
        out.flush()
        while True:
            time.sleep(60)
    elif mode == "cleanup":
        out.write(b"ready\n")
        out.flush()
        while os.read(0, 65536):
            pass
        time.sleep(0.3)
        with open(sys.argv[2], "w") as marker:
            marker.write("cleaned up")
    elif mode == "record":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it stops at EOF, after recording
        out.write(b"ready\n")
        out.flush()
        with open(sys.argv[2], "ab", buffering=0) as record:
            while data := os.read(0, 1 << 20):
                record.write(data)
                out.write(b'{"read":%d}\n' % len(data))
                out.flush()


if __name__ == "__main__":
    main()
