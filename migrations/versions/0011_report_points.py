"""Metric points numbered per series: ``wg_report_series`` and ``wg_report_points``.

Revision ID: 0011_report_points
Revises: 0010_committed_checkpoints
Create Date: 2026-12-02

A run page charts each (metric, rank) series thinned to a fixed number of points out of the whole
series. Until now every request numbered every point of the group's ``wg_reports`` rows to find
the ones to keep (``jsonb_each`` + ``row_number()`` on Postgres, a Python loop on SQLite), so its
cost grew with the run. The projector now numbers each series' points as it projects the reports:
``wg_report_points`` holds one row per numeric metric value of a report (a bool is not one) at
its position ``pos`` in its series (from 0, in stream order), and ``wg_report_series`` how many
points each series has; a request reads the counts, computes the positions it keeps, and reads
only those rows, by primary key.

The upgrade backfills both tables from ``wg_reports`` in SQL (each series numbered in stream
order, as the projector numbers it), so the read models stay where they were: no refold.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_report_points"
down_revision: str | Sequence[str] | None = "0010_committed_checkpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Time = sa.DateTime(timezone=True)

_NUMBERED = {
    "postgresql": """
        SELECT r.group_id, j.key, r.world_rank,
               row_number() OVER (
                 PARTITION BY r.group_id, j.key, r.world_rank ORDER BY r.stream_version
               ) - 1,
               r.report_index, CAST(j.value AS double precision), r.reported_at
        FROM wg_reports r, jsonb_each(r.metrics) j
        WHERE jsonb_typeof(j.value) = 'number'
    """,
    "sqlite": """
        SELECT r.group_id, j.key, r.world_rank,
               row_number() OVER (
                 PARTITION BY r.group_id, j.key, r.world_rank ORDER BY r.stream_version
               ) - 1,
               r.report_index, CAST(j.value AS REAL), r.reported_at
        FROM wg_reports r, json_each(r.metrics) j
        WHERE j.type IN ('integer', 'real')
    """,
}
"""Every numeric value of ``wg_reports.metrics`` (JSON numbers: not ``true``/``false``), numbered
per (group, metric, rank) in stream order: the rows the projector writes for them."""


def upgrade() -> None:
    """Create wg_report_series and wg_report_points; fill them from wg_reports."""
    op.create_table(
        "wg_report_series",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("metric", sa.Text(), nullable=False),
        sa.Column("world_rank", sa.Integer(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "metric", "world_rank", name="pk_wg_report_series"),
    )
    op.create_table(
        "wg_report_points",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("metric", sa.Text(), nullable=False),
        sa.Column("world_rank", sa.Integer(), nullable=False),
        sa.Column("pos", sa.Integer(), nullable=False),
        sa.Column("report_index", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("reported_at", _Time, nullable=False),
        sa.PrimaryKeyConstraint(
            "group_id", "metric", "world_rank", "pos", name="pk_wg_report_points"
        ),
        sqlite_with_rowid=False,
    )
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        # A projector's batch writes its rows and moves this checkpoint in one transaction:
        # locking the row lets a batch under way commit first (its reports are numbered below)
        # and holds the next one until the points exist. (SQLite's migration holds the write
        # lock throughout.)
        op.execute("SELECT checkpoint FROM wg_subscriptions WHERE name = 'read-models' FOR UPDATE")
    numbered = _NUMBERED[dialect]
    op.execute(
        "INSERT INTO wg_report_points "
        "(group_id, metric, world_rank, pos, report_index, value, reported_at) " + numbered
    )
    op.execute(
        "INSERT INTO wg_report_series (group_id, metric, world_rank, points) "
        "SELECT group_id, metric, world_rank, count(*) FROM wg_report_points "
        "GROUP BY group_id, metric, world_rank"
    )


def downgrade() -> None:
    """Drop wg_report_points and wg_report_series (wg_reports still holds every report)."""
    op.drop_table("wg_report_points")
    op.drop_table("wg_report_series")
