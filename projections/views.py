"""Read-side views: what the CLI, the Python API and tests ask of the store, as data.

Each function takes an open :class:`~wgstore.events.EventStore` and returns values (the typed
rows of :mod:`wgstore.projections.rows`, tuples, frozen dataclasses): no rendering. ``wgstore
groups`` / ``state`` / ``projections status`` / ``verify`` are a parse, one call here, and a
render.

- :func:`group_summaries`: one summary per worker group, from the read model ``wg_worker_groups``
  with what it has not caught up on folded from the log (:mod:`wgstore.projections.behind`).
- :func:`state_json` / :func:`worker_rows`: a group's state as JSON-ready data; one
  :class:`~wgstore.projections.rows.WorkerRow` per worker.
- :func:`read_model_status`: where the read models stand against the log.
- :func:`read_model_problems`: the read models compared with a rebuild from the log.
- :func:`unknown_types`: stored event types this wgstore does not know.
- :func:`run_streams` / :func:`stored_events`: the streams of a run; the events up to a head.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from wgstore.events import REGISTRY, EventStore, InvalidArgumentError, RecordedEvent
from wgstore.events._translate import translate_errors
from wgstore.events.engine import mask_url
from wgstore.events.schema import READ_MODEL_TABLES, wg_events, wg_runs, wg_worker_groups
from wgstore.events.stored_names import type_name
from wgstore.events.streams import (
    GROUP_STREAM_PREFIX,
    RUN_STREAM_PREFIX,
    group_id_of,
    group_stream,
    run_stream,
)
from wgstore.events.worker_group import WorkerGroupStartRequested
from wgstore.projections.behind import Behind, read_models_behind
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.projector import (
    PROJECTED_STREAMS,
    READ_MODELS_SUBSCRIPTION,
    apply_read_model_batch,
    read_model_rows,
)
from wgstore.projections.queries import worker_group_state
from wgstore.projections.rows import GroupSummary, RunSummary, WorkerRow
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus
from wgstore.projections.values import to_utc

__all__ = [
    "SUMMARY_KEYS",
    "ReadModelStatus",
    "check_event_types",
    "current_summaries",
    "first_line",
    "group_summaries",
    "iter_groups",
    "moved_group_summaries",
    "read_model_problems",
    "read_model_status",
    "read_models_current",
    "resolve_group_id",
    "resolve_id",
    "run_ids",
    "run_streams",
    "running_now",
    "state_json",
    "stored_events",
    "summaries_from_log",
    "summaries_from_read_models",
    "unknown_types",
    "worker_rows",
]

SUMMARY_KEYS = tuple(f.name for f in fields(GroupSummary))
"""The keys of every group summary's JSON (the fields of
:class:`~wgstore.projections.rows.GroupSummary`); a group whose stream cannot be folded has
status ``UNREADABLE`` and the reason in ``error``."""

R = TypeVar("R", GroupSummary, RunSummary)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_PER_TABLE = 20


# ------------------------------------------------------------------------ worker groups


def iter_groups(store: EventStore) -> Iterator[tuple[str, WorkerGroupState | ProjectionError]]:
    """Every worker group in the log, oldest first, with its state (or why it cannot be folded)."""
    for stream_id, _version in store.streams(GROUP_STREAM_PREFIX):
        group_id = group_id_of(stream_id) or stream_id
        try:
            yield group_id, worker_group_state(store, group_id)
        except ProjectionError as error:
            yield group_id, error


def state_json(state: WorkerGroupState) -> dict[str, Any]:
    """The state as JSON-ready data, with its derived values (outcome, error, counts) added."""
    data: dict[str, Any] = msgspec.to_builtins(state, str_keys=True)
    outcome = state.outcome
    error = state.error
    data.update(
        outcome=None if outcome is None else outcome.value,
        num_workers=state.num_workers,
        reports_total=state.reports_total,
        error=None if error is None else msgspec.to_builtins(error),
        worker_errors={str(rank): str(err) for rank, err in state.errors.items()},
    )
    return data


def running_now(status: str, running: int | None) -> int | None:
    """Workers running now: the latest poll's count while the group may run, 0 once it is shut
    down or its start failed (the read model's ``running_workers`` keeps the latest poll's)."""
    if running is not None and status in (
        WorkerGroupStatus.SHUT_DOWN.value,
        WorkerGroupStatus.START_FAILED.value,
    ):
        return 0
    return running


def _group_summary(group_id: str, state: WorkerGroupState) -> GroupSummary:
    outcome = state.outcome
    error = state.error
    running = running_now(
        state.status.value, state.poll_status.num_running if state.poll_status else None
    )
    return GroupSummary(
        group_id=group_id,
        run_id=state.run_id,
        attempt=state.attempt,
        status=state.status.value,
        outcome=None if outcome is None else outcome.value,
        num_workers=state.num_workers,
        running_workers=running,
        requested_at=state.requested_at,
        updated_at=state.updated_at,
        shut_down_at=state.shut_down_at,
        train_fn=state.context.train_fn,
        reports=state.reports_total,
        error=None if error is None else str(error),
    )


def read_models_current(store: EventStore) -> bool:
    """Whether the read models have applied every event of the log (then the summaries are read
    from them)."""
    checkpoint: int = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    return checkpoint >= store.head()


def current_summaries(
    from_read_models: Callable[[], list[R] | None],
    from_log: Callable[[], list[R]],
    *,
    log_only: bool = False,
    order: Callable[[R], tuple[datetime, str]],
) -> list[R]:
    """The one "read models, else the log" choice of groups and runs: the rows
    ``from_read_models()`` gives (None: too far behind the log to correct), else
    ``from_log()``, sorted by ``order``. ``log_only`` skips the read models."""
    rows = None if log_only else from_read_models()
    if rows is None:
        rows = from_log()
    rows.sort(key=order)
    return rows


def summaries_from_log(store: EventStore) -> list[GroupSummary]:
    """One summary per group, folded from the log (always right, slower on a big log)."""
    return [
        GroupSummary.unreadable(group_id, str(state))
        if isinstance(state, ProjectionError)
        else _group_summary(group_id, state)
        for group_id, state in iter_groups(store)
    ]


def moved_group_summaries(store: EventStore, behind: Behind) -> Iterator[GroupSummary]:
    """The summaries of the groups the read models have not caught up on, folded from their
    streams (each from its latest snapshot, once per ``behind``)."""
    for group_id in sorted(behind.group_ids):
        try:
            state = behind.group_state(store, group_id)
        except StreamNotFoundError:
            continue
        except ProjectionError as error:
            yield GroupSummary.unreadable(group_id, str(error))
        else:
            yield _group_summary(group_id, state)


def summaries_from_read_models(
    store: EventStore, behind: Behind | None = None
) -> list[GroupSummary] | None:
    """One summary per group from ``wg_worker_groups``, with the groups whose streams moved after
    the read models' checkpoint folded again (:mod:`wgstore.projections.behind`; ``behind`` is
    looked up when not given); None when the read models are too far behind for that (then fold
    the log)."""
    with translate_errors(store.url), store.engine.connect() as connection:
        behind = behind or read_models_behind(store, connection)
        rows = (
            []
            if behind is None
            else list(connection.execute(sa.select(wg_worker_groups)).mappings())
        )
        connection.rollback()
    if behind is None:
        return None
    result = list(moved_group_summaries(store, behind))
    for row in rows:
        if row["group_id"] in behind.group_ids:
            continue  # folded again above
        if row["projection_error"] is not None:
            result.append(GroupSummary.unreadable(row["group_id"], row["projection_error"]))
            continue
        error = f"{row['error_type']}: {row['error_message']}" if row["error_type"] else None
        result.append(
            GroupSummary(
                group_id=row["group_id"],
                run_id=row["run_id"],
                attempt=row["attempt"],
                status=row["status"],
                outcome=row["outcome"],
                num_workers=row["num_workers"],
                running_workers=running_now(row["status"], row["running_workers"]),
                requested_at=to_utc(row["requested_at"]),
                updated_at=to_utc(row["updated_at"]),
                shut_down_at=to_utc(row["shut_down_at"]),
                train_fn=row["train_fn"],
                reports=row["reports_total"],
                error=error,
            )
        )
    return result


def group_summaries(
    store: EventStore, *, from_log: bool = False, behind: Behind | None = None
) -> list[GroupSummary]:
    """One summary per group (:class:`~wgstore.projections.rows.GroupSummary`), oldest request
    first.

    ``run_id`` is None for a group that belongs to no run (made by ``WorkerGroup.create``
    without one: its start request names its own id, and there is no ``run-<id>`` stream).

    Read from ``wg_worker_groups``, the groups the read models have not caught up on folded
    from their streams (:mod:`wgstore.projections.behind`), unless ``from_log`` or the read
    models are too far behind: then every group is folded from the log. Right either way.
    ``behind``: the read models' lag, when the caller looked it up for several listings.
    """
    summaries = current_summaries(
        lambda: summaries_from_read_models(store, behind),
        lambda: summaries_from_log(store),
        log_only=from_log,
        order=lambda g: (g.requested_at or _EPOCH, g.group_id),
    )
    runs = run_ids(store)
    return [
        # a group on its own: no run stream, not a run
        s if s.run_id in runs or s.run_id is None else replace(s, run_id=None)
        for s in summaries
    ]


def first_line(error: Any) -> str:
    """The first line of an error, with `` ...`` when more follows (for tables)."""
    text = str(error).strip()
    line, _, rest = text.partition("\n")
    return f"{line} ..." if rest.strip() else line


def worker_rows(state: WorkerGroupState) -> list[WorkerRow]:
    """One row per worker: placement, status at the latest poll, reports and latest metrics.

    ``node_rank`` and ``node_ip`` name the node; ``status`` is ``started`` (no poll yet),
    ``running``, ``finished`` or ``error`` (``error`` holds its first line). Once the group is
    shut down no worker runs: a worker the last poll saw running (or that was never polled) shows
    how it ended at the shutdown (``stopped``, ``killed``, ``dead``), or ``shut down``.
    """
    rows = []
    statuses = state.poll_status.worker_statuses if state.poll_status else {}
    ended = state.status is WorkerGroupStatus.SHUT_DOWN
    endings = {ending.world_rank: ending.ending.value for ending in state.worker_endings}
    for worker in state.workers:
        status = statuses.get(worker.world_rank)
        if status is not None and status.error is not None:
            label = "error"
        elif status is not None and not status.running:
            label = "finished"
        elif ended:
            label = endings.get(worker.world_rank, "shut down")
        elif status is None:
            label = "started"
        else:
            label = "running"
        rows.append(
            WorkerRow(
                rank=worker.world_rank,
                node=f"{worker.node_rank} {worker.node_ip}",
                node_rank=worker.node_rank,
                node_ip=worker.node_ip,
                pid=worker.pid,
                status=label,
                error="" if status is None or status.error is None else first_line(status.error),
                reports=state.report_counts.get(worker.world_rank, 0),
                metrics=dict(state.latest_metrics.get(worker.world_rank, {})),
            )
        )
    return rows


# ------------------------------------------------------------------------ events


def run_ids(store: EventStore) -> set[str]:
    """The ids of the runs in the log: a run is its stream ``run-<id>`` (``wgstore runs``)."""
    return {sid[len(RUN_STREAM_PREFIX) :] for sid, _ in store.streams(RUN_STREAM_PREFIX)}


def resolve_id(store: EventStore, given: str, *, stream_prefix: str, kind: str, hint: str) -> str:
    """The full id of the one ``kind`` (a worker group, a run) whose id is ``given`` or starts with it.

    The one resolver of id prefixes: an entity is a stream ``<stream_prefix><id>``, so its id
    may be given whole, as any unique prefix, or as its stream id. ``given`` is tried as an id
    first, then without ``stream_prefix`` (a run id may itself start with ``run-``).

    Args:
        hint: what to run to list the ids, for the message when none matches.

    Raises:
        InvalidArgumentError: no id, or more than one, starts with ``given``.
    """
    given = given.strip()
    if not given:
        raise InvalidArgumentError(f"give a {kind} id (or a unique prefix of one)")
    candidates = [given]
    if given.startswith(stream_prefix) and given != stream_prefix:
        candidates.append(given[len(stream_prefix) :])
    for candidate in candidates:
        found = [sid[len(stream_prefix) :] for sid, _ in store.streams(stream_prefix + candidate)]
        if candidate in found:
            return candidate
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise InvalidArgumentError(
                f"{given!r} matches {len(found)} {kind}s ({shown}); give more of the id"
            )
    raise InvalidArgumentError(
        f"no {kind} id starts with {given!r} in {mask_url(store.url)}; {hint}"
    )


def resolve_group_id(store: EventStore, group: str) -> str:
    """The full id of the worker group whose id is ``group`` or starts with it
    (:func:`resolve_id`; ``group`` may also be the group's stream id ``worker-group-<id>``).

    Raises:
        InvalidArgumentError: no group, or more than one, matches.
    """
    return resolve_id(
        store,
        group,
        stream_prefix=GROUP_STREAM_PREFIX,
        kind="worker group",
        hint="run `wgstore groups` (or `wgstore events`) to list them",
    )


def check_event_types(types: list[str], store: EventStore | None = None) -> list[str]:
    """``types`` if each is registered (or, given ``store``, stored in its log).

    A type this process does not know but the log holds (another program's own event type) is
    accepted: its events are shown raw.

    Raises:
        InvalidArgumentError: a name that is neither, with the names it may have meant.
    """
    known = REGISTRY.names()
    for name in types:
        if name not in known and (store is None or not _stored_type(store, name)):
            close = [k for k in known if name.lower() in k.lower()]
            hint = (
                f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(known)}"
            )
            raise InvalidArgumentError(f"{name!r} is not an event type{hint}")
    return types


def _stored_type(store: EventStore, name: str) -> bool:
    return any(True for _ in store.read_all(types=[name], limit=1))


def run_streams(store: EventStore, run_id: str) -> set[str]:
    """The streams of run ``run_id``: ``run-<id>`` and every worker group started for it."""
    streams = {run_stream(run_id)}
    for record in store.read_all(types=[type_name(WorkerGroupStartRequested)]):
        event = record.event
        if isinstance(event, WorkerGroupStartRequested) and event.run_id == run_id:
            streams.add(group_stream(event.group_id))
    if len(streams) == 1 and store.stream_version(run_stream(run_id)) == 0:
        raise StreamNotFoundError(
            f"no run {run_id!r} in the log (no run stream, no worker group of it)"
        )
    return streams


def stored_events(
    store: EventStore, streams: set[str] | None, types: list[str], head: int
) -> Iterator[RecordedEvent]:
    """The stored events up to ``head``, of ``streams`` (all when None)."""
    if streams is not None and len(streams) == 1:
        (stream,) = streams
        for record in store.read_stream(stream):
            if record.position <= head and (not types or record.type in types):
                yield record
        return
    for record in store.read_all(types=types or None):
        if record.position > head:
            return
        if streams is None or record.stream_id in streams:
            yield record


# ------------------------------------------------------------------------ read models


@dataclass(frozen=True, slots=True)
class ReadModelStatus:
    """Where the read models stand against the log."""

    checkpoint: int
    """Position of the last event the read models applied."""
    head: int
    """Position of the log's newest event."""
    behind: int
    """How many events past the checkpoint the read models have not seen."""
    rows: dict[str, int]
    """Rows per read-model table."""
    broken: list[tuple[str, str]]
    """``(group_id, reason)`` of each group whose stream the projector refused."""
    broken_runs: list[tuple[str, str]] = field(default_factory=list)
    """``(run_id, reason)`` of each run whose stream the projector refused."""


def _events_after(connection: sa.Connection, checkpoint: int) -> int:
    query = sa.select(sa.func.count()).select_from(wg_events)
    return int(connection.execute(query.where(wg_events.c.position > checkpoint)).scalar_one())


def read_model_status(store: EventStore) -> ReadModelStatus:
    """The checkpoint, how many events the read models have not seen, rows, refused streams."""
    checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    head = store.head()
    table = wg_worker_groups
    with translate_errors(store.url), store.engine.connect() as connection:
        behind = _events_after(connection, checkpoint)
        rows = {
            t.name: connection.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
            for t in READ_MODEL_TABLES
        }
        refused = sa.select(table.c.group_id, table.c.projection_error).where(
            table.c.projection_error.is_not(None)
        )
        broken = [(row.group_id, row.projection_error) for row in connection.execute(refused)]
        refused_runs = sa.select(wg_runs.c.run_id, wg_runs.c.projection_error).where(
            wg_runs.c.projection_error.is_not(None)
        )
        broken_runs = [(r.run_id, r.projection_error) for r in connection.execute(refused_runs)]
        connection.rollback()
    return ReadModelStatus(checkpoint, head, behind, rows, broken, broken_runs)


def _normalizers(table: sa.Table) -> list[Callable[[Any], Any]]:
    """Per column, a function that makes SQLite and Postgres values of it compare equal."""
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]

    def as_time(value: Any) -> Any:
        return to_utc(value) if isinstance(value, (str, datetime)) else value

    def as_json(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def as_bool(value: Any) -> Any:
        return None if value is None else bool(value)

    result: list[Callable[[Any], Any]] = []
    for column in table.columns:
        if isinstance(column.type, sa.DateTime):
            result.append(as_time)
        elif isinstance(column.type.dialect_impl(pg), postgresql.JSONB):
            result.append(as_json)
        elif isinstance(column.type, sa.Boolean):
            result.append(as_bool)
        else:
            result.append(lambda value: value)
    return result


def _keyed(table: sa.Table, rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    normalize = _normalizers(table)
    names = [column.name for column in table.columns]
    key_at = [names.index(column.name) for column in table.primary_key.columns]
    keyed = {}
    for row in rows:
        clean = tuple(fn(value) for fn, value in zip(normalize, row, strict=True))
        keyed[tuple(clean[i] for i in key_at)] = clean
    return keyed


def _compare(
    table: sa.Table, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]
) -> list[str]:
    names = [column.name for column in table.columns]
    have, want = _keyed(table, actual), _keyed(table, expected)
    problems = []
    for key in sorted(set(have) | set(want), key=str):
        label = f"{table.name} row {', '.join(map(str, key))}"
        if key not in have:
            problems.append(f"{label} is missing from the read model (a rebuild has it)")
        elif key not in want:
            problems.append(f"{label} is in the read model but not in a rebuild")
        else:
            for name, mine, theirs in zip(names, have[key], want[key], strict=True):
                if mine != theirs:
                    problems.append(
                        f"{label}: {name} is {mine!r} in the read model, {theirs!r} in a rebuild"
                    )
    if len(problems) > _MAX_PER_TABLE:
        problems = [
            *problems[:_MAX_PER_TABLE],
            f"{table.name}: ... and {len(problems) - _MAX_PER_TABLE} more",
        ]
    return problems


def read_model_problems(store: EventStore) -> tuple[list[str], int]:
    """Compare the read models with a rebuild from the log into a scratch SQLite file.

    The rebuild covers the events up to the read models' checkpoint, so read models that are
    merely behind the log are not a problem. The store itself is only read.

    Returns:
        The differences (empty when none) and how many events the read models are behind.
    """
    checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    with translate_errors(store.url), store.engine.connect() as connection:
        behind = _events_after(connection, checkpoint)
        connection.rollback()
    with tempfile.TemporaryDirectory(prefix="wgstore-verify-") as folder:
        scratch = EventStore.open(f"sqlite:///{Path(folder) / 'rebuild.db'}", synchronous="OFF")
        try:
            with scratch.engine.begin() as connection:
                batch: list[Any] = []
                for record in store.read_all(streams=PROJECTED_STREAMS):
                    if record.position > checkpoint:
                        break
                    batch.append(record)
                    if len(batch) == 500:
                        apply_read_model_batch(store, connection, batch)
                        batch = []
                if batch:
                    apply_read_model_batch(store, connection, batch)
                expected = read_model_rows(connection)
        finally:
            scratch.close()
    with translate_errors(store.url), store.engine.connect() as connection:
        actual = read_model_rows(connection)
        connection.rollback()
    problems: list[str] = []
    for table in READ_MODEL_TABLES:
        problems += _compare(table, actual[table.name], expected[table.name])
    return problems, behind


def unknown_types(store: EventStore, stream: str | None = None) -> dict[str, int]:
    """How many events of each stored type that is not registered here (all, or one stream's)."""
    query = sa.select(wg_events.c.event_type, sa.func.count()).group_by(wg_events.c.event_type)
    if stream is not None:
        query = query.where(wg_events.c.stream_id == stream)
    with translate_errors(store.url), store.engine.connect() as connection:
        rows = connection.execute(query).all()
        connection.rollback()
    known = set(REGISTRY.names())
    return {name: int(count) for name, count in sorted(rows) if name not in known}
