"""Leases fence: ``wg_run_leases.epoch``, and ``wg_check_fence`` on Postgres.

Revision ID: 0009_fencing
Revises: 0008_lean_appends
Create Date: 2026-12-01

A lease told its holder it *may* act; it did not stop a holder that paused (SIGSTOP, a VM pause,
a long GC) from acting after the lease had passed to someone else. Now every grant carries an
epoch that only grows: taking a lease from another holder (or a new one) adds one, a renewal
keeps it. A holder's appends carry ``(lease, holder, epoch)`` and the database refuses them, in
the append's own transaction, once the row says otherwise:

- Postgres: ``wg_check_fence`` locks the lease row ``FOR SHARE`` (a takeover's UPDATE waits until
  the append commits) and raises ``WG004`` when holder or epoch differ; the store calls it in the
  same transaction as ``wg_append``.
- SQLite: the store reads the row inside the append's ``BEGIN IMMEDIATE`` (one writer at a time).

Existing rows start at epoch 1.

The row also says which process holds the lease (``host``, ``pid``, ``process_start``: the
kernel's boot id and the process's start time), so a holder on the same host whose process is
gone is taken over at once instead of after the lease time.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_fencing"
down_revision: str | Sequence[str] | None = "0008_lean_appends"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal (migrations are history): wgstore.events.postgres_recorder calls it by this name.
CHECK_FENCE = """
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


def upgrade() -> None:
    """Add the epoch column; create wg_check_fence on Postgres."""
    with op.batch_alter_table("wg_run_leases") as batch:
        batch.add_column(
            sa.Column(
                "epoch",
                sa.BigInteger(),
                nullable=False,
                server_default="1",
                comment="grows by one each time the lease changes hands; appends carry it",
            )
        )
        batch.add_column(sa.Column("host", sa.Text(), nullable=True))
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column(
                "process_start",
                sa.Text(),
                nullable=True,
                comment="boot id and start time of the holder's process (tells a reused pid)",
            )
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CHECK_FENCE)


def downgrade() -> None:
    """Drop wg_check_fence and the epoch column."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS wg_check_fence(text, text, bigint)")
    with op.batch_alter_table("wg_run_leases") as batch:
        for column in ("process_start", "pid", "host", "epoch"):
            batch.drop_column(column)
