"""Elastic runs in the read models: each run's size range and sizes, and every resize.

Revision ID: 0013_elastic_read_models
Revises: 0012_handed_out_positions
Create Date: 2026-12-07

An elastic run (``ScalingConfig(min_workers=...)``: Ray Train's ``num_workers=(min, max)``)
changes its size from attempt to attempt. ``wg_runs`` gains ``min_workers`` (``NULL`` for a
fixed run), ``current_workers`` (the workers of the attempt holding resources now; 0 when none)
and ``desired_workers`` (the size the controller last chose; ``NULL`` once the run ended);
``wg_run_resizes`` holds one row per ``ScalingDecisionMade`` (from what, to what, why).
``wg_worker_groups.num_workers`` already held each attempt's size.

The new columns are computed by the projector from the log, so the upgrade empties the read
models and moves their checkpoint back to 0, as 0007 and 0010 did: the next catch-up folds the
whole log again (read models are derived data).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_elastic_read_models"
down_revision: str | Sequence[str] | None = "0012_handed_out_positions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Time = sa.DateTime(timezone=True)

_READ_MODELS = (
    "wg_worker_groups",
    "wg_workers",
    "wg_poll_history",
    "wg_reports",
    "wg_report_series",
    "wg_report_points",
    "wg_runs",
    "wg_run_decisions",
)


def upgrade() -> None:
    """Add the size columns to wg_runs, create wg_run_resizes, make the projector fold again."""
    with op.batch_alter_table("wg_runs") as batch:
        batch.add_column(sa.Column("min_workers", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("current_workers", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("desired_workers", sa.Integer(), nullable=True))
    op.create_table(
        "wg_run_resizes",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=True),
        sa.Column("num_workers", sa.Integer(), nullable=False),
        sa.Column("previous_workers", sa.Integer(), nullable=True),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decided_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "stream_version", name="pk_wg_run_resizes"),
    )
    for table in _READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    op.execute("DELETE FROM wg_snapshots WHERE name = 'read-models'")
    op.execute("UPDATE wg_subscriptions SET checkpoint = 0 WHERE name = 'read-models'")


def downgrade() -> None:
    """Drop wg_run_resizes and the size columns; the other rows stay what 0011 had."""
    op.drop_table("wg_run_resizes")
    with op.batch_alter_table("wg_runs") as batch:
        batch.drop_column("desired_workers")
        batch.drop_column("current_workers")
        batch.drop_column("min_workers")
