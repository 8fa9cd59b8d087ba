"""Small helpers to read from the store's database without opening a write transaction.

On SQLite every transaction the store's engine begins is ``BEGIN IMMEDIATE``; reads here go
through a raw DBAPI connection in autocommit mode instead (as the store's own reads do), or a
connection marked for reading (:func:`reading`), so they never wait for, or hold up, a writer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from wgstore.projections.values import to_utc

if TYPE_CHECKING:
    import sqlalchemy as sa

    from wgstore.events.store import EventStore

__all__ = ["fetch", "is_postgres", "param", "reading", "sql_time"]

_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def is_postgres(store: EventStore) -> bool:
    """True when the store lives in PostgreSQL."""
    return bool(store.engine.dialect.name == "postgresql")


def param(store: EventStore) -> str:
    """The DBAPI placeholder of the store's driver."""
    return "%s" if is_postgres(store) else "?"


def fetch(store: EventStore, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run one SELECT outside any write transaction and return every row."""
    postgres = is_postgres(store)
    connection = store.engine.raw_connection()
    driver: Any = connection.driver_connection  # the DBAPI connection (psycopg's: autocommit)
    try:
        if postgres:
            driver.autocommit = True
        cursor = connection.cursor()
        try:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall())
        finally:
            cursor.close()
    finally:
        if postgres and not driver.closed:
            driver.autocommit = False
        connection.close()


@contextmanager
def reading(store: EventStore) -> Iterator[sa.Connection]:
    """A SQLAlchemy connection for the reads of one answer, its errors translated.

    PostgreSQL: autocommit, so each statement is one round trip (no ``BEGIN`` before the first,
    no ``ROLLBACK`` after the last) and its own snapshot: what must agree is read in one
    statement. SQLite: a plain ``BEGIN`` (no wait for the write lock), so every statement reads
    one snapshot; rolled back when the block ends.
    """
    # Here, not at the top: importing wgstore.projections must not load SQLAlchemy (the Ray
    # Train callback imports it on Ray's critical path; tests/test_layering.py).
    from wgstore.events._translate import translate_errors
    from wgstore.events.engine import READ_ONLY_OPTION

    with translate_errors(store.url), store.engine.connect() as connection:
        if is_postgres(store):
            connection.execution_options(isolation_level="AUTOCOMMIT")
        else:
            connection.execution_options(**{READ_ONLY_OPTION: True})
        yield connection


def sql_time(store: EventStore, value: datetime) -> Any:
    """``value`` in the form ``wg_events.recorded_at`` compares with on the store's backend."""
    value = to_utc(value)
    return value if is_postgres(store) else value.strftime(_SQLITE_TIME)
