"""A worker group's timeline as data: lifecycle phases, a lane per worker, errors, metrics; and
a run's: the controller's states, a lane per attempt with its failures, the decisions.

What ``wgstore report`` draws (the page itself, a template, is the CLI's): built by folding the
group's stream once, with every time the moment the store recorded the event (epoch ms), so one
clock orders everything. Long histories are thinned to :data:`MAX_EVENTS` events and
:data:`MAX_POINTS` points per metric series.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from wgstore.events import EventStore, RecordedEvent
from wgstore.events.streams import group_stream, run_stream
from wgstore.projections._db import fetch, is_postgres, param
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.event_time import event_time
from wgstore.projections.queries import SNAPSHOT_EVERY
from wgstore.projections.rows import UNREADABLE
from wgstore.projections.run_views import run_detail
from wgstore.projections.snapshots import load_latest_snapshot, save_snapshot
from wgstore.projections.state import WorkerGroupFold, WorkerGroupState
from wgstore.projections.text import describe, format_time

__all__ = [
    "MAX_EVENTS",
    "MAX_POINTS",
    "GroupTimeline",
    "group_metric_series",
    "group_timeline",
    "run_timeline_data",
    "state_and_series",
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


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


MAX_EVENTS = 3000
"""The page lists at most this many events (the first and last halves) to stay small."""
MAX_POINTS = 2000
"""A metric series keeps at most this many points (evenly spaced, the last one always)."""


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
    ``i * count // MAX_POINTS`` for ``i < MAX_POINTS - 1``, and the last one. Integers only, so
    the SQL of :func:`_on_grid_sql` picks the same positions."""
    if count <= MAX_POINTS:
        return range(count)
    return [*(i * count // MAX_POINTS for i in range(MAX_POINTS - 1)), count - 1]


def _on_grid_sql(pos: str, count: str) -> str:
    """An SQL condition true when position ``pos`` (0-based) is in :func:`_grid` of ``count``
    (both integer expressions, ``pos * MAX_POINTS`` must not overflow). ``pos`` is on the grid
    iff the smallest ``i`` with ``i * count / MAX_POINTS >= pos``, ``ceil(pos * MAX_POINTS /
    count)``, maps back to it and is not the last (the last point is kept on its own)."""
    m = MAX_POINTS
    ceil = f"(({pos}) * {m} + ({count}) - 1) / ({count})"
    return (
        f"(({count}) <= {m} OR ({pos}) = ({count}) - 1 "
        f"OR ({ceil} < {m - 1} AND ({ceil}) * ({count}) / {m} = ({pos})))"
    )


def _thin(points: list[list[float]]) -> list[list[float]]:
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


def group_timeline(store: EventStore, group_id: str) -> GroupTimeline:
    """:func:`timeline_data` and the group's state, from one fold of its stream.

    Raises:
        StreamNotFoundError: the group has no events.
        ProjectionError: the stream cannot be folded.
    """
    records = list(store.read_stream(group_stream(group_id)))
    fold = WorkerGroupFold()
    phases: list[dict[str, Any]] = []
    times: list[float] = []
    lanes = _Lanes()
    metrics: dict[str, dict[str, list[list[float]]]] = {}
    status: Any = None
    for record in records:
        t = _ms(record)
        times.append(t)
        fold.apply(record)
        if fold.view.status != status:
            status = fold.view.status
            if phases:
                phases[-1]["end"] = t
            phases.append({"name": status.value, "start": t, "end": t})
        event = record.event
        kind = record.type
        if kind == "WorkerReported":
            for key, value in event.metrics.items():
                if _numeric(value):
                    metrics.setdefault(key, {}).setdefault(str(event.world_rank), []).append(
                        [event.index, float(value), t]
                    )
        elif kind == "WorkersStarted":
            for worker in event.workers:
                lanes.switch(worker.world_rank, "starting", t)
        elif kind == "TrainingLaunched":
            for rank in list(lanes.open):
                if lanes.open[rank]["status"] == "starting":
                    lanes.switch(rank, "running", t)
        elif kind == "WorkerGroupPolled":
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
        elif kind == "WorkerGroupShutDown":
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
                times[i] for i, r in enumerate(records) if r.type == "WorkerGroupStartFailed"
            ),
            "stage": str(failure.stage),
            "type": failure.error.type,
            "message": failure.error.message,
            "traceback": failure.error.traceback,
        },
        "metrics": {
            name: {rank: _thin(points) for rank, points in series.items()}
            for name, series in metrics.items()
        },
    }
    return GroupTimeline(state, data)


