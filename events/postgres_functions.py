"""The SQL of every function and trigger a Postgres store runs, and the names the recorder calls.

The runtime's one copy: :mod:`wgstore.events.postgres_recorder` calls :data:`APPEND` and
:data:`CHECK_FENCE` by these names, and a fresh store is built from these statements
(:func:`create_statements`, run by ``wgstore.migrations.fresh``). The migrations keep their own
frozen copies (migrations are history): a change here needs a new revision that installs it, and
``tests/migrations/test_catalog.py`` fails until the migrated database and a fresh one agree.

- :data:`APPEND` (``wg_append``): one whole append in one round trip (the module docstring of
  the recorder says how); installed by revision ``0004_log_chain``.
- :data:`CHECK_FENCE` (``wg_check_fence``): refuses an append whose lease changed hands
  (``WG004``), locking the lease row ``FOR SHARE`` until the append commits; ``0009_fencing``.
- :data:`IMMUTABLE` (``wg_events_immutable``) and its two triggers: no UPDATE, DELETE or
  TRUNCATE of ``wg_events`` (``WG003``); ``0001_event_log``; since ``0015_archive`` a DELETE of
  a row an archive range covers passes (``wgstore archive`` moved it to a verified file).
- :data:`HANDED_OUT` (``wg_events_handed_out``) and its trigger: no INSERT at a position the
  log's sequence did not hand out (``WG005``); ``0012_handed_out_positions``; since
  ``0015_archive`` no first event of an archived stream (``WG006``) until it is restored.
"""

from __future__ import annotations

__all__ = [
    "ANALYZE_AT",
    "APPEND",
    "APPEND_FUNCTION",
    "APPEND_SIGNATURE",
    "ARCHIVED_MESSAGE",
    "CHECK_FENCE",
    "CHECK_FENCE_FUNCTION",
    "FUNCTIONS",
    "HANDED_OUT",
    "HANDED_OUT_FUNCTION",
    "HANDED_OUT_TRIGGER",
    "IMMUTABLE",
    "IMMUTABLE_FUNCTION",
    "IMMUTABLE_MESSAGE",
    "IMMUTABLE_TRIGGERS",
    "NOTIFY_CHANNEL_SQL",
    "POSITION_MESSAGE",
    "POSITION_SEQUENCE_QUERY",
    "TRIGGERS",
    "create_statements",
]

APPEND = "wg_append"
"""The append function's name (:mod:`wgstore.events.postgres_recorder` calls it)."""
CHECK_FENCE = "wg_check_fence"
"""The fence check's name (the recorder calls it before a fenced append)."""
IMMUTABLE = "wg_events_immutable"
"""The trigger function that refuses UPDATE, DELETE and TRUNCATE of ``wg_events``."""
HANDED_OUT = "wg_events_handed_out"
"""The INSERT trigger of ``wg_events`` and its function (the same name for both)."""

APPEND_SIGNATURE = (
    f"{APPEND}(text, bigint, uuid[], text[], smallint[], jsonb[], jsonb[], text[], boolean)"
)
"""The argument types of the live ``wg_append`` (for ``DROP FUNCTION``)."""

NOTIFY_CHANNEL_SQL = (
    "'wg_events_' || md5((SELECT relnamespace::regnamespace::text FROM pg_class "
    "WHERE oid = 'wg_events'::regclass))"
)
"""The channel an append notifies, as SQL: one per schema (``wg_events_`` and the md5 of the
name of the schema holding ``wg_events``), so a store's followers wake for its own appends
only, not for every store's in the same database. The listener asks the server for the same
expression on its own connection (:mod:`wgstore.events.notifier`)."""

ANALYZE_AT = 1000
"""The position whose append analyzes ``wg_events`` once (``wg_append``, and the recorder's keyed
path): a log never analyzed has no statistics, and the planner reads its tail with a sequential
scan and a sort."""

# Both hash inputs must match wgstore.events.hashing (chain_hash, log_hash) byte for byte.
# concat_ws skips NULLs, hence coalesce(mac, ''): Python joins an empty string there too.
APPEND_FUNCTION = """
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
    IF v_positions[1] <= {analyze_at} AND v_positions[v_n] >= {analyze_at} THEN
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
        PERFORM pg_notify({channel}, '');
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
    PERFORM pg_notify({channel}, '');
END $$
""".replace("{channel}", NOTIFY_CHANNEL_SQL).replace("{analyze_at}", str(ANALYZE_AT))

