"""A fresh store in one step: the final schema created at once, then stamped at the head revision.

Running every revision on an empty database only to reach head costs 0.5-0.9 s on Postgres
(~0.1 s on SQLite) plus Alembic's import; a database with no wgstore table has no history to
carry, so :func:`create_fresh_store` makes what head has from the runtime's own definitions:

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

import sqlalchemy as sa

from wgstore.events import postgres_functions, sqlite_triggers
from wgstore.events.schema import ALEMBIC_VERSION_TABLE, EVENT_LOG_VIEW_SQL, metadata

__all__ = ["HEAD_REVISION", "create_fresh_store", "is_empty", "version_table"]

HEAD_REVISION = "0013_elastic_read_models"
"""The newest revision in ``versions/``; a new migration updates it (a test checks the two agree)."""


def version_table() -> sa.Table:
    """Alembic's version table, as Alembic makes it (``alembic.ddl.impl.version_table_impl``:
    ``version_num VARCHAR(32) NOT NULL``, primary key ``<table>_pkc``), named wgstore's way."""
    return sa.Table(
        ALEMBIC_VERSION_TABLE,
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("version_num", name=f"{ALEMBIC_VERSION_TABLE}_pkc"),
    )


def is_empty(connection: sa.Connection) -> bool:
    """True when the database (Postgres: the schema the search path leads to) holds none of
    wgstore's tables and no revision: a store with no history, which :func:`create_fresh_store`
    may build. An empty version table (all revisions downgraded) is not empty: Alembic then
    upgrades it as before."""
    tables = set(sa.inspect(connection).get_table_names())
    return not tables.intersection(metadata.tables) and ALEMBIC_VERSION_TABLE not in tables


def create_fresh_store(connection: sa.Connection) -> None:
    """Create the head schema in the empty database behind ``connection`` and stamp it at
    :data:`HEAD_REVISION`, in the caller's transaction (which holds the lock migrators take)."""
    dialect = connection.dialect.name
    metadata.create_all(connection, checkfirst=False)
    # As text() (Alembic's op.execute does the same): the driver sees LIKE 'run-%' as written.
    connection.execute(sa.text(EVENT_LOG_VIEW_SQL[dialect]))
    if dialect == "postgresql":
        sequence = connection.exec_driver_sql(postgres_functions.POSITION_SEQUENCE_QUERY)
        statements = postgres_functions.create_statements(sequence.scalar_one())
    else:
        statements = sqlite_triggers.TRIGGERS
    for statement in statements:
        connection.execute(sa.text(statement))
    versions = version_table()
    versions.create(connection)
    connection.execute(versions.insert().values(version_num=HEAD_REVISION))
