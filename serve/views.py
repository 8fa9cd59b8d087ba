"""What the pages and ``/api/...`` show, as JSON-ready data: the library's read-side views, put
together per page (nothing here folds the log itself).

- :func:`run_list`: :func:`~wgstore.projections.run_views.run_summaries`, filtered as
  ``wgstore runs`` filters, newest first, paged.
- :func:`run_page`: :func:`~wgstore.projections.run_views.run_detail` plus each attempt's metric
  series and latest state (:func:`~wgstore.projections.timeline.state_and_series`); an archived
  run's from its archived events (:mod:`wgstore.projections.archived_views`), its ``run``
  marked ``archived`` with the batch that holds it.
- :func:`group_page`: a group's state (:func:`~wgstore.projections.views.state_json`), its
  workers (:func:`~wgstore.projections.views.worker_rows`), its timeline (errors with
  tracebacks, builder steps; :func:`~wgstore.projections.timeline.group_timeline`, one fold for
  the state and the timeline) and the tail of its poll history.
- :func:`event_list`: the log after a position, as ``wgstore events --json`` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from wgstore.events import EventStore, InvalidArgumentError, RecordedEvent, StoreUnavailableError
from wgstore.events.streams import group_stream, run_stream
from wgstore.projections import RunStatus
from wgstore.projections.archived_views import (
    ArchivedRun,
    archived_events,
    archived_run_detail,
    archived_summaries,
    read_archived_run,
)
from wgstore.projections.metric_series import chart_series
from wgstore.projections.queries import poll_history
from wgstore.projections.rows import UNREADABLE, RunDetail, RunSummary
from wgstore.projections.run_facts import run_error_text
from wgstore.projections.run_rows import RUN_SOURCES
from wgstore.projections.run_views import resolve_run_id, run_detail, run_summaries
from wgstore.projections.state import WorkerGroupState
from wgstore.projections.text import describe, event_json
from wgstore.projections.time_input import parse_time
from wgstore.projections.timeline import group_timeline, state_and_series
from wgstore.projections.views import (
    check_event_types,
    resolve_group_id,
    run_streams,
    state_json,
    stored_events,
    worker_rows,
)

__all__ = [
    "BUILDER_STEPS",
    "MAX_PAGE",
    "POLLS_SHOWN",
    "POLLS_WINDOW",
    "RunFilter",
    "event_list",
    "group_page",
    "parse_since",
    "run_list",
    "run_page",
]

MAX_PAGE = 500
"""At most this many runs or events per request."""
POLLS_SHOWN = 50
"""A group page shows its last this many recorded polls ..."""
POLLS_WINDOW = timedelta(hours=1)
"""... of the hour before its last poll (a windowed read: the polls, not the whole stream)."""
BUILDER_STEPS = (
    "WorkerGroupStartRequested",
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
    "TrainingLaunched",
    "WorkerGroupStartFailed",
)
"""The events the builder appends while it starts a group, in order."""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``since=`` as ``wgstore runs --since`` reads it
    (:func:`~wgstore.projections.time_input.parse_time`): ``10m`` / ``2h`` / ``3d`` ago, ``now``,
    or an ISO 8601 time (UTC when it has no zone).

    Raises:
        InvalidArgumentError: neither form, or a time outside the years 1 to 9999.
    """
    try:
        return parse_time(text, now=now)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"since: {error}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """The run listing's filters (``wgstore runs``'): all optional."""

    statuses: frozenset[str] = frozenset()
    name: str | None = None
    source: str | None = None
    orphaned: bool = False
    since: datetime | None = None

    @classmethod
    def parse(
        cls,
        statuses: Sequence[str] = (),
        name: str | None = None,
        source: str | None = None,
        orphaned: bool = False,
        since: str | None = None,
    ) -> RunFilter:
        """Check the filters as given in a URL.

        Raises:
            InvalidArgumentError: an unknown status or source, or a bad time.
        """
        known = [s.value for s in RunStatus]
        wanted = frozenset(s.strip().upper().replace("-", "_") for s in statuses if s.strip())
        unknown = sorted(wanted - set(known))
        if unknown:
            raise InvalidArgumentError(
                f"unknown status {', '.join(unknown)}; use one of {', '.join(known)}"
            )
        if source and source not in RUN_SOURCES:
            raise InvalidArgumentError(
                f"unknown source {source!r}; use one of {', '.join(RUN_SOURCES)}"
            )
        return cls(
            statuses=wanted,
            name=name or None,
            source=source or None,
            orphaned=orphaned,
            since=parse_since(since) if since else None,
        )

    @property
    def active(self) -> bool:
        """True when any filter is set."""
        return bool(self.statuses or self.name or self.source or self.orphaned or self.since)

    def keep(self, summary: RunSummary) -> bool:
        """Whether a run summary passes (an unreadable run only passes no filter at all)."""
        if summary.status == UNREADABLE:
            return not self.active
        if self.statuses and summary.status not in self.statuses:
            return False
        if self.name and self.name.lower() not in (summary.name or "").lower():
            return False
        if self.source and summary.source != self.source:
            return False
        if self.orphaned and not summary.orphaned:
            return False
        created = summary.created_at
        return self.since is None or (created is not None and created >= self.since)


def _duration_s(summary: RunSummary, now: datetime) -> float | None:
    start = summary.created_at
    if start is None:
        return None
    end = summary.ended_at or now
    return (end - start).total_seconds()


def run_list(
    store: EventStore,
    run_filter: RunFilter | None = None,
    *,
    limit: int = 100,
    offset: int = 0,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The runs, newest first, filtered and paged: ``{"runs", "total", "offset", "limit"}``.

    Each run is a :func:`~wgstore.projections.run_views.run_summaries` summary with
    ``duration_s`` added (to its end, or to ``now`` while it goes on) and ``error_text``, its
    error in one line as the CLI shows it
    (:func:`~wgstore.projections.run_facts.run_error_text`). Unfiltered, the archived runs come
    last, from their manifests (status ``ARCHIVED``, ``archived`` true, the batch).
    """
    now = now or datetime.now(UTC)
    run_filter = run_filter or RunFilter()
    limit = max(1, min(limit, MAX_PAGE))
    offset = max(0, offset)
    kept: list[RunSummary] = [s for s in run_summaries(store, now=now) if run_filter.keep(s)]
    if run_filter == RunFilter():  # archived runs have no known status: unfiltered lists only
        kept = [*archived_summaries(store), *kept]
    kept.reverse()
    page = [
        {
            **summary.to_json(),
            "duration_s": _duration_s(summary, now),
            "error_text": run_error_text(summary),
        }
        for summary in kept[offset : offset + limit]
    ]
    return {"runs": page, "total": len(kept), "offset": offset, "limit": limit}


