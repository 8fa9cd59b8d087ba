"""The state of one worker group, folded from the events of its stream ``worker-group-<id>``.

Pure: no I/O, no clock, no Ray. :func:`evolve` applies one recorded event to a state and returns
a new, frozen state; :func:`project_worker_group` folds a whole stream (or any prefix of it).

Lifecycle (one table, :data:`TRANSITIONS`)::

    REQUESTED ─► STARTING ─► RUNNING ─► SHUTTING_DOWN ─► SHUT_DOWN
        │            │          │            ▲
        │            │          └─► START_FAILED (training failed to launch)
        └────────────┴─► START_FAILED       │
        └────────────┴──────────────────────┘ (shutdown asked before the start finished)

Decisions worth knowing:

- A ``WorkerGroupPolled`` or ``WorkerReported`` may arrive while ``SHUTTING_DOWN``: the poll or
  report was in flight when shutdown was asked, and what it says is true, so it is applied. Once
  ``SHUT_DOWN`` or ``START_FAILED`` (terminal) every further event is an error, except a
  ``WorkerReported`` after ``SHUT_DOWN``: workers append their reports themselves, and one whose
  append committed as its actor was being killed can land after the shutdown. It is applied
  (counted, latest metrics) and the status stays ``SHUT_DOWN``.
- Before the first recorded poll every worker of ``WorkersStarted`` counts as running with no
  error; a poll records only the workers whose status changed from that (or from the previous
  recorded poll).
- ``polls_total`` counts the polls the log accounts for (each recorded poll plus the unchanged
  polls it stands for); ``last_poll_seq`` is the executor's own counter. They differ only if an
  executor died holding unrecorded unchanged polls.
- An event of a type the reading process does not know (an :class:`~wgstore.events.UnknownEvent`:
  another program's own event type appended to the stream) is stepped over: it moves the state's
  ``version``, ``position`` and ``updated_at`` and nothing else, even after a terminal state.
  An event of a known type that the fold has no rule for is still an error.
- A checkpoint counts once every rank of the group reported its report index, as Ray Train
  commits one (:func:`commit_round`): ``latest_checkpoint`` is that of the highest such index,
  with ``checkpoint_index`` and ``checkpoint_committed_at``; ``latest_reported_checkpoint`` is
  the latest any rank reported, which a rank that died before its peers reported may never see
  committed (a shard of a sharded checkpoint missing).
- The training ``outcome`` is separate from the lifecycle status: ``errored`` as soon as a
  recorded poll shows a worker error, ``finished`` when a recorded poll shows every worker stopped
  without error, ``aborted`` when the group shut down before either was seen.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypedDict, TypeVar, cast

from wgstore.events.records import RecordedEvent, UnknownEvent, is_record_of
from wgstore.events.worker_group import (
    CallbackFailed,
    ErrorInfo,
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkerShutdown,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.projections.errors import ProjectionError
from wgstore.projections.event_time import RAY_TIME_KEY, event_time

__all__ = [
    "TRANSITIONS",
    "ReportRound",
    "TrainingOutcome",
    "WorkerGroupChanges",
    "WorkerGroupFold",
    "WorkerGroupPollStatus",
    "WorkerGroupState",
    "WorkerGroupStatus",
    "WorkerStatus",
    "apply_poll_changes",
    "commit_round",
    "evolve",
    "project_worker_group",
]


class WorkerGroupStatus(enum.StrEnum):
    """Where a worker group is in its lifecycle."""

    REQUESTED = "REQUESTED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    SHUT_DOWN = "SHUT_DOWN"
    START_FAILED = "START_FAILED"

    @property
    def is_terminal(self) -> bool:
        """True for ``SHUT_DOWN`` and ``START_FAILED``: no event may follow."""
        return self in (WorkerGroupStatus.SHUT_DOWN, WorkerGroupStatus.START_FAILED)


class TrainingOutcome(enum.StrEnum):
    """How training on the group ended, independent of the group's lifecycle status."""

    FINISHED = "finished"
    ERRORED = "errored"
    ABORTED = "aborted"
    RESIZED = "resized"
    """Stopped so that an elastic run starts again at another size (no failure)."""


_S = WorkerGroupStatus

