"""The archive: the tables that say what left the live log, and the one DELETE the log allows.

Revision ID: 0015_archive
Revises: 0014_append_plans_and_channel
Create Date: 2026-12-07

``wgstore archive`` moves ended runs' events into Parquet files and deletes them from
``wg_events`` once the files are written, read back and verified (issue 43). Three tables:

- ``wg_archive_batches``: a batch's manifest, exactly as its SHA-256 in the signed
  ``LogArchived`` event covers it, and where its files are.
- ``wg_archive_ranges``: the positions the archive holds, as ranges of one run's events with no
  live event between (they never overlap). The immutability trigger lets a DELETE remove a row
  only inside one; the INSERT trigger lets ``wgstore restore`` put a row back only inside one.
  What the ranges prove comes from the manifest, which ``verify`` checks; the table is only
  what the triggers probe (one primary-key probe: the range starting nearest below a position).
- ``wg_archive_streams``: the archived streams. The INSERT trigger refuses a stream's first
  event when the stream is archived (a writer would start it again at version 1: two version
  1s, one live, one archived).

The triggers: SQLite's ``wg_events_no_delete`` and ``wg_events_handed_out`` are made again;
Postgres' ``wg_events_immutable()`` and ``wg_events_handed_out()`` are replaced. An append's
row pays for no probe: the conditions are tried after the ones that pass it (the next
position; a stream past its first version). The SQL is literal here (migrations are history).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_archive"
down_revision: str | Sequence[str] | None = "0014_append_plans_and_channel"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IMMUTABLE_MESSAGE = (
    "wg_events is append-only: stored events never change. "
    "Append a new event that corrects the old one instead."
)
POSITION_MESSAGE = (
    "wg_events positions are handed out by the log: a new event goes right after the last "
    "one. Append through wgstore (EventStore.append)."
)
ID_MESSAGE = (
    "wg_events ids are UUIDs in lower-case hyphenated form, as str(uuid.UUID) writes them: "
    "another form reads as the same id as a stored one."
)
STORED_MESSAGE = (
    "wg_events already holds this event_id, or this version of the stream: each event is "
    "stored once (INSERT OR REPLACE would delete the stored one)."
)
SQLITE_ARCHIVED_MESSAGE = (
    "this stream is archived: its events left the live log (wgstore archive). Put them back "
    "with `wgstore restore RUN` before appending to it."
)
PG_ARCHIVED_MESSAGE = (
    "Its events left the live log (wgstore archive): put them back with `wgstore restore RUN` "
    "before appending to it."
)


def _sqlite_archived(row: str) -> str:
    return (
        "ifnull((SELECT last_position FROM wg_archive_ranges WHERE first_position <= "
        f"{row}.position ORDER BY first_position DESC LIMIT 1) >= {row}.position, 0)"
    )


_ID_GLOB = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12))
_SQLITE_BAD_POSITION = (
    "NEW.position IS NOT (SELECT coalesce(max(position), 0) + 1 FROM wg_events) "
    f"AND NOT {_sqlite_archived('NEW')}"
)
_SQLITE_BAD_ID = f"NEW.event_id NOT GLOB '{_ID_GLOB}'"
_SQLITE_STORED = (
    "EXISTS (SELECT 1 FROM wg_events WHERE event_id = NEW.event_id) OR EXISTS (SELECT 1 FROM "
    "wg_events WHERE stream_id = NEW.stream_id AND stream_version = NEW.stream_version)"
)
_SQLITE_ARCHIVED_STREAM = (
    "NEW.stream_version = 1 AND EXISTS (SELECT 1 FROM wg_archive_streams WHERE stream_id = "
    "NEW.stream_id)"
)
SQLITE_NO_DELETE = f"""CREATE TRIGGER wg_events_no_delete BEFORE DELETE ON wg_events
        WHEN NOT {_sqlite_archived("OLD")}
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END"""
SQLITE_HANDED_OUT = f"""
CREATE TRIGGER wg_events_handed_out BEFORE INSERT ON wg_events
WHEN {_SQLITE_BAD_POSITION} OR {_SQLITE_BAD_ID} OR {_SQLITE_STORED} OR {_SQLITE_ARCHIVED_STREAM}
BEGIN
    SELECT RAISE(ABORT, '{POSITION_MESSAGE}') WHERE {_SQLITE_BAD_POSITION};
    SELECT RAISE(ABORT, '{ID_MESSAGE}') WHERE {_SQLITE_BAD_ID};
    SELECT RAISE(ABORT, '{SQLITE_ARCHIVED_MESSAGE}') WHERE {_SQLITE_ARCHIVED_STREAM};
    SELECT RAISE(ABORT, '{STORED_MESSAGE}');