def run_page(store: EventStore, run: str, now: datetime | None = None) -> dict[str, Any]:
    """One run: :func:`~wgstore.projections.run_views.run_detail` (attempts, decisions,
    transitions, controllers), ``error_text`` (as :func:`run_list`'s), ``metrics`` (per metric,
    one line per attempt and rank: :func:`~wgstore.projections.metric_series.chart_series`,
    each point ``[x, value, epoch ms, report index]`` at the step the user reported, or the
    run-wide report index) and ``latest`` (the current attempt's workers with their latest
    metrics).

    Each group's state and series are read together, each event of the log at most once
    (:func:`~wgstore.projections.timeline.state_and_series`: the projector's snapshot and the
    points of ``wg_report_points`` each series keeps, then the events after them), so a long
    run costs the events the projector has not folded yet, not its whole history.

    An archived run (``wgstore archive``) is read from its batch's file and folded the same way
    (:func:`~wgstore.projections.archived_views.archived_run_detail`): its ``run`` has
    ``archived`` true, ``archive_batch`` and ``archived_at``.

    Raises:
        InvalidArgumentError: no run, or more than one, matches ``run``.
        StreamNotFoundError / ProjectionError: as ``run_detail``.
        StoreUnavailableError: an archived run's file cannot be read, or is not the one its
            manifest names.
    """
    run_id = resolve_run_id(store, run, archived=True)
    states: dict[str, WorkerGroupState] = {}
    series: dict[str, dict[str, dict[str, list[list[Any]]]]] = {}
    if not store.stream_version(run_stream(run_id)):  # archived: its events are in a file
        return _archived_run_page(store, run_id, now)

    def group_state(store: EventStore, group_id: str) -> WorkerGroupState:
        states[group_id], series[group_id] = state_and_series(store, group_id)
        return states[group_id]

    detail = run_detail(store, run_id, now=now, group_state=group_state)
    return _page_of(detail, states, series, now)


