"""Projections read from the store: time travel, poll history and run state.

``worker_group_state(store, group_id)`` gives the latest state, starting from a snapshot when a
valid one exists and folding only the tail (none to read when the snapshot is at the stream's
version, read with it); with ``version`` or ``at`` it gives the state as it
was after that version, or at that moment (the events recorded at or before ``at``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from wgstore.events.records import RecordedEvent
from wgstore.events.stored_names import field_name, type_name
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    WorkerGroupPolled,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.projections._db import fetch, is_postgres, param, sql_time
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.poll_history import PollRecord, iter_poll_history
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.snapshots import (
    fingerprint,
    latest_snapshot_and_head,
    load_row,
    save_row,
    save_snapshot,
)
from wgstore.projections.state import (
    WorkerGroupFold,
    WorkerGroupPollStatus,
    WorkerGroupState,
    apply_poll_changes,
)
from wgstore.projections.values import to_utc

if TYPE_CHECKING:
    from wgstore.events.store import EventStore

__all__ = [
    "CLOCK_SKEW",
    "POLL_BASE_SNAPSHOT",
    "SNAPSHOT_EVERY",
    "PollBase",
    "poll_history",
    "run_state",
    "worker_group_state",
]

CLOCK_SKEW = timedelta(minutes=10)
"""How far ``polled_at`` (the executor's clock) may run ahead of ``recorded_at`` (the store's)."""

SNAPSHOT_EVERY = 1000
"""Reading the latest state saves a snapshot when it had to fold at least this many events."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PollBase:
    """The poll status of a group after ``version``: where a windowed poll history starts.

    Saved in ``wg_snapshots`` (name ``poll_history``), so the next window starts from it and
    reads only the polls after it that changed something.
    """

    version: int
    poll_seq: int
    ranks: tuple[int, ...]
    status: WorkerGroupPollStatus | None


POLL_BASE_SNAPSHOT = "poll_history"
POLL_BASE_SCHEMA = fingerprint(PollBase)
POLL_BASE_EVERY = 1000
"""A windowed poll history saves its starting point when it lies this many versions past the
saved one."""


def _until(events: Iterable[RecordedEvent], at: datetime | None) -> Iterator[RecordedEvent]:
    if at is None:
        yield from events
        return
    for event in events:
        if event.recorded_at > at:
            return
        yield event


def _close(events: Iterator[RecordedEvent]) -> None:
    """Close a read that may have stopped early. On Postgres it holds a pooled connection
    mid-query until closed; left to the garbage collector (a frame kept alive by an error's
    traceback keeps it), the connection could be finalized first and wait on the query for
    ever."""
    close = getattr(events, "close", None)
    if close is not None:
        close()


def worker_group_state(
    store: EventStore,
    group_id: str,
    version: int | None = None,
    at: datetime | None = None,
    *,
    use_snapshots: bool = True,
    snapshot_every: int = SNAPSHOT_EVERY,
) -> WorkerGroupState:
    """The state of worker group ``group_id``: now, after ``version``, or at the moment ``at``.

    Args:
        store: an open :class:`~wgstore.events.EventStore`.
        group_id: the group's id (its stream is ``worker-group-<group_id>``).
        version: the state right after this stream version.
        at: the state as of this moment: every event recorded at or before it (naive datetimes
            are UTC). With ``version`` too, whichever comes first.
        use_snapshots: start from a valid snapshot when one is not past the asked-for point.
        snapshot_every: save a new snapshot (unless the store is read-only) when at least this
            many events had to be folded.

    Raises:
        StreamNotFoundError: no such group, it did not exist yet at ``at``, or its stream has
            not reached ``version``.
        ProjectionError: the stream cannot be folded (names the stream and position).
        ValueError: ``version`` is below 1.
    """
    if version is not None and version < 1:
        raise ValueError(f"version must be 1 or more, got {version}")
    at = None if at is None else to_utc(at)
    stream_id = group_stream(group_id)
    state: WorkerGroupState | None = None
    head = None
    if use_snapshots:
        state, head = latest_snapshot_and_head(store, stream_id, max_version=version)
        if state is not None and at is not None and state.updated_at > at:
            state = None
    folded = 0
    fold = WorkerGroupFold(state)
    if state is None or head is None or state.version < head:  # else nothing after it to fold
        start = 1 if state is None else state.version + 1
        tail = store.read_stream(stream_id, from_version=start, to_version=version)
        try:
            for event in _until(tail, at):
                fold.apply(event)
                folded += 1
        finally:
            _close(tail)
    state = fold.state()
    if state is None:
        when = f" at {at.isoformat()}" if at is not None else ""
        raise StreamNotFoundError(
            f"worker group {group_id!r} has no events{when} (stream {stream_id!r}); check the "
            "group id, or ask for a later moment"
        )
    if version is not None and at is None and state.version < version:
        raise StreamNotFoundError(
            f"stream {stream_id!r} is at version {state.version}, so there is no state after "
            f"version {version}"
        )
    if use_snapshots and folded >= snapshot_every and not getattr(store, "read_only", False):
        save_snapshot(store, state)
    return state


