"""The state of a training run, folded from the events of its stream ``run-<run_id>``.

Pure: no I/O, no clock, no Ray. Statuses use Ray Train's ``RunStatus`` names. The controller's
own state (Ray's controller state names, e.g. ``RESCHEDULING`` or ``SHUTTING_DOWN``) is kept as
``controller_state``; :data:`CONTROLLER_TO_RUN_STATUS` maps it to the run status.

A run ends with ``RunFinished``, ``RunErrored`` or ``RunAborted``. A controller may enter its
terminal state (``ControllerStateChanged`` to ``FINISHED`` ...) before that: the matching end
event may follow, a contradicting one is an error, and nothing may follow the end event.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypedDict, TypeVar

from wgstore.events.records import RecordedEvent, UnknownEvent
from wgstore.events.run import (
    ControllerStarted,
    ControllerState,
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    FailureKind,
    PreemptionNoticed,
    RankError,
    RecordingFailed,
    RunAborted,
    RunCreated,
    RunErrored,
    RunFinished,
    RunResumed,
    ScalingConfig,
    ScalingDecisionMade,
    StartDeferred,
    TrainerRecorded,
)
from wgstore.events.worker_group import ErrorInfo, WorkerGroupContext
from wgstore.projections.errors import ProjectionError
from wgstore.projections.event_time import RAY_EXPORT_SOURCE, event_time

__all__ = [
    "CONTROLLER_TO_RUN_STATUS",
    "ControllerSession",
    "ControllerTransition",
    "FailureDecision",
    "Preemption",
    "RunChanges",
    "RunState",
    "RunStatus",
    "ScalingDecision",
    "evolve_run",
    "is_orphaned",
    "lease_lapsed",
    "needs_controller",
    "project_run",
    "resume_problem",
]


class RunStatus(enum.StrEnum):
    """The status of a run, with Ray Train's ``RunStatus`` names."""

    INITIALIZING = "INITIALIZING"
    SCHEDULING = "SCHEDULING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    RESIZING = "RESIZING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        """True for ``FINISHED``, ``ERRORED`` and ``ABORTED``."""
        return self in (RunStatus.FINISHED, RunStatus.ERRORED, RunStatus.ABORTED)