def _read_archived(store: EventStore, run_id: str) -> ArchivedRun:
    """An archived run's events; a file that cannot be read, or is not the one its manifest
    names, is the store's trouble (503), not the request's."""
    try:
        return read_archived_run(store, run_id)
    except StoreUnavailableError:
        raise
    except ValueError as error:  # a manifest or a file not what the log says; files dropped
        raise StoreUnavailableError(f"run {run_id} is archived: {error}") from None


def _archived_run_page(store: EventStore, run_id: str, now: datetime | None) -> dict[str, Any]:
    """:func:`run_page` of an archived run: its events read from its batch's file, folded as
    the live log's are (a file that cannot be read is the store's trouble: 503)."""
    archived = _read_archived(store, run_id)
    states: dict[str, WorkerGroupState] = {}

    def group_state(group_id: str) -> WorkerGroupState:
        states[group_id] = archived.group_state(group_id)
        return states[group_id]

    detail = archived_run_detail(store, run_id, now, run=archived, group_state=group_state)
    series = {group_id: archived.group_series(group_id) for group_id in states}
    return _page_of(detail, states, series, now)


def _page_of(
    detail: RunDetail,
    states: dict[str, WorkerGroupState],
    series: dict[str, dict[str, dict[str, list[list[Any]]]]],
    now: datetime | None,
) -> dict[str, Any]:
    latest: list[dict[str, Any]] = []
    readable = [a for a in detail.attempts if a.group_id in states]
    metrics = chart_series([(a.number, series[a.group_id]) for a in readable])
    if readable:
        current = readable[-1]
        latest = [
            {**row.to_json(), "attempt": current.number}
            for row in worker_rows(states[current.group_id])
        ]
    return {
        **detail.to_json(),
        "duration_s": _duration_s(detail.run, now or datetime.now(UTC)),
        "error_text": run_error_text(detail.run),
        "metrics": metrics,
        "latest": latest,
    }


def group_page(store: EventStore, group: str) -> dict[str, Any]:
    """One worker group: ``state`` (:func:`~wgstore.projections.views.state_json`),
    ``workers`` (:func:`~wgstore.projections.views.worker_rows`), ``errors`` (each worker's and
    the start failure, with tracebacks), ``builder`` (the start steps with the time each took),
    ``polls`` (the last :data:`POLLS_SHOWN` recorded polls) and ``phases``.

    Raises:
        InvalidArgumentError: no group, or more than one, matches ``group``.
        StreamNotFoundError / ProjectionError: the stream cannot be read or folded.
    """
    group_id = resolve_group_id(store, group)
    folded = group_timeline(store, group_id)
    state, timeline = folded.state, folded.data
    errors = [
        {"rank": worker["rank"], **error}
        for worker in timeline["workers"]
        for error in worker["errors"]
    ]
    if timeline["start_failure"] is not None:
        errors.insert(0, {"rank": None, **timeline["start_failure"]})
    builder = []
    previous = None
    for event in timeline["events"]:
        if event["type"] not in BUILDER_STEPS:
            continue
        builder.append(
            {
                "type": event["type"],
                "time": event["time"],
                "t": event["t"],
                "took_ms": None if previous is None else round(event["t"] - previous, 1),
                "summary": event["summary"],
            }
        )
        previous = event["t"]
    polls = [
        {
            "poll_seq": record.poll_seq,
            "polled_at": record.polled_at,
            "changes": msgspec.to_builtins(record.changes),
            "unchanged_polls": record.unchanged_polls,
            "running": None if record.status is None else record.status.num_running,
            "version": record.version,
        }
        for record in poll_history(store, group_id, since=_polls_since(state))[-POLLS_SHOWN:]
    ]
    return {
        "group_id": group_id,
        "state": state_json(state),
        "workers": [row.to_json() for row in worker_rows(state)],
        "errors": errors,
        "builder": builder,
        "polls": polls,
        "phases": timeline["phases"],
        "metrics": timeline["metrics"],
    }


