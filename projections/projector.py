"""The projector: keeps the SQL read models up to date with the log, each event exactly once.

It is a transactional subscription named ``read-models``: the rows it writes for a batch of
events and the subscription's checkpoint commit in one transaction, so a projector killed at any
point leaves the read models as of the last committed batch, and the next run continues there.

Each batch is folded with :func:`~wgstore.projections.state.evolve`, starting from the group's
state as of the previous batch: as this process folded it last, when the group's row is still at
that version, else its snapshot in ``wg_snapshots`` (name ``read-models``, saved in the batch's
transaction when the group is first folded, every :data:`SNAPSHOT_EVERY` events and at its end)
with the events since folded on. The read models therefore always say what the pure fold says.

The projector reads only the streams it owns (``worker-group-*`` and ``run-*``): events of other
streams (any stream a program added with its own event types) are never read nor decoded; the
checkpoint moves past them. Inside those streams, an event of a type the process does not know
(:class:`~wgstore.events.UnknownEvent`) is stepped over by the folds.

Runs (``wg_runs``, ``wg_run_decisions``): a run's row is rebuilt whenever its stream or one of its
worker groups changes in a batch, from :func:`~wgstore.projections.run_state.project_run` over its
stream and the run's groups as ``wg_worker_groups`` holds them after the batch
(:mod:`wgstore.projections.run_rows`). A ``run-*`` stream that does not begin with ``RunCreated``
is not a run (a program's own stream of that name): it gets no row.

A worker-group stream the fold refuses (an event out of order, a known event that breaks the
lifecycle, ...) does not stop the projector for every other group: its ``wg_worker_groups`` row
keeps the state as of the last good event, ``projection_error`` says which event was refused and
why, and the stream's later events are left out until the read models are rebuilt.

Rebuilding (:func:`rebuild_read_models`) never leaves the read models emptier than before. On
Postgres it empties them, folds the whole log into them and moves the checkpoint in one
transaction (rolled back on any failure; appends go on meanwhile, catch-ups in other processes
wait for it). On SQLite, where that transaction would hold the write lock throughout, it folds the
log into a scratch file beside the store, then swaps the rows in with one short transaction
(``ATTACH`` + ``INSERT ... SELECT``): appends wait only for the swap, and a failure before it
leaves the live read models untouched. Readers see the old read models until the commit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from wgstore.events._translate import translate_errors
from wgstore.events.engine import READ_ONLY_OPTION
from wgstore.events.per_store import PerStore
from wgstore.events.records import RecordedEvent
from wgstore.events.run import RunCreated
from wgstore.events.schema import (
    wg_run_decisions,
    wg_run_resizes,
    wg_runs,
    wg_snapshots,
    wg_subscriptions,
)
from wgstore.events.streams import GROUP_STREAM_PREFIX, RUN_STREAM_PREFIX, run_stream
from wgstore.events.worker_group import WorkerGroupPolled, WorkerReported, WorkersStarted
from wgstore.projections.bulk import insert_rows
from wgstore.projections.errors import ProjectionError, ReadModelsBusyError
from wgstore.projections.event_time import event_time
from wgstore.projections.read_models import (
    READ_MODEL_TABLES,
    wg_poll_history,
    wg_report_points,
    wg_report_series,
    wg_reports,
    wg_worker_groups,
    wg_workers,
)
from wgstore.projections.run_rows import (
    Attempt,
    attempt_of,
    decision_rows,
    order_attempts,
    resize_rows,
    run_row,
)
from wgstore.projections.run_state import RunState, evolve_run
from wgstore.projections.snapshots import (
    READ_MODELS_SNAPSHOT,
    SnapshotRow,
    insert_snapshot_rows,
    load_snapshots,
    snapshot_rows,
)
from wgstore.projections.state import WorkerGroupFold, WorkerGroupState, project_worker_group
from wgstore.projections.table_rows import (
    PollHistoryRow,
    RefusedGroupRow,
    ReportPointsRow,
    ReportSeriesRow,
    ReportsRow,
    RunDecisionsRow,
    RunResizesRow,
    RunsRow,
    WorkerGroupsRow,
    WorkersRow,
)
from wgstore.projections.values import is_number, plain, to_utc

if TYPE_CHECKING:
    from wgstore.events.store import EventStore

__all__ = [
    "ATTEMPT_COLUMNS",
    "PROJECTED_STREAMS",
    "PROJECTOR_SNAPSHOT",
    "READ_MODELS_SUBSCRIPTION",
    "SNAPSHOT_EVERY",
    "PreparedBatch",
    "apply_read_model_batch",
    "attempt_of_row",
    "catch_up_read_models",
    "fold_run",
    "follow_read_models",
    "prepare_read_model_batch",
    "read_model_rows",
    "rebuild_read_models",
    "write_read_model_batch",
]

READ_MODELS_SUBSCRIPTION = "read-models"
"""The name of the projector's subscription (``wg_subscriptions.name``)."""
PROJECTOR_SNAPSHOT = READ_MODELS_SNAPSHOT
"""The ``wg_snapshots.name`` of the states the projector continues from."""
PROJECTED_STREAMS = (GROUP_STREAM_PREFIX, RUN_STREAM_PREFIX)
"""The stream id prefixes the projector reads (a ``streams`` filter of ``read_all``)."""


