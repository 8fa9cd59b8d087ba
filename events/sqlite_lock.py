"""Who holds a SQLite database's write lock, and whether that process is stopped.

In WAL mode (every writable store) SQLite's write lock is a POSIX record lock on one byte of the
database's ``-shm`` file: ``WAL_WRITE_LOCK``, byte 120 (``UNIX_SHM_BASE``, SQLite's os_unix.c).
``/proc/locks`` names the process that holds it, and ``/proc/<pid>/stat`` says whether that
process is stopped (SIGSTOP, Ctrl-Z, a debugger). A stopped process keeps its locks: every
writer of the database waits until it is continued or ends, and nothing can take the lock from
it. Used only to say so in the error of a write that waited out its busy timeout.

The ``-shm`` file is never opened here (only ``stat``-ed, to match its inode): closing any
descriptor of a file drops every POSIX lock this process holds on it, SQLite's own among them
(which is why ``fcntl(F_GETLK)`` on a descriptor of our own is not used). Linux only
(``/proc``); elsewhere nothing is known.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WAL_WRITE_LOCK_BYTE", "LockHolder", "write_lock_holder"]

WAL_WRITE_LOCK_BYTE = 120
"""The byte of the ``-shm`` file whose lock is SQLite's WAL write lock."""


@dataclass(frozen=True, slots=True)
class LockHolder:
    """The process holding a database's write lock, as ``/proc`` shows it."""

    pid: int
    state: str
    """The process state letter of ``/proc/<pid>/stat`` (``R``, ``S``, ``T`` ...), "" unknown."""
    command: str
    """Its command line, shortened; "" unknown."""

    @property
    def stopped(self) -> bool:
        """True when the process is stopped (by a signal or a debugger): it runs no code and
        releases nothing until it is continued."""
        return self.state in ("T", "t")

    def describe(self) -> str:
        """One clause for an error message: who holds the lock, and what that means."""
        who = f"process {self.pid}" + (f" ({self.command})" if self.command else "")
        if self.pid == os.getpid():
            who += ", this one (another of its connections)"
        if self.stopped:
            return (
                f"its write lock is held by {who}, which is stopped (SIGSTOP, Ctrl-Z or a "
                "debugger): it keeps the lock, and every writer of this database waits, until "
                f"it is continued (kill -CONT {self.pid}) or ends"
            )
        return f"its write lock is held by {who}"


def write_lock_holder(database: str | Path) -> LockHolder | None:
    """The process that holds the write lock of the WAL database at ``database``, or None when
    none does, or it cannot be known (not Linux, no ``-shm`` file)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        shm = os.stat(f"{database}-shm")
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        # "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 120 120"; a waiter's line has "->"
        fields = line.split()
        if len(fields) != 8 or fields[1] != "POSIX" or fields[3] != "WRITE":
            continue
        pid, device, start, end = fields[4], fields[5], fields[6], fields[7]
        last = float("inf") if end == "EOF" else int(end)
        if not int(start) <= WAL_WRITE_LOCK_BYTE <= last:
            continue
        major, minor, inode = device.split(":")
        if (int(major, 16), int(minor, 16), int(inode)) == (
            os.major(shm.st_dev),
            os.minor(shm.st_dev),
            shm.st_ino,
        ):
            return LockHolder(int(pid), _state(int(pid)), _command(int(pid)))
    return None


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :][:1]  # the field after "pid (comm) "


def _command(pid: int, limit: int = 80) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
