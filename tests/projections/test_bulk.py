"""projections.bulk.insert_rows writes what SQLAlchemy's executemany of the same INSERT writes,
on both backends: every column type of the read models, NULLs, JSON ``None``, an int in a float
column, and upserts whose rows share a key (the last one wins, as one after another would)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from wgstore.events import EventStore
from wgstore.events.schema import wg_report_points, wg_runs, wg_workers
from wgstore.projections.bulk import insert_rows

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def _json_text(connection: sa.Connection, rows: list[dict[str, Any]], *names: str) -> None:
    """As the projector did before insert_rows: JSON columns as msgspec's text on SQLite
    (Postgres' JSONB takes the value)."""
    if connection.dialect.name == "postgresql":
        return
    for row in rows:
        for name in names:
            if row[name] is not None:
                row[name] = msgspec.json.encode(row[name]).decode()


def _executemany(connection: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """The reference: SQLAlchemy's upsert, one row after another."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite_dialect
    insert = dialect.insert(table)
    keys = [c.name for c in table.primary_key.columns]
    update = {name: insert.excluded[name] for name in rows[0] if name not in keys}
    for row in rows:
        connection.execute(insert.on_conflict_do_update(index_elements=keys, set_=update), row)


def _table_as_read(connection: sa.Connection, table: sa.Table) -> list[tuple[Any, ...]]:
    """Every row, with JSON columns as the JSON type they hold (``null`` vs SQL NULL shows)."""
    columns: list[Any] = []
    for column in table.columns:
        columns.append(column)
        if connection.dialect.name == "postgresql" and isinstance(
            column.type.dialect_impl(connection.dialect), sa.JSON
        ):
            columns.append(sa.func.jsonb_typeof(column))
    keys = [c for c in table.primary_key.columns]
    return [tuple(row) for row in connection.execute(sa.select(*columns).order_by(*keys))]


def _worker(rank: int, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "group_id": "g1",
        "world_rank": rank,
        "local_rank": rank,
        "node_rank": 0,
        "local_world_size": 2,
        "world_size": 2,
        "node_id": "n",
        "node_ip": "10.0.0.1",
        "pid": 100 + rank,
        "actor_id": f"a{rank}",
        "actor_name": f"w{rank}",
        "gpu_ids": "",
        "running": True,
        "error_type": None,
        "error_message": None,
        "stopped_at": None,
        "reports": 0,
        "last_report_index": None,
        "last_reported_at": None,
        "last_metrics": None,
        "last_checkpoint": None,
        "updated_at": T0,
    }
    return {**row, **changes}


def _run(run_id: str, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {column.name: None for column in wg_runs.columns}
    row.update(
        run_id=run_id,
        stream_id=f"run-{run_id}",
        attempts=1,
        worker_group_failures=0,
        start_failures=0,
        preemption_failures=0,
        controllers=1,
        needs_controller=False,
        lease_s=60,  # an int in a float column
        stream_version=3,
        last_position=7,
        updated_at=T0,
    )
    return {**row, **changes}


CASES: list[tuple[sa.Table, list[dict[str, Any]], tuple[str, ...]]] = [
    (
        wg_workers,
        [
            _worker(0),
            _worker(1, last_metrics={"loss": 0.5, "note": "<b>", "n": None}),
            _worker(0, reports=2, last_metrics={}, running=False, stopped_at=T0),
            _worker(1, last_metrics=None, last_reported_at=T0 + timedelta(seconds=1)),
        ],
        ("last_metrics",),
    ),
    (
        wg_runs,
        [
            _run("r1", ray={"a": [1, 2.5, True]}, failed_ranks=[0, 1]),
            _run("r2", resources_per_worker={"CPU": 1}, lease_s=1.5, ended_at=T0),
            _run("r1", status="FINISHED", ray=None, max_failures=2**31 - 1, last_position=2**40),
        ],
        ("resources_per_worker", "failed_ranks", "ray"),
    ),
    (
        wg_report_points,
        [
            {
                "group_id": "g1",
                "metric": metric,
                "world_rank": rank,
                "pos": pos,
                "report_index": pos,
                "value": value,
                "reported_at": T0 + timedelta(milliseconds=pos),
            }
            for metric, rank, pos, value in [
                ("loss", 0, 0, 1),
                ("loss", 0, 1, 0.25),
                ("acc", 1, 0, -0.0),
                ("", 0, 0, 1e300),
            ]
        ],
        (),
    ),
]


@pytest.mark.parametrize(
    ("table", "rows", "json_columns"), CASES, ids=[table.name for table, _, _ in CASES]
)
def test_insert_rows_writes_what_one_insert_a_row_writes(
    store: EventStore, table: sa.Table, rows: list[dict[str, Any]], json_columns: tuple[str, ...]
) -> None:
    with store.engine.begin() as connection:
        expected_rows = [dict(row) for row in rows]
        _json_text(connection, expected_rows, *json_columns)
        _executemany(connection, table, expected_rows)
        expected = _table_as_read(connection, table)
        connection.execute(table.delete())
        insert_rows(connection, table, rows, upsert=True)  # JSON columns as Python values
        assert _table_as_read(connection, table) == expected
        assert len(expected) == len({tuple(r[c.name] for c in table.primary_key) for r in rows})


def test_insert_rows_refuses_a_duplicate_key_without_upsert_and_writes_nothing(
    store: EventStore,
) -> None:
    rows = CASES[2][1]
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as connection:
        insert_rows(connection, wg_report_points, [*rows, rows[0]])
    with store.engine.connect() as connection:
        assert (
            connection.execute(sa.select(sa.func.count()).select_from(wg_report_points)).scalar()
            == 0
        )


def test_insert_rows_of_nothing_writes_nothing(store: EventStore) -> None:
    with store.engine.begin() as connection:
        insert_rows(connection, wg_workers, [], upsert=True)
        assert connection.execute(sa.select(sa.func.count()).select_from(wg_workers)).scalar() == 0
