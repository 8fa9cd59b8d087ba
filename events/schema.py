"""All table metadata: the log's tables and the read models'. Depends on nothing in wgstore.

A fresh store is this ``metadata`` created at once, with the view below, the backend's triggers
and functions (``postgres_functions``, ``sqlite_triggers``), stamped at the newest revision
(``wgstore.migrations.fresh``). The Alembic revisions bring an existing store to the same
schema; tests check both ways agree (Alembic's drift check, and a comparison of the catalogs).
Columns a later revision added come last in their table, where ``ADD COLUMN`` put them, so a
fresh store's column order is a migrated one's. Every table carries the prefix ``wg_`` so the store
can share a database with other software.

The read models (``wg_worker_groups``, ``wg_workers``, ``wg_poll_history``, ``wg_reports``,
``wg_report_series``, ``wg_report_points``, ``wg_runs``, ``wg_run_decisions``,
``wg_run_resizes``) are
kept from the log by the projector (``wgstore.projections.projector``), for people who query with
SQL; ``docs/sql.md`` explains every column. The view ``wg_event_log`` is not a table: its SQL
differs per backend (:data:`EVENT_LOG_VIEW_SQL`). Times are UTC (``timestamptz`` on Postgres;
``YYYY-MM-DD HH:MM:SS.ffffff`` text on SQLite, the same form as ``wg_events.recorded_at``). JSON
columns are ``jsonb`` on Postgres and JSON text on SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

__all__ = [
    "ALEMBIC_VERSION_TABLE",
    "EVENT_LOG_VIEW",
    "EVENT_LOG_VIEW_SQL",
    "FREQUENT_TYPES",
    "READ_MODEL_TABLES",
    "TYPE_INDEX_WHERE",
    "metadata",
    "wg_archive_batches",
    "wg_archive_ranges",
    "wg_archive_streams",
    "wg_blobs",
    "wg_events",
    "wg_poll_history",
    "wg_report_points",
    "wg_report_series",
    "wg_reports",
    "wg_run_decisions",
    "wg_run_leases",
    "wg_run_resizes",
    "wg_runs",
    "wg_snapshots",
    "wg_subscriptions",
    "wg_worker_groups",
    "wg_workers",
]

ALEMBIC_VERSION_TABLE = "wg_alembic_version"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

_Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Json = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
_EventId = sa.String(36).with_variant(postgresql.UUID(as_uuid=True), "postgresql")

wg_events = sa.Table(
    "wg_events",
    metadata,
    sa.Column(
        "position",
        _Position,
        sa.Identity(always=False),
        primary_key=True,
        comment="global order; rises in the order events become visible",
    ),
    sa.Column("event_id", _EventId, nullable=False, comment="idempotency key"),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("stream_version", sa.Integer(), nullable=False, comment="1, 2, 3... per stream"),
    sa.Column("event_type", sa.Text(), nullable=False),
    sa.Column("schema_version", sa.SmallInteger(), nullable=False),
    sa.Column("data", _Json, nullable=False),
    sa.Column("metadata", _Json, nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, comment="UTC"),
    sa.Column(
        "hash",
        sa.String(64),
        nullable=False,
        comment="SHA-256 over the stream's previous hash and this event",
    ),
    sa.Column(
        "log_hash",
        sa.String(64),
        nullable=False,
        comment="SHA-256 over the log_hash of the row before (position order), position, hash, mac",
    ),
    sa.Column(
        "mac",
        sa.String(64),
        nullable=True,
        comment="HMAC-SHA-256 of the event's content with the writer's key; NULL without a key",
    ),
    sa.UniqueConstraint("event_id"),
    sa.UniqueConstraint("stream_id", "stream_version"),
)
FREQUENT_TYPES = ("WorkerReported", "WorkerGroupPolled")
"""The event types most of a log holds; the type index leaves them out (each index an append
touches is one more page its commit writes)."""
TYPE_INDEX_WHERE = "event_type NOT IN ({})".format(", ".join(f"'{t}'" for t in FREQUENT_TYPES))
"""The type index's condition; a read of other types repeats it so the planner uses the index."""
sa.Index(
    "ix_wg_events_event_type_position",
    wg_events.c.event_type,
    wg_events.c.position,
    sqlite_where=sa.text(TYPE_INDEX_WHERE),
    postgresql_where=sa.text(TYPE_INDEX_WHERE),
)

