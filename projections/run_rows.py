"""A run as rows: its ``wg_runs`` row and ``wg_run_decisions`` rows, from its state and attempts.

Pure: no I/O, no clock. The projector, the CLI and the tests all build a run's summary here, so
the SQL read model, ``wgstore runs`` and ``project_run`` cannot disagree.

A run's attempts are the worker groups of the run: those whose ``WorkerGroupStartRequested``
names the run (``run_id``) and those the run's controller named (:attr:`RunState.groups`), ordered
by when they were requested. The run's latest checkpoint is the latest one committed over its
attempts (every rank of the attempt reported it; a retry's context carries it as
``resume_checkpoint``); ``latest_reported_checkpoint`` is the latest any rank reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from wgstore.events.run import FailureKind
from wgstore.projections.event_time import RAY_EXPORT_SOURCE, RAY_TRAIN_SOURCE
from wgstore.projections.run_state import (
    RunState,
    lease_lapsed,
    needs_controller,
    resume_problem,
)
from wgstore.projections.state import WorkerGroupState
from wgstore.projections.table_rows import RunDecisionsRow, RunResizesRow, RunsRow
from wgstore.projections.values import plain, to_utc

__all__ = [
    "RUN_SOURCES",
    "Attempt",
    "attempt_of",
    "decision_rows",
    "latest_checkpoint",
    "needs_controller",
    "order_attempts",
    "orphaned",
    "resize_rows",
    "run_row",
    "run_source",
]

RUN_SOURCES = ("wgstore", RAY_TRAIN_SOURCE, RAY_EXPORT_SOURCE)
"""Who ran a run: wgstore's own controller, or Ray Train's (recorded by ``RecordingCallback``)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt of a run: one worker group, as far as the run's listings need it.

    ``status`` is ``None`` for a group the controller named whose stream holds no events (yet).
    """

    group_id: str
    attempt: int | None = None
    status: str | None = None
    outcome: str | None = None
    requested_at: datetime | None = None
    latest_checkpoint: str | None = None
    """The attempt's committed checkpoint (every rank reported it)."""
    checkpoint_committed_at: datetime | None = None
    latest_reported_checkpoint: str | None = None
    """The latest checkpoint any rank of the attempt reported, committed or not."""
    error: str | None = None
    num_workers: int | None = None
    """The attempt's size (an elastic run's attempts differ)."""


def attempt_of(state: WorkerGroupState) -> Attempt:
    """The attempt that a worker group's folded state is."""
    outcome = state.outcome
    error = state.error
    return Attempt(
        group_id=state.group_id,
        attempt=state.attempt,
        status=state.status.value,
        outcome=None if outcome is None else outcome.value,
        requested_at=to_utc(state.requested_at),
        latest_checkpoint=state.latest_checkpoint,
        checkpoint_committed_at=to_utc(state.checkpoint_committed_at),
        latest_reported_checkpoint=state.latest_reported_checkpoint,
        error=None if error is None else str(error),
        num_workers=state.context.num_workers,
    )


def order_attempts(run: RunState, attempts: Iterable[Attempt]) -> list[Attempt]:
    """Every attempt of ``run``: ``attempts`` plus the groups the run named without one, in order.

    Ordered by request time, then by the order the controller named them, then by id; a group
    with no events (no request time) goes last.
    """
    found = {attempt.group_id: attempt for attempt in attempts}
    for group_id in run.groups:
        found.setdefault(group_id, Attempt(group_id=group_id))
    named = {group_id: index for index, group_id in enumerate(run.groups)}

    def key(attempt: Attempt) -> tuple[bool, datetime, float, str]:
        at = to_utc(attempt.requested_at)
        return (
            at is None,
            at or _EPOCH,
            named.get(attempt.group_id, math.inf),
            attempt.group_id,
        )

    return sorted(found.values(), key=key)


def latest_checkpoint(attempts: Sequence[Attempt]) -> str | None:
    """The latest committed checkpoint over ``attempts`` (in order): the last one that has one."""
    committed = _committed(attempts)
    return None if committed is None else committed.latest_checkpoint


def _committed(attempts: Sequence[Attempt]) -> Attempt | None:
    for attempt in reversed(attempts):
        if attempt.latest_checkpoint is not None:
            return attempt
    return None


def _latest_reported(attempts: Sequence[Attempt]) -> str | None:
    for attempt in reversed(attempts):
        if attempt.latest_reported_checkpoint is not None:
            return attempt.latest_reported_checkpoint
    return None


def run_source(run: RunState) -> str:
    """``wgstore`` for a run of wgstore's controller, ``ray_train`` for one recorded from Ray Train
    by the callback, ``ray_export`` for one read from Ray's export events."""
    if run.context is not None:
        return "wgstore"
    return RAY_EXPORT_SOURCE if run.source == RAY_EXPORT_SOURCE else RAY_TRAIN_SOURCE


def orphaned(needs: bool, lease_expires_at: datetime | None, now: datetime) -> bool:
    """:func:`~wgstore.projections.run_state.is_orphaned` for a summary row.

    ``needs`` is the row's ``needs_controller`` (:func:`needs_controller` of the run);
    ``lease_expires_at`` the run's ``wg_run_leases.expires_at`` (``None`` when no row).
    """
    return needs and lease_lapsed(lease_expires_at, now)


