"""Faults: a writer killed mid-batch, tampering with the log, with and without the triggers."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from wgstore.events import EventStore, ImmutableEventError
from wgstore.events.worker_group import WorkerGroupShutdownRequested

SCRIPTS = Path(__file__).parent / "scripts"


def _writer_holds_the_write_lock(store: EventStore, pid: int) -> bool:
    if store.is_postgres:
        with store.engine.connect() as connection:
            return bool(
                connection.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.relation = 'wg_events'::regclass AND l.mode = 'ExclusiveLock' "
                        "AND l.granted AND a.application_name = '' AND a.pid <> pg_backend_pid()"
                    )
                ).scalar()
            )
    database = store.engine.url.database
    probe = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


@pytest.mark.slow
def test_a_writer_killed_in_the_middle_of_a_batch_leaves_none_of_it(
    store: EventStore, store_url: str
) -> None:
    store.append("victim", [WorkerGroupShutdownRequested(reason="before")])
    writer = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "big_batch_writer.py"), store_url, "60000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "encoding done"
    deadline = time.monotonic() + 30
    while not _writer_holds_the_write_lock(store, writer.pid):
        assert time.monotonic() < deadline, "the writer never started its transaction"
        assert writer.poll() is None, "the writer finished before it could be killed"
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert "done" not in (writer.stdout.read() or "")

    assert [r.event.reason for r in store.read_stream("victim")] == ["before"]
    assert store.verify().ok
    store.append("victim", [WorkerGroupShutdownRequested(reason="after")], expected_version=1)
    assert store.stream_version("victim") == 2


def test_update_and_delete_of_events_are_refused(store: EventStore) -> None:
    store.append("s-1", [WorkerGroupShutdownRequested(reason="a")])
    statements = [
        "UPDATE wg_events SET event_type = 'Forged'",
        "DELETE FROM wg_events",
    ]
    if store.is_postgres:
        statements.append("TRUNCATE wg_events")
    for statement in statements:
        with pytest.raises(ImmutableEventError, match="append-only"):
            from wgstore.events._translate import translate_errors

            with translate_errors(store.url), store.engine.begin() as connection:
                connection.exec_driver_sql(statement)
    assert [r.event.reason for r in store.read_stream("s-1")] == ["a"]


def _tamper(store: EventStore, *statements: str) -> None:
    """Change the log behind the store's back, triggers disabled."""
    with store.engine.begin() as connection:
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events DISABLE TRIGGER USER")
            for statement in statements:
                connection.exec_driver_sql(statement)
            connection.exec_driver_sql("ALTER TABLE wg_events ENABLE TRIGGER USER")
        else:
            connection.exec_driver_sql("DROP TRIGGER wg_events_no_update")
            connection.exec_driver_sql("DROP TRIGGER wg_events_no_delete")
            for statement in statements:
                connection.exec_driver_sql(statement)


def _payload_edit(store: EventStore) -> str:
    if store.is_postgres:
        return "UPDATE wg_events SET data = jsonb_set(data, '{reason}', '\"forged\"') WHERE stream_version = 2"
    return (
        "UPDATE wg_events SET data = replace(data, '\"b\"', '\"forged\"') WHERE stream_version = 2"
    )


def test_verify_finds_a_payload_changed_with_the_triggers_disabled(store: EventStore) -> None:
    store.append("s-1", [WorkerGroupShutdownRequested(reason=r) for r in "abc"])
    store.append("s-2", [WorkerGroupShutdownRequested(reason="untouched")])
    _tamper(store, _payload_edit(store))
    report = store.verify()
    assert not report.ok
    assert len(report.problems) == 1
    assert "'s-1'" in report.problems[0] and "version 2" in report.problems[0]
    assert store.verify("s-2").ok


def test_verify_finds_an_event_removed_from_the_middle_of_a_stream(store: EventStore) -> None:
    store.append("s-1", [WorkerGroupShutdownRequested(reason=r) for r in "abc"])
    _tamper(store, "DELETE FROM wg_events WHERE stream_version = 2")
    report = store.verify()
    assert not report.ok
    assert any("missing or out of order" in problem for problem in report.problems)


def test_verify_finds_events_swapped_between_positions(store: EventStore) -> None:
    store.append("s-1", [WorkerGroupShutdownRequested(reason=r) for r in "abc"])
    _tamper(
        store,
        "UPDATE wg_events SET stream_version = 100 WHERE stream_version = 2",
        "UPDATE wg_events SET stream_version = 2 WHERE stream_version = 3",
        "UPDATE wg_events SET stream_version = 3 WHERE stream_version = 100",
    )
    report = store.verify()
    assert not report.ok
    assert any("does not match its hash" in problem for problem in report.problems)
