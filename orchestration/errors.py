"""Errors of worker-group orchestration, under :class:`~wgstore.events.errors.WgstoreError`.

The tree::

    WgstoreError
     └─ OrchestrationError
         ├─ WorkerGroupStartError          a start failed (stage, cause, group_id); all released
         ├─ WorkerGroupTimeoutError        waiting on a group took longer than allowed
         ├─ TrainFnError                   a train function that cannot be named or imported
         ├─ PlacementGroupTimeoutError     no resources for the placement group in time
         ├─ InsufficientClusterResourcesError  the cluster can never fit the group
         ├─ WorkerHealthCheckFailedError   polling a worker raised (the worker is dead)
         ├─ WorkerHealthCheckTimeoutError  a poll hung longer than health_check_timeout_s
         ├─ ExecutorLostError              the executor stopped in the middle of a start
         ├─ FailpointError                 a failure injected on purpose (tests only)
         ├─ ReportNotStoredError           report() could not put the report in the log
         ├─ CheckpointMismatchError        ranks reported different checkpoints at one index
         ├─ NotInWorkerError               get_context()/report() outside a wgstore worker
         ├─ RunLeaseHeldError              another live controller holds the run's lease
         ├─ RunLeaseLostError              a controller lost its run's lease while working
         ├─ RunNotFoundError               no run stream with that id
         ├─ RunNotResumableError           a run that ended, is live, or cannot be rebuilt
         └─ UndecidableRunError            decide() cannot step the run it was handed

Every class pickles (``WgstoreError.__reduce__``), so they cross Ray actor boundaries.
"""

from __future__ import annotations

from wgstore.events.errors import WgstoreError
from wgstore.events.worker_group import ErrorInfo, StartStage

__all__ = [
    "CheckpointMismatchError",
    "ExecutorLostError",
    "FailpointError",
    "InsufficientClusterResourcesError",
    "NotInWorkerError",
    "OrchestrationError",
    "PlacementGroupTimeoutError",
    "ReportNotStoredError",
    "RunLeaseHeldError",
    "RunLeaseLostError",
    "RunNotFoundError",
    "RunNotResumableError",
    "TrainFnError",
    "UndecidableRunError",
    "WorkerGroupStartError",
    "WorkerGroupTimeoutError",
    "WorkerHealthCheckFailedError",
    "WorkerHealthCheckTimeoutError",
]


class OrchestrationError(WgstoreError):
    """Base class for errors of worker groups on Ray."""


class WorkerGroupStartError(OrchestrationError):
    """A worker group failed to start; ``WorkerGroupStartFailed`` is in the log.

    Everything the start had acquired (placement group, actors) was released before this was
    raised. Attributes: ``stage`` (:class:`StartStage`), ``cause`` (:class:`ErrorInfo`, with the
    traceback), ``group_id`` and ``released`` (names of the released resources).
    """

    def __init__(
        self,
        stage: StartStage,
        cause: ErrorInfo,
        *,
        group_id: str,
        released: tuple[str, ...] = (),
    ) -> None:
        self.stage = stage
        self.cause = cause
        self.group_id = group_id
        self.released = released
        super().__init__(
            f"worker group {group_id} failed to start at stage {stage.value!r}: {cause}. "
            f"Released {len(released)} resource(s). Inspect it with "
            f"`wgstore state {group_id}` or `wgstore events --group {group_id}`; the traceback is in the cause."
        )


class WorkerGroupTimeoutError(OrchestrationError):
    """Waiting for a worker group took longer than the caller allowed."""


class TrainFnError(OrchestrationError):
    """A train function that cannot be named by import path, imported, or called."""


class PlacementGroupTimeoutError(OrchestrationError):
    """The placement group was not ready within ``placement_timeout_s``."""


class InsufficientClusterResourcesError(OrchestrationError):
    """The cluster can never fit the group (Ray Train's ``InsufficientClusterResourcesError``).

    Raised before any placement group is asked for, so the start fails at once instead of
    waiting out ``placement_timeout_s``.
    """


class WorkerHealthCheckFailedError(OrchestrationError):
    """Polling a worker raised: the worker actor is dead or unreachable."""


class WorkerHealthCheckTimeoutError(OrchestrationError):
    """A poll of a worker hung longer than ``health_check_timeout_s``."""


class ExecutorLostError(OrchestrationError):
    """The executor carrying out a start stopped before the start finished."""


class FailpointError(OrchestrationError):
    """A failure injected on purpose through ``RayRuntime``'s failpoints (tests only)."""


class NotInWorkerError(OrchestrationError):
    """``get_context()`` or ``report()`` was called outside a train function run by wgstore."""


class ReportNotStoredError(OrchestrationError):
    """``report()`` could not store the report (store unreachable, or it refused the report).

    Raised to the train function; the report is not in the log. The cause is chained.
    """


class CheckpointMismatchError(OrchestrationError):
    """Two ranks reported different checkpoint paths with the same report index.

    Ray Train consolidates the reports of one round into one checkpoint and raises when the
    ranks' paths differ; wgstore refuses the later report (it is not stored) and raises this to
    its train function. Ranks reporting no checkpoint at that index are fine.
    """


class RunLeaseHeldError(OrchestrationError):
    """Another controller holds the run's lease and it has not expired: it is still working."""


class RunLeaseLostError(OrchestrationError):
    """The controller could not renew its lease (it expired and another took the run): it
    stopped without acting further."""


class RunNotFoundError(OrchestrationError):
    """No run stream ``run-<run_id>`` in the store."""


class RunNotResumableError(OrchestrationError):
    """A resume was refused: the run has ended, is live (a live process holds its lease), or
    the log lacks what rebuilding it needs (the message says which)."""


class UndecidableRunError(OrchestrationError, ValueError):
    """:func:`~wgstore.orchestration.run.decide.decide` cannot step this run: it was not made by a
    wgstore controller (recorded from Ray Train: no worker-group context), the group handed in
    is not the run's current one, or the log puts the controller in a state that names no group
    or that the controller never acts in. A ``ValueError`` too, as it was before."""
