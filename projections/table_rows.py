"""The rows the projector writes, one ``TypedDict`` per read-model table.

The projector builds each table's rows as dicts keyed by column name (one ``INSERT`` a table,
:func:`~wgstore.projections.bulk.insert_rows`); these types let the checker see those keys and
their values, and ``tests/projections/test_table_rows.py`` keeps every type's keys equal to its
table's columns (:data:`ROW_TYPES`), and each value's type that of its column (nullable ones
``| None``). A column added to a table in :mod:`wgstore.events.schema` fails that test until its
row type has it, and then the checker shows every place that builds such a row without it.

JSON columns are typed as what the projector puts in them (plain data,
:func:`~wgstore.projections.values.plain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

__all__ = [
    "PARTIAL_ROW_TYPES",
    "ROW_TYPES",
    "FailedRankJson",
    "JsonObject",
    "PollChangeJson",
    "PollHistoryRow",
    "RefusedGroupRow",
    "ReportPointsRow",
    "ReportSeriesRow",
    "ReportsRow",
    "RunDecisionsRow",
    "RunResizesRow",
    "RunSummaryRow",
    "RunsRow",
    "WorkerGroupsRow",
    "WorkersRow",
]

JsonObject = Mapping[str, Any]
"""A JSON object whose values are the user's (metrics, resources, Ray's settings): any JSON."""


class FailedRankJson(TypedDict):
    """One failed rank in ``wg_runs.failed_ranks`` and ``wg_run_decisions.errors``."""

    world_rank: int
    type: str
    message: str


class PollChangeJson(TypedDict):
    """One worker's change in ``wg_poll_history.changes``."""

    world_rank: int
    running: bool
    error_type: str | None
    error_message: str | None


class WorkerGroupsRow(TypedDict):
    """A ``wg_worker_groups`` row: one worker group's folded state."""

    group_id: str
    stream_id: str
    run_id: str | None
    attempt: int | None
    status: str | None
    outcome: str | None
    num_workers: int | None
    resources_per_worker: JsonObject | None
    placement_strategy: str | None
    train_fn: str | None
    placement_group_id: str | None
    requested_at: datetime | None
    started_at: datetime | None
    startup_s: float | None
    training_launched_at: datetime | None
    running_workers: int | None
    errored_workers: int | None
    recorded_polls: int
    polls_total: int
    last_poll_seq: int
    last_polled_at: datetime | None
    reports_total: int
    latest_checkpoint: str | None
    checkpoint_index: int | None
    checkpoint_committed_at: datetime | None
    latest_reported_checkpoint: str | None
    start_failed_stage: str | None
    error_type: str | None
    error_message: str | None
    shutdown_reason: str | None
    shutdown_requested_at: datetime | None
    shut_down_at: datetime | None
    released: list[str] | None
    stream_version: int
    last_position: int
    updated_at: datetime
    projection_error: str | None


class RefusedGroupRow(TypedDict):
    """The ``wg_worker_groups`` columns written for a group whose first event the fold refused
    (no state to write): where its stream stopped, and why."""

    group_id: str
    stream_id: str
    stream_version: int
    last_position: int
    updated_at: datetime
    projection_error: str | None


class WorkersRow(TypedDict):
    """A ``wg_workers`` row: one worker of a group."""

    group_id: str
    world_rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    world_size: int
    node_id: str
    node_ip: str
    pid: int
    actor_id: str
    actor_name: str
    gpu_ids: str
    running: bool
    error_type: str | None
    error_message: str | None
    stopped_at: datetime | None
    reports: int
    last_report_index: int | None
    last_reported_at: datetime | None
    last_metrics: JsonObject | None
    last_checkpoint: str | None
    updated_at: datetime


class PollHistoryRow(TypedDict):
    """A ``wg_poll_history`` row: one recorded poll."""

    group_id: str
    poll_seq: int
    polled_at: datetime
    unchanged_polls: int
    unchanged_since: datetime | None
    running_workers: int
    errored_workers: int
    changes: list[PollChangeJson]
    stream_version: int
    position: int
    recorded_at: datetime


