"""Following the log: the events appended after a position, as they come (``wgstore events -f``),
and a run's current attempt as it changes (``wgstore resume``'s live table)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator

from wgstore.events import EventStore, RecordedEvent
from wgstore.events.streams import group_stream, run_stream
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import WorkerGroupState, evolve

__all__ = ["follow_events", "follow_run"]


def follow_events(
    store: EventStore,
    after: int,
    *,
    streams: Collection[str] | None = None,
    types: Collection[str] = (),
    stop_after_s: float | None = None,
) -> Iterator[RecordedEvent]:
    """Yield each event appended after position ``after``, oldest first, as it is committed.

    Args:
        store: the store to follow (it wakes on Postgres ``NOTIFY``, else polls).
        after: the position already seen; only later events are yielded.
        streams: only events of these streams (``None``: every stream).
        types: only events of these types (empty: every type).
        stop_after_s: stop after this many seconds; ``None`` follows until the caller stops.
    """
    deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
    while deadline is None or time.monotonic() < deadline:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        head = store.wait_for_new(after, timeout_s=wait)
        if head <= after:
            continue
        fresh = [
            record
            for record in store.read_all(after=after, types=list(types) or None)
            if record.position <= head
        ]
        after = head
        yield from (r for r in fresh if streams is None or r.stream_id in streams)


def follow_run(
    store: EventStore, run_id: str, *, stopped: Callable[[], bool], wait_s: float = 0.5
) -> Iterator[WorkerGroupState]:
    """Yield the state of run ``run_id``'s current attempt (its worker group) each time it
    changes, until ``stopped()``: whoever writes the run (a controller in this process or
    another, a Ray Train recorder), it is read from the log.

    The current attempt is the group the run's stream names last
    (:attr:`~wgstore.projections.run_state.RunState.current_group_id`); each wake reads only the
    run's and that group's new events. It wakes on appends to the store (Postgres ``NOTIFY``,
    appends through this store object) or every ``wait_s``.
    """
    run: RunState | None = None
    group: WorkerGroupState | None = None
    while True:
        last = stopped()  # a read that begins after the stop is the last: it sees everything
        head = store.head()
        records = list(
            store.read_stream(
                run_stream(run_id), from_version=1 if run is None else run.version + 1
            )
        )
        if records:
            run = project_run(records, run)
        current = None if run is None else run.current_group_id or (run.groups or [None])[-1]
        if current is not None:
            if group is not None and group.group_id != current:
                group = None  # a new attempt: fold its own stream
            changed = False
            start = 1 if group is None else group.version + 1
            for record in store.read_stream(group_stream(current), from_version=start):
                group = evolve(group, record)
                changed = True
            if changed and group is not None:
                yield group
        if last:
            return
        store.wait_for_new(head, timeout_s=wait_s)
