"""Holes in the run fold's tests that mutation testing (scripts/mutate.py) found: every status,
every recorded field, the group list, and unknown events. Given run events, then state.
"""

from __future__ import annotations

import pytest
from projection_builders import RunStream, error, record

from wgstore.events.records import UnknownEvent
from wgstore.events.run import (
    ControllerStarted,
    FailureConfig,
    FailureDecisionMade,
    RankError,
    RunCreated,
    RunErrored,
    ScalingConfig,
)
from wgstore.projections import ProjectionError, RunStatus, project_run
from wgstore.projections.run_state import (
    CONTROLLER_TO_RUN_STATUS,
    ControllerSession,
    ControllerTransition,
    FailureDecision,
    RunState,
    evolve_run,
)

RUN_STATUSES = [
    "INITIALIZING",
    "SCHEDULING",
    "RUNNING",
    "RESTARTING",
    "RESIZING",
    "FINISHED",
    "ERRORED",
    "ABORTED",
]


def test_run_statuses_are_ray_trains_names_and_three_are_terminal() -> None:
    assert [status.value for status in RunStatus] == RUN_STATUSES
    assert {s.value for s in RunStatus if s.is_terminal} == {"FINISHED", "ERRORED", "ABORTED"}


@pytest.mark.parametrize(
    ("controller_state", "run_status"),
    [
        ("SCHEDULING", "SCHEDULING"),
        ("RESCHEDULING", "SCHEDULING"),
        ("RUNNING", "RUNNING"),
        ("RESTARTING", "RESTARTING"),
        ("RESIZING", "RESIZING"),
        ("SHUTTING_DOWN", "INITIALIZING"),  # keeps the status it had
        ("PREEMPTING", "INITIALIZING"),  # Ray 2.60's state while a node drains: status kept
        ("FINISHED", "FINISHED"),
        ("ERRORED", "ERRORED"),
        ("ABORTED", "ABORTED"),
        ("INITIALIZING", "INITIALIZING"),  # a controller that started over
    ],
)
def test_each_controller_state_maps_to_its_run_status(
    controller_state: str, run_status: str
) -> None:
    stream = RunStream().created()
    state = project_run(stream.to(controller_state).events)
    assert state.status.value == run_status
    assert state.controller_state == controller_state
    assert len(CONTROLLER_TO_RUN_STATUS) == 11


def test_a_created_run_keeps_its_configuration() -> None:
    created = RunCreated(
        run_id="r1",
        name="demo",
        scaling_config=ScalingConfig(num_workers=3),
        failure_config=FailureConfig(max_failures=2),
        lease_s=5.0,
        ray={"job_id": "j"},
    )
    state = project_run([record("run-r1", 1, created)])
    assert state.stream_id == "run-r1"
    assert state.scaling_config == ScalingConfig(num_workers=3)
    assert state.failure_config.max_failures == 2
    assert (state.lease_s, state.ray, state.context) == (5.0, {"job_id": "j"}, None)
    assert state.created_at == state.updated_at
    assert (state.version, state.position) == (1, 1)
    assert state.current_group_id is None and state.attempts == 0
    assert not state.is_terminal and state.ended_at is None


def test_run_state_defaults_for_a_run_built_by_hand() -> None:
    base = project_run(RunStream().created().events)
    by_hand = RunState(
        stream_id=base.stream_id,
        run_id=base.run_id,
        name=base.name,
        status=base.status,
        controller_state=base.controller_state,
        version=1,
        position=1,
        created_at=base.created_at,
        updated_at=base.updated_at,
    )
    assert by_hand.lease_s == 60.0
    assert by_hand.failure_config == FailureConfig()
    assert (by_hand.ended, by_hand.errors, by_hand.groups) == (False, (), ())


def test_a_transition_is_recorded_with_its_reason_group_time_and_version() -> None:
    stream = RunStream().created().to("SCHEDULING", reason="start").to("RUNNING", "g1", "up")
    state = project_run(stream.events)
    assert state.transitions[1] == ControllerTransition(
        from_state="SCHEDULING",
        to_state="RUNNING",
        reason="up",
        group_id="g1",
        at=stream.events[2].recorded_at,
        version=3,
    )
    assert state.transitions[0].group_id is None
    assert (state.updated_at, state.version) == (stream.events[2].recorded_at, 3)


def test_a_group_named_again_is_kept_once_and_in_first_named_order() -> None:
    stream = RunStream().created().to("SCHEDULING", "g1").to("RUNNING", "g1")
    stream.decided("RETRY", "g1").to("RESTARTING", "g2").to("SCHEDULING", "g1")
    state = project_run(stream.events)
    assert state.groups == ("g1", "g2")
    assert state.current_group_id == "g2"


