"""A worker group's timeline as data: lifecycle phases, a lane per worker, errors, metrics; and
a run's: the controller's states, a lane per attempt with its failures, the decisions.

What ``wgstore report`` draws (the page itself, a template, is the CLI's): built by folding the
group's stream once, with every time the moment the store recorded the event (epoch ms), so one
clock orders everything. Long histories are thinned to :data:`MAX_EVENTS` events and
:data:`MAX_POINTS` points per metric series.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from wgstore.events import EventStore, RecordedEvent
from wgstore.events.records import is_record_of
from wgstore.events.stored_names import type_name
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    TrainingLaunched,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupStartFailed,
    WorkerReported,
    WorkersStarted,
)
from wgstore.projections._db import fetch, is_postgres, param
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.event_time import event_time
from wgstore.projections.metric_series import STEP_METRICS, report_steps
from wgstore.projections.queries import SNAPSHOT_EVERY
from wgstore.projections.rows import UNREADABLE, RunDetail
from wgstore.projections.run_views import run_detail
from wgstore.projections.snapshots import load_latest_snapshot, save_snapshot
from wgstore.projections.state import WorkerGroupFold, WorkerGroupState, WorkerGroupStatus
from wgstore.projections.text import describe, format_time
from wgstore.projections.values import is_number

__all__ = [
    "MAX_EVENTS",
    "MAX_POINTS",
    "GroupTimeline",
    "add_report_point",
    "group_metric_series",
    "group_timeline",
    "run_timeline_data",
    "state_and_series",
    "thin_points",
    "timeline_data",
]


def _ms(record: RecordedEvent) -> float:
    return event_time(record).timestamp() * 1000.0


class _Lanes:
    """Each worker's status over time, as segments, plus where its errors happened."""

    def __init__(self) -> None:
        self.segments: dict[int, list[dict[str, Any]]] = {}
        self.open: dict[int, dict[str, Any]] = {}
        self.errors: dict[int, list[dict[str, Any]]] = {}

    def switch(self, rank: int, status: str, t: float) -> None:
        current = self.open.get(rank)
        if current is not None:
            if current["status"] == status:
                return
            current["end"] = t
        segment = {"status": status, "start": t, "end": t, "open": True}
        self.segments.setdefault(rank, []).append(segment)
        self.open[rank] = segment

    def close_all(self, t: float, still_open: bool = False) -> None:
        for segment in self.open.values():
            segment["end"] = t
            segment["open"] = still_open
        if not still_open:
            self.open.clear()


MAX_EVENTS = 3000
"""The page lists at most this many events (the first and last halves) to stay small."""
MAX_POINTS = 500
"""A metric series keeps at most this many points (evenly spaced, the last one always).

About one a pixel of the charts that draw them (``wgstore serve``'s run page: a 600-unit wide
SVG, 544 of them for the plot; the report's are no wider): more points than pixels draw the same
line, and cost the page its JSON and its drawing (2,000 a series made a 100,000-event run's
answer 343 KB, 450-680 ms of the browser's time, bench/README.md). MLflow's UI asks for 320
sampled points a run and metric (``maxResults: 320``, MLflow 3.17)."""


def _thin_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [events[i] for i in _kept_events(len(events))]


def _kept_events(count: int) -> range | list[int]:
    """The indexes of the events a page lists out of ``count``: all, or the first and last
    halves of :data:`MAX_EVENTS`."""
    if count <= MAX_EVENTS:
        return range(count)
    half = MAX_EVENTS // 2
    return [*range(half), *range(count - half, count)]


def _event(record: RecordedEvent, t: float) -> dict[str, Any]:
    """One listed event (its summary is built only for the events a page lists)."""
    return {
        "t": t,
        "version": record.version,
        "type": record.type,
        "summary": describe(record.event),
        "time": format_time(event_time(record)),
    }


