"""What the read models have not applied yet: the streams that moved after their checkpoint.

The read models trail the log by whatever the projector has not caught up (an executor or a
Ray Train recorder catches up every 2 s), so on a log that is being written they are nearly always
a little behind. A listing that used them only when exactly current would fold the whole log
whenever anything runs. Instead, listings (``wgstore groups`` / ``runs``, ``wgstore serve``'s
pages, ``/metrics``) take the read models' rows and recompute only the rows of the streams that
moved after the checkpoint (:func:`read_models_behind`), from those streams: as right as a fold
of the whole log, at a cost that grows with the lag, not with the log.

Bounded: read models further behind than :data:`MAX_BEHIND_EVENTS` events or
:data:`MAX_BEHIND_STREAMS` streams (a log nobody projects) are not corrected; the caller folds
the log instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events._translate import translate_errors
from wgstore.events.schema import wg_events, wg_subscriptions, wg_worker_groups
from wgstore.events.streams import RUN_STREAM_PREFIX, group_id_of, group_stream
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION
from wgstore.projections.queries import worker_group_state
from wgstore.projections.state import WorkerGroupState

__all__ = [
    "MAX_BEHIND_EVENTS",
    "MAX_BEHIND_STREAMS",
    "Behind",
    "read_models_behind",
    "read_with_lag",
    "runs_moved",
    "with_lag",
]

MAX_BEHIND_EVENTS = 20_000
"""Read models at most this many events behind the log are corrected stream by stream."""
MAX_BEHIND_STREAMS = 1_000
"""... and in at most this many streams (of any kind): each moved group or run is folded again
(a group from its latest snapshot)."""


@dataclass(frozen=True, slots=True)
class Behind:
    """The read models' checkpoint, the log's head when it was looked at, and the ids of the
    worker groups and runs with events in between (the rows to recompute).

    One ``Behind`` can serve several listings of one answer (a ``/metrics`` scrape lists runs,
    groups and workers): :meth:`group_state` folds each moved group once for all of them."""

    checkpoint: int
    head: int
    group_ids: frozenset[str]
    run_ids: frozenset[str]
    _states: dict[str, WorkerGroupState | ProjectionError | StreamNotFoundError] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def current(self) -> bool:
        """Whether the read models have applied every event up to ``head``."""
        return self.checkpoint >= self.head

    def group_state(self, store: EventStore, group_id: str) -> WorkerGroupState:
        """The state of a moved group, folded once (from its latest snapshot) and kept.

        Raises:
            ProjectionError: its stream cannot be folded (``StreamNotFoundError``: no events).
        """
        found = self._states.get(group_id)
        if found is None:
            try:
                found = worker_group_state(store, group_id)
            except (ProjectionError, StreamNotFoundError) as error:
                found = error
            self._states[group_id] = found
        if isinstance(found, ProjectionError | StreamNotFoundError):
            raise found
        return found


def read_models_behind(store: EventStore, connection: sa.Connection | None = None) -> Behind | None:
    """The streams the read models have not caught up on; None when they are too far behind
    to correct (:data:`MAX_BEHIND_EVENTS`, :data:`MAX_BEHIND_STREAMS`).

    The checkpoint and the head are read in one statement (one snapshot of the database), so
    every event the read models' rows may lack lies in ``(checkpoint, head]``; rows read
    afterwards are at least that current (:func:`read_with_lag` reads rows exactly that
    current, in the same statement). ``connection``: read through the caller's (one round trip
    fewer for a caller that queries next), else a pooled one.
    """
    if connection is None:
        with translate_errors(store.url), store.engine.connect() as own:
            try:
                return read_models_behind(store, own)
            finally:
                own.rollback()
    found = connection.execute(sa.select(*_lag_columns())).one()
    return _behind_between(connection, found[0], found[1])


def with_lag(query: sa.Select[Any], *order_by: str) -> sa.Select[Any]:
    """``query`` with what :func:`read_with_lag` needs to tell how current its rows are: the
    read models' checkpoint and the log's head as columns of each row (and of one row of its
    own when ``query`` finds none), the rows in the order of ``query``'s columns named
    ``order_by``. Build it once (it is a statement with bound parameters), read it often.

    ``query`` is a read-model query without an ORDER BY; its column names must not start with
    ``wg_lag_``.
    """
    lag = sa.select(*_lag_columns()).subquery("wg_lag")
    rows = query.add_columns(sa.literal(1).label("wg_lag_row")).subquery("wg_rows")
    return (
        sa.select(lag, rows)
        .select_from(lag.outerjoin(rows, sa.true()))
        .order_by(*(rows.c[name] for name in order_by))
    )


def read_with_lag(
    connection: sa.Connection, statement: sa.Select[Any], params: dict[str, Any] | None = None
) -> tuple[Behind | None, list[tuple[Any, ...]]]:
    """The rows of a :func:`with_lag` statement (each a tuple of its query's columns) and what
    the read models had not applied when they were read (as :func:`read_models_behind`): one
    statement, so one round trip and one snapshot, and the rows are exactly as current as the
    checkpoint. Which streams moved is asked only when the read models lag (one more
    statement)."""
    found = connection.execute(statement, params or {}).all()
    checkpoint, head = found[0][0], found[0][1]  # with_lag's first columns, its marker last
    rows = [row[2:-1] for row in found if row[-1] is not None]
    return _behind_between(connection, checkpoint, head), rows


def _lag_columns() -> tuple[sa.Label[Any], sa.Label[Any]]:
    """The read models' checkpoint and the log's head, as columns of one statement."""
    checkpoint = sa.select(wg_subscriptions.c.checkpoint).where(
        wg_subscriptions.c.name == READ_MODELS_SUBSCRIPTION
    )
    head = sa.select(sa.func.max(wg_events.c.position))
    return (
        checkpoint.scalar_subquery().label("wg_lag_checkpoint"),
        head.scalar_subquery().label("wg_lag_head"),
    )


def _behind_between(
    connection: sa.Connection, checkpoint: int | None, head: int | None
) -> Behind | None:
    """The :class:`Behind` of a checkpoint and a head read together: the streams with events
    in ``(checkpoint, head]`` (asked only when there are any), or None when too many."""
    checkpoint, head = int(checkpoint or 0), int(head or 0)
    if head <= checkpoint:
        return Behind(checkpoint, head, frozenset(), frozenset())
    if head - checkpoint > MAX_BEHIND_EVENTS:
        return None
    query = (
        sa.select(wg_events.c.stream_id)
        .where(wg_events.c.position > checkpoint, wg_events.c.position <= head)
        .distinct()
        .limit(MAX_BEHIND_STREAMS + 1)
    )
    stream_ids = [row[0] for row in connection.execute(query)]
    if len(stream_ids) > MAX_BEHIND_STREAMS:
        return None
    group_ids = {g for g in map(group_id_of, stream_ids) if g is not None}
    run_ids = {s[len(RUN_STREAM_PREFIX) :] for s in stream_ids if s.startswith(RUN_STREAM_PREFIX)}
    return Behind(checkpoint, head, frozenset(group_ids), frozenset(run_ids))


def runs_moved(
    store: EventStore, behind: Behind, connection: sa.Connection | None = None
) -> set[str]:
    """The runs with events the read models have not applied: their stream moved, or one of
    their groups' (a group's run as ``wg_worker_groups`` has it, or, for a group the read models
    do not know yet, as its first event, the start request, names it). ``connection``: as for
    :func:`read_models_behind`."""
    moved = set(behind.run_ids)
    if not behind.group_ids:
        return moved
    table = wg_worker_groups
    query = sa.select(table.c.group_id, table.c.run_id).where(
        table.c.group_id.in_(sorted(behind.group_ids))
    )
    if connection is None:
        with translate_errors(store.url), store.engine.connect() as own:
            known = {group_id: run_id for group_id, run_id in own.execute(query)}
            own.rollback()
    else:
        known = {group_id: run_id for group_id, run_id in connection.execute(query)}
    moved |= {run_id for run_id in known.values() if run_id}
    for group_id in sorted(behind.group_ids - set(known)):
        first = next(iter(store.read_stream(group_stream(group_id), to_version=1)), None)
        run_id = getattr(first.event, "run_id", None) if first is not None else None
        if isinstance(run_id, str) and run_id:
            moved.add(run_id)
    return moved
