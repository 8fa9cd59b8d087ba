"""Given events of a run stream, then the run state."""

from __future__ import annotations

import pytest
from projection_builders import RunStream, Stream, error

from wgstore.projections import ProjectionError, RunStatus, project_run


def test_a_created_run_is_initializing() -> None:
    state = project_run(RunStream().created().events)
    assert state.status is RunStatus.INITIALIZING
    assert (state.run_id, state.name, state.attempts, state.ended) == ("r1", "demo", 0, False)


def test_controller_states_map_to_ray_run_statuses_and_name_the_groups() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1")
    state = project_run(stream.events)
    assert state.status is RunStatus.RUNNING
    assert state.controller_state == "RUNNING"
    assert state.groups == ("g1",)
    assert [t.to_state for t in state.transitions] == ["SCHEDULING", "RUNNING"]


def test_rescheduling_is_scheduling_and_shutting_down_keeps_the_status() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("RESCHEDULING")
    assert project_run(stream.events).status is RunStatus.SCHEDULING
    stream.to("RUNNING", "g2").to("SHUTTING_DOWN")
    state = project_run(stream.events)
    assert (state.status, state.controller_state) == (RunStatus.RUNNING, "SHUTTING_DOWN")


def test_a_failure_decision_and_a_restart_make_a_second_attempt() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").decided("RETRY", "g1")
    stream.to("RESTARTING", reason="worker died").to("SCHEDULING").to("RUNNING", "g2")
    state = project_run(stream.events)
    assert state.status is RunStatus.RUNNING
    assert state.groups == ("g1", "g2")
    assert state.attempts == 2
    assert state.current_group_id == "g2"
    assert state.failures == 1
    assert state.decisions[0].decision == "RETRY"


def test_resizing_is_a_run_status() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("RESIZING")
    assert project_run(stream.events).status is RunStatus.RESIZING


def test_a_finished_run_is_terminal() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("FINISHED")
    state = project_run(stream.finished("g1").events)
    assert state.status is RunStatus.FINISHED
    assert state.is_terminal
    assert state.final_group_id == "g1"
    assert state.ended_at == stream.events[-1].recorded_at


def test_an_errored_run_keeps_its_error() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").decided("RAISE", "g1")
    state = project_run(stream.errored("g1").events)
    assert state.status is RunStatus.ERRORED
    assert state.error == error("fatal")


def test_an_aborted_run_keeps_its_reason() -> None:
    state = project_run(RunStream().created().to("SCHEDULING").aborted("SIGTERM").events)
    assert (state.status, state.abort_reason) == (RunStatus.ABORTED, "SIGTERM")


def test_an_end_that_contradicts_the_controller_is_an_error() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("ERRORED").finished()
    with pytest.raises(ProjectionError, match="already ERRORED; it cannot end as FINISHED"):
        project_run(stream.events)


def test_nothing_may_follow_the_end_of_a_run() -> None:
    stream = RunStream().created().aborted().to("SCHEDULING")
    with pytest.raises(ProjectionError, match="already ended as ABORTED"):
        project_run(stream.events)


def test_a_transition_from_another_state_than_the_current_one_is_an_error() -> None:
    stream = RunStream().created().to("SCHEDULING")
    stream.controller = "RUNNING"
    stream.to("RESTARTING")
    with pytest.raises(ProjectionError, match="moved from RUNNING, but it was in SCHEDULING"):
        project_run(stream.events)


def test_a_controller_transition_after_a_terminal_controller_state_is_an_error() -> None:
    stream = RunStream().created().to("ABORTED").to("SCHEDULING")
    with pytest.raises(ProjectionError, match="already reached ABORTED"):
        project_run(stream.events)


def test_an_unknown_controller_state_is_an_error() -> None:
    with pytest.raises(ProjectionError, match="unknown controller state 'PAUSED'"):
        project_run(RunStream().created().to("PAUSED").events)


def test_a_run_stream_must_begin_with_run_created() -> None:
    with pytest.raises(ProjectionError, match="must begin with RunCreated"):
        project_run(RunStream().to("SCHEDULING").events)


def test_a_second_run_created_is_an_error() -> None:
    with pytest.raises(ProjectionError, match="already created"):
        project_run(RunStream().created().created().events)


def test_a_worker_group_event_in_a_run_stream_is_an_error() -> None:
    run = RunStream().created()
    run.add(Stream().requested().placement_group().events[1].event)
    with pytest.raises(ProjectionError, match="not a run event"):
        project_run(run.events)