def poll_history(
    store: EventStore,
    group_id: str,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    save_base_every: int = POLL_BASE_EVERY,
    clock_skew: timedelta = CLOCK_SKEW,
) -> list[PollRecord]:
    """Every recorded poll of ``group_id``, in order, each with the full status of every worker.

    Without ``since`` the whole stream is folded and checked, as
    :func:`~wgstore.projections.poll_history.fold_poll_history` does. With ``since`` only the
    polls from then on are read in full: the status at the start of the window is rebuilt from
    the polls before it that changed something (a handful, however long the group ran),
    starting from the last saved starting point (``wg_snapshots`` row ``poll_history``, written
    here when it moved on by :data:`POLL_BASE_EVERY` versions). The first window of a long
    stream therefore scans its older polls once; later windows read about a window of rows.

    Args:
        since: only polls with ``polled_at`` at or after this moment.
        until: only polls with ``polled_at`` at or before this moment.
        save_base_every: with ``since``, save the window's starting point when it lies this
            many versions past the saved one (unless the store is read-only).
        clock_skew: how far ``polled_at`` may run ahead of ``recorded_at``; polls recorded up
            to this long before ``since`` are read too.

    Raises:
        StreamNotFoundError: no such group.
        ProjectionError: a poll names an unknown rank or its sequence does not rise.
    """
    stream_id = group_stream(group_id)
    since = None if since is None else to_utc(since)
    until = None if until is None else to_utc(until)
    if since is None:
        events = list(store.read_stream(stream_id))
        if not events:
            raise _no_group(group_id, stream_id)
        return [
            record
            for record in iter_poll_history(events)
            if until is None or record.polled_at <= until
        ]
    return _poll_window(store, group_id, stream_id, since, until, save_base_every, clock_skew)


def _no_group(group_id: str, stream_id: str) -> StreamNotFoundError:
    return StreamNotFoundError(
        f"worker group {group_id!r} has no events (stream {stream_id!r}); check the group id"
    )


def _load_base(store: EventStore, stream_id: str) -> PollBase | None:
    row = load_row(store, POLL_BASE_SNAPSHOT, stream_id)
    if row is None or row[1] != POLL_BASE_SCHEMA:
        return None
    try:
        base = msgspec.json.decode(row[2], type=PollBase)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError):
        return None
    return base if base.version == row[0] else None


def _first_version_at(store: EventStore, stream_id: str, cutoff: Any, head: int) -> int:
    """The first version of the stream recorded at or after ``cutoff`` (head + 1 if none).

    A binary search over point lookups (``recorded_at`` rises with the version in a stream):
    about 17 index lookups for 100,000 events, where a single ``min(...)`` query can make the
    planner walk the stream from its start.
    """
    p = param(store)
    sql = f"SELECT recorded_at FROM wg_events WHERE stream_id = {p} AND stream_version = {p}"
    low, high = 1, head + 1
    while low < high:
        middle = (low + high) // 2
        (at,) = fetch(store, sql, (stream_id, middle))[0]
        if at >= cutoff:
            high = middle
        else:
            low = middle + 1
    return low


_STARTED = type_name(WorkersStarted)
_POLLED = type_name(WorkerGroupPolled)
_CHANGES = field_name(WorkerGroupPolled, "changes")


