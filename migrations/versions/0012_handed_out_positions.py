"""Positions only the log hands out, event ids only in their one form: an INSERT trigger.

Revision ID: 0012_handed_out_positions
Revises: 0011_report_points
Create Date: 2026-12-07

The immutability triggers (0001) refuse UPDATE and DELETE; a plain INSERT by anyone who may
write ``wg_events`` went in with any position and, on SQLite, any id text. ``read_stream`` reads a
stream by version, so a row at position 0 or below (where no writer puts one, and where
``verify`` did not look) was read as the stream's next event; an id upper-cased (or without its
hyphens) passed SQLite's unique constraint, which compares text, while every reader parses it
to the UUID already stored. A trigger now refuses, for each new row:

- SQLite: a position other than the log's last plus one (the writer computes exactly that under
  its write lock, so positions stay gapless), an ``event_id`` that is not a UUID in the
  lower-case, hyphenated form writers store (``str(uuid.UUID)``), and a row whose id, or stream
  and version, is already stored. The unique constraints refuse those too, except to
  ``INSERT OR REPLACE``, which deletes the stored row to make room without firing the delete
  trigger (SQLite fires delete triggers for REPLACE only with ``recursive_triggers`` on): a
  plain INSERT could delete history.
- PostgreSQL: a position below 1 or beyond the last value the ``position`` sequence handed out
  (``wg_append`` and the keyed append take their positions from it under the table lock): no row
  ahead of the log, none at 0 or below. ``uuid`` already keeps one form of each id. A row put in
  a gap the sequence left (a position handed out to an append that rolled back) is not refused
  here, which would take a query per row (+8 to +18 us a row, measured, bench/README.md):
  ``verify`` names it (the log chain breaks at the row after it, with or without the key).

Existing rows are not checked (``wgstore verify`` does). The trigger's SQL is literal here
(migrations are history). On SQLite a later migration that rebuilds ``wg_events`` (as 0008 does)
must create the trigger again. A whole dump restores as before (``pg_dump`` and SQLite's
``.dump`` create triggers after the rows); loading rows alone into a migrated schema needs the
triggers disabled for the load (``pg_restore --data-only --disable-triggers``).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012_handed_out_positions"
down_revision: str | Sequence[str] | None = "0011_report_points"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRIGGER = "wg_events_handed_out"

POSITION_MESSAGE = (
    "wg_events positions are handed out by the log: a new event goes right after the last "
    "one. Append through wgstore (EventStore.append)."
)
# The store reads "event_id" in SQLite's error as a duplicate id (DuplicateEventError, as the
# unique constraint's "UNIQUE constraint failed: wg_events.event_id"): only STORED_MESSAGE names it.
ID_MESSAGE = (
    "wg_events ids are UUIDs in lower-case hyphenated form, as str(uuid.UUID) writes them: "
    "another form reads as the same id as a stored one."
)
STORED_MESSAGE = (
    "wg_events already holds this event_id, or this version of the stream: each event is "
    "stored once (INSERT OR REPLACE would delete the stored one)."
)
# 8-4-4-4-12 lower-case hex digits: the form writers store (uuid7() and str(uuid.UUID) alike).
_ID_GLOB = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12))
_SQLITE_BAD_POSITION = "NEW.position IS NOT (SELECT coalesce(max(position), 0) + 1 FROM wg_events)"
_SQLITE_BAD_ID = f"NEW.event_id NOT GLOB '{_ID_GLOB}'"
_SQLITE_STORED = (
    "EXISTS (SELECT 1 FROM wg_events WHERE event_id = NEW.event_id) OR EXISTS (SELECT 1 FROM "
    "wg_events WHERE stream_id = NEW.stream_id AND stream_version = NEW.stream_version)"
)

# One trigger, one WHEN: the common row pays for one evaluation of the conditions (a probe of
# the position's index and one of each unique index); the body, which says which one failed,
# runs only for a refused row.
SQLITE_TRIGGER = f"""
CREATE TRIGGER {TRIGGER} BEFORE INSERT ON wg_events
WHEN {_SQLITE_BAD_POSITION} OR {_SQLITE_BAD_ID} OR {_SQLITE_STORED}
BEGIN
    SELECT RAISE(ABORT, '{POSITION_MESSAGE}') WHERE {_SQLITE_BAD_POSITION};
    SELECT RAISE(ABORT, '{ID_MESSAGE}') WHERE {_SQLITE_BAD_ID};
    SELECT RAISE(ABORT, '{STORED_MESSAGE}');
END
"""

# No query per row: the last value the sequence handed out is read from the sequence itself
# (NULL before its first nextval: then none was). The sequence is named as the upgrade found
# it and looked up in the trigger's own schema: pg_get_serial_sequence on every row costs 3 us
# more than this lookup (bench/README.md).
PG_FUNCTION = """
CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.position < 1 OR NEW.position > coalesce(pg_sequence_last_value(
            (quote_ident(TG_TABLE_SCHEMA) || '.' || {sequence})::regclass), 0) THEN
        RAISE EXCEPTION 'wgstore: position % was not handed out by the log', NEW.position
            USING ERRCODE = 'WG005', HINT = '{hint}';
    END IF;
    RETURN NEW;
END $$
"""
# The position column's sequence (an identity column's: wg_events_position_seq), quoted as an
# identifier and then as a literal, to be named in the function.
_PG_SEQUENCE = (
    "SELECT quote_literal(quote_ident(c.relname)) FROM pg_class c "
    "WHERE c.oid = pg_get_serial_sequence('wg_events', 'position')::regclass"
)
PG_TRIGGER = f"""
CREATE TRIGGER {TRIGGER} BEFORE INSERT ON wg_events
    FOR EACH ROW EXECUTE FUNCTION {TRIGGER}()
"""


def upgrade() -> None:
    """Create the INSERT trigger of wg_events."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        sequence = bind.exec_driver_sql(_PG_SEQUENCE).scalar_one()
        op.execute(PG_FUNCTION.format(trigger=TRIGGER, sequence=sequence, hint=POSITION_MESSAGE))
        op.execute(PG_TRIGGER)
        return
    op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    """Drop the INSERT trigger of wg_events."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON wg_events")
        op.execute(f"DROP FUNCTION IF EXISTS {TRIGGER}()")
        return
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