def catch_up_read_models(
    store: EventStore, *, batch_size: int = 500, max_batches: int | None = None
) -> int:
    """Apply every worker-group and run event the read models have not seen yet; return how many.

    Events of other streams are not read; the checkpoint moves past them (to the log's head once
    caught up). ``max_batches`` bounds the work of one call (``batch_size`` events a batch) for a
    caller that must not spend long on a backlog: the rest waits for the next call.

    Safe to run from several processes at once: the checkpoint moves by compare-and-set, so a
    batch is applied by exactly one of them (the others retry from the new checkpoint).
    """
    from wgstore.events.subscriptions import SubscriptionConflictError

    subscription = store.subscription(READ_MODELS_SUBSCRIPTION, streams=PROJECTED_STREAMS)
    handled = 0
    for _ in range(50):
        try:
            handled += int(
                subscription.process(
                    lambda connection, prepared: write_read_model_batch(
                        store, connection, prepared
                    ),
                    transactional=True,
                    prepare=lambda batch: prepare_read_model_batch(store, batch),
                    batch_size=batch_size,
                    max_batches=max_batches,
                )
            )
            return handled
        except SubscriptionConflictError:
            continue  # someone else applied that batch; carry on from the new checkpoint
    raise ReadModelsBusyError(
        "read models: 50 conflicting batches in a row; another process keeps moving their "
        "checkpoint (is a rebuild looping?): stop it, then run `wgstore projections catch-up`"
    )


def follow_read_models(
    store: EventStore, stop: threading.Event, *, batch_size: int = 500, wait_s: float = 1.0
) -> None:
    """Catch up, then keep the read models current until ``stop`` is set.

    Rides out the database going away as a subscription does
    (:func:`~wgstore.events.subscriptions.follow_until_stopped`): logged once, tried again with
    a backoff, and the way back logged; nothing is applied twice (a batch and its checkpoint
    commit together).
    """
    from wgstore.events.subscriptions import follow_until_stopped

    def one_pass() -> None:
        catch_up_read_models(store, batch_size=batch_size)
        if not stop.is_set():
            checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
            store.wait_for_new(checkpoint, timeout_s=wait_s)

    follow_until_stopped(store, "the read models", one_pass, stop=stop)


def rebuild_read_models(store: EventStore, *, batch_size: int = 500) -> int:
    """Rebuild the read models from the whole log; return how many events were folded.

    Never leaves the read models emptier than before: on Postgres the read models are emptied,
    refilled and the checkpoint moved in one transaction (rolled back on any failure; appends go
    on meanwhile). On SQLite, where a writing transaction would hold up every append, the read
    models are built beside the live ones, in a scratch file, then swapped in by one short
    transaction; a failure before the swap leaves the live read models untouched. Either way,
    only ``worker-group-*`` and ``run-*`` streams are read, and events appended meanwhile are
    caught up after.
    """
    with translate_errors(store.url):
        if store.is_postgres:
            handled = _rebuild_in_place(store, batch_size)
        else:
            handled = _rebuild_beside(store, batch_size)
    return handled + catch_up_read_models(store, batch_size=batch_size)


def _rebuild_in_place(store: EventStore, batch_size: int) -> int:
    with store.engine.begin() as connection:
        connection.execute(
            postgresql.insert(wg_subscriptions)
            .values(name=READ_MODELS_SUBSCRIPTION, checkpoint=0, updated_at=datetime.now(UTC))
            .on_conflict_do_nothing(index_elements=["name"])
        )
        # Taking the checkpoint row first orders this after (or before) any batch in flight.
        _set_checkpoint(connection, 0)
        for table in READ_MODEL_TABLES:
            connection.execute(table.delete())
        connection.execute(wg_snapshots.delete().where(wg_snapshots.c.name == PROJECTOR_SNAPSHOT))
        handled, end = _fold_log(store, connection, batch_size)
        _set_checkpoint(connection, end)
    return handled


def _fold_log(store: EventStore, connection: sa.Connection, batch_size: int) -> tuple[int, int]:
    """Fold every projected event into empty read models; return (events, position reached)."""
    handled = after = 0
    while True:
        head = store.head()  # read before the batch: everything up to it is committed
        batch = list(store.read_all(after=after, limit=batch_size, streams=PROJECTED_STREAMS))
        if batch:
            apply_read_model_batch(store, connection, batch)
            handled += len(batch)
        end = batch[-1].position if batch else after
        if len(batch) < batch_size:
            return handled, max(end, head)
        after = end


def _rebuild_beside(store: EventStore, batch_size: int) -> int:
    """SQLite: build into a scratch file (no lock on the store), then swap in one transaction."""
    import tempfile
    from pathlib import Path

    from wgstore.events.store import EventStore

    with tempfile.TemporaryDirectory(prefix="wgstore-rebuild-") as folder:
        path = Path(folder) / "read-models.db"
        scratch = EventStore.open(f"sqlite:///{path}", synchronous="OFF")
        try:
            with scratch.engine.begin() as connection:
                handled, end = _fold_log(store, connection, batch_size)
        finally:
            scratch.close()
        _swap_in(store, path, end)
    return handled


