"""The schema three ways agree: what the runtime defines, what the revisions make, what a fresh
store gets in one step. Compared from the database's catalog (tests/migrations/catalog.py), on
both backends.

- A database built by ``alembic upgrade head`` has exactly the tables (columns in order, their
  nullability), indexes, views, triggers and functions the runtime defines
  (``events/schema.py``, ``events/postgres_functions.py``, ``events/sqlite_triggers.py``), each
  trigger's and function's SQL as the runtime's module says it.
- A fresh store (``EventStore.open`` of an empty database: the head schema at once, stamped)
  is the migrated one, object by object, and holds the same rows (the revision's, no other).

So a function body, trigger, column or index changed in the runtime's module without a revision
that makes the same change (or the other way round) fails here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import _admin_execute, _drop_schema, make_pg_schema_url, require_postgres
from tests.migrations.catalog import catalog, one_space
from wgstore.events import EventStore, postgres_functions, sqlite_triggers
from wgstore.events.engine import create_store_engine
from wgstore.events.schema import (
    ALEMBIC_VERSION_TABLE,
    EVENT_LOG_VIEW,
    EVENT_LOG_VIEW_SQL,
    metadata,
)
from wgstore.migrations.runner import HEAD_REVISION, upgrade


@pytest.fixture(params=["sqlite", "postgres"])
def two_empty_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two empty databases of one backend (Postgres: two schemas), dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
        return
    require_postgres()
    schemas = [f"wgtest_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for schema in schemas:
        _admin_execute(f"CREATE SCHEMA {schema}")
    try:
        yield make_pg_schema_url(schemas[0]), make_pg_schema_url(schemas[1])
    finally:
        for schema in schemas:
            _drop_schema(schema)


def _migrated(url: str) -> None:
    """Every revision, one after the other, as Alembic runs them on an existing store."""
    engine = create_store_engine(url)
    try:
        with engine.begin() as connection:
            upgrade(connection)
    finally:
        engine.dispose()


def _read(url: str) -> tuple[dict[str, Any], dict[str, list[tuple[Any, ...]]]]:
    """The catalog of the store at ``url``, and the rows of each of its tables."""
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            tables = [*metadata.tables, ALEMBIC_VERSION_TABLE]
            rows = {
                table: [tuple(row) for row in connection.exec_driver_sql(f"SELECT * FROM {table}")]
                for table in tables
            }
            return catalog(connection), rows
    finally:
        engine.dispose()


def _body(statement: str) -> str:
    """The body of a ``CREATE FUNCTION ... AS $$ body $$``."""
    match = re.search(r"\$\$(.*)\$\$", statement, re.DOTALL)
    assert match is not None, statement
    return match.group(1)


def test_a_migrated_database_has_exactly_what_the_runtime_defines(
    two_empty_urls: tuple[str, str],
) -> None:
    url = two_empty_urls[0]
    _migrated(url)
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            found = catalog(connection)
            if connection.dialect.name == "postgresql":
                sequence = connection.exec_driver_sql(
                    postgres_functions.POSITION_SEQUENCE_QUERY
                ).scalar_one()
                bodies = dict(
                    connection.exec_driver_sql(
                        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n "
                        "ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
                    ).all()
                )
    finally:
        engine.dispose()
    expected_tables = {*metadata.tables, ALEMBIC_VERSION_TABLE}
    expected_indexes = {index.name for table in metadata.tables.values() for index in table.indexes}
    if "tables" in found:  # SQLite
        assert set(found["tables"]) == expected_tables
        for name, table in metadata.tables.items():
            columns = [(c[1], bool(c[3])) for c in found["tables"][name]["columns"]]
            assert columns == [(c.name, not c.nullable) for c in table.columns], name
        assert set(found["index_sql"]) == expected_indexes
        assert found["views"] == {EVENT_LOG_VIEW: one_space(EVENT_LOG_VIEW_SQL["sqlite"])}
        expected_triggers = {
            re.search(r"CREATE TRIGGER (\w+)", sql).group(1): ("wg_events", one_space(sql))  # type: ignore[union-attr]
            for sql in sqlite_triggers.TRIGGERS
        }
        assert found["triggers"] == expected_triggers
        return
    assert set(found["columns"]) == expected_tables | {EVENT_LOG_VIEW}
    for name, table in metadata.tables.items():
        columns = [(c[0], c[5] == "NO") for c in found["columns"][name]]
        assert columns == [(c.name, not c.nullable) for c in table.columns], name
    indexes = {index for _, index, _ in found["indexes"]}
    constraints = {name for _, name, _, _ in found["constraints"]}
    assert indexes - constraints == expected_indexes
    assert set(found["views"]) == {EVENT_LOG_VIEW}
    assert {name for name, _, _ in found["triggers"]} == set(postgres_functions.TRIGGERS)
    assert set(bodies) == set(postgres_functions.FUNCTIONS)
    expected_bodies = {
        re.search(r"CREATE FUNCTION (\w+)", statement).group(1): _body(statement)  # type: ignore[union-attr]
        for statement in postgres_functions.create_statements(sequence)
        if "CREATE FUNCTION" in statement
    }
    assert bodies == expected_bodies


def test_a_fresh_store_is_the_migrated_one(two_empty_urls: tuple[str, str]) -> None:
    migrated, fresh = two_empty_urls
    _migrated(migrated)
    EventStore.open(fresh).close()  # an empty database: built in one step
    migrated_catalog, migrated_rows = _read(migrated)
    fresh_catalog, fresh_rows = _read(fresh)
    assert fresh_catalog == migrated_catalog
    assert (
        fresh_rows
        == migrated_rows
        == {
            **{table: [] for table in metadata.tables},
            ALEMBIC_VERSION_TABLE: [(HEAD_REVISION,)],
        }
    )


def test_a_fresh_store_works(empty_store_url: str) -> None:
    from wgstore.events.worker_group import WorkerGroupShutdownRequested

    with EventStore.open(empty_store_url) as store:
        store.append("s-1", [WorkerGroupShutdownRequested(reason="in a fresh store")])
        assert store.verify().ok
    with EventStore.open(empty_store_url, migrate=False) as store:  # at head: no migration
        assert store.head() == 1


def test_a_fresh_store_refuses_what_a_migrated_one_refuses(empty_store_url: str) -> None:
    EventStore.open(empty_store_url).close()
    engine = create_store_engine(empty_store_url)
    try:
        with (
            pytest.raises(sa.exc.DBAPIError, match="handed out by the log"),
            engine.begin() as connection,
        ):
            connection.exec_driver_sql(
                "INSERT INTO wg_events (position, event_id, stream_id, stream_version, "
                "event_type, schema_version, data, metadata, recorded_at, hash, log_hash) "
                "VALUES (7, '00000000-0000-0000-0000-000000000001', 's', 1, 'T', 1, '{}', "
                "'{}', CURRENT_TIMESTAMP, '', '')"
            )
    finally:
        engine.dispose()
