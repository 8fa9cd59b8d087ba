"""The run controller's decisions, as a pure function: ``decide(run, group, now) -> Decision``.

No I/O, no clock of its own, no Ray. The controller loop (:mod:`wgstore.orchestration.run.controller`)
reads the run stream and the stream of the run's current worker group, calls :func:`decide`, and
appends what it returns; then it waits for the log to move and calls it again. One call makes
one step (Ray Train's ``_step``); a step that finds nothing to do returns an empty decision.

States and steps (Ray Train 2.60's controller state names)::

    INITIALIZING ──► SCHEDULING (attempt 1 requested)
    (RE)SCHEDULING ─► RUNNING          once the attempt's training launched
                   └► RESTARTING / SHUTTING_DOWN   its start failed (FailureDecisionMade)
    RUNNING ──► SHUTTING_DOWN (every worker finished: the group is shut down)
            └─► RESTARTING  (a worker failed, budget left: RETRY, the group is shut down)
            └─► SHUTTING_DOWN (a worker failed, budget exhausted: RAISE)
    RESTARTING ─► RESCHEDULING (the failed attempt released: next attempt requested, from the
                  latest checkpoint every rank of an attempt reported)
    SHUTTING_DOWN ─► FINISHED + RunFinished, or ERRORED + RunErrored (every failed rank's error:
                     those the decision saw and those the shutdown's last poll found)

Decisions worth knowing:

- Ids are derived, never random: an attempt's group id from (run id, attempt), every event id
  from the run's stream version and the event's place in the batch, or from the group and what
  the event asks. Deciding again on the same log gives the same events with the same ids, so a
  controller restarted after a crash between its two appends (run stream, then group stream)
  re-issues the group event with its old id (the store takes it once), and two controllers on
  one run cannot both act (the second's run append fails with ``ConcurrencyError``).
- The group stream may not exist yet (``group`` is ``None``): the run stream names the attempt
  (``ControllerStateChanged.group_id``, with the checkpoint it starts from), so its start request
  is re-issued from the run stream alone.
- Failures are counted as Ray Train 2.60's ``DefaultFailurePolicy`` counts them, one counter
  per kind (:data:`~wgstore.events.run.FAILURE_KINDS`): a running group whose workers erred or
  died is a ``worker_group`` failure against ``max_failures``; if any failed worker died because
  its node was preempted (Ray's ``RayActorError.preempted``, recorded by the poller as
  :data:`PREEMPTED_NOTE` in the health-check error) it is a ``preemption`` failure against
  ``max_preemption_failures`` instead; if every failed worker went with its cluster
  (``ClusterLostError``: the group was found again with no actor and no placement group left) it
  is a ``controller`` failure against ``controller_failure_limit``; a failed start is a ``start``
  failure against
  ``controller_failure_limit`` when Ray would retry it (a placement group timeout, a worker or
  the executor lost while starting) and RAISE at once otherwise (the train function cannot be
  loaded or launched, the cluster can never fit the group). ``failures_so_far`` counts the
  failures of that kind including this one; RETRY while it is within the limit (-1: unlimited).
- A group shut down under a running controller by someone else (not finished, no worker error)
  is a ``worker_group`` failure: the controller did not ask for it and cannot tell why.
- wgstore's ``WorkerGroupCallback`` errors never fail a start (they are recorded as
  ``CallbackFailed`` and the group goes on), so unlike Ray they are not a RAISE here.

An elastic run (its ``ScalingConfig`` has ``min_workers``) follows Ray Train 2.60's
``ElasticScalingPolicy`` and its controller's RESIZING and PREEMPTING states, deciding from what
the controller saw of the cluster (``cluster``: a :class:`~wgstore.orchestration.run.scaling.
ClusterView`; :func:`looks_due` says when the controller must look)::

    INITIALIZING / RESTARTING ─► (RE)SCHEDULING at what fits (>= min_workers), with
                   ScalingDecisionMade(initial / failure / preemption / start_retry)
                 └► StartDeferred once, when fewer than min_workers fit: wait; past
                    min_workers_timeout_s, ERRORED naming the shortfall
    RUNNING ──► RESIZING (another size fits, looked at every elastic_resize_monitor_interval_s):
                the group is shut down (resized_to), no failure charged
            └─► PREEMPTING (a node under the workers announced it is going): PreemptionNoticed
    RESIZING ─► SCHEDULING at that size, ScalingDecisionMade(grew / shrank)
    PREEMPTING ─► RESTARTING at the node's deadline, or once every worker stopped: a
                  ``preemption`` failure against max_preemption_failures (a worker that failed
                  for another reason fails fast, as a ``worker_group`` failure); SHUTTING_DOWN
                  if training finished first

A fixed run's decisions never look at the cluster and record no ``ScalingDecisionMade``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from wgstore.events import NO_STREAM, NewEvent
from wgstore.events.run import (
    ControllerState,
    ControllerStateChanged,
    FailureDecisionMade,
    FailureKind,
    PreemptionNoticed,
    RankError,
    ResizeCause,
    RetryDecision,
    RunErrored,
    RunFinished,
    ScalingDecisionMade,
    StartDeferred,
)
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.errors import UndecidableRunError
from wgstore.orchestration.polling.recorder import CLUSTER_LOST, PREEMPTED_NOTE
from wgstore.orchestration.run.scaling import ClusterView, failure_summary, resize_reason
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.run_state import RunState
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus

__all__ = [
    "CONTROLLER_NAMESPACE",
    "PREEMPTED_NOTE",
    "PREEMPTION_DEADLINE_S",
    "PREEMPTION_POLL_S",
    "WAIT_LOOK_S",
    "Decision",
    "FailureVerdict",
    "Looks",
    "attempt_group_id",
    "classify_failure",
    "decide",
    "is_preemption",
    "is_retryable_start_failure",
    "latest_checkpoint",
    "looks_due",
]

CONTROLLER_NAMESPACE = uuid.UUID("0c7a4f0e-2d8b-4b7e-9a1f-5e3c6d2b8a40")
"""The uuid5 namespace of the controller's group ids and event ids."""


