"""Read-side views of runs: what ``wgstore runs`` and ``wgstore report --run`` ask of the store.

- :func:`run_summaries`: one summary per run (state, attempts, failures used against the budget,
  latest checkpoint, orphaned), from the read model ``wg_runs`` when it is current with the log,
  else folded from the log.
- :func:`run_detail`: one run with every attempt (its group's status, outcome and failure, and the
  decision taken about it), every decision, transition and controller, folded from the log.
- :func:`resolve_run_id`: a run id from a unique prefix.

Orphaned is live state, not history: it joins the run with its lease (``wg_run_leases``) at
``now`` through :func:`~wgstore.projections.run_rows.orphaned`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore, RecordedEvent
from wgstore.events._translate import translate_errors
from wgstore.events.leases import Lease, lease_of, leases
from wgstore.events.run import RunCreated
from wgstore.events.schema import wg_runs
from wgstore.events.streams import RUN_STREAM_PREFIX, group_id_of
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION
from wgstore.projections.queries import run_state, worker_group_state
from wgstore.projections.run_rows import Attempt, attempt_of, order_attempts, orphaned, run_row
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import WorkerGroupState
from wgstore.projections.values import plain, to_utc
from wgstore.projections.views import iter_groups, resolve_id, run_streams

__all__ = [
    "RUN_SUMMARY_KEYS",
    "resolve_run_id",
    "run_detail",
    "run_summaries",
]

RUN_SUMMARY_KEYS = (
    "run_id",
    "name",
    "source",
    "status",
    "controller_state",
    "attempts",
    "current_group_id",
    "worker_group_failures",
    "max_failures",
    "start_failures",
    "controller_failure_limit",
    "preemption_failures",
    "max_preemption_failures",
    "latest_checkpoint",
    "checkpoint_committed_at",
    "latest_reported_checkpoint",
    "resumable",
    "not_resumable_reason",
    "orphaned",
    "lease_holder",
    "lease_expires_at",
    "created_at",
    "updated_at",
    "ended_at",
    "error",
    "abort_reason",
)
"""The keys of every run summary; a run whose stream cannot be folded has status ``UNREADABLE``
and the reason in ``error``."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _summary(row: Mapping[str, Any], lease: Lease | None, now: datetime) -> dict[str, Any]:
    """A summary from a ``wg_runs``-shaped row and the run's lease."""
    summary = {key: row.get(key) for key in RUN_SUMMARY_KEYS}
    for key in ("created_at", "updated_at", "ended_at", "checkpoint_committed_at"):
        summary[key] = to_utc(summary[key])
    summary["error"] = (
        f"{row['error_type']}: {row['error_message']}" if row.get("error_type") else None
    )
    summary["orphaned"] = orphaned(
        bool(row.get("needs_controller")), None if lease is None else lease.expires_at, now
    )
    summary["lease_holder"] = None if lease is None else lease.holder
    summary["lease_expires_at"] = None if lease is None else lease.expires_at
    return summary


def _unreadable(run_id: str, error: str) -> dict[str, Any]:
    summary: dict[str, Any] = dict.fromkeys(RUN_SUMMARY_KEYS)
    summary.update(run_id=run_id, status="UNREADABLE", error=error, orphaned=False)
    return summary


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


def _attempts_by_run(store: EventStore) -> dict[str, list[Attempt]]:
    found: dict[str, list[Attempt]] = {}
    for _group_id, state in iter_groups(store):
        if not isinstance(state, ProjectionError) and state.run_id:
            found.setdefault(state.run_id, []).append(attempt_of(state))
    return found


def summaries_from_log(store: EventStore, now: datetime) -> list[dict[str, Any]]:
    """One summary per run, folded from the log (always right, slower on a big log)."""
    runs = list(_iter_runs(store))
    if not runs:
        return []
    attempts = _attempts_by_run(store)
    held = leases(store)
    result = []
    for run_id, state in runs:
        if isinstance(state, ProjectionError):
            result.append(_unreadable(run_id, str(state)))
            continue
        row = run_row(state, order_attempts(state, attempts.get(run_id, [])))
        result.append(_summary(row, held.get(run_id), now))
    return result


