"""A hash chain over the whole log (``log_hash``) and an optional keyed MAC per event (``mac``).

Revision ID: 0004_log_chain
Revises: 0003_set_based_append
Create Date: 2026-11-30

``log_hash`` chains every event in position order, across streams: SHA-256 over the previous
row's ``log_hash``, the position, the event's stream ``hash`` and its ``mac`` (see
wgstore.events.hashing.log_hash). Existing rows are backfilled in position order (the immutability
triggers are lifted for that one UPDATE, inside the migration's transaction, with the table
locked). ``mac`` is computed by the client (the key never reaches the database) and passed in.

On Postgres, ``wg_append`` now hands out positions itself (``nextval`` under its table lock, so
they stay in visibility order), since the log hash covers the position; it takes ``p_macs`` and
drops 0003's unused ``p_lock_timeout_ms``. Still one round trip per append.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from wgstore.events.postgres_recorder import APPEND_FUNCTION, APPEND_SIGNATURE

revision: str = "0004_log_chain"
down_revision: str | Sequence[str] | None = "0003_set_based_append"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOG_HASH_COMMENT = (
    "SHA-256 over the log_hash of the row before (position order), position, hash, mac"
)
MAC_COMMENT = "HMAC-SHA-256 of the event's content with the writer's key; NULL without a key"

OLD_SIGNATURE = (
    "wg_append(text, bigint, uuid[], text[], smallint[], jsonb[], jsonb[], boolean, integer)"
)
NEW_SIGNATURE = APPEND_SIGNATURE

# The function's SQL lives beside the recorder that calls it (wgstore.events.postgres_recorder).
# When it changes, copy this revision's text here first (migrations are history) and install the
# new one from a new revision.
PG_APPEND_FUNCTION = APPEND_FUNCTION

PG_BACKFILL = """
DO $$
DECLARE
    r record;
    v_log text := '';
BEGIN
    FOR r IN SELECT position, hash, mac FROM wg_events ORDER BY position LOOP
        v_log := encode(sha256(convert_to(concat_ws(E'\\n',
            v_log, r.position::text, r.hash, coalesce(r.mac, '')), 'UTF8')), 'hex');
        UPDATE wg_events SET log_hash = v_log WHERE position = r.position;
    END LOOP;
END $$
"""


def _first() -> object:
    return importlib.import_module("wgstore.migrations.versions.0001_event_log")


def upgrade() -> None:
    """Add and backfill log_hash and mac; replace wg_append on Postgres."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("LOCK TABLE wg_events IN ACCESS EXCLUSIVE MODE")
        op.add_column(
            "wg_events",
            sa.Column("log_hash", sa.String(64), nullable=True, comment=LOG_HASH_COMMENT),
        )
        op.add_column(
            "wg_events", sa.Column("mac", sa.String(64), nullable=True, comment=MAC_COMMENT)
        )
        op.execute("ALTER TABLE wg_events DISABLE TRIGGER wg_events_no_update_delete")
        op.execute(PG_BACKFILL)
        op.execute("ALTER TABLE wg_events ENABLE TRIGGER wg_events_no_update_delete")
        op.alter_column("wg_events", "log_hash", nullable=False, existing_type=sa.String(64))
        op.execute(f"DROP FUNCTION {OLD_SIGNATURE}")
        op.execute(PG_APPEND_FUNCTION)
        return
    # SQLite: ADD COLUMN ... NOT NULL needs a default; every append sets the value.
    op.execute("ALTER TABLE wg_events ADD COLUMN log_hash VARCHAR(64) NOT NULL DEFAULT ''")
    op.execute("ALTER TABLE wg_events ADD COLUMN mac VARCHAR(64)")
    rows = bind.exec_driver_sql("SELECT position, hash FROM wg_events ORDER BY position").all()
    updates = []
    previous = ""
    for position, event_hash in rows:
        # The same bytes as wgstore.events.hashing.log_hash (copied: migrations are frozen).
        text = "\n".join((previous, str(position), event_hash, ""))
        previous = hashlib.sha256(text.encode()).hexdigest()
        updates.append((previous, position))
    if updates:
        op.execute("DROP TRIGGER wg_events_no_update")
        bind.exec_driver_sql("UPDATE wg_events SET log_hash = ? WHERE position = ?", updates)
        op.execute(_first().SQLITE_TRIGGERS[0])  # type: ignore[attr-defined]


def downgrade() -> None:
    """Drop log_hash and mac; put back 0003's wg_append on Postgres."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {NEW_SIGNATURE}")
        third = importlib.import_module("wgstore.migrations.versions.0003_set_based_append")
        op.execute(third.PG_APPEND_FUNCTION)
    op.execute("ALTER TABLE wg_events DROP COLUMN mac")
    op.execute("ALTER TABLE wg_events DROP COLUMN log_hash")
