"""SQLite: an append that meets another connection's write lock waits for it (through SQLite's
busy handler, or in short steps of our own with ``lock_wait=short``), for at most the busy
timeout, and then says so; the writer stays usable. So does every other write transaction."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from wgstore.events import EventStore, StoreUnavailableError
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def _event(reason: str) -> WorkerGroupShutdownRequested:
    return WorkerGroupShutdownRequested(reason=reason)


LOCK_WAITS = pytest.mark.parametrize("lock_wait", ["sqlite", "short"])


def _blocked_until_released(holder: sqlite3.Connection, write: Callable[[], object]) -> None:
    """Run ``write`` in a thread while ``holder`` holds the write lock: it must wait (not fail)
    until ``holder`` rolls back, then go through."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            write()
        except BaseException as error:  # noqa: BLE001 - reported below
            failed.append(error)
        finally:
            done.set()

    try:
        threading.Thread(target=run, daemon=True).start()
        assert not done.wait(0.5), failed  # blocked behind the lock, not failed
    finally:
        holder.execute("ROLLBACK")
    assert done.wait(60) and not failed, failed


@LOCK_WAITS
@pytest.mark.parametrize("first_append", ["cached heads", "locked read"])
def test_an_append_waits_for_another_writers_lock_and_lands_once_it_is_released(
    tmp_path: Path, first_append: str, lock_wait: str
) -> None:
    path = tmp_path / "wgstore.db"
    url = f"sqlite:///{path}?busy_timeout=120&lock_wait={lock_wait}"
    with EventStore.open(url) as store:
        if first_append == "cached heads":  # the next append takes the cached-heads path
            store.append("s-1", [_event("before")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of an append
        try:
            _blocked_until_released(other, lambda: store.append("s-1", [_event("while locked")]))
        finally:
            other.close()
        reasons = [r.event.reason for r in store.read_stream("s-1")]
        writer = store.recorder._writer.driver_connection  # type: ignore[attr-defined]
        assert writer.execute("PRAGMA busy_timeout").fetchone()[0] == 120_000  # as it was
    assert reasons == (["before"] if first_append == "cached heads" else []) + ["while locked"]


@LOCK_WAITS
def test_an_append_gives_up_after_the_busy_timeout_with_the_reason_and_writes_nothing(
    tmp_path: Path, lock_wait: str
) -> None:
    path = tmp_path / "wgstore.db"
    url = f"sqlite:///{path}?busy_timeout=0.3&lock_wait={lock_wait}"
    with EventStore.open(url) as store:
        store.append("s-1", [_event("before")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match=r"busy_timeout=SECONDS") as waited:
                store.append("s-1", [_event("refused")])
            assert time.monotonic() - started >= 0.3  # it waited its busy timeout
            # The holder is named (this process, here), and naming it took no lock from it:
            # a descriptor of the -shm file opened and closed here would have dropped them all.
            assert f"held by process {os.getpid()}" in str(waited.value)
            assert "stopped" not in str(waited.value)
            # (Asked of another process: this one's SQLite keeps its own books of its locks.)
            try_lock = "import sqlite3, sys; sqlite3.connect(sys.argv[1], timeout=0).execute('BEGIN IMMEDIATE')"
            tried = subprocess.run(
                [sys.executable, "-c", try_lock, str(path)], capture_output=True, text=True
            )
            assert tried.returncode != 0 and "database is locked" in tried.stderr, tried
        finally:
            other.execute("ROLLBACK")
            other.close()
        store.append("s-1", [_event("after")])  # the writer is usable again
        assert [r.event.reason for r in store.read_stream("s-1")] == ["before", "after"]


@LOCK_WAITS
def test_any_write_transaction_waits_for_the_lock_and_gives_up_after_the_busy_timeout(
    tmp_path: Path, lock_wait: str
) -> None:
    """The projector's and the leases' transactions (``store.engine.begin()``) wait as the
    appends do: blocked while another connection holds the lock, through once it is released,
    refused after the busy timeout."""
    import sqlalchemy as sa

    path = tmp_path / "wgstore.db"
    with EventStore.open(f"sqlite:///{path}?busy_timeout=120&lock_wait={lock_wait}") as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")

        def write() -> None:
            with store.engine.begin() as connection:
                connection.execute(sa.text("CREATE TABLE mine (n INTEGER)"))

        _blocked_until_released(other, write)
        impatient = EventStore.open(f"sqlite:///{path}?busy_timeout=0.3&lock_wait={lock_wait}")
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with (
                pytest.raises(sa.exc.OperationalError, match="database is locked"),
                impatient.engine.begin() as connection,
            ):
                connection.execute(sa.text("INSERT INTO mine VALUES (1)"))
            assert time.monotonic() - started >= 0.3
        finally:
            other.execute("ROLLBACK")
            other.close()
            impatient.close()


def test_short_waits_give_up_after_their_time_and_leave_the_busy_timeout_as_it_was(
    tmp_path: Path,
) -> None:
    from wgstore.events.engine import begin_immediate

    path = tmp_path / "plain.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    waiter = sqlite3.connect(path, isolation_level=None)
    waiter.execute("PRAGMA busy_timeout = 5000")
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            begin_immediate(waiter.execute, 0.2)
        assert 0.2 <= time.monotonic() - started < 5  # its own time, not the busy timeout
        assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert not waiter.in_transaction
    finally:
        holder.execute("ROLLBACK")
    begin_immediate(waiter.execute, 0.2)  # free: taken at once
    assert waiter.in_transaction
    waiter.execute("ROLLBACK")
    holder.close()
    waiter.close()


def test_a_lock_wait_that_is_not_one_says_which_there_are(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match=r"lock_wait='soon'.*sqlite, short"):
        EventStore.open(f"sqlite:///{tmp_path}/wgstore.db?lock_wait=soon")
