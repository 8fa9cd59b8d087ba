"""SQL read models: wg_worker_groups, wg_workers, wg_poll_history, wg_reports; view wg_event_log.

Revision ID: 0002_read_models
Revises: 0001_event_log
Create Date: 2026-11-29

The tables are kept by the projector (``wgstore.projections.projector``); docs/sql.md explains
every column. The view shows the log with readable columns; its SQL differs per backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_read_models"
down_revision: str | Sequence[str] | None = "0001_event_log"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Json = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
_Time = sa.DateTime(timezone=True)

_KIND = (
    "CASE WHEN stream_id LIKE 'worker-group-%' THEN 'worker-group' "
    "WHEN stream_id LIKE 'run-%' THEN 'run' ELSE 'other' END"
)
_GROUP = "CASE WHEN stream_id LIKE 'worker-group-%' THEN substr(stream_id, 14) END"
_RUN = "CASE WHEN stream_id LIKE 'run-%' THEN substr(stream_id, 5) END"

SQLITE_VIEW = f"""
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
"""

PG_VIEW = f"""
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
"""


def upgrade() -> None:
    """Create the read-model tables, their indexes and the view."""
    op.create_table(
        "wg_worker_groups",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("num_workers", sa.Integer(), nullable=True),
        sa.Column("resources_per_worker", _Json, nullable=True),
        sa.Column("placement_strategy", sa.Text(), nullable=True),
        sa.Column("train_fn", sa.Text(), nullable=True),
        sa.Column("placement_group_id", sa.Text(), nullable=True),
        sa.Column("requested_at", _Time, nullable=True),
        sa.Column("started_at", _Time, nullable=True),
        sa.Column("startup_s", sa.Float(), nullable=True),
        sa.Column("training_launched_at", _Time, nullable=True),
        sa.Column("running_workers", sa.Integer(), nullable=True),
        sa.Column("errored_workers", sa.Integer(), nullable=True),
        sa.Column("recorded_polls", sa.Integer(), server_default="0", nullable=False),
        sa.Column("polls_total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_poll_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_polled_at", _Time, nullable=True),
        sa.Column("reports_total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("latest_checkpoint", sa.Text(), nullable=True),
        sa.Column("start_failed_stage", sa.Text(), nullable=True),
        sa.Column("error_type", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("shutdown_reason", sa.Text(), nullable=True),
        sa.Column("shutdown_requested_at", _Time, nullable=True),
        sa.Column("shut_down_at", _Time, nullable=True),
        sa.Column("released", _Json, nullable=True),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", _Time, nullable=False),
        sa.Column("projection_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("group_id", name="pk_wg_worker_groups"),
    )
    op.create_index("ix_wg_worker_groups_status", "wg_worker_groups", ["status", "updated_at"])
    op.create_index("ix_wg_worker_groups_run_id", "wg_worker_groups", ["run_id", "attempt"])
    op.create_index("ix_wg_worker_groups_requested_at", "wg_worker_groups", ["requested_at"])

    op.create_table(
        "wg_workers",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("world_rank", sa.Integer(), nullable=False),
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
        sa.Column("error_type", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("stopped_at", _Time, nullable=True),
        sa.Column("reports", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_report_index", sa.Integer(), nullable=True),
        sa.Column("last_reported_at", _Time, nullable=True),
        sa.Column("last_metrics", _Json, nullable=True),
        sa.Column("last_checkpoint", sa.Text(), nullable=True),
        sa.Column("updated_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("group_id", "world_rank", name="pk_wg_workers"),
    )
    op.create_index("ix_wg_workers_node_id", "wg_workers", ["node_id"])

    op.create_table(
        "wg_poll_history",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("poll_seq", sa.Integer(), nullable=False),
        sa.Column("polled_at", _Time, nullable=False),
        sa.Column("unchanged_polls", sa.Integer(), nullable=False),
        sa.Column("unchanged_since", _Time, nullable=True),
        sa.Column("running_workers", sa.Integer(), nullable=False),
        sa.Column("errored_workers", sa.Integer(), nullable=False),
        sa.Column("changes", _Json, nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("group_id", "poll_seq", name="pk_wg_poll_history"),
    )
    op.create_index("ix_wg_poll_history_polled_at", "wg_poll_history", ["polled_at"])

    op.create_table(
        "wg_reports",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("world_rank", sa.Integer(), nullable=False),
        sa.Column("report_index", sa.Integer(), nullable=False),
        sa.Column("metrics", _Json, nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("reported_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("group_id", "world_rank", "report_index", name="pk_wg_reports"),
    )
    op.create_index("ix_wg_reports_reported_at", "wg_reports", ["reported_at"])

    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(PG_VIEW if postgres else SQLITE_VIEW)


def downgrade() -> None:
    """Drop the view, then the read-model tables."""
    op.execute("DROP VIEW IF EXISTS wg_event_log")
    op.drop_index("ix_wg_reports_reported_at", table_name="wg_reports")
    op.drop_table("wg_reports")
    op.drop_index("ix_wg_poll_history_polled_at", table_name="wg_poll_history")
    op.drop_table("wg_poll_history")
    op.drop_index("ix_wg_workers_node_id", table_name="wg_workers")
    op.drop_table("wg_workers")
    op.drop_index("ix_wg_worker_groups_requested_at", table_name="wg_worker_groups")
    op.drop_index("ix_wg_worker_groups_run_id", table_name="wg_worker_groups")
    op.drop_index("ix_wg_worker_groups_status", table_name="wg_worker_groups")
    op.drop_table("wg_worker_groups")
