"""Given events, then the worker-group state: every event type, every transition, failure paths."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from msgspec import structs
from projection_builders import T0, Stream, error, record, stopped

from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupPolled,
    WorkerReported,
    WorkerStatusChange,
)
from wgstore.projections import (
    TRANSITIONS,
    ProjectionError,
    TrainingOutcome,
    WorkerGroupPollStatus,
    WorkerGroupStatus,
    WorkerStatus,
    evolve,
    project_worker_group,
)

S = WorkerGroupStatus


class TestStart:
    def test_a_start_request_makes_a_requested_group_with_its_context(self) -> None:
        state = project_worker_group(Stream(num_workers=3).requested().events)
        assert state.status is S.REQUESTED
        assert (state.group_id, state.run_id, state.attempt) == ("g1", "r1", 1)
        assert state.stream_id == "worker-group-g1"
        assert state.context.num_workers == 3
        assert state.num_workers == 3
        assert state.version == 1
        assert state.requested_at == T0.replace(second=1)
        assert state.outcome is None
        assert not state.is_terminal

    def test_a_reserved_placement_group_moves_the_group_to_starting(self) -> None:
        state = project_worker_group(Stream().requested().placement_group().events)
        assert state.status is S.STARTING
        assert state.placement_group is not None
        assert state.placement_group.placement_group_id == "pg-1"

    def test_a_started_sync_actor_is_kept_in_the_state(self) -> None:
        state = project_worker_group(Stream().requested().sync_actor().events)
        assert state.status is S.STARTING
        assert state.sync_actor is not None and state.sync_actor.actor_id == "sync-1"

    def test_started_workers_are_kept_sorted_by_world_rank(self) -> None:
        stream = Stream(num_workers=4).requested()
        stream.workers()
        shuffled = replace(
            stream.events[-1].event, workers=tuple(reversed(stream.events[-1].event.workers))
        )
        stream.events[-1] = structs.replace(stream.events[-1], event=shuffled)
        state = project_worker_group(stream.events)
        assert [w.world_rank for w in state.workers] == [0, 1, 2, 3]
        assert state.num_workers == 4
        assert state.node_ids == ("node-0", "node-1")
        assert state.worker(3).pid == 1003

    def test_workers_with_a_gap_in_their_ranks_are_an_error(self) -> None:
        stream = Stream(num_workers=2).requested().workers()
        event = stream.events[-1].event
        bad = replace(event, workers=(event.workers[0], replace(event.workers[1], world_rank=5)))
        stream.events[-1] = structs.replace(stream.events[-1], event=bad)
        with pytest.raises(ProjectionError, match=r"world ranks must be 0\.\.n-1"):
            project_worker_group(stream.events)

    def test_a_builder_step_done_twice_is_an_error(self) -> None:
        stream = Stream().requested().placement_group().placement_group()
        with pytest.raises(ProjectionError, match="placement group of group 'g1' is already set"):
            project_worker_group(stream.events)

    def test_a_group_with_every_builder_step_is_running_once_started(self) -> None:
        state = project_worker_group(
            Stream().requested().placement_group().sync_actor().workers().started().events
        )
        assert state.status is S.RUNNING
        assert state.status is WorkerGroupStatus.RUNNING
        assert state.started_at == T0.replace(second=5)
        assert state.startup_s == 2.5
        assert not state.training_launched

    def test_starting_an_incomplete_group_is_an_error_naming_what_is_missing(self) -> None:
        stream = Stream().requested().placement_group().workers().started()
        with pytest.raises(ProjectionError, match="Missing: sync_actor") as caught:
            project_worker_group(stream.events)
        assert caught.value.version == 4
        assert caught.value.stream_id == "worker-group-g1"

    def test_starting_a_group_that_no_builder_step_touched_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="from REQUESTED to RUNNING"):
            project_worker_group(Stream().requested().started().events)

    def test_launching_training_is_recorded_with_its_time(self) -> None:
        state = project_worker_group(Stream().running().events)
        assert state.training_launched
        assert state.training_launched_at == T0.replace(second=6)

    def test_launching_training_twice_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="already launched"):
            project_worker_group(Stream().running().launched().events)

    def test_launching_training_before_the_group_started_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="cannot launch while the group is STARTING"):
            project_worker_group(Stream().requested().placement_group().launched().events)


class TestStartFailure:
    @pytest.mark.parametrize("stage", list(StartStage))
    def test_a_failed_start_is_terminal_and_keeps_the_error_and_released_resources(
        self, stage: StartStage
    ) -> None:
        state = project_worker_group(
            Stream().requested().placement_group().start_failed(stage, ("placement_group",)).events
        )
        assert state.status is S.START_FAILED
        assert state.is_terminal
        assert state.start_failure is not None and state.start_failure.stage is stage
        assert state.error == error("no resources")
        assert state.released == ("placement_group",)
        assert state.outcome is None

    def test_a_start_can_fail_before_any_builder_step(self) -> None:
        state = project_worker_group(
            Stream().requested().start_failed(StartStage.PLACEMENT_GROUP, ()).events
        )
        assert state.status is S.START_FAILED
        assert state.released == ()

    def test_a_start_can_fail_after_build_while_launching_training(self) -> None:
        stream = Stream().requested().placement_group().sync_actor().workers().started()
        state = project_worker_group(stream.start_failed(StartStage.LAUNCH).events)
        assert state.status is S.START_FAILED

    def test_a_start_cannot_fail_once_training_was_launched(self) -> None:
        with pytest.raises(ProjectionError, match="after training was launched"):
            project_worker_group(Stream().running().start_failed(StartStage.LAUNCH).events)

    def test_any_event_after_a_failed_start_is_an_error(self) -> None:
        stream = Stream().requested().start_failed().placement_group()
        with pytest.raises(ProjectionError, match="already START_FAILED") as caught:
            project_worker_group(stream.events)
        assert caught.value.version == 3


class TestPolls:
    def test_before_any_poll_the_poll_status_is_unknown(self) -> None:
        state = project_worker_group(Stream().running().events)
        assert state.poll_status is None
        assert state.errors == {}
        assert state.outcome is None

    def test_a_first_poll_without_changes_shows_every_worker_running(self) -> None:
        state = project_worker_group(Stream(num_workers=3).running().polled().events)
        assert state.poll_status == WorkerGroupPollStatus(
            {0: WorkerStatus(True), 1: WorkerStatus(True), 2: WorkerStatus(True)}
        )
        assert state.last_poll_seq == 1
        assert state.polls_total == 1
        assert state.recorded_polls == 1
        assert state.outcome is None

    def test_a_poll_applies_only_the_changes_to_the_previous_status(self) -> None:
        stream = Stream(num_workers=3).running().polled(stopped(1)).polled(stopped(2), unchanged=4)
        state = project_worker_group(stream.events)
        assert state.poll_status is not None
        assert [s.running for _, s in sorted(state.poll_status.worker_statuses.items())] == [
            True,
            False,
            False,
        ]
        assert state.last_poll_seq == 6
        assert state.polls_total == 6
        assert state.recorded_polls == 2
        assert state.last_polled_at == stream.events[-1].event.polled_at

    def test_every_worker_stopped_without_error_means_training_finished(self) -> None:
        state = project_worker_group(Stream().running().polled(stopped(0), stopped(1)).events)
        assert state.poll_status is not None and state.poll_status.finished
        assert state.outcome is TrainingOutcome.FINISHED
        assert state.status is S.RUNNING

    def test_a_worker_error_means_training_errored_even_while_others_run(self) -> None:
        state = project_worker_group(Stream().running().polled(stopped(1, error("oom"))).events)
        assert state.outcome is TrainingOutcome.ERRORED
        assert state.errors == {1: error("oom")}
        assert state.error == error("oom")

    def test_a_poll_of_an_unknown_rank_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="no worker has world rank 7"):
            project_worker_group(Stream().running().polled(stopped(7)).events)

    def test_a_poll_sequence_that_goes_backwards_is_an_error(self) -> None:
        stream = Stream().running().polled().polled()
        stream.poll_seq = 1
        stream.polled()
        with pytest.raises(ProjectionError, match=r"poll_seq 2 does not follow .* poll_seq 2"):
            project_worker_group(stream.events)

    def test_lost_unchanged_polls_leave_the_count_below_the_sequence(self) -> None:
        stream = Stream().running().polled()
        stream.poll_seq = 10
        state = project_worker_group(stream.polled().events)
        assert (state.last_poll_seq, state.polls_total) == (11, 2)

    def test_polling_a_group_that_has_not_started_is_an_error(self) -> None:
        stream = Stream().requested().placement_group().polled()
        with pytest.raises(ProjectionError, match="cannot be polled while STARTING"):
            project_worker_group(stream.events)

    def test_a_negative_unchanged_count_is_an_error(self) -> None:
        stream = Stream().running()
        stream.add(WorkerGroupPolled(poll_seq=1, polled_at=T0, unchanged_polls=-1))
        with pytest.raises(ProjectionError, match="unchanged_polls must be >= 0"):
            project_worker_group(stream.events)


class TestReports:
    def test_reports_keep_the_latest_metrics_count_and_checkpoint_per_rank(self) -> None:
        stream = Stream().running().reported(0, loss=0.5).reported(0, "/ckpt/1", loss=0.4)
        state = project_worker_group(stream.reported(1, loss=0.6).events)
        assert state.latest_metrics == {0: {"loss": 0.4}, 1: {"loss": 0.6}}
        assert state.report_counts == {0: 2, 1: 1}
        assert state.last_report_index == {0: 2, 1: 1}
        assert state.reports_total == 3
        assert state.latest_reported_checkpoint == "/ckpt/1"
        assert state.latest_checkpoint is None  # rank 1 has not reported index 2 yet


class TestCommittedCheckpoint:
    """A checkpoint counts once every rank reported its index (Ray's ReportCallbackHandler)."""

    def test_a_checkpoint_is_committed_when_the_last_rank_reports_its_index(self) -> None:
        stream = Stream().running().reported(0, "/ckpt/1")
        assert project_worker_group(stream.events).latest_checkpoint is None
        state = project_worker_group(stream.reported(1, "/ckpt/1").events)
        assert state.latest_checkpoint == "/ckpt/1"
        assert state.checkpoint_index == 1
        assert state.checkpoint_committed_at == stream.events[-1].recorded_at
        assert state.report_rounds == {}

    def test_a_step_only_some_ranks_reported_before_one_died_is_not_committed(self) -> None:
        stream = Stream().running()
        for step in (1, 2, 3):
            stream.reported(0, f"/ckpt/{step}").reported(1, f"/ckpt/{step}")
        stream.reported(0, "/ckpt/4").polled(stopped(1, error()))
        state = project_worker_group(stream.events)
        assert state.latest_checkpoint == "/ckpt/3"
        assert state.checkpoint_index == 3
        assert state.latest_reported_checkpoint == "/ckpt/4"
        assert set(state.report_rounds) == {4}

    def test_ranks_that_carry_no_checkpoint_still_complete_the_round(self) -> None:
        # DDP: only rank 0 saves; Ray registers the checkpoint once every rank reported
        stream = Stream().running().reported(0, "/ckpt/1").reported(1, loss=1.0)
        assert project_worker_group(stream.events).latest_checkpoint == "/ckpt/1"

    def test_a_later_round_without_a_checkpoint_keeps_the_committed_one(self) -> None:
        stream = Stream().running().reported(0, "/ckpt/1").reported(1, "/ckpt/1")
        state = project_worker_group(stream.reported(1).reported(0).events)
        assert (state.latest_checkpoint, state.checkpoint_index) == ("/ckpt/1", 1)

    def test_a_round_whose_ranks_named_different_paths_commits_nothing(self) -> None:
        stream = Stream().running().reported(0, "/ckpt/1").reported(1, "/ckpt/1")
        state = project_worker_group(stream.reported(0, "/a/2").reported(1, "/b/2").events)
        assert (state.latest_checkpoint, state.checkpoint_index) == ("/ckpt/1", 1)
        assert state.report_rounds == {}

    def test_a_rank_ahead_of_another_is_committed_when_the_slow_one_catches_up(self) -> None:
        stream = Stream(num_workers=3).running()
        for step in (1, 2, 3):
            stream.reported(0, f"/c/{step}")
        stream.reported(1, "/c/1").reported(2, "/c/1").reported(1, "/c/2")
        state = project_worker_group(stream.events)
        assert state.checkpoint_index == 1 and set(state.report_rounds) == {2, 3}
        state = project_worker_group(stream.reported(2, "/c/2").events)
        assert (state.latest_checkpoint, state.checkpoint_index) == ("/c/2", 2)
        assert set(state.report_rounds) == {3}

    def test_one_event_at_a_time_gives_the_same_state_as_one_fold(self) -> None:
        stream = Stream().running().reported(0, "/c/1").reported(1, "/c/1").reported(0, "/c/2")
        state = None
        for event in stream.events:
            state = evolve(state, event)
        assert state == project_worker_group(stream.events)

    def test_a_report_from_an_unknown_rank_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="no worker has world rank 2"):
            project_worker_group(Stream(num_workers=2).running().reported(2).events)

    def test_a_report_index_that_does_not_rise_is_an_error(self) -> None:
        stream = Stream().running().reported(0)
        stream.add(WorkerReported(world_rank=0, index=1, metrics={}))
        with pytest.raises(ProjectionError, match="report index 1 of rank 0 does not follow"):
            project_worker_group(stream.events)

    def test_a_report_before_the_group_started_is_an_error(self) -> None:
        stream = Stream().requested()
        stream.add(WorkerReported(world_rank=0, index=1))
        with pytest.raises(ProjectionError, match="cannot report while the group is REQUESTED"):
            project_worker_group(stream.events)


