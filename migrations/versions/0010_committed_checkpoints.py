"""Committed checkpoints and resumability in the read models; ``wg_blobs`` for large pickles.

Revision ID: 0010_committed_checkpoints
Revises: 0009_fencing
Create Date: 2026-12-01

``latest_checkpoint`` of ``wg_worker_groups`` and ``wg_runs`` now means the committed checkpoint:
that of the highest report index every rank of the attempt reported (as Ray Train registers one).
New columns say when it was committed (``checkpoint_committed_at``), at which report index
(``wg_worker_groups.checkpoint_index``), and which checkpoint a rank reported last whether or not
it was committed (``latest_reported_checkpoint``). ``wg_runs.resumable`` /
``not_resumable_reason`` say whether the run can be started again from the log (a Ray Train run's
``TrainerRecorded``). The values of existing rows were computed by
the old rule, so the upgrade empties the read models and moves their checkpoint back to 0, as
0007 did: the next catch-up folds the whole log again (read models are derived data).

``wg_blobs`` holds bytes too large to sit in an event (a Ray Train run's pickled train loop or
datasets), once per content: the event names them by SHA-256. History, not a read model.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_committed_checkpoints"
down_revision: str | Sequence[str] | None = "0009_fencing"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Time = sa.DateTime(timezone=True)

_READ_MODELS = (
    "wg_worker_groups",
    "wg_workers",
    "wg_poll_history",
    "wg_reports",
    "wg_runs",
    "wg_run_decisions",
)


def upgrade() -> None:
    """Add the committed-checkpoint columns, create wg_blobs, make the projector fold again."""
    with op.batch_alter_table("wg_worker_groups") as batch:
        batch.add_column(sa.Column("checkpoint_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("checkpoint_committed_at", _Time, nullable=True))
        batch.add_column(sa.Column("latest_reported_checkpoint", sa.Text(), nullable=True))
    with op.batch_alter_table("wg_runs") as batch:
        batch.add_column(sa.Column("checkpoint_committed_at", _Time, nullable=True))
        batch.add_column(sa.Column("latest_reported_checkpoint", sa.Text(), nullable=True))
        batch.add_column(sa.Column("resumable", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("not_resumable_reason", sa.Text(), nullable=True))
    op.create_table(
        "wg_blobs",
        sa.Column("sha256", sa.Text(), nullable=False, comment="hex SHA-256 of bytes"),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_wg_blobs"),
    )
    for table in _READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    op.execute("DELETE FROM wg_snapshots WHERE name = 'read-models'")
    op.execute("UPDATE wg_subscriptions SET checkpoint = 0 WHERE name = 'read-models'")


def downgrade() -> None:
    """Drop wg_blobs and the new columns (the read models are folded again)."""
    op.drop_table("wg_blobs")
    with op.batch_alter_table("wg_runs") as batch:
        batch.drop_column("not_resumable_reason")
        batch.drop_column("resumable")
        batch.drop_column("latest_reported_checkpoint")
        batch.drop_column("checkpoint_committed_at")
    with op.batch_alter_table("wg_worker_groups") as batch:
        batch.drop_column("latest_reported_checkpoint")
        batch.drop_column("checkpoint_committed_at")
        batch.drop_column("checkpoint_index")
    for table in _READ_MODELS:
        op.execute(f"DELETE FROM {table}")
    op.execute("DELETE FROM wg_snapshots WHERE name = 'read-models'")
    op.execute("UPDATE wg_subscriptions SET checkpoint = 0 WHERE name = 'read-models'")