_NOT_RETRYABLE_START_ERRORS = frozenset(
    {
        "TrainFnError",
        "InsufficientClusterResourcesError",
        "ImportError",
        "ModuleNotFoundError",
        "AttributeError",
        "TypeError",
        "ValueError",
        "FailpointError",
    }
)
"""Start errors that a new attempt would meet again (Ray raises these at once)."""

PREEMPTION_POLL_S = 5.0
"""How often a running elastic group's nodes are looked at for a preemption notice (Ray's
``DEFAULT_PREEMPTION_POLL_INTERVAL_S``)."""
WAIT_LOOK_S = 1.0
"""How often an elastic run waiting for ``min_workers`` looks at the cluster again (Ray's
``GET_RESERVED_RESOURCES_INTERVAL_S``)."""
PREEMPTION_DEADLINE_S = 120.0
"""How long a preemption without a deadline is waited out (Ray's
``DEFAULT_PREEMPTION_DEADLINE_S``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What one step of the controller appends.

    ``run_events`` go to the run stream with ``expected_version`` = the run's version;
    ``group_events`` to the stream of ``group_id`` with ``group_expected_version`` (``NO_STREAM``
    for a start request, otherwise ``None``: any version, the ids make it idempotent).
    ``to_state`` is the controller state after the run events (``None``: unchanged).
    ``wake_at``: decide again by then even if the log does not move (a preemption's deadline,
    the end of a wait for ``min_workers``).
    """

    run_events: tuple[NewEvent, ...] = ()
    group_id: str | None = None
    group_events: tuple[NewEvent, ...] = ()
    group_expected_version: Any = None
    to_state: ControllerState | None = None
    wake_at: datetime | None = None

    @property
    def empty(self) -> bool:
        """True when there is nothing to append."""
        return not self.run_events and not self.group_events


@dataclass(frozen=True, slots=True)
class FailureVerdict:
    """How the failure policy answers one failure (before it is recorded)."""

    kind: FailureKind
    decision: RetryDecision
    failures_so_far: int
    limit: int
    reason: str
    errors: tuple[RankError, ...]


def attempt_group_id(run_id: str, attempt: int) -> str:
    """The group id of attempt ``attempt`` of run ``run_id``: 16 hex digits, the same every time."""
    return uuid.uuid5(CONTROLLER_NAMESPACE, f"{run_id}:attempt:{attempt}").hex[:16]


def _group_event_id(group_id: str, what: str) -> uuid.UUID:
    return uuid.uuid5(CONTROLLER_NAMESPACE, f"{group_id}:{what}")