class TestShutdown:
    def test_a_shutdown_request_moves_a_running_group_to_shutting_down(self) -> None:
        state = project_worker_group(Stream().running().shutdown_requested("user").events)
        assert state.status is S.SHUTTING_DOWN
        assert state.shutdown_reason == "user"
        assert state.shutdown_requested_at == T0.replace(second=7)
        assert state.status is not WorkerGroupStatus.RUNNING

    def test_a_second_shutdown_request_keeps_the_first_reason(self) -> None:
        stream = Stream().running().shutdown_requested("user").shutdown_requested("again")
        state = project_worker_group(stream.events)
        assert state.shutdown_reason == "user"
        assert state.version == 8

    def test_polls_and_reports_in_flight_while_shutting_down_are_applied(self) -> None:
        stream = Stream().running().shutdown_requested().reported(0, loss=1.0)
        state = project_worker_group(stream.polled(stopped(0), stopped(1)).events)
        assert state.status is S.SHUTTING_DOWN
        assert state.report_counts == {0: 1}
        assert state.outcome is TrainingOutcome.FINISHED

    def test_a_group_shut_down_while_training_ran_was_aborted(self) -> None:
        stream = Stream().running().polled().shutdown_requested().shut_down(("workers",))
        state = project_worker_group(stream.events)
        assert state.status is S.SHUT_DOWN
        assert state.is_terminal
        assert state.outcome is TrainingOutcome.ABORTED
        assert state.released == ("workers",)
        assert state.shut_down_at == stream.events[-1].recorded_at
        assert state.shutdown_duration_s == 0.25

    def test_a_group_shut_down_after_training_finished_keeps_finished(self) -> None:
        stream = Stream().running().polled(stopped(0), stopped(1)).shutdown_requested().shut_down()
        assert project_worker_group(stream.events).outcome is TrainingOutcome.FINISHED

    def test_a_group_shut_down_after_a_worker_error_keeps_errored(self) -> None:
        stream = Stream().running().polled(stopped(0, error())).shutdown_requested().shut_down()
        assert project_worker_group(stream.events).outcome is TrainingOutcome.ERRORED

    def test_a_shutdown_can_be_asked_before_the_start_finished(self) -> None:
        stream = Stream().requested().placement_group().shutdown_requested().shut_down()
        state = project_worker_group(stream.events)
        assert state.status is S.SHUT_DOWN
        assert state.outcome is TrainingOutcome.ABORTED

    def test_a_shut_down_without_a_request_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="from RUNNING to SHUT_DOWN"):
            project_worker_group(Stream().running().shut_down().events)

    def test_any_event_after_shut_down_is_an_error(self) -> None:
        stream = Stream().running().shutdown_requested().shut_down().polled()
        with pytest.raises(ProjectionError, match="already SHUT_DOWN"):
            project_worker_group(stream.events)

    def test_a_report_a_worker_stored_as_it_was_killed_may_follow_the_shutdown(self) -> None:
        # workers append their own reports; one committing as its actor dies can land late
        stream = Stream().running().reported(0, loss=1.0).shutdown_requested().shut_down()
        stream.reported(0, checkpoint="/ckpt/2", loss=0.5)
        state = project_worker_group(stream.events)
        assert state.status is S.SHUT_DOWN
        assert state.report_counts[0] == 2 and state.latest_reported_checkpoint == "/ckpt/2"
        assert state.latest_checkpoint is None  # rank 1 never reported
        with pytest.raises(ProjectionError, match="already SHUT_DOWN"):
            project_worker_group(stream.shutdown_requested().events)

    def test_a_start_cannot_fail_while_shutting_down(self) -> None:
        stream = Stream().running().shutdown_requested().start_failed()
        with pytest.raises(ProjectionError, match="from SHUTTING_DOWN to START_FAILED"):
            project_worker_group(stream.events)


