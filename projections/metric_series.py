"""One metric's series of a run: what a chart of the run plots, from the read model ``wg_reports``.

**Where a point is plotted** (:func:`plot_steps`, the one rule of ``wgstore serve``'s run page,
the HTML report and :class:`MetricPoint`): against the step the user reported, the report's own
``step`` metric when every point of the chart has one, else its ``epoch`` metric when every
point has one, else a run-wide report index: the report's index in its attempt plus the reports
of the rank's earlier attempts, so each attempt is a line of its own that continues where the one
before it stopped. (A resumed run's attempt 2 reports steps 13-39 from index 0: drawn by index
within the attempt it lay on top of attempt 1.)

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

from collections.abc import Iterable, Mapping, Sequence
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
from wgstore.projections.values import is_number
from wgstore.projections.views import run_streams

__all__ = [
    "STEP_METRICS",
    "GroupSeries",
    "MetricPoint",
    "PlotLine",
    "chart_series",
    "metric_series",
    "plot_steps",
    "report_offsets",
    "report_steps",
]

_decode = msgspec.json.Decoder().decode

STEP_METRICS = ("step", "epoch")
"""The metrics a point's step is read from, in this order (:func:`plot_steps`)."""


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One reported value: the run's attempt (1, 2, ...), the report's index in that attempt
    (the n-th ``report()`` of the rank), the value as reported, and ``step``, where a chart puts
    it (:func:`plot_steps`: the report's ``step`` or ``epoch`` metric, else the run-wide report
    index)."""

    attempt: int
    index: int
    value: Any
    step: float = 0.0


def report_steps(metrics: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A report's ``step`` and ``epoch`` metrics (:data:`STEP_METRICS`) as floats, None for one
    it has not or that is no number."""
    step, epoch = (metrics.get(name) for name in STEP_METRICS)
    return _number(step), _number(epoch)


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


@dataclass(frozen=True, slots=True)
class PlotLine:
    """One line of a chart: one rank's points of one attempt, in report order, each
    ``(index, step, epoch)`` (:func:`report_steps`: None where the report had none)."""

    attempt: int
    rank: int
    points: Sequence[tuple[int, float | None, float | None]]


def report_offsets(lines: Iterable[PlotLine]) -> dict[tuple[int, int], int]:
    """Per (rank, attempt), what a report index of that attempt is shifted by on the run-wide
    report axis: one more than the last index of each of the rank's earlier attempts (of
    ``lines``: pass every metric's lines of a run, so all its charts shift alike)."""
    ends: dict[int, dict[int, int]] = {}
    for line in lines:
        if line.points:
            last = max(point[0] for point in line.points)
            attempts = ends.setdefault(line.rank, {})
            attempts[line.attempt] = max(attempts.get(line.attempt, last), last)
    offsets = {}
    for rank, attempts in ends.items():
        before = 0
        for attempt in sorted(attempts):
            offsets[rank, attempt] = before
            before += attempts[attempt] + 1
    return offsets


def plot_steps(
    lines: Sequence[PlotLine], offsets: Mapping[tuple[int, int], int] | None = None
) -> tuple[str, list[list[float]]]:
    """Where each point of one chart's ``lines`` is plotted, and what the axis is:
    ``("step", ...)`` when every point has a ``step`` metric, ``("epoch", ...)`` when every one
    has an ``epoch``, else ``("report", ...)``: the run-wide report index, the point's index
    shifted by ``offsets`` (default: :func:`report_offsets` of ``lines``), so each attempt's line
    starts after the one before it ends.

    Returns:
        The axis name and, per line, the x of each of its points.
    """
    points = [point for line in lines for point in line.points]
    if points and all(point[1] is not None for point in points):
        return "step", [[float(p[1]) for p in line.points] for line in lines]  # type: ignore[arg-type]
    if points and all(point[2] is not None for point in points):
        return "epoch", [[float(p[2]) for p in line.points] for line in lines]  # type: ignore[arg-type]
    shift = report_offsets(lines) if offsets is None else offsets
    return "report", [
        [float(shift.get((line.rank, line.attempt), 0) + p[0]) for p in line.points]
        for line in lines
    ]


GroupSeries = Mapping[str, Mapping[str, Sequence[Sequence[Any]]]]
"""One group's metric series as :func:`~wgstore.projections.timeline.group_metric_series` gives
them: per metric, per rank (text), ``[index, value, epoch ms, step, epoch]`` points."""