def _run_event_ids(run: RunState, events: list[Any]) -> tuple[NewEvent, ...]:
    return tuple(
        NewEvent(
            event,
            event_id=uuid.uuid5(
                CONTROLLER_NAMESPACE,
                f"{run_stream(run.run_id)}:{run.version + index + 1}:{type(event).__name__}",
            ),
        )
        for index, event in enumerate(events)
    )


def is_preemption(error: ErrorInfo) -> bool:
    """True when a worker's error says its node was preempted (see :data:`PREEMPTED_NOTE`)."""
    return error.is_health_check_error and PREEMPTED_NOTE in error.message


def is_retryable_start_failure(stage: StartStage, error: ErrorInfo) -> bool:
    """True for a failed start Ray Train would retry (``WorkerGroupStartupFailedError`` /
    ``WorkerGroupStartupTimeoutError``): a placement group timeout, or a worker, the sync actor
    or the executor lost while starting. Launching (user code) and errors a retry would meet
    again (the train function cannot be loaded, the cluster can never fit the group) are not."""
    if stage is StartStage.LAUNCH or error.type in _NOT_RETRYABLE_START_ERRORS:
        return False
    if stage is StartStage.PLACEMENT_GROUP:
        return error.type in ("PlacementGroupTimeoutError", "ExecutorLostError", "GetTimeoutError")
    return True


def latest_checkpoint(group: WorkerGroupState) -> str | None:
    """The latest committed checkpoint of any attempt up to ``group``: its own (the highest
    report index every rank of it reported with a checkpoint, as Ray Train commits one), else
    the one it started from (which was the latest before it). A checkpoint only some ranks
    reported before the attempt failed is never a retry's start: its shards may be missing."""
    checkpoint: str | None = group.latest_checkpoint or group.context.resume_checkpoint
    return checkpoint


def _verdict(
    run: RunState, kind: FailureKind, retryable: bool, reason: str, errors: Any
) -> FailureVerdict:
    count = run.failures_of(kind) + 1
    limit = run.failure_config.limit_of(kind)
    retry = retryable and (limit == -1 or count <= limit)
    if not retryable:
        why = f"{reason}; not retryable"
    else:
        budget = "unlimited" if limit == -1 else str(limit)
        why = f"{reason}; {kind} failure {count} of {budget}"
    return FailureVerdict(
        kind=kind,
        decision=RetryDecision.RETRY if retry else RetryDecision.RAISE,
        failures_so_far=count,
        limit=limit,
        reason=why,
        errors=tuple(errors),
    )


def classify_failure(run: RunState, group: WorkerGroupState) -> FailureVerdict | None:
    """The failure policy's answer to what ``group`` shows, or ``None`` when it did not fail."""
    if group.status is WorkerGroupStatus.START_FAILED:
        failure = group.start_failure
        assert failure is not None
        retryable = is_retryable_start_failure(failure.stage, failure.error)
        reason = f"the start failed at {failure.stage.value}: {failure.error}"
        return _verdict(
            run,
            FailureKind.START,
            retryable,
            reason,
            [RankError(world_rank=-1, error=failure.error)],
        )
    errors = group.errors
    if errors:
        ranked = [RankError(world_rank=rank, error=errors[rank]) for rank in sorted(errors)]
        if all(error.type == CLUSTER_LOST for error in errors.values()):
            kind = FailureKind.CONTROLLER  # not the training's failure: the cluster went away
        elif any(is_preemption(e) for e in errors.values()):
            kind = FailureKind.PREEMPTION
        else:
            kind = FailureKind.WORKER_GROUP
        first = min(errors)
        what = "rank" if len(errors) == 1 else "ranks"
        ranks = ",".join(str(rank) for rank in sorted(errors))
        reason = f"{what} {ranks} failed: {errors[first].type}"
        return _verdict(run, kind, True, reason, ranked)
    status = group.poll_status
    if status is not None and status.finished:
        return None
    if group.status in (WorkerGroupStatus.SHUTTING_DOWN, WorkerGroupStatus.SHUT_DOWN):
        error = ErrorInfo(
            type="WorkerGroupShutDown",
            message=(
                f"worker group {group.group_id} was shut down outside the controller "
                f"({group.shutdown_reason or 'no reason given'})"
            ),
        )
        return _verdict(
            run, FailureKind.WORKER_GROUP, True, str(error), [RankError(world_rank=-1, error=error)]
        )
    return None


