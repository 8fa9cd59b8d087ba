"""Run read models: ``wg_runs`` (one row per run) and ``wg_run_decisions`` (one per decision).

Revision ID: 0007_run_read_models
Revises: 0006_run_leases
Create Date: 2026-11-30

Kept by the projector from the ``run-*`` streams and the run's worker groups; docs/sql.md explains
every column. The projector's checkpoint is already past the run streams of an existing store,
so the upgrade empties the read models and moves their checkpoint back to 0: the next catch-up
(``wgstore projections catch-up``, or any command that runs one) folds the whole log again, runs
included. Read models are derived data: nothing is lost.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007_run_read_models"
down_revision: str | Sequence[str] | None = "0006_run_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Json = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
_Time = sa.DateTime(timezone=True)

_READ_MODELS = ("wg_worker_groups", "wg_workers", "wg_poll_history", "wg_reports")


def upgrade() -> None:
    """Create wg_runs and wg_run_decisions; make the projector fold the log again."""
    op.create_table(
        "wg_runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("controller_state", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("current_group_id", sa.Text(), nullable=True),
        sa.Column("final_group_id", sa.Text(), nullable=True),
        sa.Column("worker_group_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("start_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("preemption_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_failures", sa.Integer(), nullable=True),
        sa.Column("controller_failure_limit", sa.Integer(), nullable=True),
        sa.Column("max_preemption_failures", sa.Integer(), nullable=True),
        sa.Column("last_decision", sa.Text(), nullable=True),
        sa.Column("latest_checkpoint", sa.Text(), nullable=True),
        sa.Column("num_workers", sa.Integer(), nullable=True),
        sa.Column("resources_per_worker", _Json, nullable=True),
        sa.Column("train_fn", sa.Text(), nullable=True),
        sa.Column("controllers", sa.Integer(), server_default="0", nullable=False),
        sa.Column("needs_controller", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("lease_s", sa.Float(), nullable=True),
        sa.Column("created_at", _Time, nullable=True),
        sa.Column("ended_at", _Time, nullable=True),
        sa.Column("error_type", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("failed_ranks", _Json, nullable=True),
        sa.Column("abort_reason", sa.Text(), nullable=True),
        sa.Column("ray", _Json, nullable=True),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", _Time, nullable=False),
        sa.Column("projection_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_wg_runs"),
    )
    op.create_index("ix_wg_runs_status", "wg_runs", ["status", "updated_at"])
    op.create_table(
        "wg_run_decisions",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("failure_kind", sa.Text(), nullable=False),
        sa.Column("failures_so_far", sa.Integer(), nullable=False),
        sa.Column("failure_limit", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("errors", _Json, nullable=False),
        sa.Column("decided_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "stream_version", name="pk_wg_run_decisions"),
    )
    op.create_index("ix_wg_run_decisions_group_id", "wg_run_decisions", ["group_id"])
    for table in _READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    op.execute("DELETE FROM wg_snapshots WHERE name = 'read-models'")
    op.execute("UPDATE wg_subscriptions SET checkpoint = 0 WHERE name = 'read-models'")


def downgrade() -> None:
    """Drop wg_run_decisions and wg_runs."""
    op.drop_index("ix_wg_run_decisions_group_id", table_name="wg_run_decisions")
    op.drop_table("wg_run_decisions")
    op.drop_index("ix_wg_runs_status", table_name="wg_runs")
    op.drop_table("wg_runs")