def _swap_in(store: EventStore, path: Any, end: int) -> None:
    """Replace the read models (and the projector's snapshots) by those of the file at ``path``."""
    with store.engine.connect() as connection:
        raw = connection.connection.driver_connection  # ATTACH cannot run inside a transaction
        assert raw is not None
        raw.execute("ATTACH DATABASE ? AS rebuilt", (str(path),))
        try:
            with connection.begin():
                for table in READ_MODEL_TABLES:
                    columns = ", ".join(f'"{column.name}"' for column in table.columns)
                    connection.execute(table.delete())
                    connection.exec_driver_sql(
                        f'INSERT INTO main."{table.name}" ({columns}) '
                        f'SELECT {columns} FROM rebuilt."{table.name}"'
                    )
                connection.execute(
                    wg_snapshots.delete().where(wg_snapshots.c.name == PROJECTOR_SNAPSHOT)
                )
                columns = ", ".join(f'"{column.name}"' for column in wg_snapshots.columns)
                connection.exec_driver_sql(
                    f"INSERT INTO main.wg_snapshots ({columns}) "
                    f"SELECT {columns} FROM rebuilt.wg_snapshots WHERE name = ?",
                    (PROJECTOR_SNAPSHOT,),
                )
                connection.execute(
                    sqlite_dialect.insert(wg_subscriptions)
                    .values(
                        name=READ_MODELS_SUBSCRIPTION, checkpoint=end, updated_at=datetime.now(UTC)
                    )
                    .on_conflict_do_update(
                        index_elements=["name"],
                        set_={"checkpoint": end, "updated_at": datetime.now(UTC)},
                    )
                )
        finally:
            raw.execute("DETACH DATABASE rebuilt")


def _set_checkpoint(connection: sa.Connection, position: int) -> None:
    connection.execute(
        wg_subscriptions.update()
        .where(wg_subscriptions.c.name == READ_MODELS_SUBSCRIPTION)
        .values(checkpoint=position, updated_at=datetime.now(UTC))
    )


@dataclass
class _GroupBatch:
    """What one batch does to one group: the rows to write."""

    state: WorkerGroupState | None
    workers: dict[int, WorkersRow]
    changed_workers: set[int] = field(default_factory=set)
    polls: list[PollHistoryRow] = field(default_factory=list)
    reports: list[ReportsRow] = field(default_factory=list)
    series: dict[tuple[str, int], int] = field(default_factory=dict)
    """Points of each (metric, rank) series so far (the group's ``wg_report_series`` rows)."""
    changed_series: set[tuple[str, int]] = field(default_factory=set)
    points: list[ReportPointsRow] = field(default_factory=list)
    error: str | None = None
    last_event: RecordedEvent | None = None
    """The last event this batch looked at (the refused one, when the fold stopped)."""
    last_applied: RecordedEvent | None = None
    """The last event folded: the state's version, whose hash seals its snapshot."""
    seal: bool = False
    """Whether the batch saves the state as the group's snapshot (:func:`_should_seal`)."""


def apply_read_model_batch(
    store: EventStore, connection: sa.Connection, batch: list[RecordedEvent]
) -> None:
    """Write the read-model rows of ``batch`` through ``connection`` (the caller commits)."""
    checkpoint = _lock_checkpoint(connection, batch[0].position)
    works, runs, touched = _fold(store, connection, batch)
    prepared = PreparedBatch(batch, checkpoint, _group_rows(works, store), runs, touched)
    _write_prepared(store, connection, prepared)


def apply_restored_events(
    store: EventStore, connection: sa.Connection, records: list[RecordedEvent]
) -> None:
    """Write the read-model rows of a restored run's events (``wgstore restore``) through
    ``connection``: they are behind the checkpoint, which does not move."""
    if not records:
        return
    works, runs, touched = _fold(store, connection, records)
    checkpoint = _checkpoint(connection, for_update=False)
    _write_prepared(
        store,
        connection,
        PreparedBatch(records, checkpoint, _group_rows(works, store), runs, touched),
    )


@dataclass
class PreparedBatch:
    """A batch folded before its transaction (:func:`prepare_read_model_batch`): the group rows
    to write (built and sealed), as of the read models at ``checkpoint``."""

    events: list[RecordedEvent]
    checkpoint: int
    rows: _GroupRows
    runs: dict[str, list[RecordedEvent]]
    touched: set[str]


def prepare_read_model_batch(store: EventStore, batch: list[RecordedEvent]) -> PreparedBatch:
    """Fold ``batch``'s groups onto the read models as they are now, in a transaction that only
    reads, and build their rows (snapshots sealed): a SQLite write transaction (``BEGIN
    IMMEDIATE``) holds up every append while it is open, and doing this inside it held the
    fleet benchmark's appends 35-130 ms a batch. :func:`write_read_model_batch` then writes the
    rows if the checkpoint has not moved since."""
    reading = store.engine.connect().execution_options(**{READ_ONLY_OPTION: True})
    with reading as connection, connection.begin():
        # the checkpoint first: a batch applied after it moves it, and the write refuses
        checkpoint = _checkpoint(connection, for_update=False)
        works, runs, touched = _fold(store, connection, batch)
    return PreparedBatch(batch, checkpoint, _group_rows(works, store), runs, touched)


