"""A running worker group in one line: what ``wgstore run`` prints to a pipe or a log file.

Pure: :func:`progress_line` reads a :class:`~wgstore.projections.state.WorkerGroupState` only.
"""

from __future__ import annotations

from wgstore.projections.state import WorkerGroupState
from wgstore.projections.text import metrics_text
from wgstore.projections.views import worker_rows

__all__ = ["progress_line"]


def progress_line(state: WorkerGroupState) -> str:
    """One line of a running group: attempt, status, and per rank its reports and metrics,
    e.g. ``attempt 1: RUNNING | rank 0 running, 3 report(s) loss=0.5``."""
    head = f"attempt {state.attempt}: {state.status.value}" if state.attempt else state.status.value
    ranks = [
        f"rank {row.rank} {row.status}, {row.reports} report(s)"
        + (f" {metrics_text(row.metrics)}" if row.metrics else "")
        for row in worker_rows(state)
    ]
    return " | ".join([head, *ranks])
