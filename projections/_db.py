"""Small helpers to read from the store's database without opening a write transaction.

On SQLite every transaction the store's engine begins is ``BEGIN IMMEDIATE``; reads here go
through a raw DBAPI connection in autocommit mode instead (as the store's own reads do), so they
never wait for, or hold up, a writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from wgstore.projections.values import to_utc

if TYPE_CHECKING:
    from wgstore.events.store import EventStore

__all__ = ["fetch", "is_postgres", "param", "sql_time"]

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


def sql_time(store: EventStore, value: datetime) -> Any:
    """``value`` in the form ``wg_events.recorded_at`` compares with on the store's backend."""
    value = to_utc(value)
    return value if is_postgres(store) else value.strftime(_SQLITE_TIME)