def _transition(
    run: RunState,
    to_state: ControllerState,
    reason: str,
    group_id: str | None,
    resume_checkpoint: str | None = None,
) -> ControllerStateChanged:
    return ControllerStateChanged(
        from_state=run.controller_state,
        to_state=to_state,
        reason=reason,
        group_id=group_id,
        resume_checkpoint=resume_checkpoint,
    )


def _start_request(
    run: RunState,
    group_id: str,
    attempt: int,
    checkpoint: str | None,
    num_workers: int | None = None,
) -> tuple[NewEvent, ...]:
    context = run.context
    assert context is not None
    if checkpoint != context.resume_checkpoint:
        context = replace(context, resume_checkpoint=checkpoint)
    if num_workers is not None and num_workers != context.num_workers:
        context = replace(context, num_workers=num_workers)
    event = WorkerGroupStartRequested(
        group_id=group_id, run_id=run.run_id, attempt=attempt, context=context
    )
    return (NewEvent(event, event_id=_group_event_id(group_id, "start")),)


def _shutdown_request(
    group_id: str, reason: str, resized_to: int | None = None
) -> tuple[NewEvent, ...]:
    event = WorkerGroupShutdownRequested(reason=reason, resized_to=resized_to)
    return (NewEvent(event, event_id=_group_event_id(group_id, "shutdown")),)


def _schedule(
    run: RunState,
    to_state: ControllerState,
    attempt: int,
    checkpoint: str | None,
    why: str,
    sized: tuple[int, ResizeCause, str] | None = None,
) -> Decision:
    """Start attempt ``attempt``; ``sized`` (an elastic run's size, cause and the failure's
    summary) adds the ``ScalingDecisionMade`` that chose its size, in the same append."""
    group_id = attempt_group_id(run.run_id, attempt)
    moved = _transition(run, to_state, why, group_id, checkpoint)
    events: list[Any] = [moved]
    num_workers = None
    if sized is not None:
        num_workers, cause, failure = sized
        previous = _previous_size(run)
        events.append(
            ScalingDecisionMade(
                num_workers=num_workers,
                previous_workers=previous,
                cause=cause,
                reason=resize_reason(cause, previous, num_workers, run.scaling_config, failure),
                group_id=group_id,
                resources_per_worker=dict(run.context.resources_per_worker if run.context else {}),
            )
        )
    return Decision(
        run_events=_run_event_ids(run, events),
        group_id=group_id,
        group_events=_start_request(run, group_id, attempt, checkpoint, num_workers),
        group_expected_version=NO_STREAM,
        to_state=to_state,
    )


def _previous_size(run: RunState) -> int | None:
    """The size of the run's latest group: its scaling decision's (``None``: no group yet)."""
    if not run.groups:
        return None
    decision = run.decision_for(run.groups[-1])
    if decision is not None:
        return decision.num_workers
    return run.context.num_workers if run.context is not None else None


def _scheduled_checkpoint(run: RunState, group_id: str) -> str | None:
    for transition in reversed(run.transitions):
        if transition.group_id == group_id and transition.to_state in (
            ControllerState.SCHEDULING,
            ControllerState.RESCHEDULING,
        ):
            scheduled: str | None = transition.resume_checkpoint
            return scheduled
    assert run.context is not None
    initial: str | None = run.context.resume_checkpoint
    return initial


def _on_failure(run: RunState, group: WorkerGroupState, verdict: FailureVerdict) -> Decision:
    decided = FailureDecisionMade(
        decision=verdict.decision,
        group_id=group.group_id,
        reason=verdict.reason,
        failures_so_far=verdict.failures_so_far,
        failure_kind=verdict.kind,
        limit=verdict.limit,
        errors=verdict.errors,
    )
    to_state = (
        ControllerState.RESTARTING
        if verdict.decision is RetryDecision.RETRY
        else ControllerState.SHUTTING_DOWN
    )
    moved = _transition(run, to_state, verdict.reason, group.group_id)
    shutdown: tuple[NewEvent, ...] = ()
    if group.status is WorkerGroupStatus.RUNNING:
        shutdown = _shutdown_request(group.group_id, f"{verdict.kind} failure")
    return Decision(
        run_events=_run_event_ids(run, [decided, moved]),
        group_id=group.group_id,
        group_events=shutdown,
        to_state=to_state,
    )


