"""Prometheus metrics of a wgstore log, computed when Prometheus scrapes (a custom collector).

Mount :func:`metrics_app` in any ASGI app, or register :class:`StoreCollector` in a registry of
your own. Every name starts with ``wgstore_``; counters end in ``_total``; times are seconds.

Label bounds (Prometheus' cardinality rule): ``state``, ``kind`` and ``status`` take a fixed set
of values; ``type`` is at most :data:`~wgstore.serve.follower.MAX_EVENT_TYPES` event type names
(further ones count as ``other``); ``run_id`` / ``name`` appear only on the per-run series of
runs that have not ended, at most :data:`MAX_RUN_SERIES` of them (the newest), so a log of a
million finished runs still scrapes as a few hundred series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from wgstore.events import EventStore
from wgstore.events.schema import wg_events, wg_worker_groups, wg_workers
from wgstore.events.stored_names import type_name
from wgstore.events.streams import GROUP_STREAM_PREFIX, group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.projections import RunStatus, WorkerGroupStatus
from wgstore.projections.behind import Behind, read_models_behind
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION
from wgstore.projections.queries import worker_group_state
from wgstore.projections.rows import UNREADABLE, GroupSummary, RunSummary
from wgstore.projections.run_views import run_summaries
from wgstore.projections.views import group_summaries, worker_rows
from wgstore.serve.follower import Follower, reports_a_checkpoint

__all__ = [
    "MAX_RUN_SERIES",
    "WORKER_STATUSES",
    "StoreCollector",
    "metrics_app",
    "metrics_registry",
]

MAX_RUN_SERIES = 100
"""Per-run series (``run_id``, ``name`` labels) for at most this many unended runs, newest first."""
WORKER_STATUSES = ("started", "running", "finished", "error")
"""The values of ``wgstore_workers``' ``status`` label (``worker_rows``' statuses)."""
_ENDED_GROUP = {WorkerGroupStatus.SHUT_DOWN.value, WorkerGroupStatus.START_FAILED.value}
_FAILURE_KINDS: dict[str, Callable[[RunSummary], int | None]] = {
    "worker_group": lambda run: run.worker_group_failures,
    "start": lambda run: run.start_failures,
    "preemption": lambda run: run.preemption_failures,
}


class StoreCollector(Collector):
    """Collects the metrics of ``store`` at each scrape (``follower`` adds the append counters
    it keeps; without one they are counted with a ``GROUP BY`` per scrape)."""

    def __init__(self, store: EventStore, follower: Follower | None = None) -> None:
        self.store = store
        self.follower = follower

    def collect(self) -> Iterator[Metric]:
        """The metrics now; ``wgstore_store_up`` is 0 (and nothing else) when the store is down."""
        started = time.perf_counter()
        up = GaugeMetricFamily("wgstore_store_up", "1 when the store answered this scrape")
        try:
            families = list(self._families())
        except Exception:  # noqa: BLE001 - a scrape reports the store as down, never fails
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families
        took = GaugeMetricFamily(
            "wgstore_scrape_duration_seconds", "How long computing this scrape took"
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _families(self) -> Iterator[Metric]:
        now = datetime.now(UTC)
        store = self.store
        behind = read_models_behind(store)
        runs = run_summaries(store, now=now, behind=behind)
        groups = group_summaries(store, behind=behind)
        live = [g for g in groups if g.status not in _ENDED_GROUP | {UNREADABLE}]
        # the live groups the read models have caught up on are read from them, the others
        # (all of them when the read models are too far behind) folded from the log
        if behind is None:
            workers, reported = _workers_from_log(store, live)
        else:
            moved = [g for g in live if g.group_id in behind.group_ids]
            workers, reported = _workers_from_read_models(
                store, [g for g in live if g.group_id not in behind.group_ids]
            )
            more, more_reported = _workers_from_log(store, moved, behind)
            for status, count in more.items():
                workers[status] = workers.get(status, 0) + count
            reported.update(more_reported)
        yield from _run_families(runs)
        yield from _live_run_families(runs, groups, reported, now)
        family = GaugeMetricFamily(
            "wgstore_workers", "Workers of groups not shut down, by status", labels=["status"]
        )
        for status, count in workers.items():
            family.add_metric([status], count)
        yield family
        yield from self._log_families(now)

    def _log_families(self, now: datetime) -> Iterator[Metric]:
        store = self.store
        checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
        with store.engine.connect() as connection:
            head = int(
                connection.execute(sa.select(sa.func.max(wg_events.c.position))).scalar() or 0
            )
            behind = connection.execute(
                sa.select(sa.func.count(), sa.func.min(wg_events.c.recorded_at)).where(
                    wg_events.c.position > checkpoint
                )
            ).one()
            follower = self.follower
            if follower is not None and follower.primed:
                counts = dict(follower.type_counts)
                checkpoints = follower.checkpoints
            else:  # no follower, or a scrape before its first read: count here
                query = sa.select(wg_events.c.event_type, sa.func.count()).group_by(
                    wg_events.c.event_type
                )
                counts = {t: int(n) for t, n in connection.execute(query)}
                checkpoints = int(
                    connection.execute(
                        sa.select(sa.func.count()).where(reports_a_checkpoint(store))
                    ).scalar_one()
                )
            connection.rollback()
        position = GaugeMetricFamily(
            "wgstore_log_head_position", "Position of the newest event in the log"
        )
        position.add_metric([], head)
        yield position
        lag = GaugeMetricFamily(
            "wgstore_read_models_lag_events", "Events the read models have not applied yet"
        )
        lag.add_metric([], int(behind[0]))
        yield lag
        oldest = behind[1]
        if isinstance(oldest, str):
            oldest = datetime.fromisoformat(oldest)
        if oldest is not None and oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=UTC)
        lag_s = GaugeMetricFamily(
            "wgstore_read_models_lag_seconds",
            "Age of the oldest event the read models have not applied (0 when current)",
        )
        lag_s.add_metric([], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
        yield lag_s
        appended = CounterMetricFamily(
            "wgstore_events_appended", "Events in the log, per event type", labels=["type"]
        )
        for event_type, count in sorted(counts.items()):
            appended.add_metric([event_type], count)
        yield appended
        if self.follower is not None:
            reported = CounterMetricFamily(
                "wgstore_checkpoints_reported",
                "Worker reports that carried a checkpoint (each rank's, every attempt)",
            )
            reported.add_metric([], checkpoints)
            yield reported
            clients = GaugeMetricFamily(
                "wgstore_serve_live_pages", "Pages following the log through this server now"
            )
            clients.add_metric([], self.follower.clients)
            yield clients


def _run_families(runs: list[RunSummary]) -> Iterator[Metric]:
    states = GaugeMetricFamily("wgstore_runs", "Runs by state", labels=["state"])
    counted = dict.fromkeys([s.value for s in RunStatus] + [UNREADABLE], 0)
    for run in runs:
        counted[run.status] = counted.get(run.status, 0) + 1
    for state, count in counted.items():
        states.add_metric([state], count)
    yield states
    orphans = GaugeMetricFamily("wgstore_runs_orphaned", "Unended runs no controller holds")
    orphans.add_metric([], sum(1 for r in runs if r.orphaned))
    yield orphans
    attempts = CounterMetricFamily("wgstore_run_attempts", "Worker group attempts of all runs")
    attempts.add_metric([], sum(r.attempts or 0 for r in runs))
    yield attempts
    failures = CounterMetricFamily(
        "wgstore_run_failures", "Failures counted against runs' budgets, by kind", labels=["kind"]
    )
    for kind, used in _FAILURE_KINDS.items():
        failures.add_metric([kind], sum(used(r) or 0 for r in runs))
    yield failures
    with_checkpoint = GaugeMetricFamily(
        "wgstore_runs_with_checkpoint", "Runs with a committed checkpoint"
    )
    with_checkpoint.add_metric([], sum(1 for r in runs if r.latest_checkpoint))
    yield with_checkpoint


def _live_run_families(
    runs: list[RunSummary],
    groups: list[GroupSummary],
    reported: dict[str, datetime],
    now: datetime,
) -> Iterator[Metric]:
    live = [r for r in runs if r.ended_at is None and r.status != UNREADABLE]
    live = live[-MAX_RUN_SERIES:]
    age = GaugeMetricFamily(
        "wgstore_run_last_report_age_seconds",
        "Seconds since the latest report of a running run's current attempt (since the "
        "attempt was requested when it has not reported yet)",
        labels=["run_id", "name"],
    )
    orphaned = GaugeMetricFamily(
        "wgstore_run_orphaned",
        "1 when an unended run has no controller holding a live lease",
        labels=["run_id", "name"],
    )
    workers = GaugeMetricFamily(
        "wgstore_run_workers",
        "Workers of an unended run: 'current' those of the attempt holding resources now, "
        "'desired' the size its controller last chose (an elastic run's changes)",
        labels=["run_id", "name", "size"],
    )
    requested = {g.group_id: g.requested_at for g in groups}
    for run in live:
        labels = [run.run_id, run.name or ""]
        orphaned.add_metric(labels, 1 if run.orphaned else 0)
        workers.add_metric([*labels, "current"], run.current_workers or 0)
        if run.desired_workers is not None:
            workers.add_metric([*labels, "desired"], run.desired_workers)
        group_id = run.current_group_id
        if run.status != RunStatus.RUNNING.value or not group_id:
            continue
        last = reported.get(group_id) or requested.get(group_id)
        if last is not None:
            age.add_metric(labels, max(0.0, (now - last).total_seconds()))
    yield age
    yield orphaned
    yield workers


def _workers_from_read_models(
    store: EventStore, live: list[GroupSummary]
) -> tuple[dict[str, int], dict[str, datetime]]:
    """Workers of the ``live`` groups by status, and each group's latest report, from
    ``wg_workers`` in one query (``worker_rows``' statuses: ``started`` before the first poll)."""
    counted = dict.fromkeys(WORKER_STATUSES, 0)
    reported: dict[str, datetime] = {}
    ids = [g.group_id for g in live]
    if not ids:
        return counted, reported
    w, g = wg_workers, wg_worker_groups
    query = (
        sa.select(
            w.c.group_id, w.c.running, w.c.error_type, w.c.last_reported_at, g.c.recorded_polls
        )
        .join(g, g.c.group_id == w.c.group_id)
        .where(w.c.group_id.in_(ids))
    )
    with store.engine.connect() as connection:
        rows = connection.execute(query).all()
        connection.rollback()
    for group_id, running, error_type, last_reported_at, polls in rows:
        if error_type is not None:
            status = "error"
        elif not polls:
            status = "started"
        else:
            status = "running" if running else "finished"
        counted[status] += 1
        moment = _utc(last_reported_at)
        if moment is not None and (group_id not in reported or moment > reported[group_id]):
            reported[group_id] = moment
    return counted, reported


def _workers_from_log(
    store: EventStore, live: list[GroupSummary], behind: Behind | None = None
) -> tuple[dict[str, int], dict[str, datetime]]:
    """As :func:`_workers_from_read_models`, each live group folded from the log (once per
    ``behind`` for the groups it says moved)."""
    counted = dict.fromkeys(WORKER_STATUSES, 0)
    for group in live:
        state = (
            behind.group_state(store, group.group_id)
            if behind is not None and group.group_id in behind.group_ids
            else worker_group_state(store, group.group_id)
        )
        for row in worker_rows(state):
            counted[row.status] = counted.get(row.status, 0) + 1
    streams = [group_stream(g.group_id) for g in live]
    reported: dict[str, datetime] = {}
    if not streams:
        return counted, reported
    query = (
        sa.select(wg_events.c.stream_id, sa.func.max(wg_events.c.recorded_at))
        .where(wg_events.c.stream_id.in_(streams), wg_events.c.event_type == _REPORTED)
        .group_by(wg_events.c.stream_id)
    )
    with store.engine.connect() as connection:
        rows = connection.execute(query).all()
        connection.rollback()
    for stream_id, moment in rows:
        at = _utc(moment)
        if at is not None:
            reported[stream_id[len(GROUP_STREAM_PREFIX) :]] = at
    return counted, reported


_REPORTED = type_name(WorkerReported)


def _utc(value: Any) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def metrics_registry(store: EventStore, follower: Follower | None = None) -> CollectorRegistry:
    """A registry holding only a :class:`StoreCollector` of ``store``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, follower))
    return registry


def metrics_app(store: EventStore, follower: Follower | None = None) -> Any:
    """An ASGI app serving ``store``'s metrics in Prometheus' text format (mount it anywhere)."""
    return make_asgi_app(metrics_registry(store, follower))