END
"""

PG_IMMUTABLE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION wg_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND (SELECT r.last_position FROM wg_archive_ranges r
            WHERE r.first_position <= OLD.position
            ORDER BY r.first_position DESC LIMIT 1) >= OLD.position THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{IMMUTABLE_MESSAGE}' USING ERRCODE = 'WG003';
END $$
"""
PG_HANDED_OUT_FUNCTION = """
CREATE OR REPLACE FUNCTION wg_events_handed_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.position < 1 OR NEW.position > coalesce(pg_sequence_last_value(
            (quote_ident(TG_TABLE_SCHEMA) || '.' || {sequence})::regclass), 0) THEN
        RAISE EXCEPTION 'wgstore: position % was not handed out by the log', NEW.position
            USING ERRCODE = 'WG005', HINT = '{hint}';
    END IF;
    IF NEW.stream_version = 1 AND EXISTS (
            SELECT 1 FROM wg_archive_streams a WHERE a.stream_id = NEW.stream_id) THEN
        RAISE EXCEPTION 'wgstore: stream % is archived', NEW.stream_id
            USING ERRCODE = 'WG006', HINT = '{archived_hint}';
    END IF;
    RETURN NEW;
END $$
"""
_PG_SEQUENCE = (
    "SELECT quote_literal(quote_ident(c.relname)) FROM pg_class c "
    "WHERE c.oid = pg_get_serial_sequence('wg_events', 'position')::regclass"
)


def upgrade() -> None:
    """Create the archive's tables; let the triggers pass archived positions only."""
    op.create_table(
        "wg_archive_batches",
        sa.Column("batch_id", sa.Text(), nullable=False),
        sa.Column(
            "location",
            sa.Text(),
            nullable=False,
            comment="the archive: a folder or an fsspec URL",
        ),
        sa.Column(
            "manifest",
            sa.Text(),
            nullable=False,
            comment=(
                "the manifest's JSON, exactly the bytes its SHA-256 (in the Archived event) covers"
            ),
        ),
        sa.Column("manifest_sha256", sa.Text(), nullable=False),
        sa.Column(
            "archived_position",
            sa.BigInteger(),
            nullable=False,
            comment="position of the LogArchived event that names the manifest",
        ),
        sa.Column("events", sa.BigInteger(), nullable=False, comment="events the batch moved"),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("batch_id", name="pk_wg_archive_batches"),
    )
    op.create_table(
        "wg_archive_ranges",
        sa.Column(
            "first_position",
            sa.BigInteger(),
            autoincrement=False,
            nullable=False,
            comment="first position of a run of archived events with no live event between",
        ),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("batch_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("first_position", name="pk_wg_archive_ranges"),
    )
    op.create_index("ix_wg_archive_ranges_run_id", "wg_archive_ranges", ["run_id"])
    op.create_table(
        "wg_archive_streams",
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("batch_id", sa.Text(), nullable=False),
        sa.Column(
            "stream_version", sa.Integer(), nullable=False, comment="the stream's last version"
        ),
        sa.PrimaryKeyConstraint("stream_id", name="pk_wg_archive_streams"),
    )
    op.create_index("ix_wg_archive_streams_run_id", "wg_archive_streams", ["run_id"])
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        sequence = bind.exec_driver_sql(_PG_SEQUENCE).scalar_one()
        op.execute(PG_IMMUTABLE_FUNCTION)
        op.execute(
            PG_HANDED_OUT_FUNCTION.format(
                sequence=sequence, hint=POSITION_MESSAGE, archived_hint=PG_ARCHIVED_MESSAGE
            )
        )
        return
    op.execute("DROP TRIGGER IF EXISTS wg_events_no_delete")
    op.execute(SQLITE_NO_DELETE)
    op.execute("DROP TRIGGER IF EXISTS wg_events_handed_out")
    op.execute(SQLITE_HANDED_OUT)


def downgrade() -> None:
    """Put back the triggers of 0001 and 0012 and drop the archive's tables (an archived
    batch's rows stay in its files; restore them first)."""
    first = importlib.import_module("wgstore.migrations.versions.0001_event_log")
    twelfth = importlib.import_module("wgstore.migrations.versions.0012_handed_out_positions")
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(
            first.PG_IMMUTABLE_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        )
        sequence = bind.exec_driver_sql(_PG_SEQUENCE).scalar_one()
        op.execute(
            twelfth.PG_FUNCTION.format(
                trigger="wg_events_handed_out", sequence=sequence, hint=POSITION_MESSAGE
            ).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        )
    else:
        op.execute("DROP TRIGGER IF EXISTS wg_events_no_delete")
        op.execute(
            f"""CREATE TRIGGER wg_events_no_delete BEFORE DELETE ON wg_events
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END"""
        )
        op.execute("DROP TRIGGER IF EXISTS wg_events_handed_out")
        op.execute(twelfth.SQLITE_TRIGGER)
    op.drop_index("ix_wg_archive_streams_run_id", table_name="wg_archive_streams")
    op.drop_table("wg_archive_streams")
    op.drop_index("ix_wg_archive_ranges_run_id", table_name="wg_archive_ranges")
    op.drop_table("wg_archive_ranges")
    op.drop_table("wg_archive_batches")