def write_read_model_batch(
    store: EventStore, connection: sa.Connection, prepared: PreparedBatch
) -> None:
    """Write a :class:`PreparedBatch` through ``connection`` (the caller commits); the runs'
    rows are folded here, from the group rows as the batch leaves them.

    Raises:
        SubscriptionConflictError: the read models moved since the batch was prepared (another
            projector applied a batch): prepare it again from the new checkpoint.
    """
    from wgstore.events.subscriptions import SubscriptionConflictError

    if _lock_checkpoint(connection, prepared.events[0].position) != prepared.checkpoint:
        raise SubscriptionConflictError(
            f"read models: the checkpoint moved from {prepared.checkpoint} while a batch was "
            "prepared; another projector is running"
        )
    _write_prepared(store, connection, prepared)


def _fold(
    store: EventStore, connection: sa.Connection, batch: list[RecordedEvent]
) -> tuple[dict[str, _GroupBatch], dict[str, list[RecordedEvent]], set[str]]:
    """Fold ``batch``'s groups (reads only): their work, the batch's run events by run id, and
    the runs whose rows may change."""
    streams: dict[str, list[RecordedEvent]] = {}
    runs: dict[str, list[RecordedEvent]] = {}
    for event in batch:
        if event.stream_id.startswith(GROUP_STREAM_PREFIX):
            streams.setdefault(event.stream_id, []).append(event)
        elif event.stream_id.startswith(RUN_STREAM_PREFIX):
            runs.setdefault(event.stream_id[len(RUN_STREAM_PREFIX) :], []).append(event)
    works, touched = _fold_groups(store, connection, streams)
    return works, runs, touched


def _write_prepared(store: EventStore, connection: sa.Connection, prepared: PreparedBatch) -> None:
    """Write a batch's group rows, then fold and write its runs' rows (they read the groups')."""
    _insert_group_rows(connection, prepared.rows)
    _apply_runs(store, connection, prepared.runs, prepared.touched)


def _fold_groups(
    store: EventStore, connection: sa.Connection, streams: dict[str, list[RecordedEvent]]
) -> tuple[dict[str, _GroupBatch], set[str]]:
    """Fold a batch's groups (reads through ``connection``, writes nothing): the rows to write
    per group, and the runs whose rows may change (a group's attempt, as a run's row sees it,
    changed).

    A few statements per batch, not per group: the version of every group's row is read for all
    of them at once; a group this process folded last (its state, workers and series kept in
    :class:`_FoldedGroups`, at the version its row has) needs nothing more, and the snapshots,
    workers and series of the others are read together. Groups are folded one at a time (a
    fleet's batch touches hundreds of groups with a report or two each)."""
    touched: set[str] = set()
    works: dict[str, _GroupBatch] = {}
    if not streams:
        return works, touched
    group_ids = {stream_id: stream_id[len(GROUP_STREAM_PREFIX) :] for stream_id in streams}
    table = wg_worker_groups
    existing = {
        row.group_id: row
        for row in connection.execute(
            sa.select(table.c.group_id, table.c.stream_version, table.c.projection_error).where(
                table.c.group_id.in_(list(group_ids.values()))
            )
        )
    }
    # refused earlier: left out until a rebuild
    live = {
        sid: events
        for sid, events in streams.items()
        if group_ids[sid] not in existing or existing[group_ids[sid]].projection_error is None
    }
    memory = _folded_groups(store)
    kept: dict[str, _Folded] = {}
    for sid in live:
        group_id = group_ids[sid]
        row = existing.get(group_id)
        if row is not None and row.stream_version == live[sid][0].version - 1:
            folded = memory.take(group_id, row.stream_version)
            if folded is not None:
                kept[group_id] = folded
    unknown = [sid for sid in live if group_ids[sid] in existing and group_ids[sid] not in kept]
    snapshots = load_snapshots(
        connection, unknown, name=PROJECTOR_SNAPSHOT, log=store, hmac_key=store.hmac_key
    )
    workers = _known_workers(connection, [group_ids[sid] for sid in unknown])
    series = _known_series(connection, [group_ids[sid] for sid in unknown])
    for stream_id, events in live.items():
        group_id = group_ids[stream_id]
        before: WorkerGroupState | None = None
        sealed: int | None = None
        if group_id in kept:
            folded = kept[group_id]
            before, sealed = folded.state, folded.sealed
            group_workers, group_series = folded.workers, folded.series
        else:
            group_workers, group_series = workers.get(group_id, {}), series.get(group_id, {})
            if group_id in existing:
                snapshot = snapshots.get(stream_id)
                before = _state_before(store, stream_id, snapshot, events[0])
                sealed = None if snapshot is None else snapshot.version
        work = _fold_group(before, events, group_workers, group_series)
        work.seal = _should_seal(work, sealed)
        works[group_id] = work
        if work.state is not None and work.error is None:
            memory.keep(
                group_id,
                _Folded(
                    work.state,
                    work.workers,
                    work.series,
                    work.state.version if work.seal else sealed,
                ),
            )
        if _attempt_changed(before, work):
            touched.add(work.state.run_id)  # type: ignore[union-attr]
    return works, touched


