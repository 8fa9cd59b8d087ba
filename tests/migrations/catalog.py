"""A store's schema as its database's catalog describes it, for comparing two stores.

Everything a reader or writer of the store meets, read from the catalog (not from SQLAlchemy's
reflection, which leaves out triggers, functions and details such as partial indexes):

- SQLite (``sqlite_master`` and its pragmas): each table's columns in order (type, NOT NULL,
  default, primary key), ``WITHOUT ROWID`` and ``AUTOINCREMENT``, its indexes (unique, partial,
  columns, and the SQL of those made by ``CREATE INDEX``), foreign keys; every view's and
  trigger's SQL. SQLite's own objects (``sqlite_sequence``) are left out.
- PostgreSQL (the schema the search path leads to): each table's columns in order
  (``information_schema.columns``: type, length, NOT NULL, default, identity), column comments,
  constraints (``pg_get_constraintdef``), indexes (``pg_indexes``), triggers
  (``pg_get_triggerdef``), functions (``pg_get_functiondef``), views (``pg_get_viewdef``) and
  sequences.

The schema's own name is replaced by ``SCHEMA`` (two stores live in two schemas), and runs of
white space in SQL text are one space.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

__all__ = ["catalog", "one_space"]


def one_space(sql: str | None) -> str:
    """``sql`` with every run of white space one space, trimmed."""
    return re.sub(r"\s+", " ", sql or "").strip()


def catalog(connection: sa.Connection) -> dict[str, Any]:
    """Every object of the store behind ``connection``, by kind and name (see the module
    docstring)."""
    if connection.dialect.name == "sqlite":
        return _sqlite(connection)
    return _postgres(connection)


def _sqlite(connection: sa.Connection) -> dict[str, Any]:
    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in connection.exec_driver_sql(sql)]

    objects = rows(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    )
    tables: dict[str, Any] = {}
    for kind, name, _, sql in objects:
        if kind != "table":
            continue
        indexes = {}
        for _, index, unique, origin, partial in rows(f"PRAGMA index_list('{name}')"):
            columns = [row[2] for row in rows(f"PRAGMA index_xinfo('{index}')") if row[5]]
            indexes[index if origin == "c" else f"{origin}:{columns}"] = (unique, partial, columns)
        tables[name] = {
            "columns": rows(f"PRAGMA table_xinfo('{name}')"),
            "indexes": indexes,
            "foreign_keys": rows(f"PRAGMA foreign_key_list('{name}')"),
            "without_rowid": "WITHOUT ROWID" in sql.upper(),
            "autoincrement": "AUTOINCREMENT" in sql.upper(),
        }
    return {
        "tables": tables,
        "index_sql": {n: one_space(s) for k, n, _, s in objects if k == "index" and s},
        "views": {n: one_space(s) for k, n, _, s in objects if k == "view"},
        "triggers": {n: (t, one_space(s)) for k, n, t, s in objects if k == "trigger"},
    }


def _postgres(connection: sa.Connection) -> dict[str, Any]:
    schema = connection.exec_driver_sql("SELECT current_schema()").scalar_one()

    def rows(sql: str) -> list[tuple[Any, ...]]:
        found = connection.execute(sa.text(sql), {"schema": schema})
        return [tuple(_unschema(value, schema) for value in row) for row in found]

    columns: dict[str, list[tuple[Any, ...]]] = {}
    for table, *column in rows(
        "SELECT table_name, column_name, data_type, udt_name, character_maximum_length, "
        "numeric_precision, is_nullable, column_default, is_identity, identity_generation, "
        "col_description(format('%I.%I', table_schema, table_name)::regclass, ordinal_position) "
        "FROM information_schema.columns WHERE table_schema = :schema "
        "ORDER BY table_name, ordinal_position"
    ):
        columns.setdefault(table, []).append(tuple(column))
    return {
        "columns": columns,
        "relations": sorted(
            rows(
                "SELECT c.relname, c.relkind, c.relpersistence, obj_description(c.oid, 'pg_class') "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :schema"
            )
        ),
        "constraints": sorted(
            rows(
                "SELECT c.conrelid::regclass::text, c.conname, c.contype, "
                "pg_get_constraintdef(c.oid) FROM pg_constraint c "
                "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = :schema"
            )
        ),
        "indexes": sorted(
            rows("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = :schema")
        ),
        "triggers": sorted(
            rows(
                "SELECT t.tgname, t.tgenabled, pg_get_triggerdef(t.oid) FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = :schema AND NOT t.tgisinternal"
            )
        ),
        "functions": {
            name: one_space(definition)
            for name, definition in rows(
                "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :schema"
            )
        },
        "views": dict(
            rows(
                "SELECT viewname, pg_get_viewdef(format('%I.%I', schemaname, viewname)::regclass) "
                "FROM pg_views WHERE schemaname = :schema"
            )
        ),
        "sequences": sorted(
            rows(
                "SELECT sequencename, data_type::text, start_value, min_value, max_value, "
                "increment_by, cycle, cache_size FROM pg_sequences WHERE schemaname = :schema"
            )
        ),
    }


def _unschema(value: Any, schema: str) -> Any:
    return value.replace(schema, "SCHEMA") if isinstance(value, str) else value