TRANSITIONS: Mapping[WorkerGroupStatus, frozenset[WorkerGroupStatus]] = {
    _S.REQUESTED: frozenset({_S.STARTING, _S.START_FAILED, _S.SHUTTING_DOWN}),
    _S.STARTING: frozenset({_S.STARTING, _S.RUNNING, _S.START_FAILED, _S.SHUTTING_DOWN}),
    _S.RUNNING: frozenset({_S.RUNNING, _S.START_FAILED, _S.SHUTTING_DOWN}),
    _S.SHUTTING_DOWN: frozenset({_S.SHUTTING_DOWN, _S.SHUT_DOWN}),
    _S.SHUT_DOWN: frozenset(),
    _S.START_FAILED: frozenset(),
}
"""Every allowed status change (staying put included, where an event may leave it unchanged)."""


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """The status of one worker at a poll: still running, the error it stopped with, if any, and
    what its train function returned (Ray 2.60's ``WorkerStatus.return_value``)."""

    running: bool
    error: ErrorInfo | None = None
    return_value: Any = None


@dataclass(frozen=True, slots=True)
class WorkerGroupPollStatus:
    """The status of every worker of a group at one poll, keyed by world rank."""

    worker_statuses: Mapping[int, WorkerStatus]

    @property
    def errors(self) -> dict[int, ErrorInfo]:
        """The ranks whose worker stopped with an error, and the error."""
        return {
            rank: status.error
            for rank, status in self.worker_statuses.items()
            if status.error is not None
        }

    @property
    def finished(self) -> bool:
        """True when there is at least one worker and none is running."""
        return bool(self.worker_statuses) and not any(
            status.running for status in self.worker_statuses.values()
        )

    @property
    def return_values(self) -> dict[int, Any]:
        """What the train function returned on each rank that finished without error."""
        return {
            rank: status.return_value
            for rank, status in self.worker_statuses.items()
            if not status.running and status.error is None
        }

    @property
    def num_running(self) -> int:
        """How many workers are running."""
        return sum(1 for status in self.worker_statuses.values() if status.running)

    def get_error_string(self) -> str:
        """Every worker error as Ray Train 2.60 prints it (``WorkerGroupPollStatus``).

        Ranks whose errors are the same once numbers are ignored share one
        ``[Rank 0,2 Error Snippet]:`` entry showing the first rank's text; a train-function
        error shows the user's traceback. An error of a worker that stopped on its own is cut
        to its first and last 500 characters when it reaches 1000; a health-check failure or
        the error of a still-running worker is shown whole. The structured errors stay in
        :attr:`errors`.
        """
        ranks_of: dict[str, list[str]] = {}
        original: dict[str, str] = {}
        show_full: set[str] = set()
        for rank, status in sorted(self.worker_statuses.items()):
            if status.error is None:
                continue
            text = status.error.ray_text()
            key = _NUMBERS.sub("<NUM>", text)
            ranks_of.setdefault(key, []).append(str(rank))
            original.setdefault(key, text)
            if status.error.type == "WorkerHealthCheckFailedError" or status.running:
                show_full.add(key)
        return "\n".join(
            f"[Rank {','.join(ranks)} Error Snippet]:\n"
            + (original[key] if key in show_full else _truncate(original[key]))
            for key, ranks in ranks_of.items()
        )


_NUMBERS = re.compile(r"(\d+|0x[0-9a-fA-F]+)")
"""Ray's ``ray._private.ray_logging.NUMBERS``: errors that differ only here are grouped."""
ERROR_CHAR_LIMIT = 1000
"""Ray's ``ERR_CHAR_LIMIT``: longer errors keep their first and last half of it."""


def _truncate(text: str) -> str:
    if len(text) < ERROR_CHAR_LIMIT:
        return text
    half = ERROR_CHAR_LIMIT // 2
    return (
        text[:half]
        + "...\n... (Output truncated. See individual worker logs for full details) ...\n"
        + text[len(text) - half :]
    )


@dataclass(frozen=True, slots=True)
class ReportRound:
    """The reports of one report index so far: how many ranks reported it, the checkpoint they
    carry, and whether two ranks carried different paths (the round can then commit none)."""

    reported: int
    checkpoint: str | None = None
    conflict: bool = False


def commit_round(
    round_: ReportRound | None, checkpoint: str | None, num_workers: int
) -> tuple[ReportRound, bool]:
    """One more rank's report of an index: the round after it, and whether it is now complete.

    Ray Train's ``ReportCallbackHandler`` consolidates the n-th report of every rank into one
    report once every rank made it; the reports that carry a checkpoint must name the same path
    (ranks that carry none are fine: with DDP only rank 0 saves), and that path is the
    checkpoint Ray registers. A complete round with a checkpoint and no conflict commits it. A
    round whose ranks named different paths commits nothing (Ray raises; wgstore's workers
    refuse such a report, so only another writer's log can hold one): the previous committed
    checkpoint stays, as no rank's set of shards is known to be whole.
    """
    if round_ is None:
        round_ = _EMPTY_ROUND
    path, conflict = round_.checkpoint, round_.conflict
    if checkpoint is not None:
        if path is None:
            path = checkpoint
        elif path != checkpoint:
            conflict = True
    after = ReportRound(round_.reported + 1, path, conflict)
    return after, after.reported >= num_workers