def _raised(run: RunState, group_id: str) -> tuple[RankError, ...] | None:
    for decision in reversed(run.decisions):
        if decision.group_id == group_id:
            return decision.errors if decision.decision == RetryDecision.RAISE else None
    return None


def _end(run: RunState, group: WorkerGroupState) -> Decision:
    errors = _raised(run, group.group_id)
    if errors is None:
        events: list[Any] = [
            _transition(run, ControllerState.FINISHED, "training finished", group.group_id),
            RunFinished(group_id=group.group_id),
        ]
        to_state = ControllerState.FINISHED
    else:
        # every failed rank: those the decision saw, and those the shutdown's last poll found
        by_rank = {e.world_rank: e for e in errors}
        by_rank.update(
            {rank: RankError(world_rank=rank, error=error) for rank, error in group.errors.items()}
        )
        errors = tuple(by_rank[rank] for rank in sorted(by_rank))
        first = errors[0].error if errors else ErrorInfo(type="RunErrored", message="")
        events = [
            _transition(run, ControllerState.ERRORED, "the failure policy raised", group.group_id),
            RunErrored(error=first, group_id=group.group_id, errors=errors),
        ]
        to_state = ControllerState.ERRORED
    return Decision(run_events=_run_event_ids(run, events), to_state=to_state)


def _shutdown_reason(run: RunState, group_id: str) -> str:
    for decision in reversed(run.decisions):
        if decision.group_id == group_id:
            return f"{decision.failure_kind} failure"
    return "finished"


def _reissue_shutdown(run: RunState, group: WorkerGroupState) -> Decision:
    """Wait for the group's shutdown; ask for it again (same id, same reason) if the controller
    died after its run append and before the group got the request."""
    if group.status in (
        WorkerGroupStatus.REQUESTED,
        WorkerGroupStatus.STARTING,
        WorkerGroupStatus.RUNNING,
    ):
        reason = _shutdown_reason(run, group.group_id)
        return Decision(
            group_id=group.group_id, group_events=_shutdown_request(group.group_id, reason)
        )
    return Decision()  # shutting down: wait for the executor


# ---------------------------------------------------------------------- elastic runs


@dataclass(frozen=True, slots=True)
class Looks:
    """What the controller must look at before it decides (:func:`looks_due`), and when it
    must look next even if the log does not move (``None``: no look is coming)."""

    size: bool = False
    drain: bool = False
    next_at: datetime | None = None


def looks_due(
    run: RunState,
    group: WorkerGroupState | None,
    now: datetime,
    last_size_look: datetime | None,
    last_drain_look: datetime | None,
) -> Looks:
    """Whether the controller must look at the cluster before it decides: for what fits
    (``ClusterView.fits``) and for nodes going (``ClusterView.draining``).

    Only elastic runs look. What fits is looked at before every start (INITIALIZING,
    RESTARTING, and again every :data:`WAIT_LOOK_S` while fewer than ``min_workers`` fit) and,
    while a group runs, once every ``elastic_resize_monitor_interval_s`` counted from the
    group's start or the last look, whichever is later (Ray's rule); nodes going every
    :data:`PREEMPTION_POLL_S`.
    """
    scaling = run.scaling_config
    if run.ended or scaling is None or not scaling.elastic or run.context is None:
        return Looks()
    state = run.controller_state
    if state in (ControllerState.INITIALIZING, ControllerState.RESTARTING):
        if group is not None and not group.status.is_terminal:
            return Looks()
        return Looks(size=True, next_at=now + timedelta(seconds=WAIT_LOOK_S))
    if state is not ControllerState.RUNNING or group is None:
        return Looks()
    if group.status is not WorkerGroupStatus.RUNNING or group.started_at is None:
        return Looks()
    since = max(group.started_at, last_size_look) if last_size_look else group.started_at
    size_at = since + timedelta(seconds=scaling.elastic_resize_monitor_interval_s)
    drain_at = (last_drain_look or now) + timedelta(seconds=PREEMPTION_POLL_S)
    size, drain = now >= size_at, last_drain_look is None or now >= drain_at
    next_size = now + timedelta(seconds=scaling.elastic_resize_monitor_interval_s)
    next_drain = now + timedelta(seconds=PREEMPTION_POLL_S)
    return Looks(
        size=size,
        drain=drain,
        next_at=min(next_size if size else size_at, next_drain if drain else drain_at),
    )


