"""SQL read models: tables kept from the log by the projector, for people who query with SQL.

The tables are declared with every other table in :mod:`wgstore.events.schema` (one
``metadata``, which depends on nothing, so the migrations read metadata only); this module names
them for the projections side. ``docs/sql.md`` explains every column.
"""

from __future__ import annotations

from wgstore.events.schema import (
    EVENT_LOG_VIEW,
    READ_MODEL_TABLES,
    wg_poll_history,
    wg_report_points,
    wg_report_series,
    wg_reports,
    wg_run_decisions,
    wg_run_resizes,
    wg_runs,
    wg_worker_groups,
    wg_workers,
)

__all__ = [
    "EVENT_LOG_VIEW",
    "READ_MODEL_TABLES",
    "wg_poll_history",
    "wg_report_points",
    "wg_report_series",
    "wg_reports",
    "wg_run_decisions",
    "wg_run_resizes",
    "wg_runs",
    "wg_worker_groups",
    "wg_workers",
]
