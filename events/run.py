"""Event types of the stream ``run-<run_id>``: the controller's view of a training run.

A run is attempts of a worker group under a failure policy. ``RunCreated`` holds the run's
configuration (Ray Train's names: :class:`ScalingConfig`, :class:`FailureConfig`, and the
worker-group context every attempt starts from); ``ControllerStarted`` records each controller
process that took the run (a resumed run shows more than one); ``ControllerStateChanged`` uses Ray
Train's controller state names; ``FailureDecisionMade`` answers one failure (RETRY or RAISE) with
the failures of its kind counted so far; the run ends with exactly one of ``RunFinished``,
``RunErrored`` or ``RunAborted``. A run recorded from Ray Train also holds, once,
``TrainerRecorded``: what it takes to build its trainer again (or why it cannot be).

A run whose size may change (an elastic run: ``ScalingConfig(min_workers=...)``) records every
size its scaling policy chose as ``ScalingDecisionMade`` (from what, to what, why), and a node's
announced preemption as ``PreemptionNoticed``. A recorder hook that could not record what Ray
handed it says so in ``RecordingFailed``, so the run stays readable with what was recorded.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wgstore.events.registry import event_type
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import ErrorInfo, WorkerGroupContext

__all__ = [
    "CONTROLLER_STATES",
    "FAILURE_KINDS",
    "ControllerStarted",
    "ControllerState",
    "ControllerStateChanged",
    "FailureConfig",
    "FailureDecisionMade",
    "FailureKind",
    "Pickled",
    "PreemptionNoticed",
    "RankError",
    "RecordingFailed",
    "ResizeCause",
    "RetryDecision",
    "RunAborted",
    "RunCreated",
    "RunErrored",
    "RunFinished",
    "RunResumed",
    "ScalingConfig",
    "ScalingDecisionMade",
    "StartDeferred",
    "TrainerRecorded",
    "stream_id_for_run",
]


stream_id_for_run = run_stream
"""The stream of a run: :func:`wgstore.events.streams.run_stream` (kept name)."""


class ControllerState(enum.StrEnum):
    """The run controller's state: Ray Train 2.60's ``TrainControllerStateType`` names.

    A ``StrEnum``: each member is its name as a ``str``, so events store exactly the text they
    stored before (``ControllerStateChanged.to_state`` is still a string on the wire, and a
    stored string compares equal to its member).
    """

    INITIALIZING = "INITIALIZING"
    SCHEDULING = "SCHEDULING"
    RESCHEDULING = "RESCHEDULING"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    RESTARTING = "RESTARTING"
    RESIZING = "RESIZING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        """True for ``FINISHED``, ``ERRORED`` and ``ABORTED`` (as Ray's ``is_terminal``)."""
        return self in _TERMINAL_STATES


_TERMINAL_STATES = frozenset(
    {ControllerState.FINISHED, ControllerState.ERRORED, ControllerState.ABORTED}
)


class RetryDecision(enum.StrEnum):
    """How the failure policy answers a failure: Ray Train 2.60's ``FailureDecision`` values."""

    RETRY = "RETRY"
    """Start a new attempt (from the latest committed checkpoint)."""
    RAISE = "RAISE"
    """Give up: the run errors."""
    NOOP = "NOOP"
    """Nothing to do (Ray's; wgstore's own controller never decides it)."""


class FailureKind(enum.StrEnum):
    """What failed, as Ray Train 2.60 counts failures (one counter, and one limit, per kind)."""

    WORKER_GROUP = "worker_group"
    """A running worker group (a worker raised or died): against ``max_failures``."""
    START = "start"
    """A start (placement group timeout, a worker that died while starting): against
    ``controller_failure_limit``."""
    PREEMPTION = "preemption"
    """A node lost under the workers: against ``max_preemption_failures``."""
    CONTROLLER = "controller"
    """The controller's cluster lost with the whole group while the controller was away (the
    local Ray of a driver that died): against ``controller_failure_limit``, sharing its count
    with starts."""


class ResizeCause(enum.StrEnum):
    """Why the scaling policy chose a worker group's size (``ScalingDecisionMade.cause``)."""

    INITIAL = "initial"
    """The run's first start, at the size that fits."""
    GREW = "grew"
    """More workers fit than the running group has (resources were added): a restart from the
    committed checkpoint at the larger size. No failure is charged."""
    SHRANK = "shrank"
    """Fewer workers fit than the running group has, while it runs (Ray's reserved resources
    went down): a restart at the smaller size. No failure is charged."""
    FAILURE = "failure"
    """A restart after a failure (a worker died, its node was lost), at the size that fits now."""
    PREEMPTION = "preemption"
    """A restart after a preemption, at the size that fits without the preempted nodes."""
    START_RETRY = "start_retry"
    """A start that failed, tried again at the size that fits now."""


CONTROLLER_STATES: tuple[ControllerState, ...] = tuple(ControllerState)
"""Ray Train 2.60's controller state names, in the order a run usually meets them."""

FAILURE_KINDS: tuple[FailureKind, ...] = tuple(FailureKind)
"""Every :class:`FailureKind` (see there what each one counts)."""


def _check_limit(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"{name} must be an int >= 0, or -1 for unlimited; got {value!r}")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class ScalingConfig:
    """How many workers a run's every attempt gets, and what each one reserves (Ray Train's names).

    A fixed run has ``num_workers`` workers in every attempt. An elastic run (Ray's
    ``ScalingConfig(num_workers=(min, max))``) sets ``min_workers``: each attempt then starts
    at the size that fits, between ``min_workers`` and ``num_workers`` (its maximum), and a
    running group is looked at every ``elastic_resize_monitor_interval_s`` for a size that fits
    better.

    Args:
        num_workers: worker actors per attempt (one placement-group bundle each); the most an
            elastic run asks for.
        resources_per_worker: Ray resources of one worker; ``None`` is ``{"CPU": 1}``.
        placement_strategy: ``PACK``, ``SPREAD``, ``STRICT_PACK`` or ``STRICT_SPREAD``.
        min_workers: the fewest workers an elastic run trains with; ``None`` for a fixed run.
            Ray Train allows 0; wgstore's own runs need 1 or more.
        elastic_resize_monitor_interval_s: how often an elastic run's running group is looked
            at for a better size (Ray's default 60 s).
        min_workers_timeout_s: how long wgstore's controller waits for ``min_workers`` to fit
            before the run errors, naming the shortfall (``None``: for ever, as Ray Train).
    """

    num_workers: int = 1
    resources_per_worker: Mapping[str, float] | None = None
    placement_strategy: str = "PACK"
    min_workers: int | None = None
    elastic_resize_monitor_interval_s: float = 60.0
    min_workers_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not _is_count(self.num_workers) or self.num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {self.num_workers!r}")
        if self.min_workers is not None and (
            not _is_count(self.min_workers) or not 0 <= self.min_workers <= self.num_workers
        ):
            raise ValueError(
                f"min_workers must be an int from 0 to num_workers ({self.num_workers}), "
                f"got {self.min_workers!r}"
            )
        for name in ("elastic_resize_monitor_interval_s", "min_workers_timeout_s"):
            value = getattr(self, name)
            if value is None and name == "min_workers_timeout_s":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    @property
    def elastic(self) -> bool:
        """True when the run's size may change (``min_workers`` is set)."""
        return self.min_workers is not None

    @property
    def max_workers(self) -> int:
        """The most workers an attempt gets: ``num_workers``."""
        return self.num_workers

    @property
    def fewest_workers(self) -> int:
        """The fewest workers an attempt trains with: ``min_workers``, else ``num_workers``."""
        return self.num_workers if self.min_workers is None else self.min_workers

    def describe(self) -> str:
        """``4`` for a fixed run, ``2..4`` for an elastic one."""
        if self.min_workers is None:
            return str(self.num_workers)
        return f"{self.min_workers}..{self.num_workers}"

    @property
    def resources(self) -> dict[str, float]:
        """``resources_per_worker``, with Ray Train's default ``{"CPU": 1}`` for ``None``."""
        return dict(self.resources_per_worker or {"CPU": 1.0})


@dataclass(frozen=True, slots=True)
class FailureConfig:
    """How many failures of each kind a run survives (Ray Train 2.60's names; ``-1``: unlimited).

    Args:
        max_failures: failures of a running worker group (a worker raised or died) retried from
            the latest checkpoint before the run errors; Ray's default 0 (no retry).
        controller_failure_limit: failed starts (placement group timeout, a worker that died
            while starting) retried; unlimited by default, as in Ray Train.
        max_preemption_failures: attempts lost to a node going away; unlimited by default.
    """

    max_failures: int = 0
    controller_failure_limit: int = -1
    max_preemption_failures: int = -1

    def __post_init__(self) -> None:
        _check_limit("max_failures", self.max_failures)
        _check_limit("controller_failure_limit", self.controller_failure_limit)
        _check_limit("max_preemption_failures", self.max_preemption_failures)

    def limit_of(self, kind: str) -> int:
        """The limit for failures of ``kind`` (a :class:`FailureKind`, or its value)."""
        limits: dict[str, int] = {
            FailureKind.WORKER_GROUP: self.max_failures,
            FailureKind.START: self.controller_failure_limit,
            FailureKind.PREEMPTION: self.max_preemption_failures,
            FailureKind.CONTROLLER: self.controller_failure_limit,
        }
        if kind not in limits:
            raise ValueError(f"unknown failure kind {kind!r}; known: {', '.join(FAILURE_KINDS)}")
        return limits[kind]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankError:
    """The error of one worker, by its world rank."""

    world_rank: int
    error: ErrorInfo


@event_type("RunCreated", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunCreated:
    """A run was created with its configuration.

    ``context`` is what every attempt's worker group starts from (its ``num_workers`` and
    ``resources_per_worker`` are the scaling config's; a retry adds ``resume_checkpoint``);
    ``None`` for a run recorded from Ray Train, which keeps its train function itself.
    ``lease_s``: a controller that has not renewed its lease for this long is gone, and the run is
    orphaned. ``ray`` holds what Ray Train itself says about a recorded run (job id, controller
    actor id, log path, run settings), empty for wgstore's own runs.
    """

    run_id: str
    name: str = ""
    scaling_config: ScalingConfig | None = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    context: WorkerGroupContext | None = None
    lease_s: float = 60.0
    ray: Mapping[str, Any] = field(default_factory=dict)


@event_type("ControllerStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStarted:
    """A controller process took the run (holds its lease); ``resumed`` when the run had one before.

    ``lease_s``: the length of the lease it holds and renews while it lives (None: it holds none,
    as Ray Train runs recorded before recorders held leases). Past it, a run that has not ended
    is orphaned.
    """

    controller_id: str
    host: str = ""
    pid: int = 0
    resumed: bool = False
    lease_s: float | None = None


@event_type("ControllerStateChanged", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStateChanged:
    """The controller moved between states (Ray Train's names: SCHEDULING, RUNNING, ...).

    ``from_state`` and ``to_state`` are :class:`ControllerState` values, stored as their text;
    the fields are typed ``str`` so a log stays readable whatever a newer writer put there (the
    run's fold refuses a state it does not know, naming it).
    """

    from_state: str
    to_state: str
    reason: str = ""
    group_id: str | None = None
    resume_checkpoint: str | None = None
    """On a move to SCHEDULING/RESCHEDULING: the checkpoint the attempt ``group_id`` starts from
    (so a controller that died before requesting the group can request it again)."""


@event_type("FailureDecisionMade", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class FailureDecisionMade:
    """The failure policy answered one failure of ``group_id``: RETRY or RAISE (Ray's NOOP too).

    ``decision`` is a :class:`RetryDecision` value and ``failure_kind`` a :class:`FailureKind`
    value, stored as their text (typed ``str`` on the wire, as in ``ControllerStateChanged``);
    ``failures_so_far`` counts the failures of
    that kind including this one, against ``limit`` (-1: unlimited); ``errors`` are the failed
    ranks' errors (a start failure: rank -1 with the start's error).
    """

    decision: str
    group_id: str
    reason: str = ""
    failures_so_far: int = 0
    failure_kind: str = "worker_group"
    limit: int = 0
    errors: tuple[RankError, ...] = ()


@event_type("ScalingDecisionMade", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingDecisionMade:
    """The scaling policy chose the size of the next worker group (Ray's ``ResizeDecision``).

    ``num_workers`` is the new size, ``previous_workers`` the size of the group before it
    (``None`` before the first). ``cause`` is a :class:`ResizeCause` value (stored as its text):
    why a group starts at this size; ``reason`` says it in words (what fits, what was lost).
    ``group_id`` is the group the decision starts (wgstore's controller appends the decision
    with that group's start request, the recorder with the group's first event); ``None`` when
    no group followed (a recorded run that ended between the two).
    """

    num_workers: int
    previous_workers: int | None = None
    cause: str = "initial"
    reason: str = ""
    group_id: str | None = None
    resources_per_worker: Mapping[str, float] = field(default_factory=dict)


@event_type("StartDeferred", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class StartDeferred:
    """wgstore's controller did not start the run's next group: fewer than ``min_workers`` of
    an elastic run fit (``num_workers_fit``). Recorded once when the wait begins; the next
    ``ScalingDecisionMade`` ends it, and past ``min_workers_timeout_s`` the run errors."""

    num_workers_fit: int
    min_workers: int
    reason: str = ""
    since: datetime | None = None
    """When the wait began, by the controller's clock (its timeout counts from here)."""


@event_type("PreemptionNoticed", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionNoticed:
    """Nodes under the run's workers announced their preemption (a drain with a deadline).

    ``nodes`` maps each node's id to the world ranks on it (the ranks that will be lost);
    ``deadline`` is when the nodes go (``None``: not announced); ``detected_at`` when the notice
    was seen. The controller waits for the train function to checkpoint, until the deadline,
    then restarts without the nodes: a ``preemption`` failure against
    ``max_preemption_failures``.
    """

    group_id: str | None
    nodes: Mapping[str, tuple[int, ...]]
    deadline: datetime | None = None
    detected_at: datetime | None = None

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every preempted rank, in order."""
        return tuple(sorted({rank for ranks in self.nodes.values() for rank in ranks}))


@event_type("RecordingFailed", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RecordingFailed:
    """A Ray Train recorder hook could not record what Ray handed it (a field a Ray release
    added, a config shape wgstore did not foresee). Training went on; what the hook would have
    recorded is missing, and this says which hook and why."""

    hook: str
    error: ErrorInfo


@event_type("RunFinished", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished:
    """Training finished on every worker without error."""

    group_id: str | None = None


@event_type("RunErrored", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunErrored:
    """The run ended with an error: ``error`` the first, ``errors`` every failed rank's."""

    error: ErrorInfo
    group_id: str | None = None
    errors: tuple[RankError, ...] = ()


@event_type("RunAborted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunAborted:
    """The run was stopped by a person, a signal or ``wgstore gc`` before it finished."""

    reason: str


@event_type("RunResumed", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunResumed:
    """A process resumed the run after its driver or controller was lost.

    ``by``: ``wgstore resume`` or ``supervisor <id>``; ``reason``: why (what was lost);
    ``attempt``: the attempt the run goes on with (1 + the attempts it had).
    """

    by: str
    reason: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Pickled:
    """A value as cloudpickle bytes, named by their SHA-256.

    ``data`` holds the bytes when they are small; larger ones are stored once in ``wg_blobs``
    under ``sha256`` (``data`` is then ``None``). ``type`` is the value's qualified type name.
    """

    sha256: str
    size: int
    type: str = ""
    data: bytes | None = None


@event_type("TrainerRecorded", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerRecorded:
    """What a Ray Train run needs to be started again, recorded once by ``RecordingCallback``.

    ``trainer`` is the trainer's class (``module:qualname``); ``train_loop`` the train loop's
    import path, or the qualified name of a pickled one (``train_loop_pickle``, checked against
    its SHA-256 before it is loaded). ``train_loop_config``, ``scaling_config`` and
    ``backend_config`` are pickled as given (``train_loop_config_json`` is a readable copy);
    ``run_config`` holds the ``RunConfig`` fields a resume sets again (name, storage path,
    failure and checkpoint config, the workers' runtime env) and the callbacks other than
    wgstore's, by qualified name. ``datasets`` are pickled by name. ``resumable`` is False when
    something could not be pickled; ``not_resumable_reason`` then says what and why.
    """

    trainer: str
    train_loop: str
    train_loop_pickle: Pickled | None = None
    train_loop_config: Pickled | None = None
    train_loop_config_json: Mapping[str, Any] = field(default_factory=dict)
    scaling_config: Pickled | None = None
    run_config: Mapping[str, Any] = field(default_factory=dict)
    backend_config: Pickled | None = None
    datasets: Mapping[str, Pickled] = field(default_factory=dict)
    resumable: bool = True
    not_resumable_reason: str | None = None
