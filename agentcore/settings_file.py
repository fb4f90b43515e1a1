"""Reading the settings file: only a regular file of a settings file's size.

``--settings /dev/zero`` once read until the process held gigabytes, and a named pipe
blocked a SIGHUP reload until something wrote to it. The file is opened without blocking,
looked at (`fstat`), and refused unless it is a regular file; at most `MAX_SETTINGS_BYTES`
are read. Every way it cannot be used is a `SettingsError` naming the path.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from agentcore._constants import MAX_SETTINGS_BYTES as MAX_SETTINGS_BYTES

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class SettingsError(Exception):
    """Settings that cannot be used; each problem names where it came from and what was expected."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


def read_settings_bytes(path: Path) -> bytes:
    """The file's bytes; refused (`SettingsError`) unless it is a regular file of at most
    `MAX_SETTINGS_BYTES`. Never blocks: a FIFO is opened non-blocking and refused unread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SettingsError([f"{path}: no such settings file"]) from None
    except OSError as exc:
        raise SettingsError([f"{path}: cannot be read: {exc.strerror or exc}"]) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise SettingsError([f"{path}: is {kind}, not a settings file"])
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(MAX_SETTINGS_BYTES + 1)
        except OSError as exc:
            raise SettingsError([f"{path}: cannot be read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(
            [f"{path}: is larger than {MAX_SETTINGS_BYTES} bytes, the most a settings file holds"]
        )
    return data


def read_toml(path: Path) -> dict[str, Any]:
    """The file's values; any way it cannot be read is a `SettingsError` naming it."""
    data = read_settings_bytes(path)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SettingsError(
            [f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError([f"{path}: not valid TOML: {exc}"]) from None