def _state_before(
    store: EventStore,
    stream_id: str,
    snapshot: WorkerGroupState | None,
    first: RecordedEvent,
) -> WorkerGroupState | None:
    """The group's state just before ``first``: its snapshot, with the events between the two
    (a snapshot is sealed every :data:`SNAPSHOT_EVERY` events) folded on."""
    if snapshot is not None and snapshot.version == first.version - 1:
        return snapshot
    if snapshot is not None and snapshot.version > first.version - 1:
        snapshot = None  # newer than the read models (a rebuild since): of no use here
    start = 1 if snapshot is None else snapshot.version + 1
    between = list(store.read_stream(stream_id, from_version=start, to_version=first.version - 1))
    if not between:
        return snapshot
    return project_worker_group(between, snapshot)


def _should_seal(work: _GroupBatch, sealed: int | None) -> bool:
    """Whether the batch saves the group's snapshot: when the state moved and it has none yet,
    or its last is :data:`SNAPSHOT_EVERY` events behind, or the group ended or was refused."""
    state = work.state
    if state is None or work.last_applied is None:
        return False
    return (
        sealed is None
        or state.version - sealed >= SNAPSHOT_EVERY
        or state.status.is_terminal
        or work.error is not None
    )


SNAPSHOT_EVERY = 64
"""The projector saves a group's snapshot at most this many events after its last one (and
whenever the group ends): a reader starting from it folds at most ``SNAPSHOT_EVERY - 1`` events
of the log, where sealing one with every batch was 10-15 % of the projector's time in a fleet
(each batch touching hundreds of groups with an event or two each)."""


@dataclass
class _Folded:
    """A group as this process's projector last folded it: what its next batch starts from."""

    state: WorkerGroupState
    workers: dict[int, WorkersRow]
    series: dict[tuple[str, int], int]
    sealed: int | None
    """The version of the group's last snapshot (None: not known to be saved)."""


class _FoldedGroups:
    """The groups a process's projector folded last, at most ``capacity``, least recent out
    (31-34 KB a group of 8 workers reporting 10 metrics, measured: at most ~70 MB; a fleet of
    more live groups than that gains nothing, as each is evicted before its next batch).

    A hint, never the truth: an entry is used only when the group's read-model row is at the
    version it was folded to (the fold of the same events is the same state), so a batch that
    did not commit, another projector's batch or a rebuild make it unused, not wrong. An entry
    is taken out while a batch folds it (two threads never fold the same dicts) and put back
    after."""

    def __init__(self, capacity: int = 2_048) -> None:
        self._entries: OrderedDict[str, _Folded] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def take(self, group_id: str, version: int) -> _Folded | None:
        """The group's entry if it is at ``version`` (its row's), out of the memory."""
        with self._lock:
            folded = self._entries.pop(group_id, None)
        return folded if folded is not None and folded.state.version == version else None

    def keep(self, group_id: str, folded: _Folded) -> None:
        """Remember ``folded`` (a group that ended is not kept: nothing follows its end)."""
        if folded.state.status.is_terminal:
            return
        with self._lock:
            self._entries[group_id] = folded
            self._entries.move_to_end(group_id)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


_folded_groups = PerStore(lambda _store: _FoldedGroups())
"""The projector's memory of a store object's groups in this process."""


def _attempt_changed(before: WorkerGroupState | None, work: _GroupBatch) -> bool:
    """Whether the batch changed what the group's run row reads of it (a new group, a refused
    stream, or another :class:`~wgstore.projections.run_rows.Attempt`)."""
    state = work.state
    if state is None or not state.run_id:
        return False
    return before is None or work.error is not None or attempt_of(before) != attempt_of(state)


def _known_workers(
    connection: sa.Connection, group_ids: list[str]
) -> dict[str, dict[int, WorkersRow]]:
    """The ``wg_workers`` rows of ``group_ids``, by group and rank (one query)."""
    found: dict[str, dict[int, WorkersRow]] = {}
    if not group_ids:
        return found
    sqlite = connection.dialect.name != "postgresql"
    query = sa.select(wg_workers).where(wg_workers.c.group_id.in_(group_ids))
    for mapping in connection.execute(query).mappings():
        values = dict(mapping)
        if sqlite and values["last_metrics"] is not None:
            values["last_metrics"] = msgspec.json.decode(values["last_metrics"])
        row = cast(WorkersRow, values)  # every column of wg_workers, by name
        found.setdefault(row["group_id"], {})[row["world_rank"]] = row
    return found


def _known_series(
    connection: sa.Connection, group_ids: list[str]
) -> dict[str, dict[tuple[str, int], int]]:
    """The ``wg_report_series`` points of ``group_ids``, by group and (metric, rank)."""
    found: dict[str, dict[tuple[str, int], int]] = {}
    if not group_ids:
        return found
    table = wg_report_series
    query = sa.select(table.c.group_id, table.c.metric, table.c.world_rank, table.c.points).where(
        table.c.group_id.in_(group_ids)
    )
    for group_id, metric, rank, points in connection.execute(query):
        found.setdefault(group_id, {})[metric, rank] = points
    return found


def _checkpoint(connection: sa.Connection, *, for_update: bool) -> int:
    query = sa.select(wg_subscriptions.c.checkpoint).where(
        wg_subscriptions.c.name == READ_MODELS_SUBSCRIPTION
    )
    checkpoint = connection.execute(query.with_for_update() if for_update else query).scalar()
    return int(checkpoint or 0)