def summaries_from_read_models(store: EventStore, now: datetime) -> list[dict[str, Any]] | None:
    """One summary per run from ``wg_runs``; None when the read models are behind the log."""
    if store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() < store.head():
        return None
    with translate_errors(store.url), store.engine.connect() as connection:
        rows = [dict(row) for row in connection.execute(sa.select(wg_runs)).mappings()]
        connection.rollback()
    held = leases(store)
    return [
        _unreadable(row["run_id"], row["projection_error"])
        if row["projection_error"] is not None
        else _summary(row, held.get(row["run_id"]), now)
        for row in rows
    ]


def run_summaries(
    store: EventStore, *, from_log: bool = False, now: datetime | None = None
) -> list[dict[str, Any]]:
    """One summary per run (keys :data:`RUN_SUMMARY_KEYS`), oldest first.

    Read from ``wg_runs`` when the read models are current with the log (and ``from_log`` is
    False), else folded from the log. ``orphaned`` is judged at ``now`` (default: the wall
    clock) against the run's lease.
    """
    now = now or datetime.now(UTC)
    summaries = None if from_log else summaries_from_read_models(store, now)
    if summaries is None:
        summaries = summaries_from_log(store, now)
    summaries.sort(key=lambda r: (r["created_at"] or _EPOCH, r["run_id"]))
    return summaries


def resolve_run_id(store: EventStore, run: str) -> str:
    """The full id of the run whose id is ``run`` or starts with it (or its stream id ``run-<id>``):
    :func:`wgstore.projections.views.resolve_id`, as for worker groups.

    A run is a run stream: a group started on its own (``WorkerGroup.create`` without a run)
    is not one.

    Raises:
        InvalidArgumentError: no run, or more than one, matches.
    """
    return resolve_id(
        store,
        run,
        stream_prefix=RUN_STREAM_PREFIX,
        kind="run",
        hint="run `wgstore runs` to list them",
    )


def run_detail(
    store: EventStore,
    run_id: str,
    now: datetime | None = None,
    *,
    group_state: Callable[[EventStore, str], WorkerGroupState] = worker_group_state,
) -> dict[str, Any]:
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
    now = now or datetime.now(UTC)
    state = run_state(store, run_id)
    group_ids = {group_id_of(sid) for sid in run_streams(store, run_id)} - {None}
    group_ids |= set(state.groups)
    attempts: list[Attempt] = []
    unreadable: dict[str, str] = {}
    for group_id in sorted(g for g in group_ids if g):
        try:
            attempts.append(attempt_of(group_state(store, group_id)))
        except StreamNotFoundError:
            continue  # named by the controller, no events yet: order_attempts adds it
        except ProjectionError as error:
            unreadable[group_id] = str(error)
    ordered = order_attempts(state, attempts)
    lease = lease_of(store, run_id)
    row = run_row(state, ordered)
    summary = _summary(row, lease, now)
    decisions = [
        {
            "version": d.version,
            "at": d.at,
            "group_id": d.group_id,
            "decision": d.decision,
            "failure_kind": d.failure_kind,
            "failures_so_far": d.failures_so_far,
            "limit": d.limit,
            "reason": d.reason,
            "errors": [
                {"world_rank": e.world_rank, "type": e.error.type, "message": e.error.message}
                for e in d.errors
            ],
        }
        for d in state.decisions
    ]
    rows = []
    for number, attempt in enumerate(ordered, start=1):
        item = plain(attempt)
        item["requested_at"] = attempt.requested_at
        item["number"] = number
        if attempt.group_id in unreadable:
            item.update(status="UNREADABLE", error=unreadable[attempt.group_id])
        item["decisions"] = [d for d in decisions if d["group_id"] == attempt.group_id]
        rows.append(item)
    return {
        "run": {
            **summary,
            "num_workers": row["num_workers"],
            "resources_per_worker": row["resources_per_worker"],
            "train_fn": row["train_fn"],
            "final_group_id": row["final_group_id"],
            "failed_ranks": row["failed_ranks"],
            "lease_s": row["lease_s"],
            "ray": row["ray"],
            "version": state.version,
        },
        "attempts": rows,
        "decisions": decisions,
        "transitions": [
            {
                "version": t.version,
                "at": t.at,
                "from_state": t.from_state,
                "to_state": t.to_state,
                "reason": t.reason,
                "group_id": t.group_id,
            }
            for t in state.transitions
        ],
        "controllers": [
            {
                "version": c.version,
                "at": c.at,
                "controller_id": c.controller_id,
                "host": c.host,
                "pid": c.pid,
                "resumed": c.resumed,
            }
            for c in state.controllers
        ],
        "resumes": [{"by": r.by, "reason": r.reason, "attempt": r.attempt} for r in state.resumes],
    }