wg_subscriptions = sa.Table(
    "wg_subscriptions",
    metadata,
    sa.Column("name", sa.Text(), primary_key=True),
    sa.Column(
        "checkpoint",
        sa.BigInteger(),
        nullable=False,
        server_default="0",
        comment="position of the last event handled",
    ),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

wg_snapshots = sa.Table(
    "wg_snapshots",
    metadata,
    sa.Column("name", sa.Text(), primary_key=True, comment="which projection"),
    sa.Column("stream_id", sa.Text(), primary_key=True),
    sa.Column("stream_version", sa.Integer(), nullable=False, comment="last event folded in"),
    sa.Column(
        "schema",
        sa.Text(),
        nullable=False,
        comment="fingerprint of the state's schema; a mismatch discards the snapshot",
    ),
    sa.Column("state", _Json, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

wg_run_leases = sa.Table(
    "wg_run_leases",
    metadata,
    sa.Column("run_id", sa.Text(), primary_key=True),
    sa.Column("holder", sa.Text(), nullable=False, comment="the controller that holds the run"),
    sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column(
        "expires_at",
        sa.DateTime(timezone=True),
        nullable=False,
        comment="the holder's clock; past it the run is orphaned (coordination, not history)",
    ),
    sa.Column(
        "epoch",
        sa.BigInteger(),
        nullable=False,
        server_default="1",
        comment="grows by one each time the lease changes hands; appends carry it",
    ),
    sa.Column("host", sa.Text(), nullable=True),
    sa.Column("pid", sa.Integer(), nullable=True),
    sa.Column(
        "process_start",
        sa.Text(),
        nullable=True,
        comment="boot id and start time of the holder's process (tells a reused pid)",
    ),
)

wg_blobs = sa.Table(
    "wg_blobs",
    metadata,
    sa.Column("sha256", sa.Text(), primary_key=True, comment="hex SHA-256 of bytes"),
    sa.Column("size", sa.BigInteger(), nullable=False),
    sa.Column("bytes", sa.LargeBinary(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
"""Bytes too large for an event (a recorded run's pickled train loop or datasets), stored once
per content and named by their SHA-256 from the event (:mod:`wgstore.events.blobs`)."""

# ---------------------------------------------------------------- the archive (0015_archive)

wg_archive_batches = sa.Table(
    "wg_archive_batches",
    metadata,
    sa.Column("batch_id", sa.Text(), primary_key=True),
    sa.Column(
        "location", sa.Text(), nullable=False, comment="the archive: a folder or an fsspec URL"
    ),
    sa.Column(
        "manifest",
        sa.Text(),
        nullable=False,
        comment="the manifest's JSON, exactly the bytes its SHA-256 (in the Archived event) covers",
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
)
"""One row per archive batch whose events left the live log (:mod:`wgstore.events.archive_log`)."""

wg_archive_ranges = sa.Table(
    "wg_archive_ranges",
    metadata,
    sa.Column(
        "first_position",
        sa.BigInteger(),
        primary_key=True,
        autoincrement=False,
        comment="first position of a run of archived events with no live event between",
    ),
    sa.Column("last_position", sa.BigInteger(), nullable=False),
    sa.Column("batch_id", sa.Text(), nullable=False),
    sa.Column("run_id", sa.Text(), nullable=False),
)
"""The positions the archive holds, as ranges (one run's events each): the only rows of
``wg_events`` a DELETE may remove, and the only old positions an INSERT (``wgstore restore``)
may fill. What they prove comes from the signed manifest, not from this table."""
sa.Index("ix_wg_archive_ranges_run_id", wg_archive_ranges.c.run_id)

wg_archive_streams = sa.Table(
    "wg_archive_streams",
    metadata,
    sa.Column("stream_id", sa.Text(), primary_key=True),
    sa.Column("run_id", sa.Text(), nullable=False),
    sa.Column("batch_id", sa.Text(), nullable=False),
    sa.Column("stream_version", sa.Integer(), nullable=False, comment="the stream's last version"),
)
"""The streams in the archive: a new event of one is refused until ``wgstore restore``."""
sa.Index("ix_wg_archive_streams_run_id", wg_archive_streams.c.run_id)

# ---------------------------------------------------------------- read models

EVENT_LOG_VIEW = "wg_event_log"
"""The log with readable columns, for SQL readers (docs/sql.md); its SQL differs per backend."""
_KIND = (
    "CASE WHEN stream_id LIKE 'worker-group-%' THEN 'worker-group' "
    "WHEN stream_id LIKE 'run-%' THEN 'run' ELSE 'other' END"
)
_GROUP = "CASE WHEN stream_id LIKE 'worker-group-%' THEN substr(stream_id, 14) END"
_RUN = "CASE WHEN stream_id LIKE 'run-%' THEN substr(stream_id, 5) END"
EVENT_LOG_VIEW_SQL = {
    "sqlite": f"""
CREATE VIEW wg_event_log AS
SELECT position, recorded_at, stream_id, {_KIND} AS stream_kind, {_GROUP} AS group_id,
       {_RUN} AS run_id, stream_version, event_type, schema_version,
       json_extract(metadata, '$.causation_id') AS causation_id,
       json_extract(metadata, '$.correlation_id') AS correlation_id,
       json_extract(metadata, '$.command_id') AS command_id,
       json_extract(metadata, '$.host') AS host,
       json_extract(metadata, '$.pid') AS pid,
       data, metadata, event_id, hash
FROM wg_events
""",
    "postgresql": f"""
CREATE VIEW wg_event_log AS
SELECT position, recorded_at, stream_id, {_KIND} AS stream_kind, {_GROUP} AS group_id,
       {_RUN} AS run_id, stream_version, event_type, schema_version,
       metadata->>'causation_id' AS causation_id,
       metadata->>'correlation_id' AS correlation_id,
       metadata->>'command_id' AS command_id,
       metadata->>'host' AS host,
       (metadata->>'pid')::integer AS pid,
       data, metadata, event_id, hash
FROM wg_events
""",
}
"""``CREATE VIEW`` of :data:`EVENT_LOG_VIEW` per dialect name (a fresh store runs it; revision
``0002_read_models`` keeps its own copy)."""

_Time = sa.DateTime(timezone=True)

wg_worker_groups = sa.Table(
    "wg_worker_groups",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("run_id", sa.Text()),
    sa.Column("attempt", sa.Integer()),
    sa.Column("status", sa.Text()),
    sa.Column("outcome", sa.Text()),
    sa.Column("num_workers", sa.Integer()),
    sa.Column("resources_per_worker", _Json),
    sa.Column("placement_strategy", sa.Text()),
    sa.Column("train_fn", sa.Text()),
    sa.Column("placement_group_id", sa.Text()),
    sa.Column("requested_at", _Time),
    sa.Column("started_at", _Time),
    sa.Column("startup_s", sa.Float()),
    sa.Column("training_launched_at", _Time),
    sa.Column("running_workers", sa.Integer()),
    sa.Column("errored_workers", sa.Integer()),
    sa.Column("recorded_polls", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("polls_total", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_poll_seq", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_polled_at", _Time),
    sa.Column("reports_total", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("latest_checkpoint", sa.Text()),
    sa.Column("start_failed_stage", sa.Text()),
    sa.Column("error_type", sa.Text()),
    sa.Column("error_message", sa.Text()),
    sa.Column("shutdown_reason", sa.Text()),
    sa.Column("shutdown_requested_at", _Time),
    sa.Column("shut_down_at", _Time),
    sa.Column("released", _Json),
    sa.Column("stream_version", sa.Integer(), nullable=False),
    sa.Column("last_position", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", _Time, nullable=False),
    sa.Column("projection_error", sa.Text()),
    sa.Column("checkpoint_index", sa.Integer()),
    sa.Column("checkpoint_committed_at", _Time),
    sa.Column("latest_reported_checkpoint", sa.Text()),
)
sa.Index("ix_wg_worker_groups_status", wg_worker_groups.c.status, wg_worker_groups.c.updated_at)
sa.Index("ix_wg_worker_groups_run_id", wg_worker_groups.c.run_id, wg_worker_groups.c.attempt)
sa.Index("ix_wg_worker_groups_requested_at", wg_worker_groups.c.requested_at)

wg_workers = sa.Table(
    "wg_workers",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("world_rank", sa.Integer(), primary_key=True),
    sa.Column("local_rank", sa.Integer(), nullable=False),
    sa.Column("node_rank", sa.Integer(), nullable=False),
    sa.Column("local_world_size", sa.Integer(), nullable=False),
    sa.Column("world_size", sa.Integer(), nullable=False),
    sa.Column("node_id", sa.Text(), nullable=False),
    sa.Column("node_ip", sa.Text(), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("actor_id", sa.Text(), nullable=False),
    sa.Column("actor_name", sa.Text(), nullable=False),
    sa.Column("gpu_ids", sa.Text(), nullable=False),
    sa.Column("running", sa.Boolean(), nullable=False),
    sa.Column("error_type", sa.Text()),
    sa.Column("error_message", sa.Text()),
    sa.Column("stopped_at", _Time),
    sa.Column("reports", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_report_index", sa.Integer()),
    sa.Column("last_reported_at", _Time),
    sa.Column("last_metrics", _Json),
    sa.Column("last_checkpoint", sa.Text()),
    sa.Column("updated_at", _Time, nullable=False),
)
sa.Index("ix_wg_workers_node_id", wg_workers.c.node_id)

wg_poll_history = sa.Table(
    "wg_poll_history",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("poll_seq", sa.Integer(), primary_key=True),
    sa.Column("polled_at", _Time, nullable=False),
    sa.Column("unchanged_polls", sa.Integer(), nullable=False),
    sa.Column("unchanged_since", _Time),
    sa.Column("running_workers", sa.Integer(), nullable=False),
    sa.Column("errored_workers", sa.Integer(), nullable=False),
    sa.Column("changes", _Json, nullable=False),
    sa.Column("stream_version", sa.Integer(), nullable=False),
    sa.Column("position", sa.BigInteger(), nullable=False),
    sa.Column("recorded_at", _Time, nullable=False),
)
sa.Index("ix_wg_poll_history_polled_at", wg_poll_history.c.polled_at)

wg_reports = sa.Table(
    "wg_reports",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("world_rank", sa.Integer(), primary_key=True),
    sa.Column("report_index", sa.Integer(), primary_key=True),
    sa.Column("metrics", _Json, nullable=False),
    sa.Column("checkpoint", sa.Text()),
    sa.Column("stream_version", sa.Integer(), nullable=False),
    sa.Column("position", sa.BigInteger(), nullable=False),
    sa.Column("reported_at", _Time, nullable=False),
)
sa.Index("ix_wg_reports_reported_at", wg_reports.c.reported_at)

wg_report_series = sa.Table(
    "wg_report_series",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("metric", sa.Text(), primary_key=True),
    sa.Column("world_rank", sa.Integer(), primary_key=True),
    sa.Column("points", sa.Integer(), nullable=False),
)

wg_report_points = sa.Table(
    "wg_report_points",
    metadata,
    sa.Column("group_id", sa.Text(), primary_key=True),
    sa.Column("metric", sa.Text(), primary_key=True),
    sa.Column("world_rank", sa.Integer(), primary_key=True),
    sa.Column("pos", sa.Integer(), primary_key=True),
    sa.Column("report_index", sa.Integer(), nullable=False),
    sa.Column("value", sa.Float(), nullable=False),
    sa.Column("reported_at", _Time, nullable=False),
    sqlite_with_rowid=False,  # one b-tree, the primary key's: the key columns stored once
)

wg_runs = sa.Table(
    "wg_runs",
    metadata,
    sa.Column("run_id", sa.Text(), primary_key=True),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("name", sa.Text()),
    sa.Column("source", sa.Text()),
    sa.Column("status", sa.Text()),
    sa.Column("controller_state", sa.Text()),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("current_group_id", sa.Text()),
    sa.Column("final_group_id", sa.Text()),
    sa.Column("worker_group_failures", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("start_failures", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("preemption_failures", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("max_failures", sa.Integer()),
    sa.Column("controller_failure_limit", sa.Integer()),
    sa.Column("max_preemption_failures", sa.Integer()),
    sa.Column("last_decision", sa.Text()),
    sa.Column("latest_checkpoint", sa.Text()),
    sa.Column("num_workers", sa.Integer()),
    sa.Column("resources_per_worker", _Json),
    sa.Column("train_fn", sa.Text()),
    sa.Column("controllers", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("needs_controller", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("lease_s", sa.Float()),
    sa.Column("created_at", _Time),
    sa.Column("ended_at", _Time),
    sa.Column("error_type", sa.Text()),
    sa.Column("error_message", sa.Text()),
    sa.Column("failed_ranks", _Json),
    sa.Column("abort_reason", sa.Text()),
    sa.Column("ray", _Json),
    sa.Column("stream_version", sa.Integer(), nullable=False),
    sa.Column("last_position", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", _Time, nullable=False),
    sa.Column("projection_error", sa.Text()),
    sa.Column("checkpoint_committed_at", _Time),
    sa.Column("latest_reported_checkpoint", sa.Text()),
    sa.Column("resumable", sa.Boolean()),
    sa.Column("not_resumable_reason", sa.Text()),
    sa.Column("min_workers", sa.Integer()),
    sa.Column("current_workers", sa.Integer()),
    sa.Column("desired_workers", sa.Integer()),
)
sa.Index("ix_wg_runs_status", wg_runs.c.status, wg_runs.c.updated_at)

wg_run_decisions = sa.Table(
    "wg_run_decisions",
    metadata,
    sa.Column("run_id", sa.Text(), primary_key=True),
    sa.Column("stream_version", sa.Integer(), primary_key=True),
    sa.Column("group_id", sa.Text(), nullable=False),
    sa.Column("decision", sa.Text(), nullable=False),
    sa.Column("failure_kind", sa.Text(), nullable=False),
    sa.Column("failures_so_far", sa.Integer(), nullable=False),
    sa.Column("failure_limit", sa.Integer(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("errors", _Json, nullable=False),
    sa.Column("decided_at", _Time, nullable=False),
)
sa.Index("ix_wg_run_decisions_group_id", wg_run_decisions.c.group_id)

wg_run_resizes = sa.Table(
    "wg_run_resizes",
    metadata,
    sa.Column("run_id", sa.Text(), primary_key=True),
    sa.Column("stream_version", sa.Integer(), primary_key=True),
    sa.Column("group_id", sa.Text()),
    sa.Column("num_workers", sa.Integer(), nullable=False),
    sa.Column("previous_workers", sa.Integer()),
    sa.Column("cause", sa.Text(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("decided_at", _Time, nullable=False),
)

READ_MODEL_TABLES = (
    wg_worker_groups,
    wg_workers,
    wg_poll_history,
    wg_reports,
    wg_report_series,
    wg_report_points,
    wg_runs,
    wg_run_decisions,
    wg_run_resizes,
)
"""Every read-model table, in the order a rebuild clears them."""
