"""progress_line: a running group in one line, folded from events built by hand (no store)."""

from __future__ import annotations

from projection_builders import Stream, error, stopped

from wgstore.projections import project_worker_group
from wgstore.projections.progress import progress_line


def test_a_requested_group_is_its_status_alone() -> None:
    state = project_worker_group(Stream(attempt=0).requested().events)
    assert progress_line(state) == "REQUESTED"


def test_each_rank_shows_its_status_reports_and_its_latest_metrics_by_name() -> None:
    stream = Stream(num_workers=2).running().reported(0, loss=0.5, step=1)
    stream.reported(0, loss=0.123456, acc=0.75)
    line = progress_line(project_worker_group(stream.events))
    assert line == (
        "attempt 1: RUNNING | rank 0 started, 2 report(s) acc=0.75 loss=0.1235"
        " | rank 1 started, 0 report(s)"
    )


def test_a_failed_rank_says_so() -> None:
    stream = Stream(num_workers=2, attempt=3).running().polled(stopped(1, error("died")))
    line = progress_line(project_worker_group(stream.events))
    assert line.startswith("attempt 3: RUNNING | rank 0 ")
    assert line.endswith("| rank 1 error, 0 report(s)")