def _failure_summary(run: RunState) -> str:
    """The run's last failure in a few words, for the scaling decision that restarts it."""
    if not run.decisions:
        return ""
    last = run.decisions[-1]
    return failure_summary(last.failure_kind, last.errors)


def _restart_cause(run: RunState) -> ResizeCause:
    kind = run.decisions[-1].failure_kind if run.decisions else None
    if kind == FailureKind.PREEMPTION:
        return ResizeCause.PREEMPTION
    if kind == FailureKind.START:
        return ResizeCause.START_RETRY
    return ResizeCause.FAILURE


def _start_elastic(
    run: RunState,
    now: datetime,
    cluster: ClusterView | None,
    to_state: ControllerState,
    attempt: int,
    checkpoint: str | None,
    why: str,
) -> Decision:
    """Start attempt ``attempt`` of an elastic run at what fits, or wait for ``min_workers``
    (``StartDeferred`` once), or give up once the wait outlasted ``min_workers_timeout_s``."""
    scaling = run.scaling_config
    assert scaling is not None and scaling.min_workers is not None
    if cluster is None or cluster.fits is None:
        return Decision()  # the controller looks first (looks_due)
    fits = min(cluster.fits, scaling.num_workers)
    if fits >= max(1, scaling.min_workers):
        cause = ResizeCause.INITIAL if attempt == 1 else _restart_cause(run)
        failure = "" if cause is ResizeCause.INITIAL else _failure_summary(run)
        return _schedule(run, to_state, attempt, checkpoint, why, (fits, cause, failure))
    shortfall = (
        f"{fits} of the run's {scaling.describe()} workers fit "
        f"({_fmt_resources(scaling.resources)} each); min_workers is "
        f"{max(1, scaling.min_workers)}"
    )
    timeout = scaling.min_workers_timeout_s
    if run.deferred_since is None:
        deferred = StartDeferred(
            num_workers_fit=fits, min_workers=scaling.min_workers, reason=shortfall, since=now
        )
        wake = None if timeout is None else now + timedelta(seconds=timeout)
        return Decision(run_events=_run_event_ids(run, [deferred]), wake_at=wake)
    if timeout is None or now < run.deferred_since + timedelta(seconds=timeout):
        wake = None if timeout is None else run.deferred_since + timedelta(seconds=timeout)
        return Decision(wake_at=wake)
    waited = (now - run.deferred_since).total_seconds()
    error = ErrorInfo(
        type="InsufficientClusterResourcesError",
        message=f"waited {waited:.0f} s (min_workers_timeout_s {timeout:g}) and {shortfall}",
    )
    events = [
        _transition(run, ControllerState.ERRORED, str(error), run.current_group_id),
        RunErrored(error=error, group_id=run.current_group_id),
    ]
    return Decision(run_events=_run_event_ids(run, events), to_state=ControllerState.ERRORED)


def _fmt_resources(resources: dict[str, float]) -> str:
    return ", ".join(f"{name}={amount:g}" for name, amount in sorted(resources.items()))


def _preempted_nodes(group: WorkerGroupState, draining: Any) -> dict[str, tuple[int, ...]]:
    nodes: dict[str, list[int]] = {}
    for worker in group.workers:
        if worker.node_id in draining:
            nodes.setdefault(worker.node_id, []).append(worker.world_rank)
    return {node: tuple(sorted(ranks)) for node, ranks in sorted(nodes.items())}


def _running_elastic(
    run: RunState, group: WorkerGroupState, now: datetime, cluster: ClusterView | None
) -> Decision | None:
    """A healthy running group of an elastic run: PREEMPTING when a node under it announced it
    is going, RESIZING when another size fits; ``None`` when neither."""
    if cluster is None:
        return None
    scaling = run.scaling_config
    assert scaling is not None and scaling.min_workers is not None
    preempted = _preempted_nodes(group, cluster.draining)
    if preempted:
        deadlines = [ms for node in preempted if (ms := cluster.draining[node])]
        deadline = _epoch_ms(min(deadlines)) if deadlines else None
        ranks = sorted({rank for ranks in preempted.values() for rank in ranks})
        why = f"node {', '.join(preempted)} announced its preemption (ranks {ranks})"
        events = [
            _transition(run, ControllerState.PREEMPTING, why, group.group_id),
            PreemptionNoticed(
                group_id=group.group_id, nodes=preempted, deadline=deadline, detected_at=now
            ),
        ]
        return Decision(
            run_events=_run_event_ids(run, events),
            to_state=ControllerState.PREEMPTING,
            wake_at=_preemption_deadline(deadline, now),
        )
    if cluster.fits is None:
        return None
    fits = min(cluster.fits, scaling.num_workers)
    size = group.context.num_workers
    if fits == size or fits < max(1, scaling.min_workers):
        return None
    cause = ResizeCause.GREW if fits > size else ResizeCause.SHRANK
    why = resize_reason(cause, size, fits, scaling)
    moved = _transition(run, ControllerState.RESIZING, why, group.group_id)
    return Decision(
        run_events=_run_event_ids(run, [moved]),
        group_id=group.group_id,
        group_events=_shutdown_request(group.group_id, f"resized: {why}", resized_to=fits),
        to_state=ControllerState.RESIZING,
    )


