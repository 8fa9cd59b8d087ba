"""A fresh store in one step: the final schema created at once, then stamped at the head revision.

Running every revision on an empty database only to reach head cost ~190 ms on Postgres (0.5-0.9
s under load) and ~60 ms on SQLite, plus Alembic's import (bench/fresh_store.py: 84 and 6 ms in
one step); a database with no wgstore table has no history to carry, so
:func:`create_fresh_store` makes what head has from the runtime's own definitions:

- the tables and indexes of ``wgstore.events.schema.metadata`` (``create_all``);
- the view ``wg_event_log`` (``EVENT_LOG_VIEW_SQL``);
- Postgres: every function and trigger of ``wgstore.events.postgres_functions``; SQLite: every
  trigger of ``wgstore.events.sqlite_triggers``;
- Alembic's version table (as Alembic makes it) holding :data:`HEAD_REVISION`.

No revision leaves any row in an empty store but the version row. Alembic is not imported here.
``wgstore.migrations.runner`` calls this inside the transaction, and under the lock, in which it
would otherwise run the revisions. ``tests/migrations/test_catalog.py`` checks that the result
equals ``alembic upgrade head`` of an empty database, object by object, on both backends: a
change to the schema, a function or a trigger made in one place only fails there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from wgstore.events import postgres_functions, sqlite_triggers
from wgstore.events.schema import ALEMBIC_VERSION_TABLE, EVENT_LOG_VIEW_SQL, metadata

__all__ = ["HEAD_REVISION", "VERSION_TABLE", "create_fresh_store", "is_empty"]

HEAD_REVISION = "0015_archive"
"""The newest revision in ``versions/``; a new migration updates it (a test checks the two agree)."""


VERSION_TABLE = sa.Table(
    ALEMBIC_VERSION_TABLE,
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name=f"{ALEMBIC_VERSION_TABLE}_pkc"),
)
"""Alembic's version table, as Alembic makes it (``alembic.ddl.impl.version_table_impl``:
``version_num VARCHAR(32) NOT NULL``, primary key ``<table>_pkc``), named wgstore's way."""


def is_empty(connection: sa.Connection) -> bool:
    """True when the database (Postgres: the schema the search path leads to) holds none of
    wgstore's tables and no revision: a store with no history, which :func:`create_fresh_store`
    may build. An empty version table (all revisions downgraded) is not empty: Alembic then
    upgrades it as before.

    One query by name (SQLAlchemy's ``get_table_names`` on Postgres tests every relation of
    the database for visibility: 15 ms where a server holds many schemas)."""
    names = [*metadata.tables, ALEMBIC_VERSION_TABLE]
    if connection.dialect.name == "postgresql":
        query = sa.text(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = ANY(:names) LIMIT 1"
        )
        return connection.execute(query, {"names": names}).first() is None
    query = sa.text("SELECT 1 FROM sqlite_master WHERE name IN :names LIMIT 1").bindparams(
        sa.bindparam("names", expanding=True)
    )
    return connection.execute(query, {"names": names}).first() is None


def create_fresh_store(connection: sa.Connection) -> None:
    """Create the head schema in the empty database behind ``connection`` and stamp it at
    :data:`HEAD_REVISION`, in the caller's transaction (which holds the lock migrators take).

    On Postgres in two round trips (the tables and the view; the functions, triggers and the
    stamp), not one per statement: ~120 statements, each a round trip, were most of the time.
    """
    dialect = connection.dialect.name
    _run(connection, [*_created(metadata, connection), EVENT_LOG_VIEW_SQL[dialect]])
    if dialect == "postgresql":
        query = postgres_functions.POSITION_SEQUENCE_QUERY
        objects = postgres_functions.create_statements(_raw(connection, query).scalar_one())
    else:
        objects = sqlite_triggers.TRIGGERS
    stamp = f"INSERT INTO {ALEMBIC_VERSION_TABLE} (version_num) VALUES ('{HEAD_REVISION}')"
    _run(connection, [*objects, *_created(VERSION_TABLE.metadata, connection), stamp])


def _created(tables: sa.MetaData, connection: sa.Connection) -> tuple[str, ...]:
    """The DDL ``tables.create_all`` would run on ``connection``, as text: compiled once per
    process for each kind of server (~120 statements take a few tens of ms to compile)."""
    dialect = connection.dialect
    key = (tables, dialect.name, dialect.server_version_info)
    if key not in _compiled:
        statements: list[str] = []

        def collect(ddl: sa.ExecutableDDLElement, *_: object, **__: object) -> None:
            statements.append(str(ddl.compile(dialect=dialect)).strip())

        tables.create_all(sa.create_mock_engine(connection.engine.url, collect), checkfirst=False)
        _compiled[key] = tuple(statements)
    return _compiled[key]


_compiled: dict[tuple[sa.MetaData, str, object], tuple[str, ...]] = {}


def _run(connection: sa.Connection, statements: Sequence[str]) -> None:
    """Run ``statements`` as written (no parameters: ``%`` is a percent sign); on Postgres as
    one script, one round trip (SQLite's driver takes one statement at a time)."""
    if connection.dialect.name == "postgresql":
        _raw(connection, ";\n".join(statements))
        return
    for statement in statements:
        _raw(connection, statement)


def _raw(connection: sa.Connection, sql: str) -> sa.CursorResult[Any]:
    return connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