CONTROLLER_TO_RUN_STATUS: Mapping[str, RunStatus | None] = {
    ControllerState.INITIALIZING: RunStatus.INITIALIZING,
    ControllerState.SCHEDULING: RunStatus.SCHEDULING,
    ControllerState.RESCHEDULING: RunStatus.SCHEDULING,
    ControllerState.RUNNING: RunStatus.RUNNING,
    ControllerState.PREEMPTING: None,  # a sub-state of RUNNING (Ray's state actor ignores it too)
    ControllerState.RESTARTING: RunStatus.RESTARTING,
    ControllerState.RESIZING: RunStatus.RESIZING,
    ControllerState.SHUTTING_DOWN: None,  # keeps the run status it had
    ControllerState.FINISHED: RunStatus.FINISHED,
    ControllerState.ERRORED: RunStatus.ERRORED,
    ControllerState.ABORTED: RunStatus.ABORTED,
}
"""Ray's controller state names and the run status each one means (``None``: unchanged)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerTransition:
    """One ``ControllerStateChanged``, with when it was recorded."""

    from_state: ControllerState
    to_state: ControllerState
    reason: str
    group_id: str | None
    at: datetime
    version: int
    resume_checkpoint: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureDecision:
    """One decision of the failure policy, with when it was recorded.

    ``decision`` and ``failure_kind`` are the event's text (:class:`RetryDecision` and
    :class:`FailureKind` values; a member compares equal to its text).
    """

    decision: str
    group_id: str
    reason: str
    failures_so_far: int
    at: datetime
    version: int
    failure_kind: str = "worker_group"
    limit: int = 0
    errors: tuple[RankError, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingDecision:
    """One ``ScalingDecisionMade``: the size a group starts at and why, with when it was decided.

    ``cause`` is the event's text (a :class:`~wgstore.events.run.ResizeCause` value).
    """

    num_workers: int
    previous_workers: int | None
    cause: str
    reason: str
    group_id: str | None
    at: datetime
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """One ``PreemptionNoticed``: the nodes going, their ranks and deadline, with when it was
    recorded."""

    group_id: str | None
    nodes: Mapping[str, tuple[int, ...]]
    deadline: datetime | None
    detected_at: datetime | None
    at: datetime
    version: int

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every preempted rank, in order."""
        return tuple(sorted({rank for ranks in self.nodes.values() for rank in ranks}))


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerSession:
    """One controller process that took the run (``ControllerStarted``)."""

    controller_id: str
    host: str
    pid: int
    resumed: bool
    at: datetime
    version: int
    lease_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """A training run as the log tells it, after the event at ``version`` of its stream."""

    stream_id: str
    run_id: str
    name: str
    status: RunStatus
    controller_state: ControllerState
    version: int
    position: int
    created_at: datetime
    updated_at: datetime
    scaling_config: ScalingConfig | None = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    context: WorkerGroupContext | None = None
    """What every attempt starts from (``None`` for a run recorded from Ray Train)."""
    lease_s: float = 60.0
    ray: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    """``metadata["source"]`` of ``RunCreated``: ``ray_train`` (the recording callback),
    ``ray_export`` (``wgstore ingest ray-export``), else wgstore's own controller's."""
    controllers: tuple[ControllerSession, ...] = ()
    """Every controller process that took the run, in order."""
    resumes: tuple[RunResumed, ...] = ()
    """Every ``RunResumed``: who resumed the run after its driver was lost, why, and when."""
    groups: tuple[str, ...] = ()
    """Every worker group the controller used, in the order it first named them."""
    transitions: tuple[ControllerTransition, ...] = ()
    decisions: tuple[FailureDecision, ...] = ()
    ended: bool = False
    """True once RunFinished, RunErrored or RunAborted is folded in: nothing may follow."""
    ended_at: datetime | None = None
    error: ErrorInfo | None = None
    errors: tuple[RankError, ...] = ()
    """Every failed rank's error, when the run errored."""
    abort_reason: str | None = None
    final_group_id: str | None = None
    trainer: TrainerRecorded | None = None
    """What a run recorded from Ray Train needs to be started again (``TrainerRecorded``)."""
    scaling_decisions: tuple[ScalingDecision, ...] = ()
    """Every size the scaling policy chose for an elastic run, in order."""
    preemptions: tuple[Preemption, ...] = ()
    """Every preemption notice of nodes under the run's workers."""
    recording_errors: tuple[RecordingFailed, ...] = ()
    """What a Ray Train recorder hook could not record (``RecordingFailed``)."""
    deferred_since: datetime | None = None
    """When the controller began to wait for ``min_workers`` to fit (``StartDeferred``);
    ``None`` once a scaling decision started a group."""
    deferred: StartDeferred | None = None
    """The ``StartDeferred`` of that wait."""

    @property
    def attempts(self) -> int:
        """How many worker groups (run attempts) the run used."""
        return len(self.groups)

    @property
    def current_group_id(self) -> str | None:
        """The worker group named last."""
        return self.groups[-1] if self.groups else None

    @property
    def failures(self) -> int:
        """How many failures the policy decided about."""
        return len(self.decisions)

    def failures_of(self, kind: str) -> int:
        """How many failures counted against the limit of ``kind`` were decided (``start`` and
        ``controller`` share ``controller_failure_limit``, as in Ray Train)."""
        kinds = _SAME_LIMIT.get(kind, (kind,))
        return sum(1 for decision in self.decisions if decision.failure_kind in kinds)

    @property
    def is_terminal(self) -> bool:
        """True once the run ended."""
        return self.ended

    @property
    def elastic(self) -> bool:
        """True when the run's size may change (its scaling config has a range)."""
        return self.scaling_config is not None and self.scaling_config.elastic

    def decision_for(self, group_id: str) -> ScalingDecision | None:
        """The scaling decision that started ``group_id`` (``None``: a fixed run's group)."""
        for decision in reversed(self.scaling_decisions):
            if decision.group_id == group_id:
                return decision
        return None