def _epoch_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def _preemption_deadline(deadline: datetime | None, detected_at: datetime) -> datetime:
    """When a preemption is waited out: its deadline, else Ray's default after detection."""
    return deadline or detected_at + timedelta(seconds=PREEMPTION_DEADLINE_S)


def _preempting(run: RunState, group: WorkerGroupState, now: datetime) -> Decision:
    """PREEMPTING: wait for the train function to checkpoint until the nodes' deadline (or
    every worker stopped), then restart without them, a ``preemption`` failure. Training that
    finished first finishes; a worker failing for another reason fails fast."""
    status = group.poll_status
    if status is not None and status.finished and not group.errors:
        moved = _transition(
            run, ControllerState.SHUTTING_DOWN, "every worker finished", group.group_id
        )
        return Decision(
            run_events=_run_event_ids(run, [moved]),
            group_id=group.group_id,
            group_events=_shutdown_request(group.group_id, "finished")
            if group.status is WorkerGroupStatus.RUNNING
            else (),
            to_state=ControllerState.SHUTTING_DOWN,
        )
    notice = run.preemptions[-1] if run.preemptions else None
    preempted = set(notice.ranks) if notice is not None else set()
    verdict = classify_failure(run, group)
    if verdict is not None and not set(group.errors) <= preempted:
        return _on_failure(run, group, verdict)  # another failure: fail fast, as Ray
    detected = notice.detected_at or notice.at if notice is not None else now
    deadline = _preemption_deadline(notice.deadline if notice else None, detected)
    stopped = status is not None and status.finished
    if not stopped and now < deadline:
        return Decision(wake_at=deadline)
    nodes = ", ".join(notice.nodes) if notice is not None else "?"
    how = "every worker stopped" if stopped else "its deadline passed"
    reason = f"node {nodes} preempted: {how}"
    errors = [
        RankError(world_rank=rank, error=ErrorInfo(type="PreemptionError", message=reason))
        for rank in sorted(preempted)
    ]
    return _on_failure(run, group, _verdict(run, FailureKind.PREEMPTION, True, reason, errors))