def chart_series(attempts: Sequence[tuple[int, GroupSeries]]) -> dict[str, list[dict[str, Any]]]:
    """The charts of a run (or of one attempt): per metric, one line per attempt and rank,
    ``{"attempt", "rank", "x", "points"}``, each point ``[x, value, epoch ms, index]`` placed by
    :func:`plot_steps` (``x`` names the axis, the same for every line of a metric), the report
    axis shifted alike in every chart (:func:`report_offsets` over every metric).

    ``attempts`` are ``(attempt number, the attempt's group series)``, in attempt order.
    """
    lines: dict[str, list[tuple[PlotLine, Sequence[Sequence[Any]]]]] = {}
    for number, series in attempts:
        for name, ranks in series.items():
            for rank, points in sorted(ranks.items(), key=lambda item: int(item[0])):
                line = PlotLine(number, int(rank), [(int(p[0]), p[3], p[4]) for p in points])
                lines.setdefault(name, []).append((line, points))
    offsets = report_offsets(line for found in lines.values() for line, _ in found)
    charts = {}
    for name in sorted(lines):
        found = lines[name]
        axis, xs = plot_steps([line for line, _ in found], offsets)
        charts[name] = [
            {
                "attempt": line.attempt,
                "rank": line.rank,
                "x": axis,
                "points": [[x, p[1], p[2], p[0]] for x, p in zip(line_xs, points, strict=True)],
            }
            for (line, points), line_xs in zip(found, xs, strict=True)
        ]
    return charts


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
    found: list[_Found] = []
    if postgres:  # each row: the metric's value, then the report's step and epoch, as JSON text
        for attempt, index, value, step, epoch in rows:
            steps = report_steps({"step": _json(step), "epoch": _json(epoch)})
            found.append((attempt or 0, index, _decode(value), *steps))
    else:
        for attempt, index, value in rows:  # each row: the report's metrics as JSON text
            metrics = _decode(value)
            if name in metrics:
                found.append((attempt or 0, index, metrics[name], *report_steps(metrics)))
    return _plotted(found, world_rank)


_Found = tuple[int, int, Any, float | None, float | None]
"""One reported value: attempt, report index, value, the report's step and epoch."""


def _json(text: str | None) -> Any:
    return None if text is None else _decode(text)


def _plotted(found: list[_Found], world_rank: int) -> list[MetricPoint]:
    """``found`` (in attempt, then index order) as points, each with its :func:`plot_steps` step."""
    by_attempt: dict[int, list[_Found]] = {}
    for point in found:
        by_attempt.setdefault(point[0], []).append(point)
    lines = [
        PlotLine(attempt, world_rank, [(p[1], p[3], p[4]) for p in points])
        for attempt, points in by_attempt.items()
    ]
    _axis, xs = plot_steps(lines)
    return [
        MetricPoint(point[0], point[1], point[2], x)
        for points, line_xs in zip(by_attempt.values(), xs, strict=True)
        for point, x in zip(points, line_xs, strict=True)
    ]


@cache
def _series_statement(postgres: bool) -> sa.Select[Any]:
    """The run's (``run_id``) reports of rank ``world_rank`` with the read models' lag: attempt,
    report index and ``value``, the metric's (``name``) value and the report's ``step`` and
    ``epoch`` (PostgreSQL, only the reports that have the metric) or the report's metrics."""
    metrics: Any = wg_reports.c.metrics
    where = [
        wg_worker_groups.c.run_id == sa.bindparam("run_id", type_=sa.Text),
        wg_reports.c.world_rank == sa.bindparam("world_rank", type_=sa.Integer),
    ]
    columns = [metrics.label("value")]
    if postgres:
        name = sa.bindparam("name", type_=sa.Text)
        metrics = sa.type_coerce(metrics, postgresql.JSONB)
        where.append(metrics.has_key(name))
        columns = [
            sa.cast(metrics[key], sa.Text).label(label)
            for key, label in ((name, "value"), ("step", "step"), ("epoch", "epoch"))
        ]
    query = (
        sa.select(wg_worker_groups.c.attempt, wg_reports.c.report_index, *columns)
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
                steps = report_steps(event.metrics)
                points.append((event.index, event.metrics[name], *steps))
        attempts.append((attempt, group_id, points))
    attempts.sort(key=lambda found: (found[0], found[1]))
    return _plotted(
        [
            (attempt, index, value, step, epoch)
            for attempt, _group_id, points in attempts
            for index, value, step, epoch in sorted(points, key=lambda point: point[0])
        ],
        world_rank,
    )
