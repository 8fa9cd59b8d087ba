"""Holes in the worker-group fold's tests that mutation testing (scripts/mutate.py) found: guards,
error paths, lookups and the immutability of the states. Given events, then state; no database.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest
from projection_builders import RunStream, Stream, error, record, stopped, worker

from wgstore.events.records import UnknownEvent
from wgstore.events.run import ControllerStarted
from wgstore.events.worker_group import (
    CallbackFailed,
    ErrorInfo,
    StartStage,
    WorkerGroupPolled,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.projections import (
    ProjectionError,
    TrainingOutcome,
    WorkerGroupPollStatus,
    WorkerGroupStatus,
    WorkerStatus,
    evolve,
    fold_poll_history,
    project_run,
    project_worker_group,
)
from wgstore.projections.run_state import ControllerSession, ControllerTransition, FailureDecision
from wgstore.projections.state import WorkerGroupFold, apply_poll_changes

S = WorkerGroupStatus


# ------------------------------------------------------------------------------- immutability


def _values() -> list[Any]:
    """One instance of every state dataclass of the pure folds."""
    stream = Stream().running().polled(stopped(1)).reported(0, loss=1.0)
    group = project_worker_group(stream.events)
    assert group.poll_status is not None
    run_stream = RunStream().created().add(ControllerStarted(controller_id="c1"))
    run_stream.to("SCHEDULING").to("RUNNING", "g1")
    run = project_run(run_stream.decided("RETRY", "g1").events)
    return [
        group,
        group.poll_status,
        group.poll_status.worker_statuses[0],
        fold_poll_history(stream.events)[0],
        run,
        run.transitions[0],
        run.decisions[0],
        run.controllers[0],
    ]


@pytest.mark.parametrize("index", range(8))
def test_every_state_is_frozen_and_slotted(index: int) -> None:
    value = _values()[index]
    name = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, getattr(value, name))
    assert not hasattr(value, "__dict__")


@pytest.mark.parametrize("index", [0, 3, 4, 5, 6, 7])
def test_states_with_many_fields_are_built_by_keyword_only(index: int) -> None:
    value = _values()[index]
    positional = [getattr(value, f.name) for f in dataclasses.fields(value)]
    with pytest.raises(TypeError):
        type(value)(*positional)
    assert type(value)(**{f.name: getattr(value, f.name) for f in dataclasses.fields(value)})


def test_run_state_record_types_are_the_ones_the_fold_builds() -> None:
    run = _values()[4]
    assert isinstance(run.transitions[0], ControllerTransition)
    assert isinstance(run.decisions[0], FailureDecision)
    assert isinstance(run.controllers[0], ControllerSession)


# -------------------------------------------------------------------------- builder guards


@pytest.mark.parametrize("step", ["placement_group", "sync_actor", "workers"])
def test_a_builder_step_after_a_shutdown_request_is_an_error(step: str) -> None:
    stream = Stream().requested().shutdown_requested()
    getattr(stream, step)()
    with pytest.raises(
        ProjectionError, match="builder step cannot happen while the group is SHUTTING_DOWN"
    ):
        project_worker_group(stream.events)


def test_a_builder_step_of_a_running_group_is_an_error() -> None:
    stream = Stream().running()
    stream.sync_actor()
    with pytest.raises(ProjectionError, match="while the group is RUNNING"):
        project_worker_group(stream.events)


@pytest.mark.parametrize("step", ["sync_actor", "workers"])
def test_each_builder_step_done_twice_is_an_error_naming_it(step: str) -> None:
    stream = Stream().requested()
    getattr(stream, step)()
    getattr(stream, step)()
    with pytest.raises(
        ProjectionError, match=f"{step.replace('_', ' ')} of group 'g1' is already set"
    ):
        project_worker_group(stream.events)


def test_an_empty_worker_list_is_an_error() -> None:
    stream = Stream().requested()
    stream.add(WorkersStarted(workers=()))
    with pytest.raises(ProjectionError, match=r"world ranks must be 0\.\.n-1"):
        project_worker_group(stream.events)


def test_repeated_world_ranks_are_an_error() -> None:
    stream = Stream().requested()
    stream.add(WorkersStarted(workers=(worker(0), worker(0))))
    with pytest.raises(ProjectionError, match=r"got \[0, 0\]"):
        project_worker_group(stream.events)


def test_starting_without_workers_names_every_missing_step() -> None:
    stream = Stream().requested().sync_actor().started()
    with pytest.raises(ProjectionError, match=r"Missing: placement_group, workers$"):
        project_worker_group(stream.events)


def test_a_started_group_keeps_its_start_time_and_startup() -> None:
    stream = Stream().requested().placement_group().sync_actor().workers().started()
    state = project_worker_group(stream.events)
    assert state.status is S.RUNNING
    assert state.started_at == stream.events[-1].recorded_at
    assert state.startup_s == 2.5
    assert not state.training_launched and state.training_launched_at is None


def test_a_second_start_of_a_running_group_is_an_error() -> None:
    stream = Stream().requested().placement_group().sync_actor().workers().started().started()
    with pytest.raises(ProjectionError, match=r"Missing: $"):
        project_worker_group(stream.events)


# --------------------------------------------------------------------------- worker lookup


def test_a_worker_is_found_by_world_rank_and_a_missing_rank_raises_key_error() -> None:
    state = project_worker_group(Stream(num_workers=3).running().events)
    assert [state.worker(rank).world_rank for rank in range(3)] == [0, 1, 2]
    assert state.worker(2).actor_id == "actor-2"
    for missing in (3, -1):
        with pytest.raises(KeyError, match=f"group 'g1' has no worker with world rank {missing}"):
            state.worker(missing)


def test_a_worker_is_found_even_when_ranks_do_not_match_positions() -> None:
    state = project_worker_group(Stream(num_workers=3).running().events)
    shifted = replace(state, workers=(state.workers[1], state.workers[2]))
    assert shifted.worker(2) is state.workers[2]
    assert shifted.worker(1) is state.workers[1]
    with pytest.raises(KeyError):
        shifted.worker(0)


def test_a_group_before_its_workers_started_has_no_worker() -> None:
    state = project_worker_group(Stream().requested().events)
    with pytest.raises(KeyError):
        state.worker(0)
    assert state.node_ids == ()


# --------------------------------------------------------------------------------- polls


def test_polls_are_counted_with_their_unchanged_polls_and_time() -> None:
    stream = Stream().running().polled(unchanged=4).polled(stopped(0), unchanged=2)
    state = project_worker_group(stream.events)
    assert (state.recorded_polls, state.polls_total, state.last_poll_seq) == (2, 8, 8)
    assert state.last_polled_at == stream.events[-1].event.polled_at


def test_a_poll_with_the_same_sequence_number_is_an_error() -> None:
    stream = Stream().running().polled()
    stream.add(WorkerGroupPolled(poll_seq=1, polled_at=stream.now))
    with pytest.raises(
        ProjectionError, match="poll_seq 1 does not follow the last recorded poll_seq 1"
    ):
        project_worker_group(stream.events)


def test_a_poll_after_the_shutdown_is_an_error() -> None:
    stream = Stream().running().shutdown_requested().shut_down().polled()
    with pytest.raises(ProjectionError, match="already SHUT_DOWN"):
        project_worker_group(stream.events)


def test_a_poll_of_a_requested_group_is_an_error() -> None:
    stream = Stream().requested().polled()
    with pytest.raises(ProjectionError, match="cannot be polled while REQUESTED"):
        project_worker_group(stream.events)


def test_apply_poll_changes_starts_every_rank_running_and_refuses_unknown_ranks() -> None:
    status = apply_poll_changes(None, [0, 1], [stopped(1, error("x"))])
    assert status.worker_statuses == {0: WorkerStatus(True), 1: WorkerStatus(False, error("x"))}
    again = apply_poll_changes(status, [], [stopped(0)])
    assert again.worker_statuses[0] == WorkerStatus(False)
    assert status.worker_statuses[0] == WorkerStatus(True)  # the previous status is untouched
    with pytest.raises(KeyError):
        apply_poll_changes(status, [], [stopped(5)])


def test_poll_status_counts_running_workers_and_return_values_of_finished_ones() -> None:
    status = WorkerGroupPollStatus(
        worker_statuses={
            0: WorkerStatus(False, None, "r0"),
            1: WorkerStatus(True),
            2: WorkerStatus(False, error("e"), "ignored"),
        }
    )
    assert status.num_running == 1
    assert status.return_values == {0: "r0"}
    assert not status.finished
    assert list(status.errors) == [2]


# ------------------------------------------------------------------------------- reports


def test_a_report_of_a_negative_rank_is_an_error() -> None:
    stream = Stream().running()
    stream.reported(0)
    stream.events[-1] = record(
        stream.stream_id, stream.events[-1].version, replace(stream.events[-1].event, world_rank=-1)
    )
    with pytest.raises(ProjectionError, match="no worker has world rank -1"):
        project_worker_group(stream.events)


def test_a_report_without_a_checkpoint_keeps_the_latest_one() -> None:
    stream = Stream().running().reported(0, "/ckpt/1", loss=1.0).reported(1, loss=0.5)
    state = project_worker_group(stream.events)
    assert state.latest_checkpoint == "/ckpt/1"
    assert state.report_counts == {0: 1, 1: 1}
    assert state.last_report_index == {0: 1, 1: 1}
    assert state.reports_total == 2
    assert state.latest_metrics == {0: {"loss": 1.0}, 1: {"loss": 0.5}}


def test_reports_while_shutting_down_and_after_shut_down_are_counted() -> None:
    stream = Stream().running().shutdown_requested().reported(0, loss=1.0).shut_down()
    stream.reported(0, loss=2.0)
    state = project_worker_group(stream.events)
    assert state.status is S.SHUT_DOWN
    assert state.report_counts == {0: 2}
    assert state.latest_metrics[0] == {"loss": 2.0}


# ------------------------------------------------------------------------------ shutdown


def test_a_shutdown_request_keeps_its_reason_abort_flag_and_time() -> None:
    stream = Stream().running()
    stream.shutdown_requested("user")
    state = project_worker_group(stream.events)
    assert state.shutdown_reason == "user"
    assert state.aborted is False
    assert state.shutdown_requested_at == stream.events[-1].recorded_at
    assert state.outcome is None


def test_a_shut_down_group_keeps_its_time_duration_and_released_resources() -> None:
    stream = Stream().running().shutdown_requested().shut_down(released=("workers",))
    state = project_worker_group(stream.events)
    assert state.shut_down_at == stream.events[-1].recorded_at
    assert state.shutdown_duration_s == 0.25
    assert state.released == ("workers",)
    assert state.worker_endings == ()
    assert state.is_terminal
    assert state.outcome is not None and state.outcome.value == "aborted"


def test_callback_failures_are_kept_in_order_even_after_the_end() -> None:
    stream = Stream().running()
    first = CallbackFailed(hook="after_worker_group_start", callback="cb", error=error("a"))
    stream.add(first)
    stream.shutdown_requested().shut_down()
    second = CallbackFailed(hook="after_worker_group_shutdown", callback="cb", error=error("b"))
    stream.add(second)
    state = project_worker_group(stream.events)
    assert state.callback_failures == (first, second)
    assert state.status is S.SHUT_DOWN


# ---------------------------------------------------------------------- the fold and evolve


def test_evolve_and_the_fold_agree_and_the_fold_continues_from_a_state() -> None:
    stream = Stream().running().polled(stopped(0)).reported(1, loss=3.0)
    state = None
    for event in stream.events:
        state = evolve(state, event)
    assert state == project_worker_group(stream.events)
    middle = project_worker_group(stream.events[:3])
    fold = WorkerGroupFold(middle)
    assert fold.view is not None and fold.view.version == 3
    for event in stream.events[3:]:
        fold.apply(event)
    assert fold.state() == state
    assert fold.poll_status == state.poll_status
    assert project_worker_group(stream.events[3:], middle) == state


def test_an_empty_fold_has_no_view_state_or_poll_status() -> None:
    fold = WorkerGroupFold()
    assert (fold.view, fold.state(), fold.poll_status) == (None, None, None)


def test_each_event_moves_the_version_position_and_time() -> None:
    stream = Stream(offset=100).running()
    state = project_worker_group(stream.events)
    last = stream.events[-1]
    assert (state.version, state.position, state.updated_at) == (
        last.version,
        last.position,
        last.recorded_at,
    )
    assert state.requested_at == stream.events[0].recorded_at


def test_a_requested_group_starts_from_empty_counters_and_flags() -> None:
    state = project_worker_group(Stream().requested().events)
    assert (state.last_poll_seq, state.polls_total, state.recorded_polls) == (0, 0, 0)
    assert (state.training_launched, state.aborted) == (False, False)
    assert (state.workers, state.released, state.callback_failures) == ((), (), ())
    assert (state.poll_status, state.errors, state.error, state.return_values) == (
        None,
        {},
        None,
        {},
    )
    assert state.return_value is None and state.reports_total == 0


def test_an_unknown_event_moves_only_the_version_even_after_the_end() -> None:
    stream = Stream().running().shutdown_requested().shut_down()
    before = project_worker_group(stream.events)
    stream.add(UnknownEvent(type="CheckpointPinned", schema_version=1, data={}))
    after = project_worker_group(stream.events)
    assert after == replace(
        before,
        version=before.version + 1,
        position=before.position + 1,
        updated_at=stream.events[-1].recorded_at,
    )


def test_a_report_after_a_failed_start_is_an_error_of_the_terminal_state() -> None:
    stream = Stream().requested().placement_group().sync_actor().workers().started()
    stream.start_failed(StartStage.LAUNCH).reported(0)
    with pytest.raises(ProjectionError, match="already START_FAILED"):
        project_worker_group(stream.events)


# --------------------------------------------------------------------- Ray's error string


def _status(*errors: tuple[ErrorInfo, bool]) -> WorkerGroupPollStatus:
    return WorkerGroupPollStatus(
        worker_statuses={
            rank: WorkerStatus(running=running, error=err)
            for rank, (err, running) in enumerate(errors)
        }
    )


def test_errors_that_differ_only_in_numbers_share_one_entry_with_the_first_text() -> None:
    status = _status(
        (ErrorInfo(type="E", message="rank 0 failed at step 12"), False),
        (ErrorInfo(type="E", message="rank 1 failed at step 345"), False),
        (ErrorInfo(type="F", message="other"), False),
    )
    assert status.get_error_string() == (
        "[Rank 0,1 Error Snippet]:\nE: rank 0 failed at step 12\n[Rank 2 Error Snippet]:\nF: other"
    )


@pytest.mark.parametrize(("length", "cut"), [(999, False), (1000, True), (1500, True)])
def test_a_stopped_workers_error_of_1000_characters_or_more_is_cut(length: int, cut: bool) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(length))
    status = _status((ErrorInfo(type="E", message="m", traceback=text), False))
    shown = status.get_error_string().removeprefix("[Rank 0 Error Snippet]:\n")
    if not cut:
        assert shown == text
        return
    assert shown == (
        text[:500]
        + "...\n... (Output truncated. See individual worker logs for full details) ...\n"
        + text[-500:]
    )


def test_health_check_failures_and_running_workers_errors_are_shown_whole() -> None:
    long = "x" * 1200
    health = ErrorInfo(type="WorkerHealthCheckFailedError", message=long)
    running = ErrorInfo(type="E", message="m", traceback="y" * 1200)
    status = _status((health, False), (running, True))
    assert status.get_error_string() == (
        f"[Rank 0 Error Snippet]:\n{long}\n[Rank 1 Error Snippet]:\n{'y' * 1200}"
    )


def test_training_outcomes_are_lowercase_names() -> None:
    assert [outcome.value for outcome in TrainingOutcome] == [
        "finished",
        "errored",
        "aborted",
        "resized",
    ]


def test_the_return_value_is_rank_zeros_once_it_finished() -> None:
    stream = Stream().running()
    stream.polled(WorkerStatusChange(world_rank=1, running=False, return_value="r1"))
    assert project_worker_group(stream.events).return_value is None
    stream.polled(WorkerStatusChange(world_rank=0, running=False, return_value="r0"))
    state = project_worker_group(stream.events)
    assert state.return_values == {0: "r0", 1: "r1"}
    assert state.return_value == "r0"


def test_a_state_taken_mid_fold_never_changes_as_later_reports_are_folded() -> None:
    # The fold updates its report mappings in place once it owns them (a fast path): a state it
    # handed out, and the state a fold continued from, must keep the values they had.
    stream = Stream().running().reported(0, loss=3.0).reported(1, loss=2.0)
    stream.reported(0, loss=1.0).reported(0, "ckpt-2", loss=0.5).reported(1, loss=0.25)
    cut = len(stream.events) - 3
    fold = WorkerGroupFold()
    taken = []
    for index, event in enumerate(stream.events):
        fold.apply(event)
        if index >= cut - 1:
            taken.append((index, fold.state()))
    for index, state in taken:
        assert state == project_worker_group(stream.events[: index + 1])
    start = project_worker_group(stream.events[:cut])
    before = (dict(start.latest_metrics), dict(start.report_counts), dict(start.last_report_index))
    project_worker_group(stream.events[cut:], start)
    evolve(start, stream.events[cut])
    assert (start.latest_metrics, start.report_counts, start.last_report_index) == before