def _lock_checkpoint(connection: sa.Connection, first_position: int) -> int:
    """Lock the checkpoint's row until the commit and return the checkpoint; refuse a batch
    from ``first_position`` that it has passed already."""
    from wgstore.events.subscriptions import SubscriptionConflictError

    checkpoint = _checkpoint(connection, for_update=True)
    if checkpoint >= first_position:
        raise SubscriptionConflictError(
            f"read models: position {first_position} was already applied (checkpoint "
            f"{checkpoint}); another projector is running"
        )
    return checkpoint


def _fold_group(
    state: WorkerGroupState | None,
    events: list[RecordedEvent],
    workers: dict[int, WorkersRow],
    series: dict[tuple[str, int], int],
) -> _GroupBatch:
    """Fold one group's events of a batch onto ``state`` (pure): the rows they write."""
    work = _GroupBatch(state=state, workers=workers, series=dict(series))
    fold = WorkerGroupFold(state)
    for event in events:
        try:
            view = fold.apply(event)
        except ProjectionError as error:
            work.error = str(error)
            work.last_event = event
            break
        _rows_of(work, view, event)
        work.last_event = work.last_applied = event
    work.state = fold.state()
    return work


def _rows_of(work: _GroupBatch, state: WorkerGroupState, event: RecordedEvent) -> None:
    """The rows ``event`` adds or changes; ``state`` is the fold right after it."""
    payload = event.event
    at = to_utc(event_time(event))
    if isinstance(payload, WorkersStarted):
        for info in state.workers:
            work.workers[info.world_rank] = {
                "group_id": state.group_id,
                "world_rank": info.world_rank,
                "local_rank": info.local_rank,
                "node_rank": info.node_rank,
                "local_world_size": info.local_world_size,
                "world_size": info.world_size,
                "node_id": info.node_id,
                "node_ip": info.node_ip,
                "pid": info.pid,
                "actor_id": info.actor_id,
                "actor_name": info.actor_name,
                "gpu_ids": ",".join(info.gpu_ids),
                "running": True,
                "error_type": None,
                "error_message": None,
                "stopped_at": None,
                "reports": 0,
                "last_report_index": None,
                "last_reported_at": None,
                "last_metrics": None,
                "last_checkpoint": None,
                "updated_at": at,
            }
            work.changed_workers.add(info.world_rank)
    elif isinstance(payload, WorkerGroupPolled):
        status = state.poll_status
        assert status is not None
        polled_at = to_utc(payload.polled_at)
        for change in payload.changes:
            row = work.workers[change.world_rank]
            if row["running"] and not change.running:
                row["stopped_at"] = polled_at
            elif change.running:
                row["stopped_at"] = None
            row["running"] = change.running
            row["error_type"] = change.error.type if change.error else None
            row["error_message"] = change.error.message if change.error else None
            row["updated_at"] = at
            work.changed_workers.add(change.world_rank)
        work.polls.append(
            {
                "group_id": state.group_id,
                "poll_seq": payload.poll_seq,
                "polled_at": polled_at,
                "unchanged_polls": payload.unchanged_polls,
                "unchanged_since": None
                if payload.unchanged_since is None
                else to_utc(payload.unchanged_since),
                "running_workers": status.num_running,
                "errored_workers": len(status.errors),
                "changes": [
                    {
                        "world_rank": c.world_rank,
                        "running": c.running,
                        "error_type": c.error.type if c.error else None,
                        "error_message": c.error.message if c.error else None,
                    }
                    for c in payload.changes
                ],
                "stream_version": event.version,
                "position": event.position,
                "recorded_at": at,
            }
        )
    elif isinstance(payload, WorkerReported):
        row = work.workers[payload.world_rank]
        row["reports"] += 1
        row["last_report_index"] = payload.index
        row["last_reported_at"] = at
        row["last_metrics"] = plain(payload.metrics)
        if payload.checkpoint is not None:
            row["last_checkpoint"] = payload.checkpoint
        row["updated_at"] = at
        work.changed_workers.add(payload.world_rank)
        metrics = plain(payload.metrics)
        work.reports.append(
            {
                "group_id": state.group_id,
                "world_rank": payload.world_rank,
                "report_index": payload.index,
                "metrics": metrics,
                "checkpoint": payload.checkpoint,
                "stream_version": event.version,
                "position": event.position,
                "reported_at": at,
            }
        )
        _points_of(work, state.group_id, payload, metrics, at)


def _points_of(
    work: _GroupBatch,
    group_id: str,
    report: WorkerReported,
    metrics: Mapping[str, Any],
    at: datetime,
) -> None:
    """The ``wg_report_points`` rows of one report: each numeric metric (not a bool) is the next
    point of its (metric, rank) series, numbered from 0 in stream order."""
    rank = report.world_rank
    for metric, value in metrics.items():
        if not is_number(value):
            continue
        key = (metric, rank)
        pos = work.series.get(key, 0)
        work.series[key] = pos + 1
        work.changed_series.add(key)
        work.points.append(
            {
                "group_id": group_id,
                "metric": metric,
                "world_rank": rank,
                "pos": pos,
                "report_index": report.index,
                "value": float(value),
                "reported_at": at,
            }
        )


