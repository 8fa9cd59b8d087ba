"""The event log: wg_events (append-only, hash-chained), wg_subscriptions, wg_snapshots.

Revision ID: 0001_event_log
Revises:
Create Date: 2026-11-29

On Postgres, ``wg_append`` does a whole append in one round trip: it locks the table in
EXCLUSIVE mode (so positions become visible in the order they were handed out), checks the
expected version and the idempotency of the event ids, chains the hashes and inserts the batch.
Triggers on both backends refuse UPDATE, DELETE (and TRUNCATE on Postgres) of wg_events.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_event_log"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IMMUTABLE_MESSAGE = (
    "wg_events is append-only: stored events never change. "
    "Append a new event that corrects the old one instead."
)

SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER wg_events_no_update BEFORE UPDATE ON wg_events
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END""",
    f"""CREATE TRIGGER wg_events_no_delete BEFORE DELETE ON wg_events
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END""",
]

PG_IMMUTABLE_FUNCTION = f"""
CREATE FUNCTION wg_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{IMMUTABLE_MESSAGE}' USING ERRCODE = 'WG003';
END $$
"""

PG_TRIGGERS = [
    """CREATE TRIGGER wg_events_no_update_delete BEFORE UPDATE OR DELETE ON wg_events
        FOR EACH ROW EXECUTE FUNCTION wg_events_immutable()""",
    """CREATE TRIGGER wg_events_no_truncate BEFORE TRUNCATE ON wg_events
        FOR EACH STATEMENT EXECUTE FUNCTION wg_events_immutable()""",
]

# p_expected: >= 0 the exact version; -1 ANY; -2 NO_STREAM; -3 STREAM_EXISTS.
# The hash input must match wgstore.events.hashing.chain_hash byte for byte.
PG_APPEND_FUNCTION = """
CREATE FUNCTION wg_append(
    p_stream_id text,
    p_expected bigint,
    p_event_ids uuid[],
    p_types text[],
    p_schema_versions smallint[],
    p_data jsonb[],
    p_metadata jsonb[],
    p_check_ids boolean,
    p_lock_timeout_ms integer
) RETURNS TABLE (
    o_position bigint, o_version integer, o_recorded_at timestamptz, o_hash text, o_existed boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := cardinality(p_event_ids);
    v_version integer;
    v_hash text;
    v_found integer;
    v_min integer;
    v_max integer;
    v_same boolean;
    v_now timestamptz;
    v_us text;
    v_position bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
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

    v_now := date_trunc('microseconds', clock_timestamp());
    v_us := floor(extract(epoch FROM v_now) * 1000000)::bigint::text;
    FOR i IN 1 .. v_n LOOP
        v_version := v_version + 1;
        v_hash := encode(sha256(convert_to(concat_ws(E'\\n',
            v_hash, p_stream_id, v_version::text, p_event_ids[i]::text, p_types[i],
            p_schema_versions[i]::text, v_us, p_data[i]::text, p_metadata[i]::text), 'UTF8')), 'hex');
        INSERT INTO wg_events (event_id, stream_id, stream_version, event_type, schema_version,
                               data, metadata, recorded_at, hash)
        VALUES (p_event_ids[i], p_stream_id, v_version, p_types[i], p_schema_versions[i],
                p_data[i], p_metadata[i], v_now, v_hash)
        RETURNING position INTO v_position;
        o_position := v_position;
        o_version := v_version;
        o_recorded_at := v_now;
        o_hash := v_hash;
        o_existed := false;
        RETURN NEXT;
    END LOOP;
    PERFORM pg_notify('wg_events', '');
END $$
"""


def _json() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    """Create the log, its guards and its helper tables."""
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    event_id = sa.String(36).with_variant(postgresql.UUID(as_uuid=True), "postgresql")
    op.create_table(
        "wg_events",
        sa.Column(
            "position",
            position,
            sa.Identity(always=False),
            primary_key=True,
            comment="global order; rises in the order events become visible",
        ),
        sa.Column("event_id", event_id, nullable=False, comment="idempotency key"),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False, comment="1, 2, 3... per stream"),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.SmallInteger(), nullable=False),
        sa.Column("data", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, comment="UTC"),
        sa.Column(
            "hash",
            sa.String(64),
            nullable=False,
            comment="SHA-256 over the stream's previous hash and this event",
        ),
        sa.PrimaryKeyConstraint("position", name="pk_wg_events"),
        sa.UniqueConstraint("event_id", name="uq_wg_events_event_id"),
        sa.UniqueConstraint(
            "stream_id", "stream_version", name="uq_wg_events_stream_id_stream_version"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_wg_events_event_type_position", "wg_events", ["event_type", "position"])
    op.create_index("ix_wg_events_recorded_at", "wg_events", ["recorded_at"])
    op.create_table(
        "wg_subscriptions",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "checkpoint",
            sa.BigInteger(),
            server_default="0",
            nullable=False,
            comment="position of the last event handled",
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_wg_subscriptions"),
    )
    op.create_table(
        "wg_snapshots",
        sa.Column("name", sa.Text(), nullable=False, comment="which projection"),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False, comment="last event folded in"),
        sa.Column(
            "schema",
            sa.Text(),
            nullable=False,
            comment="fingerprint of the state's schema; a mismatch discards the snapshot",
        ),
        sa.Column("state", _json(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", "stream_id", name="pk_wg_snapshots"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_IMMUTABLE_FUNCTION)
        for statement in PG_TRIGGERS:
            op.execute(statement)
        op.execute(PG_APPEND_FUNCTION)
    else:
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    """Drop everything the upgrade created (the events with it)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS wg_append")
        op.execute("DROP TRIGGER IF EXISTS wg_events_no_truncate ON wg_events")
        op.execute("DROP TRIGGER IF EXISTS wg_events_no_update_delete ON wg_events")
        op.execute("DROP FUNCTION IF EXISTS wg_events_immutable")
    else:
        op.execute("DROP TRIGGER IF EXISTS wg_events_no_update")
        op.execute("DROP TRIGGER IF EXISTS wg_events_no_delete")
    op.drop_table("wg_snapshots")
    op.drop_table("wg_subscriptions")
    op.drop_index("ix_wg_events_recorded_at", table_name="wg_events")
    op.drop_index("ix_wg_events_event_type_position", table_name="wg_events")
    op.drop_table("wg_events")
