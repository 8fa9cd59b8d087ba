"""How a driven run ended, in words: RunResults of states folded from events built by hand."""

from __future__ import annotations

from tests.projections.projection_builders import RunStream, Stream, error, stopped
from wgstore.orchestration.run.outcome import (
    group_outcome_text,
    run_outcome_text,
    training_error_text,
)
from wgstore.orchestration.run.training import RunResult
from wgstore.projections import project_run, project_worker_group


def finished_group() -> Stream:
    stream = Stream("g2", attempt=2).running().polled(stopped(0), stopped(1))
    return stream.shutdown_requested().shut_down()


def test_a_finished_run_says_so_with_its_attempts_and_failures() -> None:
    run = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").decided("RETRY", "g1")
    run.to("RUNNING", "g2").finished("g2")
    result = RunResult(
        group_id="g2",
        state=project_worker_group(finished_group().events),
        interrupted=False,
        run_id="r1",
        run_state=project_run(run.events),
        attempts=("g1", "g2"),
    )
    assert group_outcome_text(result) == "ended: finished"
    assert run_outcome_text(result) == (
        "run r1: FINISHED, 2 attempt(s), 1 failure(s) retried or raised"
    )
    assert training_error_text(result) is None


def test_a_group_on_its_own_has_no_run_line() -> None:
    result = RunResult("g2", project_worker_group(finished_group().events), interrupted=False)
    assert run_outcome_text(result) is None


def test_an_interrupted_group_without_an_outcome_shows_its_status() -> None:
    state = project_worker_group(Stream().running().shutdown_requested("interrupted").events)
    run = project_run(RunStream().created().to("SCHEDULING").to("RUNNING", "g1").events)
    result = RunResult("g1", state, interrupted=True, run_id="r1", run_state=run, attempts=("g1",))
    assert group_outcome_text(result) == "was interrupted and shut down: SHUTTING_DOWN"
    assert run_outcome_text(result) == "run r1: RUNNING, 1 attempt(s)"


def test_a_training_error_names_the_lowest_failed_rank_and_its_first_line() -> None:
    stream = Stream(num_workers=3).running()
    stream.polled(stopped(2, error("late")), stopped(1, error("died\nTraceback (most recent")))
    result = RunResult("g1", project_worker_group(stream.events), interrupted=False)
    assert training_error_text(result) == "training errored on rank 1: RuntimeError: died ..."


def test_a_start_failure_is_a_training_error_of_no_rank() -> None:
    state = project_worker_group(Stream().requested().start_failed().events)
    result = RunResult("g1", state, interrupted=False)
    assert training_error_text(result) == "training errored: RuntimeError: no resources"


def test_a_run_line_without_the_runs_state_has_no_status() -> None:
    state = project_worker_group(finished_group().events)
    result = RunResult("g2", state, interrupted=False, run_id="r1", attempts=("g2",))
    assert run_outcome_text(result) == "run r1: , 1 attempt(s)"