def _group_row(state: WorkerGroupState) -> WorkerGroupsRow:
    status = state.poll_status
    error = state.error
    outcome = state.outcome
    return {
        "group_id": state.group_id,
        "stream_id": state.stream_id,
        "run_id": state.run_id,
        "attempt": state.attempt,
        "status": state.status.value,
        "outcome": None if outcome is None else outcome.value,
        "num_workers": state.num_workers,
        "resources_per_worker": plain(state.context.resources_per_worker),
        "placement_strategy": state.context.placement_strategy,
        "train_fn": state.context.train_fn,
        "placement_group_id": None
        if state.placement_group is None
        else state.placement_group.placement_group_id,
        "requested_at": to_utc(state.requested_at),
        "started_at": None if state.started_at is None else to_utc(state.started_at),
        "startup_s": state.startup_s,
        "training_launched_at": None
        if state.training_launched_at is None
        else to_utc(state.training_launched_at),
        "running_workers": None if status is None else status.num_running,
        "errored_workers": None if status is None else len(status.errors),
        "recorded_polls": state.recorded_polls,
        "polls_total": state.polls_total,
        "last_poll_seq": state.last_poll_seq,
        "last_polled_at": None if state.last_polled_at is None else to_utc(state.last_polled_at),
        "reports_total": state.reports_total,
        "latest_checkpoint": state.latest_checkpoint,
        "checkpoint_index": state.checkpoint_index,
        "checkpoint_committed_at": None
        if state.checkpoint_committed_at is None
        else to_utc(state.checkpoint_committed_at),
        "latest_reported_checkpoint": state.latest_reported_checkpoint,
        "start_failed_stage": None
        if state.start_failure is None
        else state.start_failure.stage.value,
        "error_type": None if error is None else error.type,
        "error_message": None if error is None else error.message,
        "shutdown_reason": state.shutdown_reason,
        "shutdown_requested_at": None
        if state.shutdown_requested_at is None
        else to_utc(state.shutdown_requested_at),
        "shut_down_at": None if state.shut_down_at is None else to_utc(state.shut_down_at),
        "released": list(state.released),
        "stream_version": state.version,
        "last_position": state.position,
        "updated_at": to_utc(state.updated_at),
        "projection_error": None,
    }


@dataclass
class _GroupRows:
    """Every table's rows of a batch's groups, built (:func:`_group_rows`) before they are
    written (:func:`_insert_group_rows`)."""

    groups: list[WorkerGroupsRow] = field(default_factory=list)
    refused: list[RefusedGroupRow] = field(default_factory=list)
    snapshots: list[SnapshotRow] = field(default_factory=list)
    workers: list[WorkersRow] = field(default_factory=list)
    polls: list[PollHistoryRow] = field(default_factory=list)
    reports: list[ReportsRow] = field(default_factory=list)
    points: list[ReportPointsRow] = field(default_factory=list)
    series: list[ReportSeriesRow] = field(default_factory=list)


def _group_rows(works: dict[str, _GroupBatch], store: EventStore) -> _GroupRows:
    """The rows of a batch's groups, snapshots encoded and sealed (no I/O)."""
    rows = _GroupRows()
    snapshots: list[tuple[WorkerGroupState, str]] = []
    for group_id, work in works.items():
        state = work.state
        if state is not None:
            row = _group_row(state)
            row["projection_error"] = work.error
            rows.groups.append(row)
            if work.seal and work.last_applied is not None:  # seal it to its last event
                snapshots.append((state, work.last_applied.hash))
        elif work.error is not None and work.last_event is not None:
            event = work.last_event
            rows.refused.append(
                {
                    "group_id": group_id,
                    "stream_id": event.stream_id,
                    "stream_version": event.version,
                    "last_position": event.position,
                    "updated_at": to_utc(event_time(event)),
                    "projection_error": work.error,
                }
            )
        rows.workers += [work.workers[rank].copy() for rank in sorted(work.changed_workers)]
        rows.polls += work.polls
        rows.reports += work.reports
        rows.points += work.points
        rows.series += [
            {"group_id": group_id, "metric": metric, "world_rank": rank, "points": count}
            for (metric, rank), count in sorted(work.series.items())
            if (metric, rank) in work.changed_series
        ]
    rows.snapshots = snapshot_rows(snapshots, name=PROJECTOR_SNAPSHOT, hmac_key=store.hmac_key)
    return rows


def _insert_group_rows(connection: sa.Connection, rows: _GroupRows) -> None:
    """Every table's rows of a batch's groups, one statement a table."""
    insert_rows(connection, wg_worker_groups, rows.groups, upsert=True)
    insert_rows(connection, wg_worker_groups, rows.refused, upsert=True)
    insert_snapshot_rows(connection, rows.snapshots)
    insert_rows(connection, wg_workers, rows.workers, upsert=True)
    insert_rows(connection, wg_poll_history, rows.polls)
    insert_rows(connection, wg_reports, rows.reports)
    insert_rows(connection, wg_report_points, rows.points)
    insert_rows(connection, wg_report_series, rows.series, upsert=True)


# ------------------------------------------------------------------------------------ runs


