"""Writing a batch's read-model rows: one statement a table, whatever the number of rows.

SQLite: SQLAlchemy's ``executemany`` of one INSERT (``sqlite3`` runs it in C).

PostgreSQL: one ``INSERT ... SELECT ... FROM unnest(...)`` with one array parameter per column.
psycopg's ``executemany`` sends one execution of the statement per row (pipelined, but each a
bind, an execute and an executor start on the server, and ~40 µs of Python in the client): a
fleet's batch of 500 reports is ~10,000 rows once each metric is a point of its series
(``wg_report_points``), and those executions were half of the projector's time. As arrays the
batch is one statement, typed on the server by the column's own type.

JSON columns (``JSONB`` on PostgreSQL, JSON text on SQLite) take the Python value. ``None`` is
stored as SQLAlchemy stores it: JSON ``null`` on PostgreSQL, SQL ``NULL`` on SQLite.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

__all__ = ["insert_rows"]

_encode_json = msgspec.json.Encoder().encode


def insert_rows(
    connection: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    upsert: bool = False,
) -> None:
    """Insert ``rows`` (mappings with the same keys: a row type of
    :mod:`~wgstore.projections.table_rows`) into ``table`` in one statement.

    With ``upsert``, a row whose primary key is already there replaces that row's other columns
    given in ``rows``; rows of one call that share a key count as their last one (as they would
    one after another).
    """
    if not rows:
        return
    if connection.dialect.name != "postgresql":
        json_names = _json_columns(table).intersection(rows[0])
        if json_names:
            rows = [_json_as_text(row, json_names) for row in rows]
        insert = sqlite_dialect.insert(table)
        if upsert:
            keys = [c.name for c in table.primary_key.columns]
            update = {name: insert.excluded[name] for name in rows[0] if name not in keys}
            insert = insert.on_conflict_do_update(index_elements=keys, set_=update)
        connection.execute(insert, list(rows))
        return
    names = tuple(rows[0])
    if upsert:
        rows = _last_of_each_key(table, rows)
    sql, converters = _postgres_statement(table, names, upsert)
    params = {
        f"c{index}": converter([row[name] for row in rows])
        for index, (name, converter) in enumerate(zip(names, converters, strict=True))
    }
    connection.exec_driver_sql(sql, params)


@functools.lru_cache(maxsize=64)
def _json_columns(table: sa.Table) -> frozenset[str]:
    """The names of ``table``'s JSON columns (JSONB on PostgreSQL, text on SQLite)."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    return frozenset(
        c.name for c in table.columns if isinstance(c.type.dialect_impl(dialect), sa.JSON)
    )


def _json_as_text(row: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """``row`` with the values of its JSON columns ``names`` as JSON text (``None`` kept)."""
    encoded = dict(row)
    for name in names:
        if encoded[name] is not None:
            encoded[name] = _encode_json(encoded[name]).decode()
    return encoded


def _last_of_each_key(
    table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> Sequence[Mapping[str, Any]]:
    """``rows`` with only the last of rows sharing a primary key (``ON CONFLICT DO UPDATE``
    refuses to touch one row twice in a statement)."""
    key_of = operator.itemgetter(*[c.name for c in table.primary_key.columns])
    if len({key_of(row) for row in rows}) == len(rows):
        return rows
    last: dict[Any, Mapping[str, Any]] = {}
    for row in rows:
        key = key_of(row)
        last.pop(key, None)  # keep the order of the last occurrences
        last[key] = row
    return list(last.values())


@functools.lru_cache(maxsize=64)
def _postgres_statement(
    table: sa.Table, names: tuple[str, ...], upsert: bool
) -> tuple[str, list[Callable[[list[Any]], list[Any]]]]:
    """The ``INSERT ... SELECT FROM unnest`` of ``names`` into ``table``, and how each column's
    values become its array."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    quote = dialect.identifier_preparer.quote
    arrays: list[str] = []
    selected: list[str] = []
    converters: list[Callable[[list[Any]], list[Any]]] = []
    for index, name in enumerate(names):
        column_type = table.c[name].type.dialect_impl(dialect)
        if isinstance(column_type, sa.JSON):
            arrays.append(f"%(c{index})b::text[]")
            selected.append(f"u.{quote(name)}::jsonb")
            converters.append(_json_texts)
        else:
            arrays.append(f"%(c{index})b::{column_type.compile(dialect=dialect)}[]")
            selected.append(f"u.{quote(name)}")
            converters.append(_converter(column_type))
    columns = ", ".join(quote(name) for name in names)
    sql = (
        f"INSERT INTO {dialect.identifier_preparer.format_table(table)} ({columns}) "
        f"SELECT {', '.join(selected)} FROM unnest({', '.join(arrays)}) AS u({columns})"
    )
    if upsert:
        keys = [c.name for c in table.primary_key.columns]
        updates = [f"{quote(n)} = EXCLUDED.{quote(n)}" for n in names if n not in keys]
        conflict = f" ON CONFLICT ({', '.join(quote(k) for k in keys)})"
        sql += f"{conflict} DO UPDATE SET {', '.join(updates)}" if updates else " DO NOTHING"
    return sql, converters


def _json_texts(values: list[Any]) -> list[str]:
    """JSON values as text (``None`` as JSON ``null``, as SQLAlchemy's JSONB binds it)."""
    return [_encode_json(value).decode() for value in values]


def _converter(column_type: sa.types.TypeEngine[Any]) -> Callable[[list[Any]], list[Any]]:
    """Values of one column as psycopg adapts them to one array type: a list takes the type of
    its first element, so an int among floats (``startup_s=0``) is made a float."""
    if isinstance(column_type, sa.Float):
        return _floats
    return _as_is


def _floats(values: list[Any]) -> list[Any]:
    return [None if value is None else float(value) for value in values]


def _as_is(values: list[Any]) -> list[Any]:
    return values