def group_metric_series(
    store: EventStore, group_id: str
) -> dict[str, dict[str, list[list[float]]]]:
    """``timeline_data(store, group_id)["metrics"]`` without folding the group's stream: each
    numeric metric's ``[index, value, epoch ms]`` points per rank (thinned the same way).

    The reports come from the read model ``wg_reports`` up to the stream version
    ``wg_worker_groups`` says the projector folded the group to, and from the log after it (all
    of them from the log when the projector has not reached the group, or could not fold it). A
    long run's page then reads the events the projector has not folded yet, not its history.

    Raises:
        StreamNotFoundError: the group has no events.
    """
    projected = _projected_version(store, group_id)
    tail: _Series = {}
    last = projected
    for record in store.read_stream(group_stream(group_id), from_version=projected + 1):
        last = record.version
        if record.type == "WorkerReported":
            _add_report(tail, record)
    if last == 0:
        raise StreamNotFoundError(f"worker group {group_id!r} has no events")
    return _thinned_series(store, group_id, projected, tail)


def state_and_series(
    store: EventStore, group_id: str
) -> tuple[WorkerGroupState, dict[str, dict[str, list[list[float]]]]]:
    """The group's latest state (as :func:`~wgstore.projections.worker_group_state` gives it)
    and its :func:`group_metric_series`, reading each event of the log at most once: the state from
    the newest valid snapshot (the projector saves one with every batch) and the events after
    it, the series from ``wg_reports`` and the events after what it holds. With neither, one
    read and one fold of the whole stream.

    Raises:
        StreamNotFoundError: the group has no events.
        ProjectionError: the stream cannot be folded.
    """
    stream_id = group_stream(group_id)
    snapshot = load_latest_snapshot(store, stream_id)
    snapshot_version = 0 if snapshot is None else snapshot.version
    projected = _projected_version(store, group_id)
    tail: _Series = {}
    fold = WorkerGroupFold(snapshot)
    folded = 0
    for record in store.read_stream(stream_id, from_version=min(snapshot_version, projected) + 1):
        if record.version > snapshot_version:
            fold.apply(record)
            folded += 1
        if record.version > projected and record.type == "WorkerReported":
            _add_report(tail, record)
    state = fold.state()
    if state is None:
        raise StreamNotFoundError(
            f"worker group {group_id!r} has no events (stream {stream_id!r}); check the group id"
        )
    if folded >= SNAPSHOT_EVERY and not getattr(store, "read_only", False):
        save_snapshot(store, state)
    return state, _thinned_series(store, group_id, projected, tail)


_Series = dict[str, dict[str, list[list[float]]]]


def _add_report(series: _Series, record: RecordedEvent) -> None:
    event = record.event
    t = _ms(record)
    for key, value in event.metrics.items():
        if _numeric(value):
            series.setdefault(key, {}).setdefault(str(event.world_rank), []).append(
                [event.index, float(value), t]
            )


def _thin_series(series: _Series) -> _Series:
    return {
        name: {rank: _thin(points) for rank, points in ranks.items()}
        for name, ranks in series.items()
    }


def _projected_version(store: EventStore, group_id: str) -> int:
    """The stream version the read models hold the group at (0: not at all, or they could not
    fold it)."""
    found = fetch(
        store,
        "SELECT stream_version, projection_error FROM wg_worker_groups "
        f"WHERE group_id = {param(store)}",
        (group_id,),
    )
    if not found or found[0][1] is not None:
        return 0
    return int(found[0][0])


_POSTGRES_SERIES = f"""
WITH tail AS (
  SELECT CAST(e ->> 0 AS integer) AS rank, e ->> 1 AS key, CAST(e ->> 2 AS bigint) AS count
  FROM jsonb_array_elements(CAST(%s AS jsonb)) e
),
numbered AS (
  SELECT r.world_rank AS rank, j.key AS key, r.report_index AS idx, row_number() OVER w - 1 AS pos,
         count(*) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS n
  FROM wg_reports r, jsonb_each(r.metrics) j
  WHERE r.group_id = %s AND r.stream_version <= %s AND jsonb_typeof(j.value) = 'number'
  WINDOW w AS (PARTITION BY r.world_rank, j.key ORDER BY r.stream_version)
),
counted AS (
  SELECT numbered.*, numbered.n + coalesce(tail.count, 0) AS total
  FROM numbered LEFT JOIN tail ON tail.rank = numbered.rank AND tail.key = numbered.key
),
kept AS (SELECT * FROM counted WHERE {_on_grid_sql("pos", "total")})
SELECT k.rank, k.key, k.idx, CAST(r.metrics -> k.key AS double precision), r.reported_at, k.n
FROM kept k JOIN wg_reports r
  ON r.group_id = %s AND r.world_rank = k.rank AND r.report_index = k.idx
ORDER BY k.key, k.rank, k.pos
"""
"""The thinned series of the reports ``wg_reports`` (``metrics``: jsonb) holds up to a version,
one row a kept point (PostgreSQL).

Each (rank, metric) series of JSON numbers (not booleans) is numbered in stream order and
counted, with the points the log adds after that version (``tail``: ``[rank, key, count]``
triples, a JSON parameter), so a point is kept when it is on :func:`_grid` of the whole series,
as :func:`_thin` keeps it. The numbering sorts narrow rows only; the kept ones are looked up
again (primary key) for their value and time. Parameters: the tail, the group, the version, the
group."""


