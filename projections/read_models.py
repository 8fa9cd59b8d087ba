"""SQL read models: tables kept from the log by the projector, for people who query with SQL.

The tables live on the same ``metadata`` as the log (``wgstore.events.schema``), so the Alembic
migrations and the drift check cover them. ``docs/sql.md`` explains every column. The view
``wg_event_log`` is created by the migration (its SQL differs per backend), not declared here.

Times are UTC (``timestamptz`` on Postgres; ``YYYY-MM-DD HH:MM:SS.ffffff`` text on SQLite, the
same form as ``wg_events.recorded_at``). JSON columns are ``jsonb`` on Postgres and JSON text on
SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from wgstore.events.schema import metadata

__all__ = [
    "EVENT_LOG_VIEW",
    "READ_MODEL_TABLES",
    "wg_poll_history",
    "wg_reports",
    "wg_worker_groups",
    "wg_workers",
]

EVENT_LOG_VIEW = "wg_event_log"

_Json = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
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

READ_MODEL_TABLES = (wg_worker_groups, wg_workers, wg_poll_history, wg_reports)
"""Every read-model table, in the order a rebuild clears them."""