def decide(
    run: RunState,
    group: WorkerGroupState | None,
    now: datetime,
    cluster: ClusterView | None = None,
) -> Decision:
    """One step of the run controller: what to append, given the log.

    Args:
        run: the run's state, folded from its stream.
        group: the state of the run's current worker group (``run.current_group_id``), or
            ``None`` when it has none yet or its stream does not exist yet.
        now: the caller's clock (UTC): an elastic run's preemption deadlines and its wait for
            ``min_workers`` are decided against it.
        cluster: what the controller saw of the cluster, for an elastic run when
            :func:`looks_due` says so (``None``: no look this step).

    Returns:
        A :class:`Decision`; empty when the controller must wait for the log to move.

    Raises:
        UndecidableRunError: the run was not made by a wgstore controller (no ``context``),
            ``group`` is not the run's current group, or the run's controller state names no
            group or is one the controller never acts in (a ``ValueError`` too).
        StreamNotFoundError: the run is past scheduling but ``group`` is ``None`` (the stream of
            its current group is missing).
    """
    if run.ended:
        return Decision()
    if run.context is None:
        raise UndecidableRunError(
            f"run {run.run_id!r} has no worker-group context (recorded from Ray Train?); a "
            "wgstore controller can only drive runs it created"
        )
    current = run.current_group_id
    if group is not None and group.group_id != current:
        raise UndecidableRunError(
            f"group {group.group_id!r} is not the current group {current!r} of the run"
        )
    state = run.controller_state
    elastic = run.elastic
    if state == ControllerState.INITIALIZING:
        checkpoint = run.context.resume_checkpoint
        if elastic:
            return _start_elastic(
                run, now, cluster, ControllerState.SCHEDULING, 1, checkpoint, "attempt 1"
            )
        return _schedule(run, ControllerState.SCHEDULING, 1, checkpoint, "attempt 1")
    if current is None:
        raise UndecidableRunError(f"run {run.run_id!r} is {state} but names no worker group")
    if state in (ControllerState.SCHEDULING, ControllerState.RESCHEDULING):
        if group is None:
            attempt = run.groups.index(current) + 1
            checkpoint = _scheduled_checkpoint(run, current)
            sized = run.decision_for(current)
            return Decision(
                group_id=current,
                group_events=_start_request(
                    run, current, attempt, checkpoint, sized.num_workers if sized else None
                ),
                group_expected_version=NO_STREAM,
            )
        if group.status is WorkerGroupStatus.RUNNING and group.training_launched:
            moved = _transition(
                run,
                ControllerState.RUNNING,
                f"training launched on attempt {group.attempt}",
                current,
            )
            return Decision(
                run_events=_run_event_ids(run, [moved]), to_state=ControllerState.RUNNING
            )
        if group.status in (
            WorkerGroupStatus.START_FAILED,
            WorkerGroupStatus.SHUTTING_DOWN,
            WorkerGroupStatus.SHUT_DOWN,
        ):
            verdict = classify_failure(run, group)
            if group.status is not WorkerGroupStatus.START_FAILED or verdict is None:
                why = f"the group was shut down while starting ({group.shutdown_reason})"
                error = ErrorInfo(type="StartAborted", message=why)
                errors = [RankError(world_rank=-1, error=error)]
                verdict = _verdict(run, FailureKind.START, True, why, errors)
            return _on_failure(run, group, verdict)
        return Decision()  # starting: wait
    if group is None:
        raise StreamNotFoundError(
            f"run {run.run_id!r} is {state} but the stream of its group {current!r} is missing"
        )
    if state == ControllerState.RUNNING:
        verdict = classify_failure(run, group)
        if verdict is not None:
            return _on_failure(run, group, verdict)
        status = group.poll_status
        if status is not None and status.finished:
            moved = _transition(
                run, ControllerState.SHUTTING_DOWN, "every worker finished", current
            )
            return Decision(
                run_events=_run_event_ids(run, [moved]),
                group_id=current,
                group_events=(
                    _shutdown_request(current, "finished")
                    if group.status is WorkerGroupStatus.RUNNING
                    else ()
                ),
                to_state=ControllerState.SHUTTING_DOWN,
            )
        if elastic and group.status is WorkerGroupStatus.RUNNING:
            return _running_elastic(run, group, now, cluster) or Decision()
        return Decision()
    if state == ControllerState.PREEMPTING:
        return _preempting(run, group, now)
    if state == ControllerState.RESIZING:
        if not group.status.is_terminal:
            return _reissue_shutdown(run, group)
        size = group.resized_to or group.context.num_workers
        cause = ResizeCause.GREW if size > group.context.num_workers else ResizeCause.SHRANK
        attempt = group.attempt + 1
        checkpoint = latest_checkpoint(group)
        why = f"attempt {attempt} with {size} workers" + (
            f" from {checkpoint}" if checkpoint else ""
        )
        return _schedule(
            run, ControllerState.SCHEDULING, attempt, checkpoint, why, (size, cause, "")
        )
    if state == ControllerState.RESTARTING:
        if not group.status.is_terminal:
            return _reissue_shutdown(run, group)
        attempt = group.attempt + 1
        checkpoint = latest_checkpoint(group)
        why = f"attempt {attempt}" + (f" from {checkpoint}" if checkpoint else "")
        if elastic:
            return _start_elastic(
                run, now, cluster, ControllerState.RESCHEDULING, attempt, checkpoint, why
            )
        return _schedule(run, ControllerState.RESCHEDULING, attempt, checkpoint, why)
    if state == ControllerState.SHUTTING_DOWN:
        if not group.status.is_terminal:
            return _reissue_shutdown(run, group)
        return _end(run, group)
    raise UndecidableRunError(f"unexpected controller state '{state}' of run {run.run_id!r}")
