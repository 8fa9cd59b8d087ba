"""Read-side views of runs: what ``wgstore runs`` and ``wgstore report --run`` ask of the store.

- :func:`run_summaries`: one summary per run (state, attempts, failures used against the budget,
  latest checkpoint, orphaned), from the read model ``wg_runs`` with what it has not caught up
  on folded from the log (:mod:`wgstore.projections.behind`).
- :func:`run_detail`: one run with every attempt (its group's status, outcome and failure, and the
  decision taken about it), every decision, transition and controller, folded from the log.
- :func:`resolve_run_id`: a run id from a unique prefix.

Orphaned is live state, not history: it joins the run with its lease (``wg_run_leases``) at
``now`` through :func:`~wgstore.projections.run_rows.orphaned`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore, RecordedEvent
from wgstore.events._translate import translate_errors
from wgstore.events.archive_log import archived_run_ids
from wgstore.events.errors import InvalidArgumentError
from wgstore.events.leases import Lease, lease_of, leases
from wgstore.events.ray_cluster import (
    JOB_STREAM_PREFIX,
    RayJobEnded,
    RayJobStarted,
    RayNodeDied,
    RayNodeStarted,
    node_stream,
)
from wgstore.events.run import RunCreated
from wgstore.events.schema import wg_run_leases, wg_runs, wg_worker_groups
from wgstore.events.streams import RUN_STREAM_PREFIX, group_id_of, run_stream
from wgstore.projections._db import reading
from wgstore.projections.behind import Behind, read_with_lag, with_lag
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.event_time import event_time
from wgstore.projections.projector import ATTEMPT_COLUMNS, attempt_of_row, fold_run
from wgstore.projections.queries import run_state, worker_group_state
from wgstore.projections.rows import (
    UNREADABLE,
    AttemptRow,
    ControllerRow,
    DecisionRow,
    FailedRank,
    NodeLossRow,
    PreemptionRow,
    RayJobRow,
    ResizeRow,
    ResumeRow,
    RunDetail,
    RunInfo,
    RunSummary,
    TransitionRow,
)
from wgstore.projections.run_rows import Attempt, attempt_of, order_attempts, orphaned, run_row
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import WorkerGroupState
from wgstore.projections.table_rows import RunsRow, RunSummaryRow
from wgstore.projections.values import to_utc
from wgstore.projections.views import (
    current_summaries,
    iter_groups,
    resolve_id,
    run_streams,
)

__all__ = [
    "RUN_SUMMARY_KEYS",
    "detail_of",
    "resolve_run_id",
    "run_detail",
    "run_summaries",
]

RUN_SUMMARY_KEYS = tuple(f.name for f in fields(RunSummary))
"""The keys of every run summary's JSON (the fields of
:class:`~wgstore.projections.rows.RunSummary`); a run whose stream cannot be folded has status
``UNREADABLE`` and the reason in ``error``."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _summary_fields(row: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The fields of a run summary from a ``wg_runs``-shaped row with its lease's
    ``lease_holder`` and ``lease_expires_at`` (None: no lease; :func:`_with_lease`) and its
    groups' latest ``groups_updated_at`` (None: no group).

    ``updated_at`` is the latest event of the run in any of its streams (a report moves it);
    an ended run has no lease (a lease row its holder left behind grants nothing)."""
    error = row.get("error_type")
    expires_at = to_utc(row.get("lease_expires_at"))
    ended_at = to_utc(row.get("ended_at"))
    return {
        **{key: row.get(key) for key in RUN_SUMMARY_KEYS},
        "created_at": to_utc(row.get("created_at")),
        "updated_at": _latest(row.get("updated_at"), row.get("groups_updated_at")),
        "ended_at": ended_at,
        "checkpoint_committed_at": to_utc(row.get("checkpoint_committed_at")),
        "error": f"{error}: {row['error_message']}" if error else None,
        "failed_ranks": _failed_ranks(row.get("failed_ranks")),
        "orphaned": orphaned(bool(row.get("needs_controller")), expires_at, now),
        "lease_holder": None if ended_at else row.get("lease_holder"),
        "lease_expires_at": None if ended_at else expires_at,
    }


def _failed_ranks(value: list[dict[str, Any]] | str | None) -> tuple[FailedRank, ...]:
    """``wg_runs.failed_ranks`` (JSON text as SQLite's raw row has it) as rows."""
    ranks = json.loads(value) if isinstance(value, str) else value
    return tuple(FailedRank(**failed) for failed in ranks or ())


def _latest(*moments: datetime | str | None) -> datetime | None:
    """The latest of ``moments`` (as UTC), None when there is none."""
    known = [moment for moment in (to_utc(m) for m in moments) if moment is not None]
    return max(known, default=None)


def _summary_row(row: RunsRow, groups_updated_at: datetime | None) -> RunSummaryRow:
    """``row`` with its groups' latest ``groups_updated_at`` (and no lease until
    :func:`_with_lease`)."""
    return {
        **row,
        "groups_updated_at": groups_updated_at,
        "lease_holder": None,
        "lease_expires_at": None,
    }


def _with_lease(row: RunSummaryRow, lease: Lease | None) -> RunSummaryRow:
    """``row`` with the holder and expiry of ``lease`` (the run's, or None)."""
    row["lease_holder"] = None if lease is None else lease.holder
    row["lease_expires_at"] = None if lease is None else lease.expires_at
    return row


def _summary(row: Mapping[str, Any], now: datetime) -> RunSummary:
    """A summary from a ``wg_runs``-shaped row with its lease's holder and expiry."""
    return RunSummary(**_summary_fields(row, now))


def _run_records(store: EventStore, stream_id: str) -> list[RecordedEvent] | None:
    """The events of a ``run-*`` stream, or None when it is not a run (no RunCreated first)."""
    records = list(store.read_stream(stream_id))
    if not records or not isinstance(records[0].event, RunCreated):
        return None
    return records


def _iter_runs(store: EventStore) -> Iterator[tuple[str, RunState | ProjectionError]]:
    for stream_id, _version in store.streams(RUN_STREAM_PREFIX):
        records = _run_records(store, stream_id)
        if records is None:
            continue
        run_id = stream_id[len(RUN_STREAM_PREFIX) :]
        try:
            yield run_id, project_run(records)
        except ProjectionError as error:
            yield run_id, error


def _attempts_by_run(store: EventStore) -> dict[str, list[tuple[Attempt, datetime]]]:
    """Each run's attempts (the groups started for it) with the time of each one's last event."""
    found: dict[str, list[tuple[Attempt, datetime]]] = {}
    for _group_id, state in iter_groups(store):
        if not isinstance(state, ProjectionError) and state.run_id:
            found.setdefault(state.run_id, []).append((attempt_of(state), state.updated_at))
    return found


def summaries_from_log(store: EventStore, now: datetime) -> list[RunSummary]:
    """One summary per run, folded from the log (always right, slower on a big log)."""
    runs = list(_iter_runs(store))
    if not runs:
        return []
    attempts = _attempts_by_run(store)
    held = leases(store)
    result = []
    for run_id, state in runs:
        if isinstance(state, ProjectionError):
            result.append(RunSummary.unreadable(run_id, str(state)))
            continue
        groups = attempts.get(run_id, [])
        row = _summary_row(
            run_row(state, order_attempts(state, [attempt for attempt, _ in groups])),
            _latest(*(at for _, at in groups)),
        )
        result.append(_summary(_with_lease(row, held.get(run_id)), now))
    return result


def summaries_from_read_models(
    store: EventStore, now: datetime, behind: Behind | None = None
) -> list[RunSummary] | None:
    """One summary per run from ``wg_runs`` and each run's lease (``wg_run_leases``), with the
    runs whose stream or groups moved after the read models' checkpoint folded again
    (:mod:`wgstore.projections.behind`); None when the read models are too far behind for that
    (then fold the log).

    Without ``behind``, the rows and the read models' lag are read in one statement
    (:func:`~wgstore.projections.behind.with_lag`); with it, the rows alone.
    """
    with reading(store) as connection:
        if behind is None:
            behind, found = read_with_lag(connection, _runs_with_lag())
        else:
            found = [tuple(row) for row in connection.execute(_runs_query())]
    if behind is None:
        return None
    keys = _runs_query().selected_columns.keys()
    rows: dict[str, Mapping[str, Any]] = {
        row["run_id"]: row for row in (dict(zip(keys, values, strict=True)) for values in found)
    }
    if not behind.current:
        moved = _moved_run_rows(store, behind, rows)
        if moved:
            held = leases(store)  # the moved runs' leases, the runs new to the read models' too
            rows.update(
                {run_id: _with_lease(row, held.get(run_id)) for run_id, row in moved.items()}
            )
    return [
        RunSummary.unreadable(row["run_id"], row["projection_error"])
        if row["projection_error"] is not None
        else _summary(row, now)
        for row in rows.values()
    ]


_ROW_COLUMNS = (*RUN_SUMMARY_KEYS, "error_type", "error_message", "needs_controller")


@cache
def _runs_query() -> sa.Select[Any]:
    """Each run's ``wg_runs`` columns a summary shows, with its lease's holder and expiry and
    the latest ``updated_at`` of the groups started for it (index ``(run_id, attempt)``): a
    report moves its group's row, not the run's."""
    leases = wg_run_leases
    groups = wg_worker_groups
    groups_updated_at = (
        sa.select(sa.func.max(groups.c.updated_at))
        .where(groups.c.run_id == wg_runs.c.run_id)
        .scalar_subquery()
    )
    return sa.select(
        *(column for column in wg_runs.c if column.name in _ROW_COLUMNS),
        wg_runs.c.projection_error,
        leases.c.holder.label("lease_holder"),
        leases.c.expires_at.label("lease_expires_at"),
        groups_updated_at.label("groups_updated_at"),
    ).outerjoin_from(wg_runs, leases, leases.c.run_id == wg_runs.c.run_id)


@cache
def _runs_with_lag() -> sa.Select[Any]:
    return with_lag(_runs_query())


def _moved_run_rows(
    store: EventStore, behind: Behind, rows: Mapping[str, Mapping[str, Any]]
) -> dict[str, RunSummaryRow]:
    """The ``wg_runs`` rows of the runs the read models have not caught up on (their stream or
    one of their groups moved), computed as the projector computes them: the run's stream
    folded, its attempts from ``wg_worker_groups`` and the moved groups folded again."""
    moved_groups: dict[str, WorkerGroupState] = {}
    for group_id in behind.group_ids:
        try:
            moved_groups[group_id] = behind.group_state(store, group_id)
        except (ProjectionError, StreamNotFoundError):
            continue  # a group the fold refuses counts for no run, as in the read models
    run_ids = set(behind.run_ids) | {s.run_id for s in moved_groups.values() if s.run_id}
    states: dict[str, tuple[RunState, str | None]] = {}
    for run_id in sorted(run_ids):
        known = rows.get(run_id)
        if known is not None and known["projection_error"] is not None:
            continue  # refused earlier: left as the read models have it, until a rebuild
        records = _run_records(store, run_stream(run_id))
        if records is not None:
            states[run_id] = fold_run(records)
    if not states:
        return {}
    table = wg_worker_groups
    named = {group_id for state, _ in states.values() for group_id in state.groups}
    query = sa.select(*ATTEMPT_COLUMNS, table.c.updated_at).where(
        sa.or_(table.c.run_id.in_(states), table.c.group_id.in_(named)),
        table.c.projection_error.is_(None),
    )
    with translate_errors(store.url), store.engine.connect() as connection:
        group_rows = list(connection.execute(query))
        connection.rollback()
    result = {}
    for run_id, (state, error) in states.items():
        mine = set(state.groups)
        attempts = [
            attempt_of_row(row)
            for row in group_rows
            if (row.run_id == run_id or row.group_id in mine)
            and row.group_id not in behind.group_ids
        ]
        attempts += [
            attempt_of(group)
            for group_id, group in moved_groups.items()
            if group.run_id == run_id or group_id in mine
        ]
        row = run_row(state, order_attempts(state, attempts))
        row["projection_error"] = error
        result[run_id] = _summary_row(
            row,
            _latest(
                *(
                    r.updated_at
                    for r in group_rows
                    if r.run_id == run_id and r.group_id not in behind.group_ids
                ),
                *(g.updated_at for g in moved_groups.values() if g.run_id == run_id),
            ),
        )
    return result


def run_summaries(
    store: EventStore,
    *,
    from_log: bool = False,
    now: datetime | None = None,
    behind: Behind | None = None,
) -> list[RunSummary]:
    """One summary per run (:class:`~wgstore.projections.rows.RunSummary`), oldest first.

    Read from ``wg_runs``, the runs the read models have not caught up on folded from the log
    (:mod:`wgstore.projections.behind`), unless ``from_log`` or the read models are too far
    behind: then every run is folded from the log
    (:func:`~wgstore.projections.views.current_summaries`, as for groups). ``orphaned`` is judged at ``now`` (default: the wall clock) against the run's
    lease.
    """
    at = now or datetime.now(UTC)
    return current_summaries(
        lambda: summaries_from_read_models(store, at, behind),
        lambda: summaries_from_log(store, at),
        log_only=from_log,
        order=lambda r: (r.created_at or _EPOCH, r.run_id),
    )


def resolve_run_id(store: EventStore, run: str, *, archived: bool = False) -> str:
    """The full id of the run whose id is ``run`` or starts with it (or its stream id ``run-<id>``):
    :func:`wgstore.projections.views.resolve_id`, as for worker groups.

    A run is a run stream: a group started on its own (``WorkerGroup.create`` without a run)
    is not one. With ``archived``, a run whose events are in the archive is one too (its id,
    or a prefix no live run shares: one archive query); without it, an archived run's id is
    refused with the batch that holds it.

    Raises:
        InvalidArgumentError: no run, or more than one, matches.
    """
    missing: InvalidArgumentError | None = None
    try:
        live: str | None = resolve_id(
            store,
            run,
            stream_prefix=RUN_STREAM_PREFIX,
            kind="run",
            hint="run `wgstore runs` to list them",
        )
    except InvalidArgumentError as error:
        if not str(error).startswith("no run id starts with"):
            raise  # a blank id, or a prefix of several live runs
        live, missing = None, error
    given = run.strip()
    candidates = [given]
    if given.startswith(RUN_STREAM_PREFIX) and given != RUN_STREAM_PREFIX:
        candidates.append(given[len(RUN_STREAM_PREFIX) :])
    if live is not None and (not archived or live in candidates):
        return live  # a live run of that very id; without ``archived``, of a unique prefix too
    batches = archived_run_ids(store)
    exact = next((c for c in candidates if c in batches), None)
    if exact is not None and archived:
        return exact
    if not archived:
        if exact is not None:
            raise InvalidArgumentError(
                f"no run id starts with {given!r} in the live log: run {exact!r} is archived "
                f"(batch {batches[exact]}); `wgstore runs {exact}` shows it, `wgstore restore "
                f"{exact}` puts it back"
            )
        raise missing or InvalidArgumentError(f"no run id starts with {given!r}")
    found = ([live] if live is not None else []) + sorted(
        {r for r in batches for c in candidates if r.startswith(c)}
    )
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise InvalidArgumentError(
            f"{given!r} matches {len(found)} runs, live or archived ({shown}); give more of the id"
        )
    if found:
        return found[0]
    raise missing or InvalidArgumentError(f"no run id starts with {given!r}")


def run_detail(
    store: EventStore,
    run_id: str,
    now: datetime | None = None,
    *,
    group_state: Callable[[EventStore, str], WorkerGroupState] = worker_group_state,
) -> RunDetail:
    """One run folded from the log: its summary, its attempts, decisions, transitions, controllers.

    Each attempt holds its group's status, outcome, failure (``error``) and the decisions taken
    about it (``decisions``: RETRY / RAISE with the failure kind and the count against the limit).

    ``group_state(store, group_id)`` gives each group's state (default:
    :func:`~wgstore.projections.worker_group_state`); a caller that folds the groups anyway
    passes its own, so each stream is folded once (``wgstore serve``, the run report).

    Raises:
        StreamNotFoundError: no run ``run_id``.
        ProjectionError: the run stream cannot be folded.
    """
    state = run_state(store, run_id)
    group_ids = {group_id_of(sid) for sid in run_streams(store, run_id)}
    return detail_of(
        store,
        run_id,
        state,
        {g for g in group_ids if g} | set(state.groups),
        lambda group_id: group_state(store, group_id),
        lease=lease_of(store, run_id),
        now=now,
    )


def detail_of(
    store: EventStore,
    run_id: str,
    state: RunState,
    group_ids: Iterable[str],
    group_state: Callable[[str], WorkerGroupState],
    *,
    lease: Lease | None,
    now: datetime | None = None,
) -> RunDetail:
    """The :class:`~wgstore.projections.rows.RunDetail` of a run folded into ``state``, its
    groups ``group_ids`` each given by ``group_state(group_id)`` (raising
    :class:`StreamNotFoundError` for a group with no events, :class:`ProjectionError` for one
    that cannot be folded), and its ``lease``: :func:`run_detail` of the live log, and of an
    archived run's events (:mod:`wgstore.projections.archived_views`). ``store`` is read for
    what Ray's export recorded beside the run (its driver job, the nodes it lost)."""
    now = now or datetime.now(UTC)
    attempts: list[Attempt] = []
    unreadable: dict[str, str] = {}
    groups_updated_at: list[datetime] = []
    groups_on: dict[str, list[tuple[str, datetime | None]]] = {}  # node -> groups, their end
    for group_id in sorted(g for g in group_ids if g):
        try:
            group = group_state(group_id)
        except StreamNotFoundError:
            continue  # named by the controller, no events yet: order_attempts adds it
        except ProjectionError as error:
            unreadable[group_id] = str(error)
            continue
        attempts.append(attempt_of(group))
        ended = group.updated_at if group.status.is_terminal else None
        for node_id in dict.fromkeys(w.node_id for w in group.workers if w.node_id):
            groups_on.setdefault(node_id, []).append((group_id, ended))
        if group.run_id == run_id:
            groups_updated_at.append(group.updated_at)
    ordered = order_attempts(state, attempts)
    row = _summary_row(run_row(state, ordered), _latest(*groups_updated_at))
    decisions = tuple(
        DecisionRow(
            version=d.version,
            at=d.at,
            group_id=d.group_id,
            decision=d.decision,
            failure_kind=d.failure_kind,
            failures_so_far=d.failures_so_far,
            limit=d.limit,
            reason=d.reason,
            errors=tuple(
                FailedRank(world_rank=e.world_rank, type=e.error.type, message=e.error.message)
                for e in d.errors
            ),
        )
        for d in state.decisions
    )
    rows = []
    for number, attempt in enumerate(ordered, start=1):
        broken = unreadable.get(attempt.group_id)
        if broken is not None:
            attempt = replace(attempt, status=UNREADABLE, error=broken)
        rows.append(
            AttemptRow(
                **{f.name: getattr(attempt, f.name) for f in fields(attempt)},
                number=number,
                decisions=tuple(d for d in decisions if d.group_id == attempt.group_id),
            )
        )
    info = RunInfo(
        **_summary_fields(_with_lease(row, lease), now),
        num_workers=row["num_workers"],
        resources_per_worker=row["resources_per_worker"],
        train_fn=row["train_fn"],
        final_group_id=row["final_group_id"],
        lease_s=row["lease_s"],
        ray=row["ray"] or {},  # run_row always has it
        version=state.version,
    )
    return RunDetail(
        run=info,
        attempts=tuple(rows),
        decisions=decisions,
        transitions=tuple(
            TransitionRow(
                version=t.version,
                at=t.at,
                from_state=t.from_state,
                to_state=t.to_state,
                reason=t.reason,
                group_id=t.group_id,
            )
            for t in state.transitions
        ),
        controllers=tuple(
            ControllerRow(
                version=c.version,
                at=c.at,
                controller_id=c.controller_id,
                host=c.host,
                pid=c.pid,
                resumed=c.resumed,
            )
            for c in state.controllers
        ),
        resumes=tuple(
            ResumeRow(by=r.by, reason=r.reason, attempt=r.attempt) for r in state.resumes
        ),
        resizes=tuple(
            ResizeRow(
                version=d.version,
                at=d.at,
                group_id=d.group_id,
                num_workers=d.num_workers,
                previous_workers=d.previous_workers,
                cause=d.cause,
                reason=d.reason,
            )
            for d in state.scaling_decisions
        ),
        preemptions=tuple(
            PreemptionRow(
                version=p.version,
                at=p.at,
                group_id=p.group_id,
                nodes=p.nodes,
                ranks=p.ranks,
                deadline=p.deadline,
            )
            for p in state.preemptions
        ),
        nodes_lost=_nodes_lost(store, groups_on),
        ray_job=_ray_job(store, state),
    )


def _ms(value: int) -> datetime | None:
    return datetime.fromtimestamp(value / 1000, tz=UTC) if value else None


def _ray_job(store: EventStore, state: RunState) -> RayJobRow | None:
    """The driver job of a run recorded from Ray (its ``ray.job_id``), from the job's stream
    (``wgstore ingest ray-export``): of the jobs of that id (one per cluster, or cluster start;
    each stream is named by the job's start), the last that started before the run did, so one
    stream is read however many clusters had a job of that id."""
    job_id = str(state.ray.get("job_id") or "")
    if not job_id:
        return None
    prefix = f"{JOB_STREAM_PREFIX}{job_id}-"
    run_started_ns = state.ray.get("start_time_ns")
    starts = []
    for stream_id, _ in store.streams(prefix):
        start = stream_id[len(prefix) :]
        if start.isdigit() and (
            not isinstance(run_started_ns, int) or int(start) * 1_000_000 <= run_started_ns
        ):
            starts.append(int(start))
    if not starts:
        return None
    records = list(store.read_stream(f"{prefix}{max(starts)}"))
    job = next((r.event for r in records if isinstance(r.event, RayJobStarted)), None)
    ended = next((r.event for r in records if isinstance(r.event, RayJobEnded)), None)
    if job is None:
        return None
    return RayJobRow(
        job_id=job_id,
        entrypoint=job.entrypoint,
        driver_ip=job.driver_ip,
        driver_pid=job.driver_pid,
        started_at=_ms(job.start_time_ms),
        ended_at=_ms(ended.end_time_ms) if ended is not None else None,
    )


_NODE_LOSS_SLACK = timedelta(seconds=2)
"""How long after an attempt ended a node's death still counts as the attempt's (Ray's nodes'
clocks and the export's are not one clock)."""


def _nodes_lost(
    store: EventStore, groups_on: Mapping[str, list[tuple[str, datetime | None]]]
) -> tuple[NodeLossRow, ...]:
    """The nodes under the run's workers that Ray reported dead while an attempt had workers on
    them (``ray-node-*`` streams, written by ``wgstore ingest ray-export``), in the order they
    died; a node that died after the attempts on it ended (the cluster torn down) is not one."""
    lost = []
    for node_id, group_ids in groups_on.items():
        stream = node_stream(node_id)
        if not store.stream_version(stream):  # (one indexed query a node under the run)
            continue
        records = list(store.read_stream(stream))
        started = next((r.event for r in records if isinstance(r.event, RayNodeStarted)), None)
        for record in records:
            died = record.event
            if isinstance(died, RayNodeDied):
                at = (
                    datetime.fromtimestamp(died.end_time_ms / 1000, tz=UTC)
                    if died.end_time_ms
                    else event_time(record)
                )
                hit = tuple(
                    g for g, end in group_ids if end is None or at <= end + _NODE_LOSS_SLACK
                )
                if not hit:
                    continue
                lost.append(
                    NodeLossRow(
                        at=at,
                        node_id=node_id,
                        node_ip=started.node_ip if started is not None else "",
                        reason=died.reason,
                        message=died.reason_message,
                        group_ids=hit,
                    )
                )
    return tuple(sorted(lost, key=lambda row: row.at))
