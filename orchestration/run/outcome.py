"""How a run driven to its end (:func:`~wgstore.orchestration.run_training`,
:func:`~wgstore.orchestration.resume_run`) ended, in words: what ``wgstore run`` prints last.

Pure: each function reads a :class:`~wgstore.orchestration.run.training.RunResult` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore.projections.views import first_line

if TYPE_CHECKING:
    from wgstore.orchestration.run.training import RunResult

__all__ = ["group_outcome_text", "run_outcome_text", "training_error_text"]


def group_outcome_text(result: RunResult) -> str:
    """How the last worker group ended: ``ended: finished``, ``was interrupted and shut down:
    aborted`` (its status when it has no outcome)."""
    outcome = result.outcome
    how = "was interrupted and shut down" if result.interrupted else "ended"
    return f"{how}: {outcome.value if outcome else result.state.status.value}"


def run_outcome_text(result: RunResult) -> str | None:
    """``run ID: STATUS, N attempt(s)`` and the failures the policy decided about; None for a
    group that is not part of a run."""
    if not result.run_id:
        return None
    run = result.run_state
    used = f", {run.failures} failure(s) retried or raised" if run and run.failures else ""
    status = run.status.value if run else ""
    return f"run {result.run_id}: {status}, {len(result.attempts)} attempt(s){used}"


def training_error_text(result: RunResult) -> str | None:
    """``training errored on rank R: <first line>`` when the last group's training errored
    (the lowest failed rank), else None."""
    error = result.state.error
    if error is None:
        return None
    errors = result.state.errors
    where = f" on rank {min(errors)}" if errors else ""
    return f"training errored{where}: {first_line(error)}"
