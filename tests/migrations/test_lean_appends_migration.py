"""Migration 0008: the partial type index (both backends) and SQLite's wg_events rebuilt without
AUTOINCREMENT, carrying every row across unchanged."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.pooled_recorder import PooledRecorder
from wgstore.events.schema import TYPE_INDEX_WHERE
from wgstore.events.worker_group import (
    WorkerGroupPolled,
    WorkerGroupShutdownRequested,
    WorkerReported,
)
from wgstore.migrations.runner import HEAD_REVISION, current_revision, downgrade, upgrade

BEFORE = "0007_run_read_models"


def _rows(store: EventStore) -> list[tuple[object, ...]]:
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(
            "SELECT * FROM wg_events ORDER BY position"
        )]  # fmt: skip


def _events(n: int, kinds: int = 3) -> list[object]:
    at = datetime(2026, 11, 30, tzinfo=UTC)
    makers = [
        lambda i: WorkerReported(world_rank=0, index=i, metrics={"step": i}),
        lambda i: WorkerGroupPolled(poll_seq=i + 1, polled_at=at),
        lambda i: WorkerGroupShutdownRequested(reason=f"r{i}"),
    ]
    return [makers[i % kinds](i) for i in range(n)]


def _sql(store: EventStore, statement: str) -> list[tuple[object, ...]]:
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(statement)]


def test_upgrading_keeps_every_row_and_the_chains_and_positions_continue(
    store_url: str,
) -> None:
    with EventStore.open(store_url, hmac_key=b"k" * 32) as store:
        with store.engine.begin() as connection:
            downgrade(connection, BEFORE)
        for stream in range(4):
            store.append(f"worker-group-{stream}", _events(30))
        before = _rows(store)
        with store.engine.begin() as connection:
            upgrade(connection)
            assert current_revision(connection) == HEAD_REVISION
        assert _rows(store) == before
        assert store.verify().ok
        [record] = store.append("worker-group-0", [WorkerGroupShutdownRequested(reason="after")])
        assert record.position == len(before) + 1
        assert store.verify().ok
        if store.is_postgres:
            return
        # SQLite: no AUTOINCREMENT any more, so no sequence row is kept (or written) for the log.
        ddl = _sql(store, "SELECT sql FROM sqlite_master WHERE name = 'wg_events'")[0][0]
        assert "AUTOINCREMENT" not in str(ddl)
        assert _sql(store, "SELECT seq FROM sqlite_sequence WHERE name = 'wg_events'") == []
        names = {row[0] for row in _sql(store, "SELECT name FROM sqlite_master")}
        assert {"wg_events_no_update", "wg_events_no_delete", "wg_event_log"} <= names
        assert "wg_events_new" not in names


def test_the_rebuilt_sqlite_log_still_refuses_updates_and_deletes(sqlite_url: str) -> None:
    with EventStore.open(sqlite_url) as store:
        store.append("s-1", [WorkerGroupShutdownRequested(reason="kept")])
        for statement in ("UPDATE wg_events SET data = '{}'", "DELETE FROM wg_events"):
            with (
                pytest.raises(sa.exc.IntegrityError, match="append-only"),
                store.engine.begin() as connection,
            ):
                connection.exec_driver_sql(statement)
        assert [r.event.reason for r in store.read_stream("s-1")] == ["kept"]


def test_downgrading_restores_autoincrement_and_the_full_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'down.db'}"
    with EventStore.open(url) as store:
        store.append("worker-group-a", _events(9))
        before = _rows(store)
        with store.engine.begin() as connection:
            downgrade(connection, BEFORE)
        assert _rows(store) == before
        ddl = _sql(store, "SELECT sql FROM sqlite_master WHERE name = 'wg_events'")[0][0]
        assert "AUTOINCREMENT" in str(ddl)
        index = _sql(
            store, "SELECT sql FROM sqlite_master WHERE name = 'ix_wg_events_event_type_position'"
        )[0][0]
        assert "WHERE" not in str(index)
        # The 0007 writer's head query reads sqlite_sequence: the copy left it at the last row.
        assert _sql(store, "SELECT seq FROM sqlite_sequence WHERE name = 'wg_events'") == [(9,)]
        with store.engine.begin() as connection:
            upgrade(connection)
        assert _rows(store) == before
        assert store.verify().ok


def test_a_read_of_rare_types_uses_the_partial_index(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EventStore.open(store_url) as store:
        store.append("worker-group-a", _events(3000, kinds=2))  # reports and polls only
        rare = [WorkerGroupShutdownRequested(reason=f"x{i}") for i in range(3)]
        store.append("worker-group-b", rare)
        found = [r.event.reason for r in store.read_all(types=["WorkerGroupShutdownRequested"])]
        assert found == ["x0", "x1", "x2"]
        frequent = list(store.read_all(types=["WorkerReported"], limit=5))
        assert [r.type for r in frequent] == ["WorkerReported"] * 5
        mixed = {r.type for r in store.read_all(types=["WorkerReported", "WorkerGroupPolled"])}
        assert mixed == {"WorkerReported", "WorkerGroupPolled"}
        statements: list[str] = []
        recorder = store.recorder
        assert isinstance(recorder, PooledRecorder)
        fetch = recorder.fetch

        def capture(sql: str, params: Sequence[Any]) -> list[Any]:
            statements.append(sql)
            return fetch(sql, params)

        monkeypatch.setattr(recorder, "fetch", capture)
        stream_rows = recorder.stream_rows  # Postgres streams its pages: the SQL goes through here
        if stream_rows is not None:

            def capture_streamed(cursor: Any, sql: str, params: Sequence[Any]) -> Any:
                statements.append(sql)
                return stream_rows(cursor, sql, params)

            monkeypatch.setattr(recorder, "stream_rows", capture_streamed)
        list(store.read_all(types=["WorkerGroupShutdownRequested"]))
        [select] = statements
        explain = "EXPLAIN" if store.is_postgres else "EXPLAIN QUERY PLAN"
        with store.engine.begin() as connection:
            if store.is_postgres:
                connection.exec_driver_sql("ANALYZE wg_events")
            plan = connection.exec_driver_sql(
                f"{explain} {select}", (0, "WorkerGroupShutdownRequested")
            ).all()
        assert "ix_wg_events_event_type_position" in str(plan), plan


def test_the_migration_and_the_schema_name_the_same_frequent_types() -> None:
    migration = importlib.import_module("wgstore.migrations.versions.0008_lean_appends")
    assert migration.TYPE_INDEX_WHERE == TYPE_INDEX_WHERE


def test_the_sqlite_rebuild_keeps_the_users_own_views_indexes_and_triggers(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'theirs.db'}"
    with EventStore.open(url) as store:
        with store.engine.begin() as connection:
            downgrade(connection, BEFORE)
            for statement in (
                "CREATE VIEW my_reports AS SELECT position, data FROM wg_events "
                "WHERE event_type = 'WorkerReported'",
                "CREATE INDEX my_recorded_at ON wg_events (recorded_at)",
                "CREATE TABLE my_counter (n INTEGER NOT NULL)",
                "INSERT INTO my_counter VALUES (0)",
                "CREATE TRIGGER my_count AFTER INSERT ON wg_events "
                "BEGIN UPDATE my_counter SET n = n + 1; END",
            ):
                connection.exec_driver_sql(statement)
        store.append("worker-group-a", _events(6))
        with store.engine.begin() as connection:
            upgrade(connection)
        store.append("worker-group-a", _events(3))
        assert len(_sql(store, "SELECT * FROM my_reports")) == 2 + 1
        assert _sql(store, "SELECT n FROM my_counter") == [(9,)]
        plan = _sql(store, "EXPLAIN QUERY PLAN SELECT * FROM wg_events WHERE recorded_at > ''")
        assert "my_recorded_at" in str(plan)
        names = {row[0] for row in _sql(store, "SELECT name FROM sqlite_master")}
        assert "wg_events_new" not in names
        assert store.verify().ok
