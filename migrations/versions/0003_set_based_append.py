"""wg_append inserts a batch with one set-based INSERT instead of one INSERT per event.

Revision ID: 0003_set_based_append
Revises: 0002_read_models
Create Date: 2026-11-29

Measured in bench/ (W2, batches of 100 on Postgres): the per-event ``INSERT ... RETURNING`` loop
of 0001 cost 0.55 of plain executemany. The hashes are still chained in a loop (each needs the
one before), but into an array; the rows then go in with one ``INSERT ... SELECT`` whose
``ORDER BY`` hands out positions in batch order. A single event takes a plain INSERT, and the
lock timeout moved to the connection (``SET lock_timeout``) instead of a ``set_config`` per call.
``p_lock_timeout_ms`` stays in the signature so 0001's callers and this one's match; it is
ignored. SQLite is unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0003_set_based_append"
down_revision: str | Sequence[str] | None = "0002_read_models"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The hash input must match wgstore.events.hashing.chain_hash byte for byte.
PG_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION wg_append(
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
    v_hashes text[] := array_fill(NULL::text, ARRAY[cardinality(p_event_ids)]);
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
        v_hash := encode(sha256(convert_to(concat_ws(E'\\n',
            v_hash, p_stream_id, (v_version + i)::text, p_event_ids[i]::text, p_types[i],
            p_schema_versions[i]::text, v_us, p_data[i]::text, p_metadata[i]::text), 'UTF8')),
            'hex');
        v_hashes[i] := v_hash;  -- in place: appending with || would copy the array each time
    END LOOP;

    IF v_n = 1 THEN  -- the common single append: a plain INSERT is cheaper than the CTE
        INSERT INTO wg_events (event_id, stream_id, stream_version, event_type, schema_version,
                               data, metadata, recorded_at, hash)
        VALUES (p_event_ids[1], p_stream_id, v_version + 1, p_types[1], p_schema_versions[1],
                p_data[1], p_metadata[1], v_now, v_hash)
        RETURNING position INTO o_position;
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
        INSERT INTO wg_events (event_id, stream_id, stream_version, event_type, schema_version,
                               data, metadata, recorded_at, hash)
        SELECT p_event_ids[x.i], p_stream_id, v_version + x.i::integer, p_types[x.i],
               p_schema_versions[x.i], p_data[x.i], p_metadata[x.i], v_now, v_hashes[x.i]
          FROM generate_series(1, v_n) AS x(i)
         ORDER BY x.i
        RETURNING position, stream_version, hash
    )
    SELECT ins.position, ins.stream_version, v_now, ins.hash::text, false
      FROM inserted ins ORDER BY ins.stream_version;
    PERFORM pg_notify('wg_events', '');
END $$
"""


def upgrade() -> None:
    """Replace wg_append with the set-based version (Postgres only)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_APPEND_FUNCTION)


def downgrade() -> None:
    """Put back the per-event loop of 0001 (Postgres only)."""
    if op.get_bind().dialect.name == "postgresql":
        first = importlib.import_module("wgstore.migrations.versions.0001_event_log")
        op.execute(
            first.PG_APPEND_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        )