def _thinned_series(store: EventStore, group_id: str, projected: int, tail: _Series) -> _Series:
    """The group's series, thinned: the points of the reports ``wg_reports`` holds up to version
    ``projected`` (0: none), followed by ``tail``, the points of the reports after ``projected``
    read from the log (unthinned, in order).

    On PostgreSQL the thinning is done in SQL (:data:`_POSTGRES_SERIES`: the rows of a long run
    are never all turned into points). On SQLite every row is read and turned into points, then
    thinned: SQLite's ``json_each`` and window functions over 100,000 reports took more CPU than
    this loop (0.7 s against 0.4 s of CPU, bench/README.md "Fold once")."""
    if projected == 0:
        return _thin_series(tail)
    if not is_postgres(store):
        series = _projected_points(store, group_id, projected)
        for key, ranks in tail.items():
            for rank_key, points in ranks.items():
                series.setdefault(key, {}).setdefault(rank_key, []).extend(points)
        thinned = _thin_series(series)
        for ranks in thinned.values():
            for points in ranks.values():
                for point in points:
                    at: Any = point[2]
                    if type(at) is not float:  # a row's reported_at, not converted yet
                        point[2] = _row_ms(at)
        return thinned
    counts = [
        [int(rank), key, len(points)]
        for key, ranks in tail.items()
        for rank, points in ranks.items()
    ]
    rows = fetch(
        store,
        _POSTGRES_SERIES,
        (msgspec.json.encode(counts).decode(), group_id, projected, group_id),
    )
    series = {}
    projected_counts: dict[tuple[str, str], int] = {}
    for rank, key, index, value, at, n in rows:
        rank_key = str(rank)
        series.setdefault(key, {}).setdefault(rank_key, []).append(
            [index, float(value), _row_ms(at)]
        )
        projected_counts[key, rank_key] = n
    for key, ranks in tail.items():
        for rank_key, points in ranks.items():
            n = projected_counts.get((key, rank_key), 0)  # a series in SQL keeps its first point
            kept = series.setdefault(key, {}).setdefault(rank_key, [])
            grid = _grid(n + len(points))
            if isinstance(grid, range):
                kept += points
            else:
                on_grid = set(grid)
                kept += [point for pos, point in enumerate(points, start=n) if pos in on_grid]
    return series


_decode = msgspec.json.Decoder().decode


def _projected_points(store: EventStore, group_id: str, projected: int) -> _Series:
    """Every point of the reports ``wg_reports`` holds for the group up to version
    ``projected``, unthinned (SQLite: JSON text), with the row's ``reported_at`` as the driver
    returns it in place of its epoch ms (converted once thinned, for the points kept)."""
    rows = fetch(
        store,
        "SELECT world_rank, report_index, metrics, reported_at FROM wg_reports "
        "WHERE group_id = ? AND stream_version <= ? ORDER BY stream_version",
        (group_id, projected),
    )
    series: _Series = {}
    decode = _decode
    for rank, index, values, at in rows:
        rank_key = str(rank)
        for key, value in decode(values).items():
            kind = type(value)
            if kind is float or kind is int:  # JSON numbers (a bool is not one)
                series.setdefault(key, {}).setdefault(rank_key, []).append(
                    [index, float(value), at]
                )
    return series


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


def run_timeline_data(store: EventStore, run_id: str) -> dict[str, Any]:
    """Everything the run report shows: the controller's states, one lane per attempt with its
    phases and failures, and each decision of the failure policy, on one clock (epoch ms).
    ``run`` is the run's :class:`~wgstore.projections.rows.RunInfo` (``json_default`` writes it
    as its ``to_json()``).

    Raises:
        StreamNotFoundError: no run ``run_id``.
        ProjectionError: the run stream cannot be folded.
    """
    timelines: dict[str, GroupTimeline] = {}

    def folded(store: EventStore, group_id: str) -> WorkerGroupState:
        timelines[group_id] = group_timeline(store, group_id)
        return timelines[group_id].state

    detail = run_detail(store, run_id, group_state=folded)
    run_records = list(store.read_stream(run_stream(run_id)))
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
            "status": attempt.status,
            "outcome": attempt.outcome,
            "error": attempt.error,
            "phases": [],
            "failures": [],
        }
        if attempt.status not in (None, UNREADABLE):
            known = timelines.get(attempt.group_id)
            group = known.data if known else timeline_data(store, attempt.group_id)
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