class RunChanges(TypedDict, total=False):
    """The fields of a :class:`RunState` one event changes: what each handler of the fold returns
    (a test keeps its keys and types those of the state's fields)."""

    stream_id: str
    run_id: str
    name: str
    status: RunStatus
    controller_state: ControllerState
    version: int
    position: int
    created_at: datetime
    updated_at: datetime
    scaling_config: ScalingConfig | None
    failure_config: FailureConfig
    context: WorkerGroupContext | None
    lease_s: float
    ray: Mapping[str, Any]
    source: str
    controllers: tuple[ControllerSession, ...]
    resumes: tuple[RunResumed, ...]
    groups: tuple[str, ...]
    transitions: tuple[ControllerTransition, ...]
    decisions: tuple[FailureDecision, ...]
    ended: bool
    ended_at: datetime | None
    error: ErrorInfo | None
    errors: tuple[RankError, ...]
    abort_reason: str | None
    final_group_id: str | None
    trainer: TrainerRecorded | None
    scaling_decisions: tuple[ScalingDecision, ...]
    preemptions: tuple[Preemption, ...]
    recording_errors: tuple[RecordingFailed, ...]
    deferred_since: datetime | None
    deferred: StartDeferred | None


def _with_group(groups: tuple[str, ...], group_id: str | None) -> tuple[str, ...]:
    if group_id is None or group_id in groups:
        return groups
    return (*groups, group_id)


def _end(
    state: RunState, record: RecordedEvent, status: RunStatus, changes: RunChanges
) -> RunChanges:
    if state.status.is_terminal and state.status is not status:
        raise ProjectionError.at(
            record,
            f"run {state.run_id!r} is already {state.status.value}; it cannot end as {status.value}",
        )
    group_id = changes.get("final_group_id")
    ended: RunChanges = {
        "status": status,
        "ended": True,
        "ended_at": event_time(record),
        "groups": _with_group(state.groups, group_id),
    }
    ended.update(changes)
    return ended


def _controller_state_changed(
    state: RunState, record: RecordedEvent[ControllerStateChanged]
) -> RunChanges:
    event = record.event
    if event.from_state != state.controller_state:
        raise ProjectionError.at(
            record,
            f"the controller moved from {event.from_state}, but it was in {state.controller_state}",
        )
    if event.to_state not in CONTROLLER_TO_RUN_STATUS:
        raise ProjectionError.at(
            record,
            f"unknown controller state {event.to_state!r}; known: "
            f"{', '.join(CONTROLLER_TO_RUN_STATUS)}",
        )
    if state.status.is_terminal:
        raise ProjectionError.at(record, f"the controller already reached {state.status.value}")
    to_state = ControllerState(event.to_state)
    transition = ControllerTransition(
        from_state=state.controller_state,
        to_state=to_state,
        reason=event.reason,
        group_id=event.group_id,
        at=event_time(record),
        version=record.version,
        resume_checkpoint=event.resume_checkpoint,
    )
    return {
        "status": CONTROLLER_TO_RUN_STATUS[to_state] or state.status,
        "controller_state": to_state,
        "transitions": (*state.transitions, transition),
        "groups": _with_group(state.groups, event.group_id),
    }


def _failure_decision_made(
    state: RunState, record: RecordedEvent[FailureDecisionMade]
) -> RunChanges:
    event = record.event
    decision = FailureDecision(
        decision=event.decision,
        group_id=event.group_id,
        reason=event.reason,
        failures_so_far=event.failures_so_far,
        at=event_time(record),
        version=record.version,
        failure_kind=event.failure_kind,
        limit=event.limit,
        errors=event.errors,
    )
    return {
        "decisions": (*state.decisions, decision),
        "groups": _with_group(state.groups, event.group_id),
    }


def _finished(state: RunState, record: RecordedEvent[RunFinished]) -> RunChanges:
    event = record.event
    return _end(state, record, RunStatus.FINISHED, {"final_group_id": event.group_id})


def _errored(state: RunState, record: RecordedEvent[RunErrored]) -> RunChanges:
    event = record.event
    return _end(
        state,
        record,
        RunStatus.ERRORED,
        {"error": event.error, "errors": event.errors, "final_group_id": event.group_id},
    )


def _aborted(state: RunState, record: RecordedEvent[RunAborted]) -> RunChanges:
    event = record.event
    return _end(state, record, RunStatus.ABORTED, {"abort_reason": event.reason})


