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
NEW_SIGNATURE = (
    "wg_append(text, bigint, uuid[], text[], smallint[], jsonb[], jsonb[], text[], boolean)"
)

# Literal (migrations are history): the function as this revision installs it, whatever
# wgstore.events.postgres_functions says today (a change there comes with a revision of its own).
# Both hash inputs must match wgstore.events.hashing (chain_hash, log_hash) byte for byte.
# concat_ws skips NULLs, hence coalesce(mac, ''): Python joins an empty string there too.
PG_APPEND_FUNCTION = """
CREATE FUNCTION wg_append(
    p_stream_id text,
    p_expected bigint,
    p_event_ids uuid[],
    p_types text[],
    p_schema_versions smallint[],
    p_data jsonb[],
    p_metadata jsonb[],
    p_macs text[],
    p_check_ids boolean
) RETURNS TABLE (
    o_position bigint, o_version integer, o_recorded_at timestamptz, o_hash text, o_existed boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := cardinality(p_event_ids);
    v_version integer;
    v_hash text;
    v_log text;
    v_hashes text[] := array_fill(NULL::text, ARRAY[cardinality(p_event_ids)]);
    v_logs text[] := array_fill(NULL::text, ARRAY[cardinality(p_event_ids)]);
    v_positions bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_event_ids)]);
    v_sequence text := pg_get_serial_sequence('wg_events', 'position');
    v_found integer;
    v_min integer;
    v_max integer;
    v_same boolean;
    v_now timestamptz;
    v_us text;
BEGIN
    -- lock_timeout is set per connection (wgstore.events.engine), not per call: cheaper.
    LOCK TABLE wg_events IN EXCLUSIVE MODE;

    IF p_check_ids THEN
        SELECT count(e.position), min(e.stream_version - x.i::integer),
               max(e.stream_version - x.i::integer), bool_and(e.stream_id = p_stream_id)
          INTO v_found, v_min, v_max, v_same
          FROM unnest(p_event_ids) WITH ORDINALITY AS x(id, i)
          JOIN wg_events e ON e.event_id = x.id;
        IF v_found > 0 THEN
            IF v_found = v_n AND v_same AND v_min = v_max THEN
                RETURN QUERY
                    SELECT e.position, e.stream_version, e.recorded_at, e.hash::text, true
                      FROM unnest(p_event_ids) WITH ORDINALITY AS x(id, i)
                      JOIN wg_events e ON e.event_id = x.id
                     ORDER BY x.i;
                RETURN;
            END IF;
            RAISE EXCEPTION 'wgstore: % of % event ids are already stored elsewhere', v_found, v_n
                USING ERRCODE = 'WG002';
        END IF;
    END IF;

    -- The stream's chain continues from its last event...
    SELECT e.stream_version, e.hash INTO v_version, v_hash
      FROM wg_events e WHERE e.stream_id = p_stream_id
     ORDER BY e.stream_version DESC LIMIT 1;
    IF NOT FOUND THEN
        v_version := 0;
        v_hash := '';
    END IF;
    IF (p_expected >= 0 AND v_version <> p_expected)
       OR (p_expected = -2 AND v_version <> 0)
       OR (p_expected = -3 AND v_version = 0) THEN
        RAISE EXCEPTION 'wgstore: stream % is at version %', p_stream_id, v_version
            USING ERRCODE = 'WG001', DETAIL = v_version::text;
    END IF;

    -- ...and the log's chain from the log's last event, whatever its stream.
    SELECT e.log_hash INTO v_log FROM wg_events e ORDER BY e.position DESC LIMIT 1;
    IF NOT FOUND THEN
        v_log := '';
    END IF;

    v_now := date_trunc('microseconds', clock_timestamp());
    v_us := floor(extract(epoch FROM v_now) * 1000000)::bigint::text;
    FOR i IN 1 .. v_n LOOP
        v_hash := encode(sha256(convert_to(concat_ws(E'\\n',
            v_hash, p_stream_id, (v_version + i)::text, p_event_ids[i]::text, p_types[i],
            p_schema_versions[i]::text, v_us, p_data[i]::text, p_metadata[i]::text), 'UTF8')),
            'hex');
        -- The table lock makes these positions consecutive and visible in this order.
        v_positions[i] := nextval(v_sequence);
        v_log := encode(sha256(convert_to(concat_ws(E'\\n',
            v_log, v_positions[i]::text, v_hash, coalesce(p_macs[i], '')), 'UTF8')), 'hex');
        v_hashes[i] := v_hash;  -- in place: appending with || would copy the array each time
        v_logs[i] := v_log;
    END LOOP;

    IF v_n = 1 THEN  -- the common single append: a plain INSERT is cheaper than the CTE
        INSERT INTO wg_events (position, event_id, stream_id, stream_version, event_type,
                               schema_version, data, metadata, recorded_at, hash, log_hash, mac)
        VALUES (v_positions[1], p_event_ids[1], p_stream_id, v_version + 1, p_types[1],
                p_schema_versions[1], p_data[1], p_metadata[1], v_now, v_hash, v_log, p_macs[1]);
        o_position := v_positions[1];
        o_version := v_version + 1;
        o_recorded_at := v_now;
        o_hash := v_hash;
        o_existed := false;
        RETURN NEXT;
        PERFORM pg_notify('wg_events', '');
        RETURN;
    END IF;

    RETURN QUERY
    WITH inserted AS (
        INSERT INTO wg_events (position, event_id, stream_id, stream_version, event_type,
                               schema_version, data, metadata, recorded_at, hash, log_hash, mac)
        SELECT v_positions[x.i], p_event_ids[x.i], p_stream_id, v_version + x.i::integer,
               p_types[x.i], p_schema_versions[x.i], p_data[x.i], p_metadata[x.i], v_now,
               v_hashes[x.i], v_logs[x.i], p_macs[x.i]
          FROM generate_series(1, v_n) AS x(i)
        RETURNING position, stream_version, hash
    )
    SELECT ins.position, ins.stream_version, v_now, ins.hash::text, false
      FROM inserted ins ORDER BY ins.stream_version;
    PERFORM pg_notify('wg_events', '');
END $$
"""

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