CHECK_FENCE_FUNCTION = """
CREATE FUNCTION wg_check_fence(p_lease text, p_holder text, p_epoch bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_epoch bigint;
BEGIN
    SELECT holder, epoch INTO v_holder, v_epoch
      FROM wg_run_leases WHERE run_id = p_lease FOR SHARE;
    IF NOT FOUND OR v_holder <> p_holder OR v_epoch <> p_epoch THEN
        RAISE EXCEPTION 'wgstore: lease % is not held by % at epoch %', p_lease, p_holder, p_epoch
            USING ERRCODE = 'WG004',
                  DETAIL = coalesce(v_holder, '') || E'\\n' || coalesce(v_epoch::text, '');
    END IF;
END $$
"""

IMMUTABLE_MESSAGE = (
    "wg_events is append-only: stored events never change. "
    "Append a new event that corrects the old one instead."
)
# Archive ranges never overlap: the one starting nearest below a position is the only one
# that can cover it (one probe of the primary key).
IMMUTABLE_FUNCTION = f"""
CREATE FUNCTION wg_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND (SELECT r.last_position FROM wg_archive_ranges r
            WHERE r.first_position <= OLD.position
            ORDER BY r.first_position DESC LIMIT 1) >= OLD.position THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{IMMUTABLE_MESSAGE}' USING ERRCODE = 'WG003';
END $$
"""
IMMUTABLE_TRIGGERS = (
    """CREATE TRIGGER wg_events_no_update_delete BEFORE UPDATE OR DELETE ON wg_events
        FOR EACH ROW EXECUTE FUNCTION wg_events_immutable()""",
    """CREATE TRIGGER wg_events_no_truncate BEFORE TRUNCATE ON wg_events
        FOR EACH STATEMENT EXECUTE FUNCTION wg_events_immutable()""",
)

POSITION_MESSAGE = (
    "wg_events positions are handed out by the log: a new event goes right after the last "
    "one. Append through wgstore (EventStore.append)."
)
# No query per row: the last value the sequence handed out is read from the sequence itself
# (NULL before its first nextval: then none was). The sequence is named as it was found when
# the function was made (POSITION_SEQUENCE_QUERY) and looked up in the trigger's own schema:
# pg_get_serial_sequence on every row costs 3 us more than this lookup (bench/README.md).
ARCHIVED_MESSAGE = (
    "Its events left the live log (wgstore archive): put them back with `wgstore restore RUN` "
    "before appending to it."
)
# Only a stream's first event probes the archive's streams (an archived stream has no live
# rows, so a writer starts it at version 1 again).
HANDED_OUT_FUNCTION = """
CREATE FUNCTION wg_events_handed_out() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""With ``{sequence}`` (what :data:`POSITION_SEQUENCE_QUERY` returns), ``{hint}`` and
``{archived_hint}`` to fill."""
POSITION_SEQUENCE_QUERY = (
    "SELECT quote_literal(quote_ident(c.relname)) FROM pg_class c "
    "WHERE c.oid = pg_get_serial_sequence('wg_events', 'position')::regclass"
)
"""The position column's sequence (an identity column's: ``wg_events_position_seq``), quoted
as an identifier and then as a literal, to be named in :data:`HANDED_OUT_FUNCTION`."""
HANDED_OUT_TRIGGER = """
CREATE TRIGGER wg_events_handed_out BEFORE INSERT ON wg_events
    FOR EACH ROW EXECUTE FUNCTION wg_events_handed_out()
"""

FUNCTIONS = (APPEND, CHECK_FENCE, IMMUTABLE, HANDED_OUT)
"""Every function a Postgres store has (wgstore's own; nothing else)."""
TRIGGERS = ("wg_events_no_update_delete", "wg_events_no_truncate", HANDED_OUT)
"""Every trigger a Postgres store has, all on ``wg_events``."""


def create_statements(sequence: str) -> tuple[str, ...]:
    """The statements that make every function and trigger, in an order that works, for a
    ``wg_events`` (and ``wg_run_leases``) that exist; ``sequence`` is what
    :data:`POSITION_SEQUENCE_QUERY` returned for that ``wg_events``."""
    return (
        IMMUTABLE_FUNCTION,
        *IMMUTABLE_TRIGGERS,
        APPEND_FUNCTION,
        CHECK_FENCE_FUNCTION,
        HANDED_OUT_FUNCTION.format(
            sequence=sequence, hint=POSITION_MESSAGE, archived_hint=ARCHIVED_MESSAGE
        ),
        HANDED_OUT_TRIGGER,
    )