def _controller_started(state: RunState, record: RecordedEvent[ControllerStarted]) -> RunChanges:
    event = record.event
    session = ControllerSession(
        controller_id=event.controller_id,
        host=event.host,
        pid=event.pid,
        resumed=event.resumed,
        at=event_time(record),
        version=record.version,
        lease_s=event.lease_s,
    )
    return {"controllers": (*state.controllers, session)}


def _scaling_decision_made(
    state: RunState, record: RecordedEvent[ScalingDecisionMade]
) -> RunChanges:
    event = record.event
    decision = ScalingDecision(
        num_workers=event.num_workers,
        previous_workers=event.previous_workers,
        cause=event.cause,
        reason=event.reason,
        group_id=event.group_id,
        at=event_time(record),
        version=record.version,
    )
    return {
        "scaling_decisions": (*state.scaling_decisions, decision),
        "deferred_since": None,
        "deferred": None,
    }


def _start_deferred(state: RunState, record: RecordedEvent[StartDeferred]) -> RunChanges:
    if state.deferred_since is not None:
        return {"deferred": record.event}  # the wait goes on: it began then
    event = record.event
    return {"deferred_since": event.since or event_time(record), "deferred": event}


def _preemption_noticed(state: RunState, record: RecordedEvent[PreemptionNoticed]) -> RunChanges:
    event = record.event
    preemption = Preemption(
        group_id=event.group_id,
        nodes=event.nodes,
        deadline=event.deadline,
        detected_at=event.detected_at,
        at=event_time(record),
        version=record.version,
    )
    return {"preemptions": (*state.preemptions, preemption)}


def _trainer_recorded(state: RunState, record: RecordedEvent[TrainerRecorded]) -> RunChanges:
    if state.trainer is not None:
        raise ProjectionError.at(record, f"run {state.run_id!r} already recorded its trainer")
    return {"trainer": record.event}


def _resumed(state: RunState, record: RecordedEvent[RunResumed]) -> RunChanges:
    return {"resumes": (*state.resumes, record.event)}


def _recording_failed(state: RunState, record: RecordedEvent[RecordingFailed]) -> RunChanges:
    return {"recording_errors": (*state.recording_errors, record.event)}


_Handler = Callable[[RunState, RecordedEvent[Any]], RunChanges]
_E = TypeVar("_E")


def _rule(
    cls: type[_E], handler: Callable[[RunState, RecordedEvent[_E]], RunChanges]
) -> tuple[type, _Handler]:
    """One entry of :data:`_HANDLERS`: the checker sees that ``handler`` takes ``cls``'s events."""
    return cls, handler


_HANDLERS: dict[type, _Handler] = dict(
    [
        _rule(ControllerStarted, _controller_started),
        _rule(ControllerStateChanged, _controller_state_changed),
        _rule(FailureDecisionMade, _failure_decision_made),
        _rule(RunFinished, _finished),
        _rule(RunErrored, _errored),
        _rule(RunAborted, _aborted),
        _rule(TrainerRecorded, _trainer_recorded),
        _rule(RunResumed, _resumed),
        _rule(ScalingDecisionMade, _scaling_decision_made),
        _rule(PreemptionNoticed, _preemption_noticed),
        _rule(StartDeferred, _start_deferred),
        _rule(RecordingFailed, _recording_failed),
    ]
)
"""Each run event type and its handler: it reads the state and returns the fields it changes
(the same style as the worker-group fold's table in :mod:`wgstore.projections.state`)."""


def _first(record: RecordedEvent) -> RunState:
    event = record.event
    if not isinstance(event, RunCreated) or record.version != 1:
        raise ProjectionError.at(record, "a run stream must begin with RunCreated at version 1")
    return RunState(
        stream_id=record.stream_id,
        run_id=event.run_id,
        name=event.name,
        status=RunStatus.INITIALIZING,
        controller_state=ControllerState.INITIALIZING,
        version=record.version,
        position=record.position,
        created_at=event_time(record),
        updated_at=event_time(record),
        scaling_config=event.scaling_config,
        failure_config=event.failure_config,
        context=event.context,
        lease_s=event.lease_s,
        ray=event.ray,
        source=str(record.metadata.get("source") or ""),
    )


