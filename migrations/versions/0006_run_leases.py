"""``wg_run_leases``: which controller holds a run, until when.

Revision ID: 0006_run_leases
Revises: 0005_lean_indexes
Create Date: 2026-11-30

A lease is coordination, not history: a controller renews its row every few seconds, and a run
whose row has expired (or is missing) while the run has not ended is orphaned (``wgstore gc``
may release it). Renewals would flood the append-only log, so they live in this small table; each
controller that takes a run also appends ``ControllerStarted`` to the run's stream, so who worked
on a run stays in the log.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_run_leases"
down_revision: str | Sequence[str] | None = "0005_lean_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create wg_run_leases."""
    op.create_table(
        "wg_run_leases",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False, comment="the controller that holds the run"),
        sa.Column("acquired_at", _Time, nullable=False),
        sa.Column("renewed_at", _Time, nullable=False),
        sa.Column(
            "expires_at",
            _Time,
            nullable=False,
            comment="the holder's clock; past it the run is orphaned (coordination, not history)",
        ),
        sa.PrimaryKeyConstraint("run_id", name="pk_wg_run_leases"),
    )


def downgrade() -> None:
    """Drop wg_run_leases."""
    op.drop_table("wg_run_leases")
