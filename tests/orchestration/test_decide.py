"""The pure controller, ``decide``: every transition and guard, then random fault sequences.

No database, no Ray: the log is in memory (``decide_sim.SimLog``) and a scripted ``World`` plays
the executor and the workers.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.orchestration.decide_sim import T0, SimLog, World, step
from wgstore.events import NO_STREAM
from wgstore.events.run import (
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    RunErrored,
    RunFinished,
)
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.errors import UndecidableRunError
from wgstore.orchestration.run.decide import (
    attempt_group_id,
    decide,
    is_preemption,
    is_retryable_start_failure,
)


def _types(decision: Any) -> list[str]:
    return [type(e.event).__name__ for e in (*decision.run_events, *decision.group_events)]


def _new(config: FailureConfig | None = None, checkpoint: str | None = None) -> SimLog:
    log = SimLog()
    log.create(config or FailureConfig(), checkpoint=checkpoint)
    return log


def _running(log: SimLog) -> World:
    world = World(log)
    step(log)  # INITIALIZING -> SCHEDULING
    world.start(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    step(log)  # -> RUNNING
    assert log.run().controller_state == "RUNNING"
    return world


def _current(log: SimLog) -> Any:
    return log.group(log.run().current_group_id)


class TestTransitions:
    def test_a_new_run_schedules_attempt_1_with_a_derived_group_id(self) -> None:
        log = _new(checkpoint="/ckpt/given")
        decision = step(log)
        group_id = attempt_group_id("r1", 1)
        assert _types(decision) == ["ControllerStateChanged", "WorkerGroupStartRequested"]
        moved = decision.run_events[0].event
        assert (moved.from_state, moved.to_state, moved.group_id) == (
            "INITIALIZING",
            "SCHEDULING",
            group_id,
        )
        start = decision.group_events[0].event
        assert isinstance(start, WorkerGroupStartRequested)
        assert (start.group_id, start.run_id, start.attempt) == (group_id, "r1", 1)
        assert start.context.resume_checkpoint == "/ckpt/given"
        assert decision.group_expected_version is NO_STREAM
        assert group_id.isalnum() and len(group_id) == 16

    def test_group_ids_and_event_ids_are_the_same_when_decided_again(self) -> None:
        log = _new()
        first = decide(log.run(), None, T0)
        again = decide(log.run(), None, T0)
        assert [e.event_id for e in first.run_events] == [e.event_id for e in again.run_events]
        assert first.group_events == again.group_events
        assert attempt_group_id("r1", 2) != attempt_group_id("r1", 1)
        assert attempt_group_id("r2", 1) != attempt_group_id("r1", 1)

    def test_scheduling_waits_while_the_group_starts(self) -> None:
        log = _new()
        step(log)
        assert step(log).empty  # requested, nothing started yet

    def test_a_launched_group_moves_the_controller_to_running(self) -> None:
        log = _new()
        _running(log)
        assert [t.to_state for t in log.run().transitions] == ["SCHEDULING", "RUNNING"]
        assert step(log).empty  # running, nothing new

    def test_every_worker_finished_shuts_down_then_finishes_the_run(self) -> None:
        log = _new()
        world = _running(log)
        world.finish(_current(log))
        decision = step(log)
        assert _types(decision) == ["ControllerStateChanged", "WorkerGroupShutdownRequested"]
        assert decision.to_state == "SHUTTING_DOWN"
        assert step(log).empty  # waiting for the release
        world.shut_down(_current(log))
        decision = step(log)
        assert _types(decision) == ["ControllerStateChanged", "RunFinished"]
        run = log.run()
        assert (run.status.value, run.ended, run.final_group_id) == (
            "FINISHED",
            True,
            attempt_group_id("r1", 1),
        )
        assert step(log).empty  # ended: nothing more, ever

    def test_a_worker_failure_within_budget_restarts_from_the_latest_checkpoint(self) -> None:
        log = _new(FailureConfig(max_failures=2))
        world = _running(log)
        world.report(_current(log), "/ckpt/1")
        world.report(_current(log), None)  # a later report without a checkpoint
        world.fail(_current(log), [1])
        decision = step(log)
        assert _types(decision) == [
            "FailureDecisionMade",
            "ControllerStateChanged",
            "WorkerGroupShutdownRequested",
        ]
        made: FailureDecisionMade = decision.run_events[0].event
        assert (made.decision, made.failure_kind, made.failures_so_far, made.limit) == (
            "RETRY",
            "worker_group",
            1,
            2,
        )
        assert [e.world_rank for e in made.errors] == [1]
        assert decision.run_events[1].event.to_state == "RESTARTING"
        assert step(log).empty  # the failed attempt is not released yet: no second attempt
        world.shut_down(_current(log))
        decision = step(log)
        moved: ControllerStateChanged = decision.run_events[0].event
        assert (moved.from_state, moved.to_state, moved.resume_checkpoint) == (
            "RESTARTING",
            "RESCHEDULING",
            "/ckpt/1",
        )
        start = decision.group_events[0].event
        assert (start.group_id, start.attempt, start.context.resume_checkpoint) == (
            attempt_group_id("r1", 2),
            2,
            "/ckpt/1",
        )

    def test_a_retry_starts_from_the_last_checkpoint_every_rank_reported(self) -> None:
        # the user's case: rank 1 died after step 3, rank 0 reported step 4 alone
        log = _new(FailureConfig(max_failures=2))
        world = _running(log)
        for step_number in (1, 2, 3):
            world.report(_current(log), f"/ckpt/step{step_number}")
        world.report(_current(log), "/ckpt/step4", ranks=[0])
        assert _current(log).latest_reported_checkpoint == "/ckpt/step4"
        world.fail(_current(log), [1])
        step(log)
        world.shut_down(_current(log))
        decision = step(log)
        moved: ControllerStateChanged = decision.run_events[0].event
        assert (moved.to_state, moved.resume_checkpoint) == ("RESCHEDULING", "/ckpt/step3")
        assert decision.group_events[0].event.context.resume_checkpoint == "/ckpt/step3"

    def test_a_checkpoint_no_rank_but_one_reported_does_not_replace_the_start_one(self) -> None:
        log = _new(FailureConfig(max_failures=1), checkpoint="/c0")
        world = _running(log)
        world.report(_current(log), "/ckpt/1", ranks=[0])
        world.fail(_current(log), [1])
        step(log)
        world.shut_down(_current(log))
        decision = step(log)
        assert decision.group_events[0].event.context.resume_checkpoint == "/c0"

    def test_an_attempt_without_a_report_keeps_the_checkpoint_it_started_from(self) -> None:
        log = _new(FailureConfig(max_failures=-1))
        world = _running(log)
        world.report(_current(log), "/ckpt/a")
        for expected in ("/ckpt/a", "/ckpt/a"):
            world.fail(_current(log), [0])
            step(log)
            world.shut_down(_current(log))
            step(log)
            assert _current(log).context.resume_checkpoint == expected
            world.start(_current(log))
            step(log)

    def test_the_budget_exhausted_errors_the_run_naming_every_failed_rank(self) -> None:
        log = _new(FailureConfig(max_failures=0))
        world = _running(log)
        world.fail(_current(log), [0, 1])
        decision = step(log)
        made = decision.run_events[0].event
        assert (made.decision, made.failures_so_far, made.limit) == ("RAISE", 1, 0)
        assert decision.run_events[1].event.to_state == "SHUTTING_DOWN"
        assert _types(decision)[-1] == "WorkerGroupShutdownRequested"
        world.shut_down(_current(log))
        decision = step(log)
        assert _types(decision) == ["ControllerStateChanged", "RunErrored"]
        errored: RunErrored = decision.run_events[1].event
        assert [e.world_rank for e in errored.errors] == [0, 1]
        assert errored.error.message == "rank 0"
        assert log.run().status.value == "ERRORED"

    def test_the_errored_run_names_ranks_that_failed_after_the_decision_too(self) -> None:
        log = _new(FailureConfig(max_failures=0))
        world = _running(log)
        world.fail(_current(log), [1])
        step(log)  # RAISE, seeing rank 1 only
        world.fail(_current(log), [0])  # the shutdown's last poll finds rank 0 failed too
        world.shut_down(_current(log))
        errored = step(log).run_events[1].event
        assert [e.world_rank for e in errored.errors] == [0, 1]
        assert errored.error.message == "rank 0"

    def test_a_preempted_worker_counts_against_the_preemption_budget(self) -> None:
        log = _new(FailureConfig(max_failures=0, max_preemption_failures=1))
        world = _running(log)
        world.fail(_current(log), [0], preempted=True)
        made = step(log).run_events[0].event
        assert (made.failure_kind, made.decision, made.failures_so_far, made.limit) == (
            "preemption",
            "RETRY",
            1,
            1,
        )
        assert log.run().failures_of("worker_group") == 0

    def test_a_retryable_start_failure_counts_against_the_controller_failure_limit(
        self,
    ) -> None:
        log = _new(FailureConfig(controller_failure_limit=1))
        world = World(log)
        step(log)
        world.fail_start(_current(log), retryable=True)
        decision = step(log)
        made = decision.run_events[0].event
        assert (made.failure_kind, made.decision, made.failures_so_far) == ("start", "RETRY", 1)
        assert decision.group_events == ()  # a failed start released everything itself
        decision = step(log)  # START_FAILED is terminal: next attempt at once
        assert decision.run_events[0].event.to_state == "RESCHEDULING"
        world.fail_start(_current(log), retryable=True)
        made = step(log).run_events[0].event
        assert (made.decision, made.failures_so_far) == ("RAISE", 2)
        decision = step(log)
        assert _types(decision) == ["ControllerStateChanged", "RunErrored"]
        assert decision.run_events[1].event.errors[0].world_rank == -1

    def test_a_start_failure_a_retry_would_meet_again_raises_at_once(self) -> None:
        log = _new(FailureConfig(controller_failure_limit=-1, max_failures=5))
        world = World(log)
        step(log)
        world.fail_start(_current(log), retryable=False)
        made = step(log).run_events[0].event
        assert (made.decision, made.failure_kind) == ("RAISE", "start")
        assert "not retryable" in made.reason

    def test_a_group_shut_down_by_someone_else_is_a_worker_group_failure(self) -> None:
        log = _new(FailureConfig(max_failures=1))
        world = _running(log)
        world.external_shutdown(_current(log))
        decision = step(log)
        made = decision.run_events[0].event
        assert (made.failure_kind, made.decision) == ("worker_group", "RETRY")
        assert decision.group_events == ()  # already shutting down: not asked twice

    def test_a_group_shut_down_while_starting_is_a_start_failure(self) -> None:
        log = _new(FailureConfig(controller_failure_limit=0))
        world = World(log)
        step(log)
        world.external_shutdown(_current(log))
        made = step(log).run_events[0].event
        assert (made.failure_kind, made.decision) == ("start", "RAISE")


class TestCrashesBetweenAppends:
    def test_a_missing_group_stream_is_requested_again_from_the_run_stream(self) -> None:
        log = _new(checkpoint="/c0")
        first = step(log, crash_before_group=True)
        assert log.group(log.run().current_group_id) is None
        again = step(log)
        assert again.run_events == ()
        assert again.group_events == first.group_events  # the same event, the same id
        assert log.group(log.run().current_group_id) is not None
        assert step(log).empty

    def test_a_lost_restart_request_is_issued_again_with_its_checkpoint(self) -> None:
        log = _new(FailureConfig(max_failures=1))
        world = _running(log)
        world.report(_current(log), "/ckpt/7")
        world.fail(_current(log), [0])
        step(log)
        world.shut_down(_current(log))
        step(log, crash_before_group=True)
        start = step(log).group_events[0].event
        assert (start.attempt, start.context.resume_checkpoint) == (2, "/ckpt/7")

    @pytest.mark.parametrize("outcome", ["finish", "fail"])
    def test_a_lost_shutdown_request_is_issued_again_with_the_same_id(self, outcome: str) -> None:
        log = _new(FailureConfig(max_failures=1))
        world = _running(log)
        if outcome == "finish":
            world.finish(_current(log))
        else:
            world.fail(_current(log), [1])
        first = step(log, crash_before_group=True)
        again = step(log)
        assert again.run_events == ()
        assert [(e.event_id, e.event) for e in again.group_events] == [
            (e.event_id, e.event) for e in first.group_events
        ]
        assert isinstance(again.group_events[0].event, WorkerGroupShutdownRequested)
        assert step(log).empty  # shutting down now: wait

    def test_appending_a_decision_twice_writes_it_once(self) -> None:
        log = _new()
        decision = decide(log.run(), None, T0)
        log.apply(decision)
        group_id = decision.group_id
        log.append(
            f"worker-group-{group_id}", list(decision.group_events), decision.group_expected_version
        )
        assert len(log.streams[f"worker-group-{group_id}"]) == 1


class TestGuards:
    def test_an_ended_run_decides_nothing(self) -> None:
        log = _new()
        world = _running(log)
        world.finish(_current(log))
        step(log)
        world.shut_down(_current(log))
        step(log)
        assert decide(log.run(), _current(log), T0).empty

    def test_a_run_recorded_from_ray_train_is_refused(self) -> None:
        from wgstore.events.run import RunCreated
        from wgstore.events.streams import run_stream

        log = SimLog()
        log.append(run_stream("r1"), [RunCreated(run_id="r1")])
        with pytest.raises(UndecidableRunError, match="recorded from Ray Train") as raised:
            decide(log.run(), None, T0)
        assert isinstance(raised.value, ValueError)  # as before it was wgstore's

    def test_a_group_that_is_not_the_current_one_is_refused(self) -> None:
        log = _new(FailureConfig(max_failures=1))
        world = _running(log)
        old = _current(log)
        world.fail(old, [0])
        step(log)
        world.shut_down(_current(log))
        step(log)
        with pytest.raises(UndecidableRunError, match="not the current group"):
            decide(log.run(), log.group(old.group_id), T0)

    def test_retryable_start_failures_follow_ray(self) -> None:
        def info(kind: str) -> ErrorInfo:
            return ErrorInfo(type=kind, message="")

        assert is_retryable_start_failure(
            StartStage.PLACEMENT_GROUP, info("PlacementGroupTimeoutError")
        )
        assert not is_retryable_start_failure(
            StartStage.PLACEMENT_GROUP, info("InsufficientClusterResourcesError")
        )
        assert is_retryable_start_failure(StartStage.WORKERS, info("ActorDiedError"))
        assert is_retryable_start_failure(StartStage.WORKERS, info("ExecutorLostError"))
        assert not is_retryable_start_failure(StartStage.INIT_TRAIN_CONTEXT, info("TrainFnError"))
        assert not is_retryable_start_failure(StartStage.LAUNCH, info("ActorDiedError"))

    def test_only_a_health_check_error_naming_preemption_is_a_preemption(self) -> None:
        from tests.orchestration.decide_sim import health_error

        assert is_preemption(health_error(True))
        assert not is_preemption(health_error(False))
        assert not is_preemption(ErrorInfo(type="RuntimeError", message="preempted"))


# ------------------------------------------------------------------------------ random faults

OUTCOMES = ["finish", "fail", "fail_all", "preempt", "start_retry", "start_fatal", "external"]
LIMITS = st.sampled_from([-1, 0, 1, 2, 3])


def _simulate(data: Any, config: FailureConfig) -> tuple[SimLog, list[tuple[int, dict[str, int]]]]:
    """Drive a run to its end with drawn faults; returns the log and, per controller step that
    appended run events, the versions of the streams it had read."""
    log = _new(config, checkpoint=data.draw(st.sampled_from([None, "/c0"])))
    world = World(log)
    decisions: list[tuple[int, dict[str, int]]] = []
    checkpoints = 0
    for _ in range(400):
        run = log.run()
        if run.ended:
            break
        group = log.group(run.current_group_id)
        live = [g for g in log.groups().values() if not g.status.is_terminal]
        assert len(live) <= 1, f"two live attempts: {[g.group_id for g in live]}"
        decision = decide(run, group, T0)
        if not decision.empty:
            if decision.run_events:
                versions = {"run": run.version}
                if group is not None:
                    versions[group.group_id] = group.version
                decisions.append((run.version, versions))
            log.apply(decision, crash_before_group=data.draw(st.booleans()))
            continue
        # nothing to decide: the world moves
        assert group is not None
        status = group.status.value
        if status == "REQUESTED" and group.shutdown_reason is None:
            outcome = data.draw(st.sampled_from(OUTCOMES))
            if outcome == "start_retry":
                world.fail_start(group, retryable=True)
            elif outcome == "start_fatal":
                world.fail_start(group, retryable=False)
            else:
                world.start(group)
                group = log.group(group.group_id)
                assert group is not None
                for _ in range(data.draw(st.integers(0, 2))):
                    checkpoints += 1
                    world.report(group, data.draw(st.sampled_from([None, f"/ckpt/{checkpoints}"])))
                    group = log.group(group.group_id)
                    assert group is not None
                if outcome == "finish":
                    world.finish(group)
                elif outcome == "fail":
                    world.fail(group, [data.draw(st.integers(0, 1))])
                elif outcome == "fail_all":
                    world.fail(group, [0, 1])
                elif outcome == "preempt":
                    world.fail(group, [0], preempted=True)
                else:
                    world.external_shutdown(group)
        elif status == "SHUTTING_DOWN":
            world.shut_down(group)
        else:
            raise AssertionError(f"stuck: controller {run.controller_state}, group {status}")
    assert log.run().ended, "the run did not end"
    return log, decisions


def _check_invariants(log: SimLog, config: FailureConfig) -> None:
    run = log.run()
    groups = log.groups()
    # one attempt per group id, attempts numbered 1..n, all released at the end
    assert sorted(g.attempt for g in groups.values()) == list(range(1, len(groups) + 1))
    assert set(run.groups) == set(groups)
    assert all(g.status.is_terminal for g in groups.values())
    # every failure counted exactly once: one decision per failed attempt, counted in order
    failed = {
        gid
        for gid, g in groups.items()
        if g.start_failure is not None
        or g.errors
        or (g.outcome is not None and g.outcome.value == "aborted")
    }
    assert [d.group_id for d in run.decisions] == sorted(
        failed, key=lambda gid: groups[gid].attempt
    )
    for kind in ("worker_group", "start", "preemption"):
        counts = [d.failures_so_far for d in run.decisions if d.failure_kind == kind]
        assert counts == list(range(1, len(counts) + 1))
        limit = config.limit_of(kind)
        retries = [d for d in run.decisions if d.failure_kind == kind and d.decision == "RETRY"]
        if limit != -1:
            assert len(retries) <= limit
        for d in run.decisions:
            if d.failure_kind == kind and "not retryable" not in d.reason:
                assert (d.decision == "RETRY") == (limit == -1 or d.failures_so_far <= limit)
    # every attempt after the first resumes from the latest checkpoint before it
    ordered = sorted(groups.values(), key=lambda g: g.attempt)
    latest = ordered[0].context.resume_checkpoint
    for group in ordered:
        assert group.context.resume_checkpoint == latest
        latest = group.latest_checkpoint or latest
    # the end matches the last attempt and the last decision
    last = ordered[-1]
    if run.decisions and run.decisions[-1].decision == "RAISE":
        assert run.status.value == "ERRORED"
        assert run.errors == run.decisions[-1].errors
    else:
        assert run.status.value == "FINISHED"
        assert last.outcome is not None and last.outcome.value == "finished"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    max_failures=LIMITS,
    start_limit=LIMITS,
    preemption_limit=LIMITS,
)
def test_random_fault_sequences_keep_every_invariant_and_replay_to_the_same_decisions(
    data: Any, max_failures: int, start_limit: int, preemption_limit: int
) -> None:
    config = FailureConfig(
        max_failures=max_failures,
        controller_failure_limit=start_limit,
        max_preemption_failures=preemption_limit,
    )
    log, decisions = _simulate(data, config)
    _check_invariants(log, config)
    # replay: decide over the recorded log at each point reproduces each recorded decision
    run_events = log.streams["run-r1"]
    for run_version, versions in decisions:
        run = log.run(run_version)
        current = run.current_group_id
        group = log.group(current, versions.get(current)) if current in versions else None
        again = decide(run, group, T0)
        recorded = run_events[run_version : run_version + len(again.run_events)]
        assert [(e.event_id, e.event) for e in again.run_events] == [
            (r.event_id, r.event) for r in recorded
        ]


def test_the_finished_event_names_the_last_attempt() -> None:
    log = _new(FailureConfig(max_failures=1))
    world = _running(log)
    world.fail(_current(log), [0])
    step(log)
    world.shut_down(_current(log))
    step(log)
    world.start(_current(log))
    step(log)
    world.finish(_current(log))
    step(log)
    world.shut_down(_current(log))
    finished = step(log).run_events[1].event
    assert finished == RunFinished(group_id=attempt_group_id("r1", 2))
