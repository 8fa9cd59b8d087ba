"""Drop the ``recorded_at`` index of ``wg_events``: no read uses it, and every append paid for it.

Revision ID: 0005_lean_indexes
Revises: 0004_log_chain
Create Date: 2026-11-30

Measured in bench/store.py (W2, batches of 100): each secondary index is one more B-tree insert per
event under the write lock. The time filters of the CLI (``--since``/``--until``) and the export
run in Python over a position scan, so nothing queries ``wg_events`` by ``recorded_at``. The
``(event_type, position)`` index stays: ``read_all(types=...)`` of a rare type needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_lean_indexes"
down_revision: str | Sequence[str] | None = "0004_log_chain"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Drop ix_wg_events_recorded_at."""
    op.drop_index("ix_wg_events_recorded_at", table_name="wg_events")


def downgrade() -> None:
    """Put ix_wg_events_recorded_at back."""
    op.create_index("ix_wg_events_recorded_at", "wg_events", ["recorded_at"])