def _apply_runs(
    store: EventStore,
    connection: sa.Connection,
    runs: dict[str, list[RecordedEvent]],
    touched: set[str],
) -> None:
    """Rewrite the rows of every run whose stream (``runs``) or groups (``touched``) changed:
    each run folded, then every run's attempts read in one query and the rows written together."""
    run_ids = sorted(set(runs) | touched)
    if not run_ids:
        return
    existing = {
        row.run_id: row
        for row in connection.execute(
            sa.select(wg_runs.c.run_id, wg_runs.c.stream_version, wg_runs.c.projection_error).where(
                wg_runs.c.run_id.in_(run_ids)
            )
        )
    }
    folded: dict[str, tuple[RunState, str | None]] = {}
    for run_id in run_ids:
        known = existing.get(run_id)
        if known is not None and known.projection_error is not None:
            continue  # refused earlier: left out until a rebuild
        new = runs.get(run_id, [])
        if new:
            first = new[0].version
        elif known is not None:
            first = known.stream_version + 1  # only its groups changed: the stream as it was
        else:
            continue  # a group of a run with no run stream (yet)
        stream_id = run_stream(run_id)
        earlier = list(store.read_stream(stream_id, to_version=first - 1)) if first > 1 else []
        records = earlier + new
        if not isinstance(records[0].event, RunCreated):
            continue  # not a run: a program's own stream named run-*
        folded[run_id] = fold_run(records)
    if not folded:
        return
    attempts = _attempts(connection, [state for state, _ in folded.values()])
    rows: list[RunsRow] = []
    decisions: list[RunDecisionsRow] = []
    resizes: list[RunResizesRow] = []
    for run_id, (state, error) in folded.items():
        row = run_row(state, attempts[run_id])
        row["projection_error"] = error
        rows.append(row)
        decisions += decision_rows(state)
        resizes += resize_rows(state)
    insert_rows(connection, wg_runs, rows, upsert=True)
    table_rows: list[RunDecisionsRow] | list[RunResizesRow]
    for table, table_rows in ((wg_run_decisions, decisions), (wg_run_resizes, resizes)):
        connection.execute(table.delete().where(table.c.run_id.in_(folded)))
        insert_rows(connection, table, table_rows)


def fold_run(records: list[RecordedEvent]) -> tuple[RunState, str | None]:
    """Fold a run stream (it begins with RunCreated): the state as of its last good event, and
    why the fold stopped there (``None`` when it did not)."""
    state = evolve_run(None, records[0])
    for record in records[1:]:
        try:
            state = evolve_run(state, record)
        except ProjectionError as error:
            return state, str(error)
    return state, None


ATTEMPT_COLUMNS = (
    wg_worker_groups.c.group_id,
    wg_worker_groups.c.run_id,
    wg_worker_groups.c.attempt,
    wg_worker_groups.c.status,
    wg_worker_groups.c.outcome,
    wg_worker_groups.c.requested_at,
    wg_worker_groups.c.latest_checkpoint,
    wg_worker_groups.c.checkpoint_committed_at,
    wg_worker_groups.c.latest_reported_checkpoint,
    wg_worker_groups.c.error_type,
    wg_worker_groups.c.error_message,
    wg_worker_groups.c.num_workers,
)
"""The ``wg_worker_groups`` columns an :class:`~wgstore.projections.run_rows.Attempt` is made
of (:func:`attempt_of_row`)."""


def attempt_of_row(row: Any) -> Attempt:
    """The attempt a ``wg_worker_groups`` row (:data:`ATTEMPT_COLUMNS`) stands for."""
    committed_at = row.checkpoint_committed_at
    return Attempt(
        group_id=row.group_id,
        attempt=row.attempt,
        status=row.status,
        outcome=row.outcome,
        requested_at=None if row.requested_at is None else to_utc(row.requested_at),
        latest_checkpoint=row.latest_checkpoint,
        checkpoint_committed_at=None if committed_at is None else to_utc(committed_at),
        latest_reported_checkpoint=row.latest_reported_checkpoint,
        error=None if row.error_type is None else f"{row.error_type}: {row.error_message}",
        num_workers=row.num_workers,
    )


def _attempts(connection: sa.Connection, runs: list[RunState]) -> dict[str, list[Attempt]]:
    """Each run's attempts as ``wg_worker_groups`` holds them (this batch's rows included), in
    one query: the groups started for it and those its controller named."""
    table = wg_worker_groups
    named = {group_id for run in runs for group_id in run.groups}
    query = sa.select(*ATTEMPT_COLUMNS).where(
        sa.or_(table.c.run_id.in_([run.run_id for run in runs]), table.c.group_id.in_(named)),
        table.c.projection_error.is_(None),
    )
    rows = list(connection.execute(query))
    result = {}
    for run in runs:
        mine = set(run.groups)
        found = [
            attempt_of_row(row) for row in rows if row.run_id == run.run_id or row.group_id in mine
        ]
        result[run.run_id] = order_attempts(run, found)
    return result


def read_model_rows(connection: sa.Connection) -> Mapping[str, list[tuple[Any, ...]]]:
    """Every row of every read-model table, sorted: to compare two sets of read models."""
    result: dict[str, list[tuple[Any, ...]]] = {}
    for table in READ_MODEL_TABLES:
        keys = list(table.primary_key.columns)
        rows = connection.execute(sa.select(table).order_by(*keys)).all()
        result[table.name] = [tuple(row) for row in rows]
    return result