def evolve_run(state: RunState | None, record: RecordedEvent) -> RunState:
    """Apply one recorded event of a ``run-<id>`` stream to ``state`` (``None`` before the first).

    Raises:
        ProjectionError: unknown event type, out-of-order version, an event after the run ended,
            a controller transition that does not start from the current controller state, or a
            stream that does not begin with ``RunCreated``.
    """
    if state is None:
        return _first(record)
    event = record.event
    ProjectionError.check_follows(record, state.stream_id, state.version)
    handler = _HANDLERS.get(type(event))
    if handler is None and isinstance(event, UnknownEvent):
        changes: RunChanges = {}  # not ours to interpret: step over it
    elif state.ended and not isinstance(event, RecordingFailed):  # (a recording note may follow)
        raise ProjectionError.at(
            record, f"run {state.run_id!r} already ended as {state.status.value}"
        )
    elif handler is None:
        if isinstance(event, RunCreated):
            raise ProjectionError.at(
                record, f"run {state.run_id!r} was already created at version 1"
            )
        raise ProjectionError.at(
            record,
            f"{type(event).__module__}.{type(event).__qualname__} is not a run event; the run "
            "projection does not know how to apply it",
        )
    else:
        changes = handler(state, record)
    changes["version"] = record.version
    changes["position"] = record.position
    changes["updated_at"] = event_time(record)
    return replace(state, **changes)


def project_run(events: Iterable[RecordedEvent], state: RunState | None = None) -> RunState:
    """Fold the events of one ``run-<id>`` stream into its :class:`RunState`.

    Raises:
        ProjectionError: as :func:`evolve_run`, or when there is nothing to fold.
    """
    for event in events:
        state = evolve_run(state, event)
    if state is None:
        raise ProjectionError.nothing_to_fold()
    return state


_SHARED_LIMIT = (FailureKind.START, FailureKind.CONTROLLER)
_SAME_LIMIT: Mapping[str, tuple[str, ...]] = {
    FailureKind.START: _SHARED_LIMIT,
    FailureKind.CONTROLLER: _SHARED_LIMIT,
}


def needs_controller(state: RunState) -> bool:
    """True while a live process must hold the run's lease: the run has not ended and its
    latest controller took a lease: wgstore's own controller (the run has a ``context``) or a Ray
    Train recorder that holds one (``ControllerStarted.lease_s``). Runs no controller ever took,
    and Ray Train runs recorded before recorders held leases, never need one."""
    if state.ended or not state.controllers:
        return False
    return state.context is not None or state.controllers[-1].lease_s is not None


def lease_lapsed(lease_expires_at: datetime | None, now: datetime) -> bool:
    """True when no controller holds a live lease: no ``wg_run_leases`` row, or it expired."""
    return lease_expires_at is None or now >= lease_expires_at


def is_orphaned(state: RunState, lease_expires_at: datetime | None, now: datetime) -> bool:
    """True when a run has not ended and the process that must hold its lease holds none live:
    its wgstore controller, or the Ray Train controller recording it, is gone (its driver died).

    ``lease_expires_at`` is the run's lease (``wg_run_leases.expires_at``; ``None`` when no row).
    See :func:`needs_controller` for which runs need a lease.
    """
    return needs_controller(state) and lease_lapsed(lease_expires_at, now)


def resume_problem(state: RunState) -> str | None:
    """Why the run could not be started again from the log (``None``: it could).

    A run of wgstore's controller can (its ``RunCreated`` holds the context every attempt starts
    from). A run recorded from Ray Train can once its ``TrainerRecorded`` says it is resumable.
    """
    if state.context is not None:
        return None
    if state.source == RAY_EXPORT_SOURCE:
        return (
            "recorded from Ray's export events, which carry no train loop, metrics or "
            "checkpoints (listed, watched and audited; record it with RecordingCallback to "
            "resume it)"
        )
    if state.trainer is None:
        return "no TrainerRecorded in the log (recorded by an older wgstore, or it was not written)"
    if not state.trainer.resumable:
        return state.trainer.not_resumable_reason or "recorded as not resumable"
    return None
