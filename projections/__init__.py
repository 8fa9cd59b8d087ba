"""Projections of the log: pure folds, poll history, run state, time travel, snapshots, read models.

Everything here imports and works without Ray installed.
"""

from __future__ import annotations

from wgstore.projections.errors import ProjectionError
from wgstore.projections.poll_history import PollRecord, fold_poll_history, iter_poll_history
from wgstore.projections.run import (
    ControllerTransition,
    FailureDecision,
    RunState,
    RunStatus,
    evolve_run,
    project_run,
)
from wgstore.projections.state import (
    TRANSITIONS,
    TrainingOutcome,
    WorkerGroupPollStatus,
    WorkerGroupState,
    WorkerGroupStatus,
    WorkerStatus,
    evolve,
    project_worker_group,
)

__all__ = [
    "TRANSITIONS",
    "ControllerTransition",
    "FailureDecision",
    "PollRecord",
    "ProjectionError",
    "RunState",
    "RunStatus",
    "TrainingOutcome",
    "WorkerGroupPollStatus",
    "WorkerGroupState",
    "WorkerGroupStatus",
    "WorkerStatus",
    "evolve",
    "evolve_run",
    "fold_poll_history",
    "iter_poll_history",
    "project_run",
    "project_worker_group",
]