def test_run_events_out_of_order_are_an_error() -> None:
    events = RunStream().created().to("SCHEDULING").to("RUNNING").events
    with pytest.raises(ProjectionError, match="out of order"):
        project_run([events[0], events[2]])


def test_folding_no_run_events_is_an_error() -> None:
    with pytest.raises(ProjectionError, match="no events"):
        project_run([])


def test_a_recorded_trainer_tells_whether_and_why_not_the_run_can_be_resumed() -> None:
    from wgstore.events.run import TrainerRecorded
    from wgstore.projections.run_state import resume_problem

    stream = RunStream().created()
    assert "no TrainerRecorded" in (resume_problem(project_run(stream.events)) or "")
    stream.add(TrainerRecorded(trainer="m:T", train_loop="m:f"))
    state = project_run(stream.events)
    assert state.trainer is not None and resume_problem(state) is None
    refused = RunStream().created()
    refused.add(
        TrainerRecorded(
            trainer="m:T",
            train_loop="m:f",
            resumable=False,
            not_resumable_reason="dataset 'x' cannot be pickled",
        )
    )
    assert resume_problem(project_run(refused.events)) == "dataset 'x' cannot be pickled"
    with pytest.raises(ProjectionError, match="already recorded its trainer"):
        project_run(stream.add(TrainerRecorded(trainer="m:T", train_loop="m:f")).events)


def test_an_elastic_run_keeps_every_size_its_policy_chose_and_every_preemption() -> None:
    from datetime import UTC, datetime

    from wgstore.events.run import (
        PreemptionNoticed,
        RunCreated,
        ScalingConfig,
        ScalingDecisionMade,
    )

    stream = RunStream()
    stream.add(
        RunCreated(
            run_id="r1",
            name="elastic",
            scaling_config=ScalingConfig(num_workers=4, min_workers=2),
        )
    )
    stream.to("SCHEDULING").add(
        ScalingDecisionMade(num_workers=3, cause="initial", reason="3 fit", group_id="g1")
    )
    stream.to("RUNNING", "g1").to("RESIZING")
    stream.to("SCHEDULING").add(
        ScalingDecisionMade(num_workers=4, previous_workers=3, cause="grew", group_id="g2")
    )
    deadline = datetime(2027, 1, 1, tzinfo=UTC)
    stream.to("RUNNING", "g2").to("PREEMPTING").add(
        PreemptionNoticed(group_id="g2", nodes={"n2": (3, 2)}, deadline=deadline)
    )
    state = project_run(stream.events)
    assert state.elastic and state.scaling_config is not None
    assert state.scaling_config.describe() == "2..4"
    assert [(d.group_id, d.previous_workers, d.num_workers) for d in state.scaling_decisions] == [
        ("g1", None, 3),
        ("g2", 3, 4),
    ]
    assert state.decision_for("g2") is state.scaling_decisions[1]
    assert state.decision_for("g3") is None
    (preemption,) = state.preemptions
    assert (preemption.ranks, preemption.deadline) == ((2, 3), deadline)
    assert state.status is RunStatus.RUNNING  # PREEMPTING is a sub-state of RUNNING


def test_a_recording_note_is_the_one_event_that_may_follow_a_runs_end() -> None:
    from wgstore.events.run import RecordingFailed

    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("FINISHED")
    stream.finished("g1").add(RecordingFailed(hook="after_controller_finish", error=error()))
    state = project_run(stream.events)
    assert state.status is RunStatus.FINISHED
    assert [f.hook for f in state.recording_errors] == ["after_controller_finish"]
    with pytest.raises(ProjectionError, match="already ended"):
        project_run(stream.to("RUNNING", "g1").events)


def test_a_fixed_scaling_config_has_no_range_and_a_bad_range_is_refused() -> None:
    from wgstore.events.run import ScalingConfig

    fixed = ScalingConfig(num_workers=4)
    assert (fixed.elastic, fixed.fewest_workers, fixed.describe()) == (False, 4, "4")
    assert ScalingConfig(num_workers=4, min_workers=0).fewest_workers == 0  # Ray allows 0
    for bad in (5, -1, 1.5, True):
        with pytest.raises(ValueError, match="min_workers must be an int from 0 to num_workers"):
            ScalingConfig(num_workers=4, min_workers=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="elastic_resize_monitor_interval_s"):
        ScalingConfig(num_workers=4, min_workers=1, elastic_resize_monitor_interval_s=-1)