def _poll_window(
    store: EventStore,
    group_id: str,
    stream_id: str,
    since: datetime,
    until: datetime | None,
    save_base_every: int,
    clock_skew: timedelta,
) -> list[PollRecord]:
    p = param(store)
    postgres = is_postgres(store)
    data = "data::text" if postgres else "data"
    # Polls that changed something; a false positive only costs a row, never a wrong status.
    has_changes = (
        f"data->'{_CHANGES}' <> '[]'::jsonb"
        if postgres
        else f"instr(data, '\"{_CHANGES}\":[]') = 0"
    )
    columns = f"position, stream_version, event_type, schema_version, {data}"
    head = store.stream_version(stream_id)
    if head == 0:
        raise _no_group(group_id, stream_id)
    start = _first_version_at(store, stream_id, sql_time(store, since - clock_skew), head)
    base = _load_base(store, stream_id)
    if base is None or base.version >= start:
        workers = fetch(
            store,
            f"SELECT {columns} FROM wg_events WHERE stream_id = {p} AND event_type = {p} "
            "ORDER BY stream_version LIMIT 1",
            (stream_id, _STARTED),
        )
        if not workers:
            return []
        started: WorkersStarted = _decode(store, stream_id, workers[0])
        base = PollBase(
            version=workers[0][1],
            poll_seq=0,
            ranks=tuple(w.world_rank for w in started.workers),
            status=None,
        )
    status, last_seq, ranks = base.status, base.poll_seq, list(base.ranks)
    for row in fetch(
        store,
        f"SELECT {columns} FROM wg_events WHERE stream_id = {p} AND stream_version > {p} "
        f"AND stream_version < {p} AND event_type = {p} AND {has_changes} "
        "ORDER BY stream_version",
        (stream_id, base.version, start, _POLLED),
    ):
        poll: WorkerGroupPolled = _decode(store, stream_id, row)
        status = _apply(status, ranks, poll.changes, stream_id, row)
        last_seq = poll.poll_seq
    if start - 1 - base.version >= save_base_every and not getattr(store, "read_only", False):
        new_base = PollBase(version=start - 1, poll_seq=last_seq, ranks=base.ranks, status=status)
        save_row(
            store,
            POLL_BASE_SNAPSHOT,
            stream_id,
            new_base.version,
            POLL_BASE_SCHEMA,
            msgspec.json.encode(new_base).decode(),
        )
    history: list[PollRecord] = []
    for row in fetch(
        store,
        f"SELECT {columns} FROM wg_events WHERE stream_id = {p} AND stream_version >= {p} "
        f"AND event_type = {p} ORDER BY stream_version",
        (stream_id, start, _POLLED),
    ):
        poll = _decode(store, stream_id, row)
        if poll.poll_seq <= last_seq:
            raise ProjectionError(
                f"poll_seq {poll.poll_seq} does not follow the last recorded poll_seq {last_seq}",
                stream_id=stream_id,
                version=row[1],
                position=row[0],
                event_type=row[2],
            )
        last_seq = poll.poll_seq
        if status is None or poll.changes:
            status = _apply(status, ranks, poll.changes, stream_id, row)
        if until is not None and poll.polled_at > until:
            break
        if poll.polled_at < since:
            continue
        history.append(
            PollRecord(
                poll_seq=poll.poll_seq,
                polled_at=poll.polled_at,
                status=status,
                changes=tuple(poll.changes),
                unchanged_polls=poll.unchanged_polls,
                unchanged_since=poll.unchanged_since,
                version=row[1],
                position=row[0],
            )
        )
    return history


def _decode(store: EventStore, stream_id: str, row: Any) -> Any:
    position, _version, type_name, schema_version, data = row
    return store.codec.decode(
        type_name, schema_version, data, stream_id=stream_id, position=position
    )


def _apply(
    status: WorkerGroupPollStatus | None,
    ranks: list[int],
    changes: tuple[WorkerStatusChange, ...],
    stream_id: str,
    row: Any,
) -> WorkerGroupPollStatus:
    try:
        return apply_poll_changes(status, ranks, changes)
    except KeyError as missing:
        raise ProjectionError(
            f"no worker has world rank {missing.args[0]}",
            stream_id=stream_id,
            version=row[1],
            position=row[0],
            event_type=row[2],
        ) from None


def run_state(store: EventStore, run_id: str, version: int | None = None) -> RunState:
    """The state of run ``run_id``, now or right after stream ``version``.

    Raises:
        StreamNotFoundError: no such run.
        ProjectionError: the stream cannot be folded.
    """
    stream_id = run_stream(run_id)
    events = list(store.read_stream(stream_id, to_version=version))
    if not events:
        raise StreamNotFoundError(f"run {run_id!r} has no events (stream {stream_id!r})")
    return project_run(events)