class TestStreamIntegrity:
    def test_a_stream_that_does_not_begin_with_a_start_request_is_an_error(self) -> None:
        stream = Stream().requested().placement_group()
        with pytest.raises(ProjectionError, match="must begin with WorkerGroupStartRequested") as e:
            evolve(None, stream.events[1])
        assert (e.value.version, e.value.position) == (2, 2)

    def test_a_start_request_that_is_not_version_one_is_an_error(self) -> None:
        event = Stream().requested().events[0]
        with pytest.raises(ProjectionError, match="must be version 1"):
            evolve(None, structs.replace(event, version=3))

    def test_a_second_start_request_is_an_error(self) -> None:
        stream = Stream().requested().requested()
        with pytest.raises(ProjectionError, match="already requested"):
            project_worker_group(stream.events)

    def test_an_event_out_of_order_names_the_stream_and_position(self) -> None:
        events = Stream().running().events
        events[2], events[3] = events[3], events[2]
        with pytest.raises(ProjectionError) as caught:
            project_worker_group(events)
        assert "out of order" in str(caught.value)
        assert "'worker-group-g1', version 4, position 4" in str(caught.value)
        assert caught.value.position == 4

    def test_a_repeated_event_is_an_error_not_a_skip(self) -> None:
        events = Stream().running().events
        with pytest.raises(ProjectionError, match="out of order"):
            project_worker_group([*events[:3], events[2], *events[3:]])

    def test_an_event_of_another_stream_is_an_error(self) -> None:
        state = project_worker_group(Stream().requested().events)
        other = Stream("g2").requested().placement_group().events[1]
        with pytest.raises(ProjectionError, match="another stream"):
            evolve(state, other)

    def test_an_unknown_event_type_is_an_error_not_a_skip(self) -> None:
        @dataclass(frozen=True)
        class CheckpointPinned:
            path: str

        state = project_worker_group(Stream().running().events)
        unknown = record("worker-group-g1", state.version + 1, CheckpointPinned(path="/x"))
        with pytest.raises(ProjectionError, match="CheckpointPinned") as caught:
            evolve(state, unknown)
        assert caught.value.event_type == "CheckpointPinned"

    def test_folding_nothing_is_an_error(self) -> None:
        with pytest.raises(ProjectionError, match="no events to fold"):
            project_worker_group([])

    def test_evolve_never_changes_the_state_it_was_given(self) -> None:
        stream = Stream().running().reported(0, loss=1.0)
        before = project_worker_group(stream.events)
        after = project_worker_group(stream.reported(0, loss=2.0).events[-1:], before)
        assert before.latest_metrics == {0: {"loss": 1.0}}
        assert after.latest_metrics == {0: {"loss": 2.0}}

    def test_projection_errors_survive_pickling(self) -> None:
        import pickle

        error_ = ProjectionError("bad", stream_id="s", version=2, position=9, event_type="X")
        copy = pickle.loads(pickle.dumps(error_))
        assert (copy.stream_id, copy.version, copy.position, str(copy)) == ("s", 2, 9, str(error_))


