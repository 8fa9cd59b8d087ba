"""Cheaper appends: a type index that reports and polls skip; no AUTOINCREMENT on SQLite.

Revision ID: 0008_lean_appends
Revises: 0007_run_read_models
Create Date: 2026-11-30

Measured in bench/README.md (SQLite, single appends, ``synchronous=NORMAL``): a commit writes one
WAL page per index it touches, and SQLite's share of an append fell from 60 to 46 µs with both
changes.

- ``ix_wg_events_event_type_position`` becomes partial: ``WorkerReported`` and
  ``WorkerGroupPolled``, the bulk of any log, are left out of it. The read it serves,
  ``read_all(types=...)`` of rare types (``wgstore groups`` lists ``WorkerGroupStartRequested``),
  repeats the index's condition so both planners use it; a read of the two frequent types scans
  by position, where most rows match anyway. On Postgres this is all the upgrade does (0.1 s
  for a log of 300,000 reports here).
- SQLite: ``wg_events`` is rebuilt without ``AUTOINCREMENT``, whose ``sqlite_sequence`` row was
  one more page written by every commit (views, indexes and triggers users added survive). The writer hands out positions itself under the write
  lock, and the triggers refuse deletes, so a position is never handed out twice either way.
  SQLite cannot drop ``AUTOINCREMENT`` in place: the rows are copied, in one transaction, once
  (16 s for a million events, 790 MB, on the 2-core machine of bench/README.md; the disk needs
  room for a second copy meanwhile). ``EventStore.open`` logs a warning before it starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0008_lean_appends"
down_revision: str | Sequence[str] | None = "0007_run_read_models"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TYPE_INDEX = "ix_wg_events_event_type_position"
# Literal (migrations are history): wgstore.events.schema.TYPE_INDEX_WHERE must say the same.
TYPE_INDEX_WHERE = "event_type NOT IN ('WorkerReported', 'WorkerGroupPolled')"
COLUMNS = (
    "position, event_id, stream_id, stream_version, event_type, schema_version, data, "
    "metadata, recorded_at, hash, log_hash, mac"
)


def _revision(name: str) -> Any:
    return importlib.import_module(f"wgstore.migrations.versions.{name}")


def _create_type_index(partial: bool) -> None:
    where = sa.text(TYPE_INDEX_WHERE) if partial else None
    op.create_index(
        TYPE_INDEX,
        "wg_events",
        ["event_type", "position"],
        sqlite_where=where,
        postgresql_where=where,
    )


def _events_table(name: str, autoincrement: bool) -> None:
    """Create SQLite's ``wg_events`` as 0001 and 0004 left it, with or without AUTOINCREMENT."""
    op.create_table(
        name,
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.SmallInteger(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("log_hash", sa.String(64), nullable=False),
        sa.Column("mac", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("position", name="pk_wg_events"),
        sa.UniqueConstraint("event_id", name="uq_wg_events_event_id"),
        sa.UniqueConstraint(
            "stream_id", "stream_version", name="uq_wg_events_stream_id_stream_version"
        ),
        sqlite_autoincrement=autoincrement,
    )


def _rebuild_sqlite(autoincrement: bool, partial: bool) -> None:
    """Copy ``wg_events`` into a new table, SQLite's way (``lang_altertable.html``, "other kinds
    of table schema changes"): the users' own views of it keep working, and their own indexes
    and triggers on it are made again; wgstore's view, triggers and index are made anew."""
    bind = op.get_bind()
    theirs = [
        sql
        for (sql,) in bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'wg_events' "
            "AND type IN ('index', 'trigger') AND sql IS NOT NULL AND name NOT IN "
            f"('{TYPE_INDEX}', 'wg_events_no_update', 'wg_events_no_delete') ORDER BY rowid"
        )
    ]
    op.execute("DROP VIEW wg_event_log")
    _events_table("wg_events_new", autoincrement)
    op.execute(
        f"INSERT INTO wg_events_new ({COLUMNS}) SELECT {COLUMNS} FROM wg_events ORDER BY position"
    )
    op.execute("DROP TABLE wg_events")  # its indexes, triggers and sqlite_sequence row with it
    # Legacy mode renames the table alone: views that name wg_events are left as they are (and
    # work again), where the modern rename would try to rewrite them.
    op.execute("PRAGMA legacy_alter_table = ON")
    op.execute("ALTER TABLE wg_events_new RENAME TO wg_events")
    op.execute("PRAGMA legacy_alter_table = OFF")
    _create_type_index(partial)
    for statement in _revision("0001_event_log").SQLITE_TRIGGERS:
        op.execute(statement)
    op.execute(_revision("0002_read_models").SQLITE_VIEW)
    for statement in theirs:
        op.execute(statement)


def upgrade() -> None:
    """Partial type index; SQLite: wg_events without AUTOINCREMENT."""
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(autoincrement=False, partial=True)
        return
    op.drop_index(TYPE_INDEX, table_name="wg_events")
    _create_type_index(partial=True)


def downgrade() -> None:
    """The full type index; SQLite: wg_events with AUTOINCREMENT again."""
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(autoincrement=True, partial=False)
        return
    op.drop_index(TYPE_INDEX, table_name="wg_events")
    _create_type_index(partial=False)
