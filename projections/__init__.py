"""Projections of the log: pure folds, poll history, run state, time travel, snapshots, read models.

Pure folds (no I/O): :func:`project_worker_group` / :func:`evolve`, :func:`fold_poll_history`,
:func:`project_run`. With a store: :func:`worker_group_state` (time travel, from snapshots),
:func:`poll_history`, :func:`run_state`, and the SQL read models kept by
:func:`catch_up_read_models` and rebuilt by :func:`rebuild_read_models`.

Everything here imports and works without Ray installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore._lazy import lazy_getattr
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.poll_history import PollRecord, fold_poll_history, iter_poll_history
from wgstore.projections.queries import poll_history, run_state, worker_group_state
from wgstore.projections.run_state import (
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

if TYPE_CHECKING:
    from wgstore.projections.projector import (
        READ_MODELS_SUBSCRIPTION,
        catch_up_read_models,
        follow_read_models,
        rebuild_read_models,
    )
    from wgstore.projections.snapshots import load_snapshot, save_snapshot

# The read models and snapshots pull in SQLAlchemy (~0.25 s): they load on first use, so a
# process that only folds or builds events (a Ray Train controller recording a run) stays light.
_LAZY = {
    "READ_MODELS_SUBSCRIPTION": "wgstore.projections.projector",
    "catch_up_read_models": "wgstore.projections.projector",
    "follow_read_models": "wgstore.projections.projector",
    "rebuild_read_models": "wgstore.projections.projector",
    "load_snapshot": "wgstore.projections.snapshots",
    "save_snapshot": "wgstore.projections.snapshots",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "READ_MODELS_SUBSCRIPTION",
    "TRANSITIONS",
    "ControllerTransition",
    "FailureDecision",
    "PollRecord",
    "ProjectionError",
    "RunState",
    "RunStatus",
    "StreamNotFoundError",
    "TrainingOutcome",
    "WorkerGroupPollStatus",
    "WorkerGroupState",
    "WorkerGroupStatus",
    "WorkerStatus",
    "catch_up_read_models",
    "evolve",
    "evolve_run",
    "fold_poll_history",
    "follow_read_models",
    "iter_poll_history",
    "load_snapshot",
    "poll_history",
    "project_run",
    "project_worker_group",
    "rebuild_read_models",
    "run_state",
    "save_snapshot",
    "worker_group_state",
]
