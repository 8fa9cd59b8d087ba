"""One metric's series of a run: what a chart of the run plots, from the read model ``wg_reports``.

:func:`metric_series` answers with one indexed statement when the read models have applied every
event of the run: the read models' lag (:func:`~wgstore.projections.behind.with_lag`), the
run's attempts from ``wg_worker_groups`` (index ``(run_id, attempt)``) and their reports of one
rank from ``wg_reports`` (primary key ``(group_id, world_rank, report_index)``), together. On
PostgreSQL the statement picks the metric out of each report (``metrics -> name``, as JSON text)
and leaves out the reports without it, so the client decodes one small value a report instead
of every report's metrics. When the read models lag on the run, it reads the run's streams
instead (always right, slower: every event of every attempt is read and decoded).
bench/README.md ("The recorder against MLflow") has the numbers beside MLflow's
``get_metric_history``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from wgstore.events import EventStore
from wgstore.events.schema import wg_reports, wg_worker_groups
from wgstore.events.streams import group_id_of, group_stream
from wgstore.events.worker_group import WorkerGroupStartRequested, WorkerReported
from wgstore.projections._db import is_postgres, reading
from wgstore.projections.behind import read_with_lag, runs_moved, with_lag
from wgstore.projections.queries import run_state
from wgstore.projections.views import run_streams

__all__ = ["MetricPoint", "metric_series"]

_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One reported value: the run's attempt (1, 2, ...), the report's index in that attempt
    (the n-th ``report()`` of the rank), and the value as reported."""

    attempt: int
    index: int
    value: Any


def metric_series(
    store: EventStore, run_id: str, name: str, *, world_rank: int = 0
) -> list[MetricPoint]:
    """The values of metric ``name`` that rank ``world_rank`` reported in run ``run_id``, in
    order (attempt, then report index); reports without that metric are left out.

    From the read models when they have applied every event of the run (its stream and its
    groups'; :mod:`wgstore.projections.behind`), else from the run's streams.

    Raises:
        StreamNotFoundError: no run ``run_id`` (only when read from the log).
    """
    postgres = is_postgres(store)
    params = {"run_id": run_id, "world_rank": world_rank, "name": name}
    with reading(store) as connection:
        behind, rows = read_with_lag(connection, _series_statement(postgres), params)
        current = behind is not None and (
            behind.current or run_id not in runs_moved(store, behind, connection)
        )
    if not current:
        return _from_log(store, run_id, name, world_rank)
    if postgres:  # each row's value: the metric's, as JSON text
        return [MetricPoint(attempt or 0, index, _decode(value)) for attempt, index, value in rows]
    points = []
    for attempt, index, value in rows:  # each row's value: the report's metrics as JSON text
        metrics = _decode(value)
        if name in metrics:
            points.append(MetricPoint(attempt or 0, index, metrics[name]))
    return points


@cache
def _series_statement(postgres: bool) -> sa.Select[Any]:
    """The run's (``run_id``) reports of rank ``world_rank`` with the read models' lag: attempt,
    report index and ``value``, the metric's (``name``) value (PostgreSQL, only the reports
    that have it) or the report's metrics."""
    metrics: Any = wg_reports.c.metrics
    where = [
        wg_worker_groups.c.run_id == sa.bindparam("run_id", type_=sa.Text),
        wg_reports.c.world_rank == sa.bindparam("world_rank", type_=sa.Integer),
    ]
    if postgres:
        name = sa.bindparam("name", type_=sa.Text)
        metrics = sa.type_coerce(metrics, postgresql.JSONB)
        where.append(metrics.has_key(name))
        metrics = sa.cast(metrics[name], sa.Text)
    query = (
        sa.select(wg_worker_groups.c.attempt, wg_reports.c.report_index, metrics.label("value"))
        .join_from(
            wg_worker_groups, wg_reports, wg_reports.c.group_id == wg_worker_groups.c.group_id
        )
        .where(*where)
    )
    return with_lag(query, "attempt", "report_index")


def _from_log(store: EventStore, run_id: str, name: str, world_rank: int) -> list[MetricPoint]:
    """The series from the run's streams: its groups (those its controller named and those
    started for it, as a Ray Train run's are), each numbered by its start request's attempt."""
    state = run_state(store, run_id)  # no such run: StreamNotFoundError
    group_ids = {group_id_of(s) for s in run_streams(store, run_id)} | set(state.groups)
    attempts = []
    for group_id in sorted(g for g in group_ids if g):
        attempt = 0
        points = []
        for record in store.read_stream(group_stream(group_id)):
            event = record.event
            if isinstance(event, WorkerGroupStartRequested):
                attempt = event.attempt or 0
            elif (
                isinstance(event, WorkerReported)
                and event.world_rank == world_rank
                and name in event.metrics
            ):
                points.append((event.index, event.metrics[name]))
        attempts.append((attempt, group_id, points))
    attempts.sort(key=lambda found: (found[0], found[1]))
    return [
        MetricPoint(attempt, index, value)
        for attempt, _group_id, points in attempts
        for index, value in sorted(points, key=lambda point: point[0])
    ]
