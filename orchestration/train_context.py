"""What a train function sees: :func:`get_context` and :func:`report`. No Ray here.

Kept light (no ``wgstore.events`` import until a report is stored or an error is raised): every
Ray worker process imports it. Each worker actor runs one train function in a thread and holds
one :class:`WorkerSession`. ``report()`` is durable: it numbers the report (0, 1, ... per worker)
and hands it to the session's writer, which appends ``WorkerReported`` to the store and returns
once it is in the log (see :mod:`wgstore.orchestration.train_fn.report_writer`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "PREEMPTION_LOOK_S",
    "ReportSink",
    "TrainContext",
    "WorkerSession",
    "get_context",
    "on_shutdown",
    "preemption_notice",
    "report",
]

PREEMPTION_LOOK_S = 1.0
"""A worker reads its run's log for a preemption notice at most this often."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainContext:
    """The place of this worker in its group, and the group's train config.

    Ranks are assigned as Ray Train assigns them: workers sorted by node (first seen first) and
    then lowest GPU id; ``world_rank`` is the position, ``local_rank``/``local_world_size`` count
    workers on the same node IP, ``node_rank`` is the index of the node IP.
    """

    group_id: str
    world_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    config: Mapping[str, Any] = field(default_factory=dict)
    resume_checkpoint: str | None = None
    run_id: str | None = None
    """The run the group is an attempt of (``None``: a group on its own)."""

    @property
    def checkpoint(self) -> str | None:
        """The checkpoint this attempt resumes from (``resume_checkpoint``): the latest one any
        earlier attempt of the run reported, or ``None`` on a fresh start (Ray Train's
        ``get_checkpoint()``)."""
        return self.resume_checkpoint


class ReportSink(Protocol):
    """Where a session's reports go: ``append`` returns once report ``index`` is stored."""

    def append(self, index: int, metrics: Mapping[str, Any], checkpoint: str | None) -> None:
        """Store one report or raise."""

    def preemption(self, run_id: str) -> Any:
        """The latest ``PreemptionNoticed`` of this worker's group in run ``run_id``'s log,
        or ``None``."""


class WorkerSession:
    """The per-worker state behind :func:`get_context` and :func:`report`.

    Args:
        context: this worker's place in its group.
        sink: stores each report (the worker's :class:`ReportWriter`).
    """

    def __init__(
        self,
        context: TrainContext,
        sink: ReportSink,
        checkpoint_guard: Callable[[int, str], None] | None = None,
    ) -> None:
        self.context = context
        self._sink = sink
        self._checkpoint_guard = checkpoint_guard
        self._next_index = 0
        self._lock = threading.Lock()
        self._shutdown_hooks: list[Callable[[], object]] = []
        self._preemption: Any = None
        self._preemption_read_at = float("-inf")
        self._preemption_lock = threading.Lock()

    def add_shutdown_hook(self, hook: Callable[[], object]) -> None:
        """Run ``hook`` when the group shuts down (see :func:`on_shutdown`)."""
        if not callable(hook):
            raise TypeError(f"on_shutdown() takes a callable, got {type(hook).__name__}")
        with self._lock:
            self._shutdown_hooks.append(hook)

    def shutdown_hooks(self) -> list[Callable[[], object]]:
        """The hooks registered so far, in registration order."""
        with self._lock:
            return list(self._shutdown_hooks)

    @property
    def reports_made(self) -> int:
        """How many reports were numbered so far (stored, or raised to the caller)."""
        return self._next_index

    def report(self, metrics: Mapping[str, Any], checkpoint: str | None = None) -> None:
        """Store a report; returns once it is in the log.

        The index is used up even when storing fails, so a report never reuses the id of one
        that may have been stored before a lost reply.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"report() takes a mapping of metrics, got {type(metrics).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, str):
            raise TypeError(
                f"report(checkpoint=...) takes a path string or None, got {type(checkpoint)}"
            )
        try:
            clean = json.loads(json.dumps(dict(metrics), allow_nan=False))
        except (TypeError, ValueError, RecursionError) as error:
            raise TypeError(
                f"report() metrics must be JSON-able (numbers, strings, lists, dicts; no NaN): "
                f"{error}"
            ) from error
        with self._lock:  # one report at a time per worker, so indexes reach the log in order
            index = self._next_index
            self._next_index += 1
            if checkpoint is not None and self._checkpoint_guard is not None:
                self._checkpoint_guard(index, checkpoint)  # raises: the report is refused
            self._sink.append(index, clean, checkpoint)

    def preemption(self) -> Any:
        """The group's preemption notice, if its run's controller recorded one (the log read
        at most every :data:`PREEMPTION_LOOK_S`); ``None`` for a group on its own."""
        run_id = self.context.run_id
        if run_id is None:
            return None
        with self._preemption_lock:  # not the reports' lock: a read never holds up a report
            now = time.monotonic()
            if self._preemption is None and now - self._preemption_read_at >= PREEMPTION_LOOK_S:
                self._preemption_read_at = now
                self._preemption = self._sink.preemption(run_id)
            return self._preemption


_session: WorkerSession | None = None
_session_lock = threading.Lock()


def _set_session(session: WorkerSession | None) -> None:
    global _session
    with _session_lock:
        _session = session


def _current_session() -> WorkerSession:
    session = _session
    if session is None:
        from wgstore.orchestration.errors import NotInWorkerError

        raise NotInWorkerError(
            "get_context() and report() only work inside a train function started by wgstore "
            "(WorkerGroup.create(...) or `wgstore run`); call them from the train function"
        )
    return session


def get_context() -> TrainContext:
    """The :class:`TrainContext` of the calling worker.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
    """
    return _current_session().context


def report(metrics: Mapping[str, Any], checkpoint: str | None = None) -> None:
    """Report metrics (JSON-able) and optionally a checkpoint path; stored as ``WorkerReported``.

    Durable: when it returns, the report is in the log (a worker killed right after loses
    nothing); it takes about one append to the store.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
        TypeError: metrics that are not JSON-able, or a checkpoint that is not a string.
        CheckpointMismatchError: another rank's report with the same index carries a different
            checkpoint path (Ray's consolidation refuses that too); nothing is stored.
        ReportNotStoredError: the store could not be reached (transient errors are retried for
            30 s) or refused the report; the report is not in the log.
    """
    _current_session().report(metrics, checkpoint)


def preemption_notice() -> Any:
    """Whether a node under this worker's group announced its preemption: the
    :class:`~wgstore.events.run.PreemptionNoticed` its run's controller recorded (``nodes``,
    ``ranks``, ``deadline``), or ``None``.

    An elastic run (``ScalingConfig(min_workers=...)``) waits until the deadline before it
    restarts without the nodes, from the committed checkpoint: a train function that reads this
    now and then can report a checkpoint as soon as a notice comes (Ray Train's
    ``get_preemption_info()``). Cheap to call every step: the log is read at most once a second.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
    """
    return _current_session().preemption()


def on_shutdown(hook: Callable[[], object]) -> None:
    """Run ``hook()`` (no arguments) in this worker when its group shuts down.

    Ray Train's ``WorkerCallback.before_worker_shutdown``: hooks run in registration order,
    before the worker actor is killed; the shutdown waits for them up to the group's
    ``shutdown_patience_s`` (5 s by default), then kills the worker. Whether each worker ended on
    its own or was killed, and a hook's error, are recorded in ``WorkerGroupShutDown``.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
        TypeError: ``hook`` is not callable.
    """
    _current_session().add_shutdown_hook(hook)