def run_row(run: RunState, attempts: Sequence[Attempt]) -> RunsRow:
    """The ``wg_runs`` row of ``run`` (JSON columns as plain data), given its ordered attempts.

    ``attempts`` come from :func:`order_attempts`. ``projection_error`` is ``None``: the caller
    sets it when the fold stopped early.
    """
    scaling = run.scaling_config
    context = run.context
    failure = run.failure_config
    if scaling is not None:
        num_workers: int | None = scaling.num_workers
        resources: dict[str, float] | None = scaling.resources
    elif context is not None:
        num_workers, resources = context.num_workers, dict(context.resources_per_worker)
    else:
        num_workers, resources = None, None
    error = run.error
    last = run.decisions[-1] if run.decisions else None
    current = run.current_group_id or (attempts[-1].group_id if attempts else None)
    current_workers, desired_workers = _sizes(run, attempts, num_workers)
    committed = _committed(attempts)
    problem = resume_problem(run)
    return {
        "run_id": run.run_id,
        "stream_id": run.stream_id,
        "name": run.name,
        "source": run_source(run),
        "status": run.status.value,
        "controller_state": run.controller_state.value,
        "attempts": len(attempts),
        "current_group_id": current,
        "final_group_id": run.final_group_id,
        "worker_group_failures": run.failures_of(FailureKind.WORKER_GROUP),
        "start_failures": run.failures_of(FailureKind.START),
        "preemption_failures": run.failures_of(FailureKind.PREEMPTION),
        "max_failures": failure.max_failures,
        "controller_failure_limit": failure.controller_failure_limit,
        "max_preemption_failures": failure.max_preemption_failures,
        "last_decision": None if last is None else last.decision,
        "latest_checkpoint": None if committed is None else committed.latest_checkpoint,
        "checkpoint_committed_at": None if committed is None else committed.checkpoint_committed_at,
        "latest_reported_checkpoint": _latest_reported(attempts),
        "resumable": problem is None,
        "not_resumable_reason": problem,
        "num_workers": num_workers,
        "min_workers": None if scaling is None else scaling.min_workers,
        "current_workers": current_workers,
        "desired_workers": desired_workers,
        "resources_per_worker": None if resources is None else plain(resources),
        "train_fn": None if context is None else context.train_fn,
        "controllers": len(run.controllers),
        "needs_controller": needs_controller(run),
        "lease_s": run.lease_s,
        "created_at": to_utc(run.created_at),
        "ended_at": to_utc(run.ended_at),
        "error_type": None if error is None else error.type,
        "error_message": None if error is None else error.message,
        "failed_ranks": [
            {"world_rank": e.world_rank, "type": e.error.type, "message": e.error.message}
            for e in run.errors
        ],
        "abort_reason": run.abort_reason,
        "ray": plain(dict(run.ray)),
        "stream_version": run.version,
        "last_position": run.position,
        "updated_at": to_utc(run.updated_at),
        "projection_error": None,
    }


_HOLDING = frozenset({"STARTING", "RUNNING", "SHUTTING_DOWN"})
"""Attempt statuses whose workers hold resources."""


def _sizes(
    run: RunState, attempts: Sequence[Attempt], num_workers: int | None
) -> tuple[int, int | None]:
    """``(current, desired)`` workers: those of the attempt holding resources now (0: none), and
    the size the controller wants (the latest scaling decision's, or the run's size; ``None``
    once the run ended)."""
    holding = [a for a in attempts if a.status in _HOLDING]
    current = holding[-1].num_workers or 0 if holding else 0
    if run.ended:
        return current, None
    decided = run.scaling_decisions[-1].num_workers if run.scaling_decisions else num_workers
    return current, decided


def resize_rows(run: RunState) -> list[RunResizesRow]:
    """The ``wg_run_resizes`` rows of ``run``: one per ``ScalingDecisionMade``, in order."""
    return [
        {
            "run_id": run.run_id,
            "stream_version": decision.version,
            "group_id": decision.group_id,
            "num_workers": decision.num_workers,
            "previous_workers": decision.previous_workers,
            "cause": decision.cause,
            "reason": decision.reason,
            "decided_at": to_utc(decision.at),
        }
        for decision in run.scaling_decisions
    ]


def decision_rows(run: RunState) -> list[RunDecisionsRow]:
    """The ``wg_run_decisions`` rows of ``run``: one per ``FailureDecisionMade``, in order."""
    return [
        {
            "run_id": run.run_id,
            "stream_version": decision.version,
            "group_id": decision.group_id,
            "decision": decision.decision,
            "failure_kind": decision.failure_kind,
            "failures_so_far": decision.failures_so_far,
            "failure_limit": decision.limit,
            "reason": decision.reason,
            "errors": [
                {"world_rank": e.world_rank, "type": e.error.type, "message": e.error.message}
                for e in decision.errors
            ],
            "decided_at": to_utc(decision.at),
        }
        for decision in run.decisions
    ]
