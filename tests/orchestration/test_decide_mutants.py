"""The pure controller ``decide``: the texts, ids, guards and rare branches the transition tests
left unchecked.

Written for the survivors of ``make mutate`` (issue 15). The log is in memory
(``decide_sim.SimLog``); where a branch is reached only by a log the controller would not write
itself (a transition that names no group, a RAISE without errors), the test appends those
events by hand, as another program or an older wgstore could have.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from tests.orchestration.decide_sim import T0, SimLog, World, step
from tests.projections.projection_builders import worker
from wgstore.events.run import ControllerStateChanged, FailureConfig, FailureDecisionMade
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    PlacementGroupReserved,
    StartStage,
    SyncActorStarted,
    WorkerGroupStarted,
    WorkersStarted,
)
from wgstore.orchestration.errors import UndecidableRunError
from wgstore.orchestration.run.decide import (
    Decision,
    FailureVerdict,
    attempt_group_id,
    decide,
    is_preemption,
    is_retryable_start_failure,
)
from wgstore.projections.errors import StreamNotFoundError

G1 = attempt_group_id("r1", 1)


def _new(config: FailureConfig | None = None, checkpoint: str | None = None) -> SimLog:
    log = SimLog()
    log.create(config or FailureConfig(), checkpoint=checkpoint)
    return log


def _current(log: SimLog) -> Any:
    return log.group(log.run().current_group_id)


def _running(log: SimLog) -> World:
    world = World(log)
    step(log)
    world.start(_current(log))
    step(log)
    assert log.run().controller_state == "RUNNING"
    return world


def _moved(decision: Decision) -> ControllerStateChanged:
    (moved,) = [e.event for e in decision.run_events if isinstance(e.event, ControllerStateChanged)]
    return moved


# ------------------------------------------------------------------ ids and texts pinned


def test_event_ids_of_group_requests_are_pinned_so_an_upgraded_controller_reissues_them() -> None:
    # a controller restarted on a newer wgstore must re-issue a lost request with the same id
    log = _new()
    start = step(log, crash_before_group=True)
    assert G1 == "3af8b7fa771d51dd"
    assert start.group_events[0].event_id == uuid.UUID("666fe93d-4225-5392-905a-99bfae1aeb27")
    world = World(log)
    step(log)  # the start request again
    world.start(_current(log))
    step(log)
    world.finish(_current(log))
    shutdown = step(log)
    assert shutdown.group_events[0].event_id == uuid.UUID("e010eb90-31dd-5b88-9687-0f9eb17756b1")


def test_each_transition_says_why_and_the_decision_names_the_state_it_moves_to() -> None:
    log = _new(FailureConfig(max_failures=1))
    first = step(log)
    assert (_moved(first).reason, first.to_state) == ("attempt 1", "SCHEDULING")
    world = World(log)
    world.start(_current(log))
    launched = step(log)
    assert (_moved(launched).reason, launched.to_state) == (
        "training launched on attempt 1",
        "RUNNING",
    )
    world.report(_current(log), "/ckpt/1")
    world.fail(_current(log), [1])
    step(log)
    world.shut_down(_current(log))
    assert _moved(step(log)).reason == "attempt 2 from /ckpt/1"
    world.start(_current(log))
    step(log)
    world.finish(_current(log))
    finished = step(log)
    assert _moved(finished).reason == "every worker finished"
    world.shut_down(_current(log))
    end = step(log)
    assert (_moved(end).reason, end.to_state) == ("training finished", "FINISHED")


def test_a_restart_without_any_checkpoint_names_only_the_attempt() -> None:
    log = _new(FailureConfig(max_failures=1))
    world = _running(log)
    world.fail(_current(log), [0])
    step(log)
    world.shut_down(_current(log))
    assert _moved(step(log)).reason == "attempt 2"


def test_the_failure_reason_names_the_ranks_and_the_budget() -> None:
    log = _new(FailureConfig(max_failures=-1))
    world = _running(log)
    world.fail(_current(log), [1])
    one = step(log).run_events[0].event
    assert one.reason == "rank 1 failed: RuntimeError; worker_group failure 1 of unlimited"
    world.shut_down(_current(log))
    step(log)
    world.start(_current(log))
    step(log)
    world.fail(_current(log), [0, 1])
    two = step(log).run_events[0].event
    assert two.reason == "ranks 0,1 failed: RuntimeError; worker_group failure 2 of unlimited"


def test_the_errored_run_names_the_policy_and_moves_to_errored() -> None:
    log = _new(FailureConfig(max_failures=0))
    world = _running(log)
    world.fail(_current(log), [0])
    step(log)
    world.shut_down(_current(log))
    end = step(log)
    assert (_moved(end).reason, end.to_state) == ("the failure policy raised", "ERRORED")


def test_a_raise_that_named_no_error_ends_the_run_with_a_blank_run_errored() -> None:
    log = _new(FailureConfig(max_failures=0))
    _running(log)
    run = log.run()
    log.append(  # an older log: the decision carried no errors
        run.stream_id,
        [
            FailureDecisionMade(decision="RAISE", group_id=G1, reason="?", failures_so_far=1),
            ControllerStateChanged(from_state="RUNNING", to_state="SHUTTING_DOWN", reason="?"),
        ],
    )
    step(log)  # the group was not asked to shut down: the controller asks now
    World(log).shut_down(_current(log))
    errored = step(log).run_events[1].event
    assert errored.error == ErrorInfo(type="RunErrored", message="") and errored.errors == ()


def test_a_group_shut_down_by_someone_else_is_named_as_such_with_the_controller_s_rank() -> None:
    log = _new(FailureConfig(max_failures=1))
    world = _running(log)
    world.external_shutdown(_current(log))
    made = step(log).run_events[0].event
    (error,) = made.errors
    assert (error.world_rank, error.error.type) == (-1, "WorkerGroupShutDown")
    assert error.error.message == (
        f"worker group {G1} was shut down outside the controller (someone)"
    )


def test_a_group_shut_down_while_starting_is_a_retryable_start_failure() -> None:
    log = _new(FailureConfig(controller_failure_limit=1))
    world = World(log)
    step(log)
    world.external_shutdown(_current(log))
    made = step(log).run_events[0].event
    (error,) = made.errors
    assert (made.decision, made.failure_kind, made.failures_so_far, made.limit) == (
        "RETRY",
        "start",
        1,
        1,
    )
    assert (error.world_rank, error.error.type) == (-1, "StartAborted")
    assert error.error.message == "the group was shut down while starting (someone)"


# --------------------------------------------------------------------------- start rules


@pytest.mark.parametrize(
    "kind",
    [
        "TrainFnError",
        "InsufficientClusterResourcesError",
        "ImportError",
        "ModuleNotFoundError",
        "AttributeError",
        "TypeError",
        "ValueError",
        "FailpointError",
    ],
)
def test_start_errors_a_retry_would_meet_again_are_not_retried_at_any_stage(kind: str) -> None:
    for stage in (StartStage.WORKERS, StartStage.PLACEMENT_GROUP):
        assert is_retryable_start_failure(stage, ErrorInfo(type=kind, message="")) is False


@pytest.mark.parametrize(
    "kind", ["PlacementGroupTimeoutError", "ExecutorLostError", "GetTimeoutError"]
)
def test_placement_group_timeouts_and_a_lost_executor_are_retried(kind: str) -> None:
    assert is_retryable_start_failure(StartStage.PLACEMENT_GROUP, ErrorInfo(type=kind, message=""))
    assert not is_retryable_start_failure(
        StartStage.PLACEMENT_GROUP, ErrorInfo(type="RuntimeError", message="")
    )


def test_a_preemption_note_recorded_by_an_earlier_wgstore_is_still_a_preemption() -> None:
    # the note is in logs already written: its text is part of the log format
    error = ErrorInfo(
        type="WorkerHealthCheckFailedError",
        message="A worker health check failed.\nThe actor's node was preempted.",
    )
    assert is_preemption(error)


# --------------------------------------------------------------------- guards, rare logs


def test_a_started_group_is_not_running_for_the_controller_until_training_launched() -> None:
    log = _new()
    step(log)
    group = _current(log)
    n = group.context.num_workers
    log.append(
        group_stream(G1),
        [
            PlacementGroupReserved(
                placement_group_id="pg", name="pg", bundles=({"CPU": 1.0},) * n, strategy="PACK"
            ),
            SyncActorStarted(actor_id="sync", name="sync"),
            WorkersStarted(
                workers=tuple(dataclasses.replace(worker(r), world_size=n) for r in range(n))
            ),
            WorkerGroupStarted(start_time=T0, startup_s=1.0),
        ],
    )
    assert _current(log).status.value == "RUNNING" and not _current(log).training_launched

    assert step(log).empty


def test_a_scheduling_transition_that_names_no_group_is_refused() -> None:
    log = _new()
    log.append(
        run_stream("r1"),
        [ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING", reason="")],
    )
    with pytest.raises(UndecidableRunError, match="is SCHEDULING but names no worker group"):
        decide(log.run(), None, T0)


def test_a_lost_start_request_takes_the_checkpoint_its_scheduling_transition_named() -> None:
    log = _new(checkpoint="/c0")
    log.append(
        run_stream("r1"),
        [
            ControllerStateChanged(
                from_state="INITIALIZING",
                to_state="SCHEDULING",
                reason="",
                group_id=G1,
                resume_checkpoint="/c1",
            )
        ],
    )
    start = decide(log.run(), None, T0).group_events[0].event
    assert start.context.resume_checkpoint == "/c1"


def test_a_lost_start_request_no_scheduling_transition_names_takes_the_run_s_checkpoint() -> None:
    log = _new(checkpoint="/c0")
    moves = [("INITIALIZING", "SCHEDULING", None), ("SCHEDULING", "RUNNING", G1)]
    moves.append(("RUNNING", "RESCHEDULING", None))
    log.append(
        run_stream("r1"),
        [
            ControllerStateChanged(from_state=a, to_state=b, reason="", group_id=g)
            for a, b, g in moves
        ],
    )
    run = log.run()
    assert (run.controller_state, run.current_group_id) == ("RESCHEDULING", G1)

    start = decide(run, None, T0).group_events[0].event

    assert (start.group_id, start.context.resume_checkpoint) == (G1, "/c0")


def test_a_running_run_whose_group_stream_is_missing_is_refused() -> None:
    log = _new()
    _running(log)
    with pytest.raises(StreamNotFoundError, match=f"the stream of its group '{G1}' is missing"):
        decide(log.run(), None, T0)


def test_a_controller_state_decide_does_not_know_is_refused() -> None:
    log = _new()
    _running(log)
    log.append(
        run_stream("r1"),
        [ControllerStateChanged(from_state="RUNNING", to_state="ERRORED", reason="", group_id=G1)],
    )
    run = log.run()
    assert not run.ended
    with pytest.raises(
        UndecidableRunError, match="unexpected controller state 'ERRORED' of run 'r1'"
    ):
        decide(run, _current(log), T0)


def _values() -> list[Any]:
    return [
        Decision(),
        FailureVerdict(
            kind="start", decision="RAISE", failures_so_far=1, limit=0, reason="", errors=()
        ),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["Decision", "FailureVerdict"])
def test_decisions_are_immutable_and_slotted(index: int) -> None:
    value = _values()[index]
    name = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, getattr(value, name))
    assert not hasattr(value, "__dict__")