class TestTransitionTable:
    def test_terminal_statuses_allow_no_transition(self) -> None:
        for status in S:
            assert status.is_terminal == (not TRANSITIONS[status])

    def test_every_status_has_an_entry(self) -> None:
        assert set(TRANSITIONS) == set(S)

    def test_statuses_and_outcomes_are_strings(self) -> None:
        assert S.RUNNING == "RUNNING"
        assert TrainingOutcome.ABORTED == "aborted"


class TestPollStatus:
    def test_errors_and_the_error_string_list_every_failed_rank(self) -> None:
        status = WorkerGroupPollStatus(
            {
                0: WorkerStatus(False, ErrorInfo(type="ValueError", message="bad")),
                1: WorkerStatus(True),
                2: WorkerStatus(False, ErrorInfo(type="OSError", message="disk")),
            }
        )
        assert set(status.errors) == {0, 2}
        assert status.get_error_string() == (
            "[Rank 0 Error Snippet]:\nValueError: bad\n[Rank 2 Error Snippet]:\nOSError: disk"
        )
        assert not status.finished
        assert status.num_running == 1

    def test_an_empty_poll_status_is_not_finished(self) -> None:
        assert not WorkerGroupPollStatus({}).finished

    def test_a_change_of_a_rank_is_recorded_as_given(self) -> None:
        stream = Stream().running().polled(stopped(0))
        stream.polled(WorkerStatusChange(world_rank=0, running=True))
        state = project_worker_group(stream.events)
        assert state.poll_status is not None
        assert state.poll_status.worker_statuses[0] == WorkerStatus(True)


def test_a_group_stopped_for_a_resize_ended_resized_not_aborted() -> None:
    from wgstore.events.worker_group import WorkerGroupShutdownRequested

    stream = Stream().running().polled()
    stream.add(WorkerGroupShutdownRequested(reason="resized", resized_to=4))
    state = project_worker_group(stream.shut_down().events)
    assert (state.outcome, state.resized_to) == (TrainingOutcome.RESIZED, 4)
    aborted = project_worker_group(
        Stream().running().polled().shutdown_requested().shut_down().events
    )
    assert aborted.outcome is TrainingOutcome.ABORTED
