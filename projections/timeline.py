"""A worker group's timeline as data: lifecycle phases, a lane per worker, errors, metrics; and
a run's: the controller's states, a lane per attempt with its failures, the decisions.

What ``wgstore report`` draws (the page itself, a template, is the CLI's): built by folding the
group's stream once, with every time the moment the store recorded the event (epoch ms), so one
clock orders everything. Long histories are thinned to :data:`MAX_EVENTS` events and
:data:`MAX_POINTS` points per metric series.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from wgstore.events import EventStore, RecordedEvent
from wgstore.events.streams import group_stream, run_stream
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.event_time import event_time
from wgstore.projections.run_views import run_detail
from wgstore.projections.state import WorkerGroupState, evolve
from wgstore.projections.text import describe, format_time

__all__ = ["MAX_EVENTS", "MAX_POINTS", "run_timeline_data", "timeline_data"]


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
    if len(events) <= MAX_EVENTS:
        return events
    half = MAX_EVENTS // 2
    return events[:half] + events[-half:]


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    kept = [points[int(i * step)] for i in range(MAX_POINTS - 1)]
    return [*kept, points[-1]]


def timeline_data(store: EventStore, group_id: str) -> dict[str, Any]:
    """Everything the report page shows about ``group_id``, as JSON-ready data (epoch ms).

    Raises:
        StreamNotFoundError: the group has no events.
    """
    records = list(store.read_stream(group_stream(group_id)))
    state: WorkerGroupState | None = None
    phases: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    lanes = _Lanes()
    metrics: dict[str, dict[str, list[list[float]]]] = {}
    for record in records:
        t = _ms(record)
        previous = state.status.value if state else None
        state = evolve(state, record)
        if state.status.value != previous:
            if phases:
                phases[-1]["end"] = t
            phases.append({"name": state.status.value, "start": t, "end": t})
        events.append(
            {
                "t": t,
                "version": record.version,
                "type": record.type,
                "summary": describe(record.event),
                "time": format_time(event_time(record)),
            }
        )
        event = record.event
        if record.type == "WorkersStarted":
            for worker in event.workers:
                lanes.switch(worker.world_rank, "starting", t)
        elif record.type == "TrainingLaunched":
            for rank in list(lanes.open):
                if lanes.open[rank]["status"] == "starting":
                    lanes.switch(rank, "running", t)
        elif record.type == "WorkerGroupPolled":
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
        elif record.type == "WorkerReported":
            for key, value in event.metrics.items():
                if _numeric(value):
                    metrics.setdefault(key, {}).setdefault(str(event.world_rank), []).append(
                        [event.index, float(value), t]
                    )
        elif record.type == "WorkerGroupShutDown":
            lanes.close_all(t)
    if state is None:
        raise StreamNotFoundError(f"worker group {group_id!r} has no events")
    end = _ms(records[-1])
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
    return {
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
        "events": _thin_events(events),
        "events_total": len(events),
        "workers": workers,
        "start_failure": None
        if failure is None
        else {
            "t": next(_ms(r) for r in records if r.type == "WorkerGroupStartFailed"),
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


# ------------------------------------------------------------------------------------ runs


def _at_ms(moment: datetime) -> float:
    return moment.timestamp() * 1000.0


def run_timeline_data(store: EventStore, run_id: str) -> dict[str, Any]:
    """Everything the run report shows: the controller's states, one lane per attempt with its
    phases and failures, and each decision of the failure policy, on one clock (epoch ms).

    Raises:
        StreamNotFoundError: no run ``run_id``.
        ProjectionError: the run stream cannot be folded.
    """
    detail = run_detail(store, run_id)
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
    for attempt in detail["attempts"]:
        lane: dict[str, Any] = {
            "number": attempt["number"],
            "group_id": attempt["group_id"],
            "label": f"attempt {attempt['number']}",
            "status": attempt["status"],
            "outcome": attempt["outcome"],
            "error": attempt["error"],
            "phases": [],
            "failures": [],
        }
        if attempt["status"] not in (None, "UNREADABLE"):
            group = timeline_data(store, attempt["group_id"])
            lane["phases"] = group["phases"]
            times += [group["t0"], group["t1"]]
            for worker in group["workers"]:
                for error in worker["errors"]:
                    lane["failures"].append(
                        {"t": error["t"], "rank": worker["rank"], "kind": "worker", **error}
                    )
            failure = group["start_failure"]
            if failure is not None:
                lane["failures"].append({**failure, "rank": -1, "kind": "start"})
            events += [{**e, "stream": f"attempt {attempt['number']}"} for e in group["events"]]
        lanes.append(lane)
    decisions = []
    for decision in detail["decisions"]:
        number = next(
            (a["number"] for a in detail["attempts"] if a["group_id"] == decision["group_id"]),
            None,
        )
        decisions.append({**decision, "t": _at_ms(decision["at"]), "attempt": number})
    end = max(times)
    controller = [{"name": "INITIALIZING", "start": times[0], "end": times[0]}]
    for transition in detail["transitions"]:
        t = _at_ms(transition["at"])
        if controller:
            controller[-1]["end"] = t
        controller.append({"name": transition["to_state"], "start": t, "end": t})
    controller[-1]["end"] = end
    controller[-1]["open"] = not detail["run"]["ended_at"]
    events.sort(key=lambda e: e["t"])
    return {
        "run": detail["run"],
        "t0": min(times),
        "t1": end,
        "controller": controller,
        "attempts": lanes,
        "decisions": decisions,
        "events": _thin_events(events),
        "events_total": len(events),
    }
