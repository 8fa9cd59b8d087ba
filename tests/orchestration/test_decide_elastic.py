"""The pure controller of an elastic run: sizes, resizes, preemptions and waits (issue 40 §2).

No database, no Ray: the log is in memory (``decide_sim.SimLog``), a scripted ``World`` plays
the executor and the workers, and the cluster is what a ``ClusterView`` says (how many workers
fit, which nodes are going). The last test drives random resource histories (hypothesis) and
checks the rules that must hold whatever the cluster does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.orchestration.decide_sim import T0, SimLog, World, step
from wgstore.events.run import FailureConfig, ResizeCause, ScalingConfig
from wgstore.orchestration.run.decide import (
    PREEMPTION_DEADLINE_S,
    PREEMPTION_POLL_S,
    WAIT_LOOK_S,
    decide,
    looks_due,
)
from wgstore.orchestration.run.scaling import ClusterView, workers_that_fit

ELASTIC = ScalingConfig(
    num_workers=4, min_workers=2, elastic_resize_monitor_interval_s=10, min_workers_timeout_s=60
)


def _types(decision: Any) -> list[str]:
    return [type(e.event).__name__ for e in (*decision.run_events, *decision.group_events)]


def _new(scaling: ScalingConfig = ELASTIC, config: FailureConfig | None = None) -> SimLog:
    log = SimLog()
    log.create(config or FailureConfig(max_failures=2, max_preemption_failures=1), scaling=scaling)
    return log


def _fits(n: int, **draining: int | None) -> ClusterView:
    return ClusterView(fits=n, draining=draining)


def _current(log: SimLog) -> Any:
    return log.group(log.run().current_group_id)


def _running(log: SimLog, fits: int = 3) -> World:
    world = World(log)
    step(log, cluster=_fits(fits))  # INITIALIZING -> SCHEDULING at what fits
    world.start(_current(log))
    step(log)  # -> RUNNING
    assert log.run().controller_state == "RUNNING"
    return world


class TestStart:
    def test_a_run_starts_at_what_fits_within_its_range(self) -> None:
        log = _new()
        decision = step(log, cluster=_fits(3))
        assert _types(decision) == [
            "ControllerStateChanged",
            "ScalingDecisionMade",
            "WorkerGroupStartRequested",
        ]
        sized = decision.run_events[1].event
        assert (sized.num_workers, sized.previous_workers, sized.cause) == (3, None, "initial")
        assert sized.reason == "start: 3 workers fit (range 2..4)"
        assert decision.group_events[0].event.context.num_workers == 3
        assert sized.group_id == decision.group_id

    def test_more_than_the_maximum_fitting_starts_the_maximum(self) -> None:
        log = _new()
        assert step(log, cluster=_fits(9)).group_events[0].event.context.num_workers == 4

    def test_without_a_look_at_the_cluster_an_elastic_run_does_not_start(self) -> None:
        assert step(_new()).empty

    def test_fewer_than_min_waits_saying_why_then_errors_naming_the_shortfall(self) -> None:
        log = _new()
        first = step(log, cluster=_fits(1))
        assert _types(first) == ["StartDeferred"]
        deferred = first.run_events[0].event
        assert (deferred.num_workers_fit, deferred.min_workers) == (1, 2)
        assert "1 of the run's 2..4 workers fit" in deferred.reason
        since = log.run().deferred_since
        assert since is not None and first.wake_at == T0 + timedelta(seconds=60)
        later = since + timedelta(seconds=30)
        waiting = step(log, now=later, cluster=_fits(0))
        assert waiting.empty and waiting.wake_at == since + timedelta(seconds=60)
        ended = step(log, now=since + timedelta(seconds=61), cluster=_fits(1))
        assert _types(ended) == ["ControllerStateChanged", "RunErrored"]
        run = log.run()
        assert run.status.value == "ERRORED" and run.error is not None
        assert run.error.type == "InsufficientClusterResourcesError"
        assert "1 of the run's 2..4 workers fit" in run.error.message
        assert "min_workers is 2" in run.error.message

    def test_a_wait_ends_when_enough_fits(self) -> None:
        log = _new()
        step(log, cluster=_fits(1))
        decision = step(log, now=T0 + timedelta(seconds=5), cluster=_fits(2))
        assert _types(decision)[1:] == ["ScalingDecisionMade", "WorkerGroupStartRequested"]
        assert log.run().deferred_since is None

    def test_without_a_timeout_the_run_waits_for_ever_as_ray_does(self) -> None:
        log = _new(ScalingConfig(num_workers=4, min_workers=2))
        step(log, cluster=_fits(1))
        assert step(log, now=T0 + timedelta(days=3), cluster=_fits(1)).empty


class TestResize:
    def test_more_fitting_stops_the_group_and_starts_a_larger_one_charging_nothing(self) -> None:
        log = _new()
        world = _running(log, fits=3)
        world.report(_current(log), "/ckpt/1")
        decision = step(log, cluster=_fits(4))
        assert _types(decision) == ["ControllerStateChanged", "WorkerGroupShutdownRequested"]
        assert decision.to_state == "RESIZING"
        shutdown = decision.group_events[0].event
        assert shutdown.resized_to == 4 and "more resources available" in shutdown.reason
        world.shut_down(_current(log))
        decision = step(log)
        assert _types(decision) == [
            "ControllerStateChanged",
            "ScalingDecisionMade",
            "WorkerGroupStartRequested",
        ]
        moved, sized = (e.event for e in decision.run_events)
        assert (moved.from_state, moved.to_state) == ("RESIZING", "SCHEDULING")
        assert (sized.num_workers, sized.previous_workers, sized.cause) == (4, 3, "grew")
        start = decision.group_events[0].event
        assert (start.attempt, start.context.num_workers) == (2, 4)
        assert start.context.resume_checkpoint == "/ckpt/1"  # the committed checkpoint
        assert log.run().failures == 0

    def test_fewer_fitting_while_running_shrinks_and_below_min_changes_nothing(self) -> None:
        log = _new()
        _running(log, fits=4)
        assert step(log, cluster=_fits(1)).empty  # below min: keep what runs
        assert step(log, cluster=_fits(4)).empty  # the same size
        decision = step(log, cluster=_fits(3))
        assert decision.to_state == "RESIZING"
        assert decision.group_events[0].event.resized_to == 3


class TestFailures:
    def test_a_failed_group_restarts_at_what_fits_now_not_at_its_old_size(self) -> None:
        log = _new()
        world = _running(log, fits=4)
        world.fail(_current(log), [3])
        decision = step(log)
        assert decision.to_state == "RESTARTING"
        world.shut_down(_current(log))
        assert step(log).empty  # no look: it waits for one
        decision = step(log, cluster=_fits(2))
        sized = decision.run_events[1].event
        assert (sized.num_workers, sized.previous_workers, sized.cause) == (2, 4, "failure")
        assert "worker_group failure: rank 3 RuntimeError" in sized.reason
        assert decision.group_events[0].event.context.num_workers == 2
        run = log.run()
        assert (run.failures_of("worker_group"), run.controller_state) == (1, "RESCHEDULING")

    def test_a_failed_start_is_tried_again_at_what_fits(self) -> None:
        log = _new()
        world = World(log)
        step(log, cluster=_fits(4))
        world.fail_start(_current(log), retryable=True)
        step(log)
        decision = step(log, cluster=_fits(3))
        sized = decision.run_events[1].event
        assert (sized.cause, sized.num_workers) == ("start_retry", 3)


class TestPreemption:
    def test_a_node_going_under_the_workers_waits_its_deadline_then_restarts_without_it(
        self,
    ) -> None:
        log = _new()
        world = _running(log, fits=4)  # ranks 0,1 on node-0; 2,3 on node-1
        deadline_ms = int((T0 + timedelta(seconds=30)).timestamp() * 1000)
        decision = step(log, cluster=_fits(4, **{"node-1": deadline_ms}))
        assert _types(decision) == ["ControllerStateChanged", "PreemptionNoticed"]
        notice = decision.run_events[1].event
        assert (dict(notice.nodes), notice.ranks) == ({"node-1": (2, 3)}, (2, 3))
        assert notice.deadline == T0 + timedelta(seconds=30)
        assert decision.to_state == "PREEMPTING" and decision.wake_at == notice.deadline
        world.report(_current(log), "/ckpt/just-in-time")  # the train function checkpoints
        waiting = step(log, now=T0 + timedelta(seconds=10))
        assert waiting.empty and waiting.wake_at == notice.deadline
        decision = step(log, now=T0 + timedelta(seconds=31))
        assert decision.to_state == "RESTARTING"
        failure = decision.run_events[0].event
        assert (failure.failure_kind, failure.decision, failure.failures_so_far, failure.limit) == (
            "preemption",
            "RETRY",
            1,
            1,
        )
        assert [e.world_rank for e in failure.errors] == [2, 3]
        world.shut_down(_current(log))
        decision = step(log, cluster=_fits(2, **{"node-1": deadline_ms}))
        sized = decision.run_events[1].event
        assert (sized.cause, sized.num_workers) == ("preemption", 2)
        start = decision.group_events[0].event
        assert start.context.resume_checkpoint == "/ckpt/just-in-time"
        assert log.run().failures_of("worker_group") == 0  # its own budget

    def test_every_worker_stopping_ends_the_wait_before_the_deadline(self) -> None:
        log = _new()
        world = _running(log, fits=4)
        step(log, cluster=_fits(4, **{"node-1": None}))  # no deadline: Ray's 120 s default
        world.fail(_current(log), [2, 3], preempted=True)
        world.poll(_current(log), [])
        from wgstore.events.worker_group import WorkerStatusChange

        world.poll(_current(log), [WorkerStatusChange(world_rank=r, running=False) for r in (0, 1)])
        decision = step(log, now=T0 + timedelta(seconds=5))
        assert decision.to_state == "RESTARTING"
        assert decision.run_events[0].event.failure_kind == "preemption"

    def test_a_worker_failing_for_another_reason_fails_fast(self) -> None:
        log = _new()
        world = _running(log, fits=4)
        step(log, cluster=_fits(4, **{"node-1": None}))
        world.fail(_current(log), [0])  # rank 0 is on node-0, which is not going
        decision = step(log, now=T0 + timedelta(seconds=1))
        assert decision.run_events[0].event.failure_kind == "worker_group"

    def test_training_that_finishes_first_finishes(self) -> None:
        log = _new()
        world = _running(log, fits=4)
        step(log, cluster=_fits(4, **{"node-1": None}))
        world.finish(_current(log))
        assert step(log, now=T0 + timedelta(seconds=1)).to_state == "SHUTTING_DOWN"
        world.shut_down(_current(log))
        step(log)
        assert log.run().status.value == "FINISHED"

    def test_the_preemption_budget_spent_raises(self) -> None:
        log = _new(config=FailureConfig(max_preemption_failures=0))
        _running(log, fits=4)
        step(log, cluster=_fits(4, **{"node-1": None}))
        later = T0 + timedelta(seconds=PREEMPTION_DEADLINE_S + 1)
        decision = step(log, now=later)
        assert decision.run_events[0].event.decision == "RAISE"
        assert decision.to_state == "SHUTTING_DOWN"


class TestLooks:
    def test_a_fixed_run_never_looks(self) -> None:
        log = SimLog()
        log.create(FailureConfig())
        assert looks_due(log.run(), None, T0, None, None) == looks_due(
            log.run(), None, T0 + timedelta(days=1), None, None
        )
        assert not looks_due(log.run(), None, T0, None, None).size

    def test_an_elastic_run_looks_before_it_starts_and_again_while_it_waits(self) -> None:
        log = _new()
        looks = looks_due(log.run(), None, T0, None, None)
        assert looks.size and looks.next_at == T0 + timedelta(seconds=WAIT_LOOK_S)

    def test_a_running_group_is_looked_at_every_interval_and_for_drains_every_poll(self) -> None:
        log = _new()
        _running(log, fits=3)
        run, group = log.run(), _current(log)
        started = group.started_at
        assert started is not None
        at = started + timedelta(seconds=1)
        looks = looks_due(run, group, at, None, None)
        assert (looks.size, looks.drain) == (False, True)
        looks = looks_due(run, group, at, None, at)
        assert (looks.size, looks.drain) == (False, False)
        assert looks.next_at == at + timedelta(seconds=PREEMPTION_POLL_S)
        looks = looks_due(run, group, started + timedelta(seconds=10), None, at)
        assert looks.size
        # the interval counts from the later of the start and the last look
        last = started + timedelta(seconds=10)
        assert not looks_due(run, group, last + timedelta(seconds=9), last, last).size
        assert looks_due(run, group, last + timedelta(seconds=10), last, last).size


class TestFits:
    """Ray's ``ElasticScalingPolicy._count_possible_workers``, case by case (its
    ``test_elastic_scaling_policy.py``): per node the fewest of free / need, summed, capped."""

    def test_per_node_floors_summed_and_capped(self) -> None:
        free = {"a": {"CPU": 3.0, "GPU": 1.0}, "b": {"CPU": 8.0, "GPU": 4.0}}
        assert workers_that_fit(free, {"CPU": 1, "GPU": 1}, 10) == 5
        assert workers_that_fit(free, {"CPU": 1, "GPU": 1}, 4) == 4
        assert workers_that_fit(free, {"CPU": 2}, 10) == 5

    def test_no_resources_needed_fits_the_maximum(self) -> None:
        assert workers_that_fit({"a": {}}, {"CPU": 0}, 7) == 7

    def test_draining_nodes_count_for_nothing(self) -> None:
        free = {"a": {"CPU": 2.0}, "b": {"CPU": 2.0}}
        assert workers_that_fit(free, {"CPU": 1}, 8, draining={"b": 123}) == 2

    def test_strategies(self) -> None:
        free = {"a": {"CPU": 3.0}, "b": {"CPU": 2.0}, "c": {"CPU": 0.5}}
        assert workers_that_fit(free, {"CPU": 1}, 9, strategy="STRICT_PACK") == 3
        assert workers_that_fit(free, {"CPU": 1}, 9, strategy="STRICT_SPREAD") == 2
        assert workers_that_fit(free, {"CPU": 1}, 9, strategy="SPREAD") == 5

    def test_fractions_of_a_resource(self) -> None:
        assert workers_that_fit({"a": {"CPU": 1.5}}, {"CPU": 0.5}, 9) == 3
        assert workers_that_fit({"a": {"CPU": 0.3}}, {"CPU": 0.1}, 9) == 3  # not 2: float error


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from(["none", "fail", "finish", "drain"])),
        min_size=1,
        max_size=25,
    )
)
def test_whatever_the_cluster_does_sizes_stay_in_range_and_resizes_cost_nothing(
    history: list[tuple[int, str]],
) -> None:
    """Each step the cluster offers ``fits`` workers and may fail a worker, finish training, or
    announce a node going; the controller looks every step. Whatever happens: every group
    starts within the range at the size its scaling decision says, with that decision; a
    failure is charged only for a failure or a preemption; deciding twice adds nothing."""
    log = _new(config=FailureConfig(max_failures=-1, max_preemption_failures=-1))
    world = World(log)
    now = T0
    injected = 0
    for fits, what in history:
        now += timedelta(seconds=200)  # past every interval and deadline
        run = log.run()
        if run.ended:
            break
        group = _current(log)
        if group is not None and group.status.value == "REQUESTED":
            world.start(group)
        elif group is not None and group.status.value == "RUNNING" and not group.errors:
            if what == "fail":
                world.fail(group, [0])
                injected += 1
            elif what == "finish":
                world.finish(group)
        elif group is not None and group.status.value == "SHUTTING_DOWN":
            world.shut_down(group)
        draining = {"node-1": None} if what == "drain" else {}
        view = ClusterView(fits=fits, draining=draining)
        run, group = log.run(), _current(log)
        decision = decide(run, group, now, view)
        again = decide(run, group, now, view)
        assert [e.event_id for e in decision.run_events] == [e.event_id for e in again.run_events]
        log.apply(decision)
    run = log.run()
    groups = log.groups()
    for group_id in run.groups:
        sized = run.decision_for(group_id)
        assert sized is not None, group_id
        if group_id in groups:
            assert groups[group_id].context.num_workers == sized.num_workers
        assert 2 <= sized.num_workers <= 4
    kinds = [d.failure_kind for d in run.decisions]
    assert kinds.count("worker_group") <= injected
    assert all(kind in ("worker_group", "preemption") for kind in kinds)
    grew = [d for d in run.scaling_decisions if d.cause in (ResizeCause.GREW, ResizeCause.SHRANK)]
    assert all(d.previous_workers != d.num_workers for d in grew)


def test_a_resize_keeps_its_size_in_the_log_when_the_controller_dies_mid_way() -> None:
    """The driver killed after the group was asked to stop for a resize: a new controller
    reads the size from the shutdown request, starts there, re-issues nothing."""
    log = _new()
    world = _running(log, fits=3)
    step(log, cluster=_fits(4))  # RESIZING: the old controller dies here
    world.shut_down(_current(log))
    decision = step(log)  # a new controller: no look needed, the log has the size
    assert decision.group_events[0].event.context.num_workers == 4
    assert step(log).empty  # the new group is starting: nothing more to decide


def test_a_start_request_lost_with_its_controller_is_asked_again_at_the_decided_size() -> None:
    log = _new()
    step(log, cluster=_fits(3), crash_before_group=True)
    decision = step(log)  # the group stream is missing: re-issued from the run stream
    assert decision.group_events[0].event.context.num_workers == 3
    assert decision.run_events == ()
