"""wg_append checks event ids with ``= ANY``, analyzes a new log once, notifies its own channel.

Revision ID: 0014_append_plans_and_channel
Revises: 0013_elastic_read_models
Create Date: 2026-12-07

Postgres only (SQLite has no functions). Three changes to ``wg_append``, found by the server's
statement profile (bench/pg_profile.py, issue 44):

- The check that an append's event ids are new joined ``unnest(p_event_ids)`` with
  ``wg_events``, and its plan depended on what PL/pgSQL's plan cache saw first (0.63 ms a call
  in one profile at 100 runs x 8, 0.03 ms in another). It is ``event_id = ANY(p_event_ids)``
  now, the unique index's plan whatever came first, the order of the ids taken with
  ``array_position``.
- A log never analyzed (autovacuum off, as on the test machine's server, or not run yet) has no
  statistics, and the planner read its tail (``position > p ORDER BY position LIMIT n``, every
  stream follower's read) with a sequential scan and a sort: 1.0-1.3 ms a read at a few thousand
  events, growing with the log, a third of the server's time. The append that takes position
  1,000 analyzes the table once (so does this upgrade); the planner then bounds a tail read by
  the index's live end and takes the index.
- ``pg_notify`` went to one channel, ``wg_events``, for every store in a database: each store's
  followers woke for every other schema's appends. The channel is now ``wg_events_`` and the md5
  of the name of the schema that holds ``wg_events``; listeners ask the server for the same
  name. A process of an older wgstore still listening on ``wg_events`` is no longer woken and
  reads on its fallback interval (0.5 s).

Same signature and result: ``CREATE OR REPLACE``. The downgrade puts back 0004's function.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0014_append_plans_and_channel"
down_revision: str | Sequence[str] | None = "0013_elastic_read_models"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen: the function as this revision installs it (the runtime's copy lives in
# wgstore.events.postgres_functions and may move on).
PG_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION wg_append(
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
        -- = ANY, not a join with unnest: the unique index's plan whatever the plan cache saw
        -- first (the join's took 0.63 ms a call in one profile, 0.03 ms in another).
        SELECT count(e.position),
               min(e.stream_version - array_position(p_event_ids, e.event_id)),
               max(e.stream_version - array_position(p_event_ids, e.event_id)),
               bool_and(e.stream_id = p_stream_id)
          INTO v_found, v_min, v_max, v_same
          FROM wg_events e WHERE e.event_id = ANY(p_event_ids);
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

    -- A log never analyzed (autovacuum off, or not run yet) has no statistics, and the planner
    -- reads its tail (position > p ORDER BY position LIMIT n: every follower's read) with a
    -- sequential scan and a sort, a cost that grows with the log. The append that takes
    -- position 1,000 analyzes it once: with a histogram, the planner bounds such a read by the
    -- index's live end and takes the index.
    IF v_positions[1] <= 1000 AND v_positions[v_n] >= 1000 THEN
        ANALYZE wg_events;
    END IF;

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
        PERFORM pg_notify('wg_events_' || md5((SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'wg_events'::regclass)), '');
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
    PERFORM pg_notify('wg_events_' || md5((SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'wg_events'::regclass)), '');
END $$
"""


def upgrade() -> None:
    """Replace wg_append on Postgres; analyze a log that has events (its appends past 1,000
    will not, having passed that position)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_APPEND_FUNCTION)
        op.execute("ANALYZE wg_events")


def downgrade() -> None:
    """Put back 0004's wg_append on Postgres."""
    if op.get_bind().dialect.name == "postgresql":
        fourth = importlib.import_module("wgstore.migrations.versions.0004_log_chain")
        op.execute(
            fourth.PG_APPEND_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        )