class ReportsRow(TypedDict):
    """A ``wg_reports`` row: one worker's report."""

    group_id: str
    world_rank: int
    report_index: int
    metrics: JsonObject
    checkpoint: str | None
    stream_version: int
    position: int
    reported_at: datetime


class ReportSeriesRow(TypedDict):
    """A ``wg_report_series`` row: how many points one (metric, rank) series has."""

    group_id: str
    metric: str
    world_rank: int
    points: int


class ReportPointsRow(TypedDict):
    """A ``wg_report_points`` row: one numeric metric of one report."""

    group_id: str
    metric: str
    world_rank: int
    pos: int
    report_index: int
    value: float
    reported_at: datetime


class RunsRow(TypedDict):
    """A ``wg_runs`` row: one run's summary."""

    run_id: str
    stream_id: str
    name: str | None
    source: str | None
    status: str | None
    controller_state: str | None
    attempts: int
    current_group_id: str | None
    final_group_id: str | None
    worker_group_failures: int
    start_failures: int
    preemption_failures: int
    max_failures: int | None
    controller_failure_limit: int | None
    max_preemption_failures: int | None
    last_decision: str | None
    latest_checkpoint: str | None
    checkpoint_committed_at: datetime | None
    latest_reported_checkpoint: str | None
    resumable: bool | None
    not_resumable_reason: str | None
    num_workers: int | None
    min_workers: int | None
    current_workers: int | None
    desired_workers: int | None
    resources_per_worker: JsonObject | None
    train_fn: str | None
    controllers: int
    needs_controller: bool
    lease_s: float | None
    created_at: datetime | None
    ended_at: datetime | None
    error_type: str | None
    error_message: str | None
    failed_ranks: list[FailedRankJson] | None
    abort_reason: str | None
    ray: JsonObject | None
    stream_version: int
    last_position: int
    updated_at: datetime
    projection_error: str | None


class RunSummaryRow(RunsRow):
    """A ``wg_runs`` row with what a run summary reads beside it (not columns of the table):
    its lease's holder and expiry, and the latest update of its groups."""

    lease_holder: str | None
    lease_expires_at: datetime | None
    groups_updated_at: datetime | None


class RunDecisionsRow(TypedDict):
    """A ``wg_run_decisions`` row: one failure decision of a run's controller."""

    run_id: str
    stream_version: int
    group_id: str
    decision: str
    failure_kind: str
    failures_so_far: int
    failure_limit: int
    reason: str
    errors: list[FailedRankJson]
    decided_at: datetime


class RunResizesRow(TypedDict):
    """A ``wg_run_resizes`` row: one size an elastic run's scaling policy chose."""

    run_id: str
    stream_version: int
    group_id: str | None
    num_workers: int
    previous_workers: int | None
    cause: str
    reason: str
    decided_at: datetime


# By table name: this module imports neither SQLAlchemy nor the tables (the folds import it
# through run_rows, and a process that only folds events must not load SQLAlchemy).
ROW_TYPES: Mapping[str, type] = {
    "wg_worker_groups": WorkerGroupsRow,
    "wg_workers": WorkersRow,
    "wg_poll_history": PollHistoryRow,
    "wg_reports": ReportsRow,
    "wg_report_series": ReportSeriesRow,
    "wg_report_points": ReportPointsRow,
    "wg_runs": RunsRow,
    "wg_run_decisions": RunDecisionsRow,
    "wg_run_resizes": RunResizesRow,
}
"""Each read-model table's name and the type of its full rows (keys: every column)."""

PARTIAL_ROW_TYPES: Mapping[type, str] = {RefusedGroupRow: "wg_worker_groups"}
"""Row types that write some columns of a table (keys: a subset of its columns, its key in)."""