def _grid(count: int) -> range | list[int]:
    """The positions a series of ``count`` points keeps: all of them, or :data:`MAX_POINTS`:
    ``i * count // MAX_POINTS`` for ``i < MAX_POINTS - 1``, and the last one (ascending)."""
    if count <= MAX_POINTS:
        return range(count)
    return [*(i * count // MAX_POINTS for i in range(MAX_POINTS - 1)), count - 1]


def thin_points(points: list[list[Any]]) -> list[list[Any]]:
    """At most :data:`MAX_POINTS` of a series' points, spread evenly (a page's chart)."""
    if len(points) <= MAX_POINTS:
        return points
    return [points[i] for i in _grid(len(points))]


@dataclass(frozen=True, slots=True)
class GroupTimeline:
    """A group's timeline data together with the state its stream folds to (one fold for both)."""

    state: WorkerGroupState
    """The group's state after its last event, as :func:`~wgstore.projections.worker_group_state`
    gives it."""
    data: dict[str, Any]
    """What :func:`timeline_data` returns."""


def timeline_data(store: EventStore, group_id: str) -> dict[str, Any]:
    """Everything the report page shows about ``group_id``, as JSON-ready data (epoch ms).

    Raises:
        StreamNotFoundError: the group has no events.
        ProjectionError: the stream cannot be folded.
    """
    return group_timeline(store, group_id).data


def group_timeline(
    store: EventStore, group_id: str, records: Sequence[RecordedEvent] | None = None
) -> GroupTimeline:
    """:func:`timeline_data` and the group's state, from one fold of its stream (``records``:
    the stream's events when they are not read from the live log, an archived group's).

    Raises:
        StreamNotFoundError: the group has no events.
        ProjectionError: the stream cannot be folded.
    """
    records = list(store.read_stream(group_stream(group_id)) if records is None else records)
    fold = WorkerGroupFold()
    phases: list[dict[str, Any]] = []
    times: list[float] = []
    lanes = _Lanes()
    metrics: dict[str, dict[str, list[list[Any]]]] = {}
    status: WorkerGroupStatus | None = None
    for record in records:
        t = _ms(record)
        times.append(t)
        view = fold.apply(record)
        if view.status != status:
            status = view.status
            if phases:
                phases[-1]["end"] = t
            phases.append({"name": status.value, "start": t, "end": t})
        event = record.event
        if isinstance(event, WorkerReported):
            _add_points(metrics, event, t)
        elif isinstance(event, WorkersStarted):
            for worker in event.workers:
                lanes.switch(worker.world_rank, "starting", t)
        elif isinstance(event, TrainingLaunched):
            for rank in list(lanes.open):
                if lanes.open[rank]["status"] == "starting":
                    lanes.switch(rank, "running", t)
        elif isinstance(event, WorkerGroupPolled):
            for change in event.changes:
                if change.error is not None:
                    lanes.switch(change.world_rank, "error", t)
                    lanes.errors.setdefault(change.world_rank, []).append(
                        {
                            "t": t,
                            "type": change.error.type,
                            "message": change.error.message,
                            "traceback": change.error.traceback,
                            "poll_seq": event.poll_seq,
                        }
                    )
                else:
                    lanes.switch(change.world_rank, "running" if change.running else "finished", t)
        elif isinstance(event, WorkerGroupShutDown):
            lanes.close_all(t)
    state = fold.state()
    if state is None:
        raise StreamNotFoundError(f"worker group {group_id!r} has no events")
    end = times[-1]
    lanes.close_all(end, still_open=not state.is_terminal)
    if phases:
        phases[-1]["end"] = end
        phases[-1]["open"] = not state.is_terminal
    workers = []
    for worker in state.workers:
        rank = worker.world_rank
        workers.append(
            {
                "rank": rank,
                "label": f"rank {rank}",
                "detail": f"node {worker.node_rank} {worker.node_ip}, pid {worker.pid}, {worker.actor_name}",
                "segments": lanes.segments.get(rank, []),
                "errors": lanes.errors.get(rank, []),
            }
        )
    outcome = state.outcome
    error = state.error
    failure = state.start_failure
    data = {
        "group": {
            "group_id": state.group_id,
            "run_id": state.run_id,
            "attempt": state.attempt,
            "status": state.status.value,
            "outcome": None if outcome is None else outcome.value,
            "train_fn": state.context.train_fn,
            "train_fn_config": dict(state.context.train_fn_config),
            "num_workers": state.num_workers,
            "resources_per_worker": dict(state.context.resources_per_worker),
            "requested_at": format_time(state.requested_at),
            "updated_at": format_time(state.updated_at),
            "version": state.version,
            "polls_total": state.polls_total,
            "reports_total": state.reports_total,
            "latest_checkpoint": state.latest_checkpoint,
            "checkpoint_index": state.checkpoint_index,
            "checkpoint_committed_at": None
            if state.checkpoint_committed_at is None
            else format_time(state.checkpoint_committed_at),
            "latest_reported_checkpoint": state.latest_reported_checkpoint,
            "shutdown_reason": state.shutdown_reason,
            "error": None if error is None else str(error),
        },
        "t0": _ms(records[0]),
        "t1": end,
        "phases": phases,
        "events": [_event(records[i], times[i]) for i in _kept_events(len(records))],
        "events_total": len(records),
        "workers": workers,
        "start_failure": None
        if failure is None
        else {
            "t": next(
                times[i]
                for i, r in enumerate(records)
                if isinstance(r.event, WorkerGroupStartFailed)
            ),
            "stage": str(failure.stage),
            "type": failure.error.type,
            "message": failure.error.message,
            "traceback": failure.error.traceback,
        },
        "metrics": {
            name: {rank: thin_points(points) for rank, points in series.items()}
            for name, series in metrics.items()
        },
    }
    return GroupTimeline(state, data)


def group_metric_series(store: EventStore, group_id: str) -> dict[str, dict[str, list[list[Any]]]]:
    """``timeline_data(store, group_id)["metrics"]`` without folding the group's stream: each
    numeric metric's ``[index, value, epoch ms, step, epoch]`` points per rank (thinned the same way).

    The points come from the read model ``wg_report_points`` (numbered per series when
    projected; only the kept positions are read) up to the stream version ``wg_worker_groups``
    says the projector folded the group to, and from the log after it (all of them from the log
    when the projector has not reached the group, or could not fold it). A long run's page then
    reads the events the projector has not folded yet, not its history.

    Raises:
        StreamNotFoundError: the group has no events.
    """
    projected, counts = _projected(store, group_id)
    tail: _Series = {}
    last = projected
    for record in store.read_stream(group_stream(group_id), from_version=projected + 1):
        last = record.version
        if record.type == _REPORTED:
            add_report_point(tail, record)
    if last == 0:
        raise StreamNotFoundError(f"worker group {group_id!r} has no events")
    return _thinned_series(store, group_id, counts, tail)


def state_and_series(
    store: EventStore, group_id: str
) -> tuple[WorkerGroupState, dict[str, dict[str, list[list[Any]]]]]:
    """The group's latest state (as :func:`~wgstore.projections.worker_group_state` gives it)
    and its :func:`group_metric_series`, reading each event of the log at most once: the state from
    the newest valid snapshot (the projector saves one with every batch) and the events after
    it, the series from ``wg_report_points`` and the events after what it holds. With neither, one
    read and one fold of the whole stream.

    Raises:
        StreamNotFoundError: the group has no events.
        ProjectionError: the stream cannot be folded.
    """
    stream_id = group_stream(group_id)
    snapshot = load_latest_snapshot(store, stream_id)
    snapshot_version = 0 if snapshot is None else snapshot.version
    projected, counts = _projected(store, group_id)
    tail: _Series = {}
    fold = WorkerGroupFold(snapshot)
    folded = 0
    for record in store.read_stream(stream_id, from_version=min(snapshot_version, projected) + 1):
        if record.version > snapshot_version:
            fold.apply(record)
            folded += 1
        if record.version > projected and record.type == _REPORTED:
            add_report_point(tail, record)
    state = fold.state()
    if state is None:
        raise StreamNotFoundError(
            f"worker group {group_id!r} has no events (stream {stream_id!r}); check the group id"
        )
    if folded >= SNAPSHOT_EVERY and not getattr(store, "read_only", False):
        save_snapshot(store, state)
    return state, _thinned_series(store, group_id, counts, tail)


_Series = dict[str, dict[str, list[list[Any]]]]


_REPORTED = type_name(WorkerReported)


def add_report_point(series: _Series, record: RecordedEvent) -> None:
    """Add a ``WorkerReported`` record's numeric metrics to ``series`` (other records: none)."""
    if is_record_of(record, WorkerReported):  # as its type says (read without decoding)
        _add_points(series, record.event, _ms(record))


def _add_points(series: _Series, event: WorkerReported, t: float) -> None:
    """Each numeric metric of a ``WorkerReported`` as the next point of its series:
    ``[index, value, epoch ms, step, epoch]`` (the report's own ``step`` and ``epoch`` metrics,
    None where it has none: :func:`~wgstore.projections.metric_series.report_steps`)."""
    steps = report_steps(event.metrics)
    for key, value in event.metrics.items():
        if is_number(value):
            point: list[Any] = [event.index, float(value), t, *steps]
            series.setdefault(key, {}).setdefault(str(event.world_rank), []).append(point)


_Counts = dict[tuple[str, int], int]


def _projected(store: EventStore, group_id: str) -> tuple[int, _Counts]:
    """The stream version the read models hold the group at (0: not at all, or they could not
    fold it), and how many points each (metric, rank) series has there (``wg_report_series``):
    one statement, so both are of the same commit of the projector."""
    p = param(store)
    rows = fetch(
        store,
        "SELECT g.stream_version, g.projection_error, s.metric, s.world_rank, s.points "
        "FROM wg_worker_groups g LEFT JOIN wg_report_series s ON s.group_id = g.group_id "
        f"WHERE g.group_id = {p}",
        (group_id,),
    )
    if not rows or rows[0][1] is not None:
        return 0, {}
    counts = {
        (metric, int(rank)): int(points)
        for _, _, metric, rank, points in rows
        if metric is not None
    }
    return int(rows[0][0]), counts


_POSTGRES_POINTS = """
SELECT p.metric, p.world_rank, p.pos, p.report_index, p.value, p.reported_at{steps}
FROM unnest(CAST(%s AS text[]), CAST(%s AS integer[]), CAST(%s AS integer[])) AS g(metric, rank, pos)
CROSS JOIN LATERAL (
  SELECT * FROM wg_report_points p
  WHERE p.group_id = %s AND p.metric = g.metric AND p.world_rank = g.rank AND p.pos = g.pos
  LIMIT 1
) p{join}
"""
"""The ``wg_report_points`` rows at the given (metric, rank, pos) keys (PostgreSQL: three
arrays), each found by primary key. The ``LATERAL ... LIMIT 1`` (one row a key anyway) keeps the
planner from joining them otherwise: with a plain join it hashed every row of the group (all
200,000 points of a 100,000-event run, 150-350 ms) when the table's statistics were not yet
gathered, as after a migration or a rebuild. With :data:`_POSTGRES_STEPS`, each point's report's
``step`` and ``epoch`` metrics too, as reported (the ``wg_reports`` row, by primary key)."""

_POSTGRES_STEPS = (
    ", r.step, r.epoch",
    """
LEFT JOIN LATERAL (
  SELECT r.metrics -> 'step' AS step, r.metrics -> 'epoch' AS epoch FROM wg_reports r
  WHERE r.group_id = p.group_id AND r.world_rank = p.world_rank
    AND r.report_index = p.report_index
  LIMIT 1
) r ON true""",
)

_SQLITE_POINTS = """
SELECT p.metric, p.world_rank, p.pos, p.report_index, p.value, p.reported_at{steps}
FROM json_each(?) AS g CROSS JOIN wg_report_points AS p{join}
WHERE p.group_id = ? AND p.metric = json_extract(g.value, '$[0]')
  AND p.world_rank = json_extract(g.value, '$[1]') AND p.pos = json_extract(g.value, '$[2]')
"""
"""The same on SQLite (a JSON list of ``[metric, rank, pos]``; ``CROSS JOIN`` makes the keys the
outer loop, so each row is found by primary key); with :data:`_SQLITE_STEPS` each point's
report's step and epoch as one JSON list (one parse of its metrics; ``true`` stays no number)."""

_SQLITE_STEPS = (
    ", json_extract(r.metrics, '$.step', '$.epoch')",
    """
LEFT JOIN wg_reports AS r ON r.group_id = p.group_id AND r.world_rank = p.world_rank
  AND r.report_index = p.report_index""",
)


def _points_sql(postgres: bool, steps: bool) -> str:
    """The statement that reads kept points: with their reports' steps when ``steps`` (a
    report's lookup costs as much again: 13 -> 21 ms of CPU for a 100,000-event run's group on
    SQLite, so only for a group whose read models hold a ``step`` or ``epoch`` series)."""
    sql, (columns, join) = (
        (_POSTGRES_POINTS, _POSTGRES_STEPS) if postgres else (_SQLITE_POINTS, _SQLITE_STEPS)
    )
    return sql.format(steps=columns, join=join) if steps else sql.format(steps="", join="")


def _thinned_series(store: EventStore, group_id: str, counts: _Counts, tail: _Series) -> _Series:
    """The group's series, thinned: the ``counts[metric, rank]`` points of each series that
    ``wg_report_points`` holds, followed by ``tail``, the points of the reports after them read
    from the log (unthinned, in order).

    The projector numbered each series' points (``pos``, from 0, in stream order), so the
    positions :func:`_grid` keeps out of the whole series (read models + tail) are known from
    the counts alone: only those rows are read, each by primary key (at most
    :data:`MAX_POINTS` a series, however long the run), on both backends."""
    order = sorted(counts) + [
        key
        for key in ((metric, int(rank)) for metric, ranks in tail.items() for rank in ranks)
        if key not in counts
    ]
    grids = {
        (metric, rank): _grid(counts.get((metric, rank), 0) + len(_tail_of(tail, metric, rank)))
        for metric, rank in order
    }
    keys = [
        (metric, rank, pos)
        for (metric, rank), grid in grids.items()
        for pos in grid
        if pos < counts.get((metric, rank), 0)
    ]
    found: dict[tuple[str, int], list[tuple[int, list[Any]]]] = {}
    if keys:
        postgres = is_postgres(store)
        with_steps = any(metric in STEP_METRICS for metric, _rank in counts)
        sql = _points_sql(postgres, with_steps)
        if postgres:
            names, world_ranks, positions = (list(column) for column in zip(*keys, strict=True))
            rows = fetch(store, sql, (names, world_ranks, positions, group_id))
        else:
            rows = fetch(store, sql, (msgspec.json.encode(keys).decode(), group_id))
        for row in rows:
            metric, rank, pos, index, value, at = row[:6]
            steps: tuple[Any, ...] = (None, None)
            if with_steps:
                steps = (row[6], row[7]) if postgres else _decode_steps(row[6])
            point = [
                index,
                float(value),
                _row_ms(at),
                *report_steps(dict(zip(STEP_METRICS, steps, strict=True))),
            ]
            found.setdefault((metric, int(rank)), []).append((pos, point))
    series: _Series = {}
    for (metric, rank), grid in grids.items():
        n = counts.get((metric, rank), 0)
        points = _tail_of(tail, metric, rank)  # positions n, n + 1, ... of the series
        kept = [point for _, point in sorted(found.get((metric, rank), []), key=lambda r: r[0])]
        kept += [points[pos - n] for pos in grid if pos >= n]
        series.setdefault(metric, {})[str(rank)] = kept
    return series


def _decode_steps(text: str | None) -> tuple[Any, ...]:
    """SQLite's ``json_extract(metrics, '$.step', '$.epoch')``: a JSON list (None: no report)."""
    return tuple(msgspec.json.decode(text)) if text else (None, None)


def _tail_of(tail: _Series, metric: str, rank: int) -> list[list[Any]]:
    """The points of one series that the log holds after the read models (none: ``[]``)."""
    return tail.get(metric, {}).get(str(rank), [])


_NAIVE_EPOCH = datetime(1970, 1, 1)


def _row_ms(at: datetime | str) -> float:
    """Epoch ms of a ``wg_reports.reported_at`` as the raw driver returns it (SQLite: UTC text
    without a zone), computed as ``datetime.timestamp()`` does, to the same float."""
    moment = datetime.fromisoformat(at) if isinstance(at, str) else at
    if moment.tzinfo is None:
        return (moment - _NAIVE_EPOCH).total_seconds() * 1000.0
    return moment.timestamp() * 1000.0


# ------------------------------------------------------------------------------------ runs


def _at_ms(moment: datetime) -> float:
    return moment.timestamp() * 1000.0


def run_timeline_data(
    store: EventStore,
    run_id: str,
    *,
    stream: Callable[[str], list[RecordedEvent]] | None = None,
    detail_of_run: Callable[..., RunDetail] | None = None,
) -> dict[str, Any]:
    """Everything the run report shows: the controller's states, one lane per attempt with its
    phases and failures, and each decision of the failure policy, on one clock (epoch ms).
    ``run`` is the run's :class:`~wgstore.projections.rows.RunInfo` (``json_default`` writes it
    as its ``to_json()``). An archived run's events come from ``stream(stream_id)`` and its
    detail from ``detail_of_run(store, run_id, group_state=...)`` (default: the live log's).

    Raises:
        StreamNotFoundError: no run ``run_id``.
        ProjectionError: the run stream cannot be folded.
    """
    timelines: dict[str, GroupTimeline] = {}
    read = stream or (lambda stream_id: list(store.read_stream(stream_id)))

    def folded(store: EventStore, group_id: str) -> WorkerGroupState:
        timelines[group_id] = group_timeline(store, group_id, read(group_stream(group_id)))
        return timelines[group_id].state

    detail = (detail_of_run or run_detail)(store, run_id, group_state=folded)
    run_records = read(run_stream(run_id))
    events: list[dict[str, Any]] = [
        {
            "t": _ms(record),
            "stream": "run",
            "version": record.version,
            "type": record.type,
            "summary": describe(record.event),
            "time": format_time(event_time(record)),
        }
        for record in run_records
    ]
    times = [_ms(run_records[0]), _ms(run_records[-1])]
    lanes = []
    for attempt in detail.attempts:
        lane: dict[str, Any] = {
            "number": attempt.number,
            "group_id": attempt.group_id,
            "label": f"attempt {attempt.number}",
            "num_workers": attempt.num_workers,
            "status": attempt.status,
            "outcome": attempt.outcome,
            "error": attempt.error,
            "phases": [],
            "failures": [],
        }
        if attempt.status not in (None, UNREADABLE):
            known = timelines.get(attempt.group_id)
            group = (
                known.data
                if known
                else group_timeline(
                    store, attempt.group_id, read(group_stream(attempt.group_id))
                ).data
            )
            lane["phases"] = group["phases"]
            for key in (
                "latest_checkpoint",
                "checkpoint_committed_at",
                "latest_reported_checkpoint",
            ):
                lane[key] = group["group"][key]  # the attempt row's checkpoint, as the group's
            times += [group["t0"], group["t1"]]
            for worker in group["workers"]:
                for error in worker["errors"]:
                    lane["failures"].append(
                        {"t": error["t"], "rank": worker["rank"], "kind": "worker", **error}
                    )
            failure = group["start_failure"]
            if failure is not None:
                lane["failures"].append({**failure, "rank": -1, "kind": "start"})
            events += [{**e, "stream": f"attempt {attempt.number}"} for e in group["events"]]
        lanes.append(lane)
    decisions = []
    for decision in detail.decisions:
        number = next((a.number for a in detail.attempts if a.group_id == decision.group_id), None)
        decisions.append({**decision.to_json(), "t": _at_ms(decision.at), "attempt": number})
    end = max(times)
    controller = [{"name": "INITIALIZING", "start": times[0], "end": times[0]}]
    for transition in detail.transitions:
        t = _at_ms(transition.at)
        if controller:
            controller[-1]["end"] = t
        controller.append({"name": transition.to_state, "start": t, "end": t})
    controller[-1]["end"] = end
    controller[-1]["open"] = not detail.run.ended_at
    events.sort(key=lambda e: e["t"])
    return {
        "run": detail.run,
        "t0": min(times),
        "t1": end,
        "controller": controller,
        "attempts": lanes,
        "decisions": decisions,
        "events": _thin_events(events),
        "events_total": len(events),
    }
