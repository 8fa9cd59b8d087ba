"""One metric's series of a run: what a chart of the run plots, from the read model ``wg_reports``.

:func:`metric_series` answers with one indexed query when the read models are current with the
log: the run's attempts from ``wg_worker_groups`` (index ``(run_id, attempt)``), their reports
of one rank from ``wg_reports`` (primary key ``(group_id, world_rank, report_index)``). When the
read models are behind, it reads the run's streams instead (always right, slower: every event of
every attempt is read and decoded). bench/README.md ("The recorder against MLflow") has the
numbers beside MLflow's ``get_metric_history``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events._translate import translate_errors
from wgstore.events.schema import wg_reports, wg_worker_groups
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION
from wgstore.projections.queries import run_state

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

    From the read models when they are current with the log, else from the run's streams.

    Raises:
        StreamNotFoundError: no run ``run_id`` (only when read from the log).
    """
    if store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() < store.head():
        return _from_log(store, run_id, name, world_rank)
    query = (
        sa.select(wg_worker_groups.c.attempt, wg_reports.c.report_index, wg_reports.c.metrics)
        .join_from(
            wg_worker_groups, wg_reports, wg_reports.c.group_id == wg_worker_groups.c.group_id
        )
        .where(wg_worker_groups.c.run_id == run_id, wg_reports.c.world_rank == world_rank)
        .order_by(wg_worker_groups.c.attempt, wg_reports.c.report_index)
    )
    points = []
    with translate_errors(store.url), store.engine.connect() as connection:
        for attempt, index, metrics in connection.execute(query):
            if isinstance(metrics, str):  # SQLite: JSON text; Postgres: jsonb, decoded
                metrics = _decode(metrics)
            if name in metrics:
                points.append(MetricPoint(attempt or 0, index, metrics[name]))
        connection.rollback()
    return points


def _from_log(store: EventStore, run_id: str, name: str, world_rank: int) -> list[MetricPoint]:
    points = []
    for attempt, group_id in enumerate(run_state(store, run_id).groups, start=1):
        for record in store.read_stream(group_stream(group_id)):
            event = record.event
            if (
                isinstance(event, WorkerReported)
                and event.world_rank == world_rank
                and name in event.metrics
            ):
                points.append(MetricPoint(attempt, event.index, event.metrics[name]))
    return points
