"""Who holds a SQLite database's write lock, and whether that process is stopped.

In WAL mode (every writable store) SQLite's write lock is a POSIX record lock on one byte of the
database's ``-shm`` file: ``WAL_WRITE_LOCK``, byte 120 (``UNIX_SHM_BASE``, SQLite's os_unix.c).
``fcntl(F_GETLK)`` names the process that holds it, and ``/proc/<pid>/stat`` says whether that
process is stopped (SIGSTOP, Ctrl-Z, a debugger). A stopped process keeps its locks: every
writer of the database waits until it is continued or ends, and nothing can take the lock from
it. Used only to say so in the error of a write that waited out its busy timeout.

Linux only (the ``flock`` layout and ``/proc``); elsewhere nothing is known. A lock held by this
process (another of its connections) is not reported: POSIX locks do not conflict with their
own process.
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WAL_WRITE_LOCK_BYTE", "LockHolder", "write_lock_holder"]

WAL_WRITE_LOCK_BYTE = 120
"""The byte of the ``-shm`` file whose lock is SQLite's WAL write lock."""
_FLOCK = "hhqqi"  # struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid


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
        if self.stopped:
            return (
                f"its write lock is held by {who}, which is stopped (SIGSTOP, Ctrl-Z or a "
                "debugger): it keeps the lock, and every writer of this database waits, until "
                f"it is continued (kill -CONT {self.pid}) or ends"
            )
        return f"its write lock is held by {who}"


def write_lock_holder(database: str | Path) -> LockHolder | None:
    """The process that holds the write lock of the WAL database at ``database``, or None when
    no other process holds it, or it cannot be known (not Linux, no ``-shm`` file)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = os.open(f"{database}-shm", os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, WAL_WRITE_LOCK_BYTE, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _, _, _, pid = struct.unpack(_FLOCK, answer)
    if kind == fcntl.F_UNLCK or pid <= 0:
        return None
    return LockHolder(pid, _state(pid), _command(pid))


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