def _polls_since(state: Any) -> datetime:
    last: datetime = state.last_polled_at or state.requested_at
    return last - POLLS_WINDOW


def event_list(
    store: EventStore,
    *,
    after: int | None = None,
    stream: str | None = None,
    group: str | None = None,
    run: str | None = None,
    types: Sequence[str] = (),
    limit: int = 200,
) -> dict[str, Any]:
    """Events as ``wgstore events --json`` prints them (``event_json``), with the one-line
    ``summary`` ``wgstore events`` shows (``describe``), oldest first.

    With ``after``, the first ``limit`` events past that position; without it, the last
    ``limit`` events of the log. ``stream``, ``group`` (an id or prefix) or ``run`` (an id or
    prefix: its run stream and every group of it, :func:`~wgstore.projections.views.run_streams`;
    an archived run's events from its batch's file) narrow the streams; ``types`` the types (a
    foreign type the log holds is shown raw, as in the CLI). Returns ``{"events", "head", "next"}``: ``next`` is the position to ask ``after``
    next.

    Raises:
        InvalidArgumentError: an unknown type, group or run, or a negative position.
    """
    limit = max(1, min(limit, MAX_PAGE))
    if after is not None and after < 0:
        raise InvalidArgumentError(f"after={after} is negative; give a position of 0 or more")
    type_names = check_event_types([t for t in types if t], store) or None
    streams: set[str] | None = None
    archived: list[RecordedEvent] | None = None
    if group:
        streams = {group_stream(resolve_group_id(store, group))}
    elif run:
        run_id = resolve_run_id(store, run, archived=True)
        if store.stream_version(run_stream(run_id)):
            streams = run_streams(store, run_id)
        else:  # archived: its events are in its batch's file
            archived = archived_events(_read_archived(store, run_id), type_names or [])
    elif stream:
        streams = {stream}
    head = store.head()
    if streams is not None or archived is not None:
        chosen = (
            archived
            if archived is not None
            else stored_events(store, streams, type_names or [], head)
        )
        records = [r for r in chosen if after is None or r.position > after]
        records = records[:limit] if after is not None else records[-limit:]
    elif after is not None:
        records = [
            r
            for r in store.read_all(after=after, types=type_names, limit=limit)
            if r.position <= head
        ]
    else:
        records = _last(store, head, type_names, limit)
    shown = [{**event_json(r), "summary": describe(r.event)} for r in records]
    if after is not None and len(records) < limit:
        last = head  # nothing more up to the head: the next page starts past it
    else:
        last = records[-1].position if records else (after if after is not None else head)
    return {"events": shown, "head": head, "next": max(last or 0, 0)}


def _last(store: EventStore, head: int, types: list[str] | None, limit: int) -> list[Any]:
    """The last ``limit`` events (of ``types``) up to ``head``: read back in widening windows."""
    window = limit
    while True:
        after = max(0, head - window)
        records = [r for r in store.read_all(after=after, types=types) if r.position <= head]
        if len(records) >= limit or after == 0:
            return records[-limit:]
        window *= 4