_EMPTY_ROUND = ReportRound(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupState:
    """A worker group as the log tells it, after the event at ``version`` of its stream.

    Times are those of the events that set them (UTC): their ``recorded_at``, or for a run
    recorded from Ray Train the time Ray called the hook
    (:func:`~wgstore.projections.event_time.event_time`), except where a field says otherwise. Mappings keyed by ``int`` are keyed by world rank.
    """

    stream_id: str
    group_id: str
    run_id: str
    attempt: int
    context: WorkerGroupContext
    status: WorkerGroupStatus
    version: int
    """The last stream version folded in."""
    position: int
    """The global log position of the last event folded in."""
    requested_at: datetime
    updated_at: datetime
    """When the last event folded in was recorded."""
    placement_group: PlacementGroupReserved | None = None
    sync_actor: SyncActorStarted | None = None
    workers: tuple[WorkerInfo, ...] = ()
    """Sorted by world rank."""
    started_at: datetime | None = None
    startup_s: float | None = None
    """As the executor measured it (``WorkerGroupStarted.startup_s``)."""
    training_launched: bool = False
    training_launched_at: datetime | None = None
    poll_status: WorkerGroupPollStatus | None = None
    """As of the latest recorded poll; ``None`` before the first."""
    last_poll_seq: int = 0
    last_polled_at: datetime | None = None
    """``polled_at`` of the latest recorded poll (the executor's clock)."""
    polls_total: int = 0
    """Polls the log accounts for: recorded ones plus the unchanged polls they stand for."""
    recorded_polls: int = 0
    latest_metrics: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    """The metrics of the latest report of each rank."""
    report_counts: Mapping[int, int] = field(default_factory=dict)
    last_report_index: Mapping[int, int] = field(default_factory=dict)
    latest_checkpoint: str | None = None
    """The committed checkpoint: that of the highest report index every rank reported (see
    :func:`commit_round`); what a retry or a resume starts from."""
    checkpoint_index: int | None = None
    """The report index of :attr:`latest_checkpoint`."""
    checkpoint_committed_at: datetime | None = None
    """When :attr:`latest_checkpoint` was committed: the ``recorded_at`` of the last rank's
    report of its index."""
    latest_reported_checkpoint: str | None = None
    """The checkpoint of the latest report (any rank) that carried one, committed or not."""
    report_rounds: Mapping[int, ReportRound] = field(default_factory=dict)
    """Report indexes above the last complete one that some but not every rank reported."""
    start_failure: WorkerGroupStartFailed | None = None
    shutdown_reason: str | None = None
    shutdown_requested_at: datetime | None = None
    shut_down_at: datetime | None = None
    shutdown_duration_s: float | None = None
    worker_endings: tuple[WorkerShutdown, ...] = ()
    """Per rank, whether the worker ended on its own at shutdown or was killed."""
    aborted: bool = False
    """The shutdown was an ``abort()``."""
    resized_to: int | None = None
    """The shutdown was an elastic run's resize: the run starts again at this size."""
    callback_failures: tuple[CallbackFailed, ...] = ()
    """Executor hooks (``WorkerGroupCallback``) that raised, in log order."""
    released: tuple[str, ...] = ()
    """Resources released by a failed start or by the shutdown."""

    @property
    def num_workers(self) -> int:
        """How many workers: those started, or those asked for before they started."""
        return len(self.workers) if self.workers else self.context.num_workers

    @property
    def is_terminal(self) -> bool:
        """True once the group is shut down or failed to start: no event may follow."""
        return self.status.is_terminal

    @property
    def outcome(self) -> TrainingOutcome | None:
        """How training ended: errored, finished, aborted, or ``None`` while it is not known."""
        status = self.poll_status
        if status is not None:
            if any(s.error is not None for s in status.worker_statuses.values()):
                return TrainingOutcome.ERRORED
            if status.finished:
                return TrainingOutcome.FINISHED
        if self.status is WorkerGroupStatus.SHUT_DOWN:
            return TrainingOutcome.ABORTED if self.resized_to is None else TrainingOutcome.RESIZED
        return None

    @property
    def errors(self) -> dict[int, ErrorInfo]:
        """The worker errors of the latest recorded poll, by rank."""
        return {} if self.poll_status is None else self.poll_status.errors

    @property
    def error(self) -> ErrorInfo | None:
        """The group's error: why the start failed, or the lowest-ranked worker error."""
        if self.start_failure is not None:
            return self.start_failure.error
        errors = self.errors
        return errors[min(errors)] if errors else None

    @property
    def return_values(self) -> dict[int, Any]:
        """What the train function returned on each rank that finished (latest recorded poll).

        Ray Train keeps rank 0's as the run's return value; here every rank's is kept.
        """
        return {} if self.poll_status is None else self.poll_status.return_values

    @property
    def return_value(self) -> Any:
        """Rank 0's return value (Ray's ``Result.return_value``), ``None`` until it finished."""
        return self.return_values.get(0)

    @property
    def reports_total(self) -> int:
        """How many reports every worker made, together."""
        return sum(self.report_counts.values())

    @property
    def node_ids(self) -> tuple[str, ...]:
        """The nodes the workers run on, in rank order, each once."""
        return tuple(dict.fromkeys(w.node_id for w in self.workers))

    def worker(self, world_rank: int) -> WorkerInfo:
        """The worker with ``world_rank``.

        Raises:
            KeyError: no started worker has that rank.
        """
        if (
            0 <= world_rank < len(self.workers)
            and self.workers[world_rank].world_rank == world_rank
        ):
            return self.workers[world_rank]
        for info in self.workers:
            if info.world_rank == world_rank:
                return info
        raise KeyError(f"group {self.group_id!r} has no worker with world rank {world_rank}")


class WorkerGroupChanges(TypedDict, total=False):
    """The fields of a :class:`WorkerGroupState` one event changes: what each handler of the fold
    returns (a test keeps its keys and types those of the state's fields)."""

    stream_id: str
    group_id: str
    run_id: str
    attempt: int
    context: WorkerGroupContext
    status: WorkerGroupStatus
    version: int
    position: int
    requested_at: datetime
    updated_at: datetime
    placement_group: PlacementGroupReserved | None
    sync_actor: SyncActorStarted | None
    workers: tuple[WorkerInfo, ...]
    started_at: datetime | None
    startup_s: float | None
    training_launched: bool
    training_launched_at: datetime | None
    poll_status: WorkerGroupPollStatus | None
    last_poll_seq: int
    last_polled_at: datetime | None
    polls_total: int
    recorded_polls: int
    latest_metrics: Mapping[int, Mapping[str, Any]]
    report_counts: Mapping[int, int]
    last_report_index: Mapping[int, int]
    latest_checkpoint: str | None
    checkpoint_index: int | None
    checkpoint_committed_at: datetime | None
    latest_reported_checkpoint: str | None
    report_rounds: Mapping[int, ReportRound]
    start_failure: WorkerGroupStartFailed | None
    shutdown_reason: str | None
    shutdown_requested_at: datetime | None
    shut_down_at: datetime | None
    shutdown_duration_s: float | None
    worker_endings: tuple[WorkerShutdown, ...]
    aborted: bool
    resized_to: int | None
    callback_failures: tuple[CallbackFailed, ...]
    released: tuple[str, ...]


def apply_poll_changes(
    previous: WorkerGroupPollStatus | None,
    ranks: Iterable[int],
    changes: Iterable[WorkerStatusChange],
) -> WorkerGroupPollStatus:
    """The full poll status after ``changes``, starting from ``previous``.

    With no previous poll, every rank in ``ranks`` starts as running with no error. Ranks not
    in ``ranks`` raise ``KeyError``.
    """
    if previous is None:
        statuses = dict.fromkeys(ranks, _RUNNING)
    else:
        statuses = dict(previous.worker_statuses)
    for change in changes:
        rank = change.world_rank
        if rank not in statuses:
            raise KeyError(rank)
        if change.error is None and change.return_value is None:
            # the common change, a worker starting or stopping: share one frozen status
            statuses[rank] = _RUNNING if change.running else _STOPPED
        else:
            statuses[rank] = WorkerStatus(
                running=change.running, error=change.error, return_value=change.return_value
            )
    poll_status = _new(WorkerGroupPollStatus)  # its __init__ only sets the one field
    _set_statuses(poll_status, statuses)
    return poll_status


_new = object.__new__
# The field's slot, set through its descriptor: cheaper than object.__setattr__ by name.
_set_statuses = vars(WorkerGroupPollStatus)["worker_statuses"].__set__


_RUNNING = WorkerStatus(running=True)
_STOPPED = WorkerStatus(running=False)


def _move(state: WorkerGroupState, record: RecordedEvent, to: WorkerGroupStatus) -> None:
    if to not in TRANSITIONS[state.status]:
        raise ProjectionError.at(
            record,
            f"{type(record.event).__name__} cannot move group {state.group_id!r} from "
            f"{state.status.value} to {to.value}",
        )


def _start_requested(
    state: WorkerGroupState | None, record: RecordedEvent[WorkerGroupStartRequested]
) -> WorkerGroupState:
    event = record.event
    if state is not None:
        raise ProjectionError.at(
            record, f"group {state.group_id!r} was already requested at version 1"
        )
    return WorkerGroupState(
        stream_id=record.stream_id,
        group_id=event.group_id,
        run_id=event.run_id,
        attempt=event.attempt,
        context=event.context,
        status=WorkerGroupStatus.REQUESTED,
        version=record.version,
        position=record.position,
        requested_at=event_time(record),
        updated_at=event_time(record),
    )


def _builder_step(state: WorkerGroupState, record: RecordedEvent, attr: str) -> WorkerGroupChanges:
    if state.status not in (WorkerGroupStatus.REQUESTED, WorkerGroupStatus.STARTING):
        raise ProjectionError.at(
            record, f"a builder step cannot happen while the group is {state.status.value}"
        )
    if getattr(state, attr) not in (None, ()):
        raise ProjectionError.at(
            record, f"{attr.replace('_', ' ')} of group {state.group_id!r} is already set"
        )
    return {"status": WorkerGroupStatus.STARTING}


def _placement_group(
    state: WorkerGroupState, record: RecordedEvent[PlacementGroupReserved]
) -> WorkerGroupChanges:
    changes = _builder_step(state, record, "placement_group")
    changes["placement_group"] = record.event
    return changes


def _sync_actor(
    state: WorkerGroupState, record: RecordedEvent[SyncActorStarted]
) -> WorkerGroupChanges:
    changes = _builder_step(state, record, "sync_actor")
    changes["sync_actor"] = record.event
    return changes


def _workers_started(
    state: WorkerGroupState, record: RecordedEvent[WorkersStarted]
) -> WorkerGroupChanges:
    event = record.event
    changes = _builder_step(state, record, "workers")
    workers = tuple(sorted(event.workers, key=lambda w: w.world_rank))
    ranks = [w.world_rank for w in workers]
    if ranks != list(range(len(workers))) or not workers:
        raise ProjectionError.at(
            record, f"world ranks must be 0..n-1 with no gap or repeat, got {ranks}"
        )
    changes["workers"] = workers
    return changes


def _started(
    state: WorkerGroupState, record: RecordedEvent[WorkerGroupStarted]
) -> WorkerGroupChanges:
    event = record.event
    _move(state, record, WorkerGroupStatus.RUNNING)
    missing = [
        name
        for name, value in (
            ("placement_group", state.placement_group),
            ("workers", state.workers),
            ("sync_actor", state.sync_actor),
        )
        if not value
    ]
    if missing or state.status is not WorkerGroupStatus.STARTING:
        raise ProjectionError.at(
            record, f"cannot build incomplete state. Missing: {', '.join(missing)}"
        )
    return {
        "status": WorkerGroupStatus.RUNNING,
        "started_at": event_time(record),
        "startup_s": event.startup_s,
    }


def _training_launched(
    state: WorkerGroupState, record: RecordedEvent[TrainingLaunched]
) -> WorkerGroupChanges:
    if state.status is not WorkerGroupStatus.RUNNING:
        raise ProjectionError.at(
            record, f"training cannot launch while the group is {state.status.value}"
        )
    if state.training_launched:
        raise ProjectionError.at(record, "training was already launched on this group")
    return {"training_launched": True, "training_launched_at": event_time(record)}


def _start_failed(
    state: WorkerGroupState, record: RecordedEvent[WorkerGroupStartFailed]
) -> WorkerGroupChanges:
    event = record.event
    _move(state, record, WorkerGroupStatus.START_FAILED)
    if state.training_launched:
        raise ProjectionError.at(record, "the start cannot fail after training was launched")
    return {
        "status": WorkerGroupStatus.START_FAILED,
        "start_failure": event,
        "released": tuple(event.released),
    }


def _polled(
    state: WorkerGroupState, record: RecordedEvent[WorkerGroupPolled]
) -> WorkerGroupChanges:
    event = record.event
    status = state.status
    if status is not _GROUP_RUNNING and status is not _SHUTTING_DOWN:
        raise ProjectionError.at(record, f"a group cannot be polled while {status.value}")
    if event.poll_seq <= state.last_poll_seq:
        raise ProjectionError.at(
            record,
            f"poll_seq {event.poll_seq} does not follow the last recorded poll_seq "
            f"{state.last_poll_seq}",
        )
    if event.unchanged_polls < 0:
        raise ProjectionError.at(
            record, f"unchanged_polls must be >= 0, got {event.unchanged_polls}"
        )
    previous = state.poll_status
    ranks = () if previous is not None else [w.world_rank for w in state.workers]
    try:
        poll_status = apply_poll_changes(previous, ranks, event.changes)
    except KeyError as missing:
        raise ProjectionError.at(record, f"no worker has world rank {missing.args[0]}") from None
    return {
        "poll_status": poll_status,
        "last_poll_seq": event.poll_seq,
        "last_polled_at": event.polled_at,
        "polls_total": state.polls_total + event.unchanged_polls + 1,
        "recorded_polls": state.recorded_polls + 1,
    }


def _reported(state: WorkerGroupState, record: RecordedEvent[WorkerReported]) -> WorkerGroupChanges:
    event = record.event
    status = state.status
    if status is not _GROUP_RUNNING and status is not _SHUTTING_DOWN and status is not _SHUT_DOWN:
        raise ProjectionError.at(
            record, f"a worker cannot report while the group is {state.status.value}"
        )
    rank = event.world_rank
    if not 0 <= rank < len(state.workers):
        raise ProjectionError.at(record, f"no worker has world rank {rank}")
    previous = state.last_report_index.get(rank)
    if previous is not None and event.index <= previous:
        raise ProjectionError.at(
            record, f"report index {event.index} of rank {rank} does not follow index {previous}"
        )
    metrics: dict[int, Mapping[str, Any]]
    counts: dict[int, int]
    indexes: dict[int, int]
    rounds: dict[int, ReportRound]
    changes: WorkerGroupChanges
    draft = state if isinstance(state, _Draft) else None  # a _Draft while folding
    if draft is not None and draft.owns_reports:
        # this fold's own copies, which no frozen state shares yet: update them in place
        metrics, counts, indexes, rounds = (
            draft.latest_metrics,
            draft.report_counts,
            draft.last_report_index,
            draft.report_rounds,
        )
        changes = {}
    else:
        metrics = dict(state.latest_metrics)
        counts = dict(state.report_counts)
        indexes = dict(state.last_report_index)
        rounds = dict(state.report_rounds)
        if draft is not None:
            draft.owns_reports = True
        changes = {
            "latest_metrics": metrics,
            "report_counts": counts,
            "last_report_index": indexes,
            "report_rounds": rounds,
        }
    checkpoint = event.checkpoint
    if checkpoint is not None:
        changes["latest_reported_checkpoint"] = checkpoint
    metrics[rank] = event.metrics
    counts[rank] = counts.get(rank, 0) + 1
    index = event.index
    indexes[rank] = index
    round_, complete = commit_round(rounds.get(index), checkpoint, len(state.workers))
    if not complete:
        rounds[index] = round_
        return changes
    # Every rank reported this index. Each rank's indexes only grow, so no lower index that
    # is still open can complete any more: drop them with this one.
    for stale in [i for i in rounds if i <= index]:
        del rounds[stale]
    if round_.checkpoint is not None and not round_.conflict:
        changes["latest_checkpoint"] = round_.checkpoint
        changes["checkpoint_index"] = index
        changes["checkpoint_committed_at"] = record.recorded_at
    return changes


def _shutdown_requested(
    state: WorkerGroupState, record: RecordedEvent[WorkerGroupShutdownRequested]
) -> WorkerGroupChanges:
    event = record.event
    _move(state, record, WorkerGroupStatus.SHUTTING_DOWN)
    if state.status is WorkerGroupStatus.SHUTTING_DOWN:
        return {}  # asked again: the first reason and time stand
    return {
        "status": WorkerGroupStatus.SHUTTING_DOWN,
        "shutdown_reason": event.reason,
        "aborted": event.abort,
        "resized_to": event.resized_to,
        "shutdown_requested_at": event_time(record),
    }


def _shut_down(
    state: WorkerGroupState, record: RecordedEvent[WorkerGroupShutDown]
) -> WorkerGroupChanges:
    event = record.event
    _move(state, record, WorkerGroupStatus.SHUT_DOWN)
    return {
        "status": WorkerGroupStatus.SHUT_DOWN,
        "shut_down_at": event_time(record),
        "shutdown_duration_s": event.duration_s,
        "worker_endings": tuple(event.workers),
        "released": tuple(event.released),
    }


def _callback_failed(
    state: WorkerGroupState, record: RecordedEvent[CallbackFailed]
) -> WorkerGroupChanges:
    return {"callback_failures": (*state.callback_failures, record.event)}


_Handler = Callable[[WorkerGroupState, RecordedEvent[Any]], WorkerGroupChanges]
_E = TypeVar("_E")


def _rule(
    cls: type[_E], handler: Callable[[WorkerGroupState, RecordedEvent[_E]], WorkerGroupChanges]
) -> tuple[type, _Handler]:
    """One entry of :data:`_HANDLERS`: the checker sees that ``handler`` takes ``cls``'s events."""
    return cls, handler


_HANDLERS: dict[type, _Handler] = dict(
    [
        _rule(PlacementGroupReserved, _placement_group),
        _rule(SyncActorStarted, _sync_actor),
        _rule(WorkersStarted, _workers_started),
        _rule(WorkerGroupStarted, _started),
        _rule(TrainingLaunched, _training_launched),
        _rule(WorkerGroupStartFailed, _start_failed),
        _rule(WorkerGroupPolled, _polled),
        _rule(WorkerReported, _reported),
        _rule(WorkerGroupShutdownRequested, _shutdown_requested),
        _rule(WorkerGroupShutDown, _shut_down),
        _rule(CallbackFailed, _callback_failed),
    ]
)


class _Draft:
    """A mutable copy of a state's fields, so a fold of many events builds one frozen state.

    Handlers only read attributes and return the fields they change, so they work on a draft
    exactly as on a :class:`WorkerGroupState`: it has the state's fields as attributes and its
    properties and methods (copied below), which is what lets :meth:`as_state` hand it to them
    typed as one. One exception saves three dict copies per report: while ``owns_reports`` is
    set, the report mappings are the draft's own copies, shared with no frozen state, and
    ``_reported`` updates them in place.
    """

    __slots__ = ("__dict__", "owns_reports")

    # the report mappings as the draft holds them once it owns them (``owns_reports``)
    latest_metrics: dict[int, Mapping[str, Any]]
    report_counts: dict[int, int]
    last_report_index: dict[int, int]
    report_rounds: dict[int, ReportRound]

    def __init__(self, state: WorkerGroupState) -> None:
        self.__dict__.update({name: getattr(state, name) for name in _FIELDS})
        self.owns_reports = False

    def as_state(self) -> WorkerGroupState:
        """The draft as the checker should see it: a state (fields, properties and methods)."""
        return cast(WorkerGroupState, self)

    def freeze(self) -> WorkerGroupState:
        self.owns_reports = False  # the frozen state shares the mappings from here on
        return WorkerGroupState(**self.__dict__)


_FIELDS = tuple(f.name for f in fields(WorkerGroupState))

for _name, _member in vars(WorkerGroupState).items():
    if isinstance(_member, property) or (inspect.isfunction(_member) and _name[0] != "_"):
        setattr(_Draft, _name, _member)  # a draft answers num_workers, outcome, worker(), ...


def _first(event: RecordedEvent) -> WorkerGroupState:
    if not is_record_of(event, WorkerGroupStartRequested):
        raise ProjectionError.at(
            event,
            "a worker-group stream must begin with WorkerGroupStartRequested; fold the "
            "stream from version 1 (or from a snapshot)",
        )
    if event.version != 1:
        raise ProjectionError.at(event, "WorkerGroupStartRequested must be version 1 of its stream")
    return _start_requested(None, event)


def _apply(draft: _Draft, events: Iterable[RecordedEvent]) -> None:
    """Fold ``events`` into ``draft`` (the loop is here: one call per fold, not per event)."""
    values = draft.__dict__  # the draft's fields: reading them here skips attribute lookups
    state = draft.as_state()  # what the handlers read
    handlers = _HANDLERS
    for event in events:
        payload = event.event
        version = event.version
        if event.stream_id != values["stream_id"] or version != values["version"] + 1:
            ProjectionError.check_follows(event, values["stream_id"], values["version"])  # raises
        handler = handlers.get(type(payload))
        status = values["status"]
        # identity, not a set: an enum member's hash is a Python-level call
        if handler is not None and status is not _SHUT_DOWN and status is not _START_FAILED:
            changes = handler(state, event)
        else:
            changes = _unusual(state, event, handler, status)
        values.update(changes)
        values["version"] = version
        values["position"] = event.position
        # event_time() inlined for the common case: only Ray Train's recorder sets this key
        values["updated_at"] = (
            event_time(event) if RAY_TIME_KEY in event.metadata else event.recorded_at
        )


def _unusual(
    draft: WorkerGroupState,
    event: RecordedEvent,
    handler: _Handler | None,
    status: WorkerGroupStatus,
) -> WorkerGroupChanges:
    """The changes of an event of no known type, or one that follows a terminal state."""
    payload = event.event
    if handler is None and isinstance(payload, UnknownEvent):
        return {}  # not ours to interpret: step over it
    if (
        not isinstance(payload, CallbackFailed)  # after_* hooks run after the end
        and not (
            # a worker's own append can commit while its actor is being killed at shutdown
            status is _SHUT_DOWN and isinstance(payload, WorkerReported)
        )
        and (status is _SHUT_DOWN or status is _START_FAILED)
    ):
        raise ProjectionError.at(event, f"group {draft.group_id!r} is already {status.value}")
    if handler is None:
        if is_record_of(event, WorkerGroupStartRequested):
            _start_requested(draft, event)  # raises
        raise ProjectionError.at(
            event,
            f"{type(payload).__module__}.{type(payload).__qualname__} is not a worker-group "
            "event; the worker-group projection does not know how to apply it",
        )
    return handler(draft, event)


# The statuses the per-event code compares with, as module globals: reading a member off the
# enum class (``WorkerGroupStatus.RUNNING``) costs ten times as much, on every event.
_GROUP_RUNNING = WorkerGroupStatus.RUNNING
_SHUTTING_DOWN = WorkerGroupStatus.SHUTTING_DOWN
_SHUT_DOWN = WorkerGroupStatus.SHUT_DOWN
_START_FAILED = WorkerGroupStatus.START_FAILED


def evolve(state: WorkerGroupState | None, event: RecordedEvent) -> WorkerGroupState:
    """Apply one recorded event of a worker-group stream to ``state`` (``None`` before the first).

    Returns:
        A new state; ``state`` is never changed.

    Raises:
        ProjectionError: the event is of an unknown type, is not the next version of the same
            stream, follows a terminal state, breaks the lifecycle, or the stream does not
            begin with ``WorkerGroupStartRequested``.
    """
    if state is None:
        return _first(event)
    draft = _Draft(state)
    _apply(draft, (event,))
    return draft.freeze()


class WorkerGroupFold:
    """Folds events one at a time without building a frozen state after each one.

    ``project_worker_group`` and the poll history use it; :meth:`state` freezes the result.
    """

    def __init__(self, state: WorkerGroupState | None = None) -> None:
        self._draft: _Draft | None = None if state is None else _Draft(state)

    def apply(self, event: RecordedEvent) -> WorkerGroupState:
        """Fold in one event (see :func:`evolve` for what raises); returns :attr:`view`, the
        state folded so far (never ``None`` once an event is folded)."""
        if self._draft is None:
            self._draft = _Draft(_first(event))
        else:
            _apply(self._draft, (event,))
        return self._draft.as_state()

    @property
    def view(self) -> WorkerGroupState | None:
        """The state folded so far, read-only by convention (``None`` before any event).

        Not frozen: the fold's draft, with the fields, properties and methods of
        :class:`WorkerGroupState`; cheaper than
        :meth:`state` when only a few fields are needed after each event. Its report mappings
        (``latest_metrics``, ``report_counts``, ``last_report_index``, ``report_rounds``) are
        updated in place by later reports: copy one to keep it as it is now (:meth:`state`'s are never changed).
        """
        return None if self._draft is None else self._draft.as_state()

    @property
    def poll_status(self) -> WorkerGroupPollStatus | None:
        """The poll status folded so far."""
        return None if self._draft is None else self._draft.as_state().poll_status

    def state(self) -> WorkerGroupState | None:
        """The state folded so far (``None`` before any event)."""
        return None if self._draft is None else self._draft.freeze()


def project_worker_group(
    events: Iterable[RecordedEvent], state: WorkerGroupState | None = None
) -> WorkerGroupState:
    """Fold ``events`` (in stream order) into the state of their worker group.

    Args:
        events: the events of one ``worker-group-<id>`` stream, from version 1, or the ones that
            follow ``state``.
        state: a state to continue from (a snapshot, or an earlier fold).

    Raises:
        ProjectionError: as :func:`evolve`, or when there are no events and no state.
    """
    iterator = iter(events)
    if state is None:
        for first in iterator:
            state = _first(first)
            break
        else:
            raise ProjectionError.nothing_to_fold()
    draft = _Draft(state)
    _apply(draft, iterator)  # WorkerGroupFold.apply's work, without two calls per event
    return draft.freeze()
