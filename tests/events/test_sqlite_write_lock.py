"""SQLite: an append that meets another connection's write lock waits for it (SQLite's busy
handler), for at most the busy timeout, and then says so; the writer stays usable."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from wgstore.events import EventStore, StoreUnavailableError
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def _event(reason: str) -> WorkerGroupShutdownRequested:
    return WorkerGroupShutdownRequested(reason=reason)


@pytest.mark.parametrize("first_append", ["cached heads", "locked read"])
def test_an_append_waits_for_another_writers_lock_and_lands_once_it_is_released(
    tmp_path: Path, first_append: str
) -> None:
    path = tmp_path / "wgstore.db"
    url = f"sqlite:///{path}?busy_timeout=120"
    with EventStore.open(url) as store:
        if first_append == "cached heads":  # the next append takes the cached-heads path
            store.append("s-1", [_event("before")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of an append
        done = threading.Event()
        failed: list[BaseException] = []

        def append() -> None:
            try:
                store.append("s-1", [_event("while locked")])
            except BaseException as error:  # noqa: BLE001 - reported below
                failed.append(error)
            finally:
                done.set()

        appending = threading.Thread(target=append, daemon=True)
        try:
            appending.start()
            assert not done.wait(0.5), failed  # blocked behind the lock, not failed
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert done.wait(60) and not failed, failed
        reasons = [r.event.reason for r in store.read_stream("s-1")]
    assert reasons == (["before"] if first_append == "cached heads" else []) + ["while locked"]


def test_an_append_gives_up_after_the_busy_timeout_with_the_reason_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wgstore.db"
    url = f"sqlite:///{path}?busy_timeout=0.3"
    with EventStore.open(url) as store:
        store.append("s-1", [_event("before")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match=r"busy_timeout=SECONDS"):
                store.append("s-1", [_event("refused")])
            assert time.monotonic() - started >= 0.3  # it waited its busy timeout
        finally:
            other.execute("ROLLBACK")
            other.close()
        store.append("s-1", [_event("after")])  # the writer is usable again
        assert [r.event.reason for r in store.read_stream("s-1")] == ["before", "after"]