def test_a_failure_decision_keeps_every_field_and_counts_by_kind() -> None:
    rank_error = RankError(world_rank=1, error=error("oom"))
    stream = RunStream().created()
    stream.add(
        FailureDecisionMade(
            decision="RAISE",
            group_id="g7",
            reason="start failed",
            failures_so_far=3,
            failure_kind="start",
            limit=2,
            errors=(rank_error,),
        )
    )
    stream.decided("RETRY", "g8")
    state = project_run(stream.events)
    assert state.decisions[0] == FailureDecision(
        decision="RAISE",
        group_id="g7",
        reason="start failed",
        failures_so_far=3,
        at=stream.events[1].recorded_at,
        version=2,
        failure_kind="start",
        limit=2,
        errors=(rank_error,),
    )
    assert state.groups == ("g7", "g8")  # a decision names its group
    assert (state.failures, state.failures_of("start"), state.failures_of("worker_group")) == (
        2,
        1,
        1,
    )
    assert state.failures_of("preemption") == 0


def test_controller_sessions_are_kept_in_order() -> None:
    stream = RunStream().created()
    stream.add(ControllerStarted(controller_id="c1", host="h", pid=7))
    stream.add(ControllerStarted(controller_id="c2", host="h2", pid=8, resumed=True))
    state = project_run(stream.events)
    assert state.controllers == (
        ControllerSession(
            controller_id="c1",
            host="h",
            pid=7,
            resumed=False,
            at=stream.events[1].recorded_at,
            version=2,
        ),
        ControllerSession(
            controller_id="c2",
            host="h2",
            pid=8,
            resumed=True,
            at=stream.events[2].recorded_at,
            version=3,
        ),
    )


def test_a_run_that_ends_adds_its_final_group_and_its_time() -> None:
    stream = RunStream().created().to("SCHEDULING").finished("g3")
    state = project_run(stream.events)
    assert (state.status, state.final_group_id, state.groups) == (
        RunStatus.FINISHED,
        "g3",
        ("g3",),
    )
    assert state.ended and state.is_terminal
    assert state.ended_at == stream.events[-1].recorded_at


def test_an_errored_run_keeps_every_failed_rank_and_its_group() -> None:
    errors = (RankError(world_rank=0, error=error("a")), RankError(world_rank=2, error=error("b")))
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").to("ERRORED")
    stream.add(RunErrored(error=error("a"), group_id="g1", errors=errors))
    state = project_run(stream.events)
    assert (state.status, state.errors, state.final_group_id) == (RunStatus.ERRORED, errors, "g1")
    assert state.ended_at == stream.events[-1].recorded_at


def test_an_aborted_run_without_a_group_names_none() -> None:
    state = project_run(RunStream().created().aborted("stop").events)
    assert (state.status, state.groups, state.final_group_id) == (RunStatus.ABORTED, (), None)
    assert state.ended


@pytest.mark.parametrize("end", ["finished", "errored", "aborted"])
def test_a_run_may_end_once_and_not_twice(end: str) -> None:
    stream = RunStream().created().to("SCHEDULING")
    getattr(stream, end)()
    getattr(stream, end)()
    with pytest.raises(ProjectionError, match="already ended as"):
        project_run(stream.events)


def test_an_unknown_event_is_stepped_over_even_after_the_end() -> None:
    stream = RunStream().created().to("SCHEDULING").aborted()
    stream.add(UnknownEvent(type="SomeoneElses", schema_version=1, data={"x": 1}))
    before = project_run(stream.events[:-1])
    state = project_run(stream.events)
    assert state.version == 4
    assert state.updated_at == stream.events[-1].recorded_at
    assert (state.status, state.transitions, state.groups) == (
        before.status,
        before.transitions,
        before.groups,
    )


def test_evolve_run_continues_from_a_state_and_checks_the_stream() -> None:
    stream = RunStream().created().to("SCHEDULING").to("RUNNING", "g1")
    middle = project_run(stream.events[:2])
    assert project_run(stream.events[2:], middle) == project_run(stream.events)
    assert evolve_run(middle, stream.events[2]).position == stream.events[2].position
    other = record("run-r2", 3, stream.events[2].event)
    with pytest.raises(ProjectionError, match="another stream"):
        evolve_run(middle, other)
    with pytest.raises(ProjectionError, match="RunCreated at version 1"):
        evolve_run(None, record("run-r1", 2, stream.events[0].event))


def test_a_failure_decision_built_by_hand_defaults_to_a_worker_group_failure() -> None:
    at = project_run(RunStream().created().events).created_at
    decision = FailureDecision(
        decision="RETRY", group_id="g", reason="", failures_so_far=1, at=at, version=2
    )
    assert (decision.failure_kind, decision.limit, decision.errors) == ("worker_group", 0, ())
