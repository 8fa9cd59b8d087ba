"""Ray Train's own tests of its elastic scaling policy, adapted to wgstore's decider (issue 40).

Each test below is one of ``python/ray/train/v2/tests/test_elastic_scaling_policy.py`` in Ray's
repository (read at commit 0718d5b, newer than the installed 2.60), with the same numbers:
Ray's reserved resources per node become the free resources per node wgstore counts
(:func:`~wgstore.orchestration.run.scaling.workers_that_fit`), Ray's ``ResizeDecision`` the size of
the group :func:`~wgstore.orchestration.run.decide.decide` starts or resizes to, its
``NoopDecision`` an empty decision (or, for a group not running, a wait), and its monitor
interval :func:`~wgstore.orchestration.run.decide.looks_due`. Pure: no Ray, no database.

Not adapted, and why:

- ``test_before_controller_abort``, ``test_request_and_clear``,
  ``test_get_reserved_resources_interval``: they test the requests Ray's policy sends to its
  ``AutoscalingCoordinator`` (a Ray Data actor) and how often it reads its reservations back.
  wgstore reserves nothing ahead: it reads what is free in the GCS at each look
  (``cluster_probe.py``), every ``WAIT_LOOK_S`` while a start waits, as Ray reads its
  reservations every ``GET_RESERVED_RESOURCES_INTERVAL_S``.
- ``test_count_possible_workers_tpu_slice_rounding``: TPU slices; wgstore places no TPU groups.
- ``test_preemption_unit.py`` (read at 0f28583, newer than 2.60, whose ``PreemptionInfo`` has
  other fields): its budget tests are adapted below; its "leave PREEMPTING when every rank
  exited cleanly" path is not 2.60's (which, as wgstore, finishes a run whose every worker
  returned without error) and is left out, as are its TPU failure domains and watcher defaults.
- The installed Ray 2.60 divides with a plain ``//``; the fetched tests
  (``test_count_possible_workers_fractional_resources``,
  ``..._ignores_partial_worker``) are of the later fix for float drift, which wgstore follows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.orchestration.decide_sim import T0, SimLog, World, step
from wgstore.events.run import FailureConfig, ScalingConfig
from wgstore.orchestration.run.decide import looks_due
from wgstore.orchestration.run.scaling import ClusterView, workers_that_fit

PER_WORKER = {"CPU": 8.0, "GPU": 1.0}


def _reserved(per_node: dict[str, float], nodes: int) -> dict[str, dict[str, float]]:
    """Ray's ``_make_reserved``: ``nodes`` nodes holding ``per_node`` each."""
    return {f"n{i}": dict(per_node) for i in range(nodes)}


def _view(nodes: int, max_workers: int = 64) -> ClusterView:
    return ClusterView(fits=workers_that_fit(_reserved(PER_WORKER, nodes), PER_WORKER, max_workers))


def _run(min_workers: int = 4, max_workers: int = 64, interval_s: float = 0.0) -> SimLog:
    log = SimLog()
    log.create(
        FailureConfig(),
        scaling=ScalingConfig(
            num_workers=max_workers,
            min_workers=min_workers,
            resources_per_worker=PER_WORKER,
            elastic_resize_monitor_interval_s=interval_s,
        ),
    )
    return log


def _size(decision: Any) -> int | None:
    for new in decision.group_events:
        context = getattr(new.event, "context", None)
        if context is not None:
            return int(context.num_workers)
    for new in decision.group_events:
        resized = getattr(new.event, "resized_to", None)
        if resized is not None:
            return int(resized)
    return None


def test_non_running_worker_group_decision() -> None:
    # No resources, then fewer than min: no start (Ray's NoopDecision: wgstore waits)
    assert _size(step(_run(), cluster=ClusterView(fits=0))) is None
    log = _run()
    assert _size(step(log, cluster=_view(3))) is None
    assert log.run().deferred is not None  # the wait, said once
    # min, then max: a start at that size
    assert _size(step(_run(), cluster=_view(4))) == 4
    assert _size(step(_run(), cluster=_view(64))) == 64


def _running(log: SimLog, nodes: int) -> None:
    step(log, cluster=_view(nodes))
    World(log).start(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    step(log)
    assert log.run().controller_state == "RUNNING"


def test_running_worker_group_decision() -> None:
    log = _run()
    _running(log, 4)
    assert step(log, cluster=_view(4)).empty  # no change in resources
    assert step(log, cluster=_view(3)).empty  # fewer than min: keep the group
    decision = step(log, cluster=_view(64))  # more resources
    assert decision.to_state == "RESIZING" and _size(decision) == 64


def test_monitor_recently_started_worker_group() -> None:
    log = _run(interval_s=60)
    _running(log, 4)
    run, group = log.run(), log.group(log.run().current_group_id)
    assert group is not None and group.started_at is not None
    started = group.started_at
    assert not looks_due(run, group, started + timedelta(seconds=30), None, None).size
    assert looks_due(run, group, started + timedelta(seconds=60), None, None).size
    decision = step(log, cluster=_view(63))
    assert _size(decision) == 63


def test_monitor_long_running_worker_group() -> None:
    log = _run(interval_s=60)
    _running(log, 4)
    run, group = log.run(), log.group(log.run().current_group_id)
    assert group is not None and group.started_at is not None
    now = group.started_at + timedelta(seconds=60 * 60)
    assert looks_due(run, group, now, None, None).size
    assert step(log, cluster=_view(4)).empty  # looked: the same size
    half = now + timedelta(seconds=30)
    assert not looks_due(run, group, half, now, now).size  # looked recently
    later = now + timedelta(seconds=60)
    assert looks_due(run, group, later, now, now).size
    assert _size(step(log, cluster=_view(64))) == 64


def test_count_possible_workers() -> None:
    def count(per_node: dict[str, float], nodes: int) -> int:
        return workers_that_fit(_reserved(per_node, nodes), PER_WORKER, 8)

    assert workers_that_fit({}, PER_WORKER, 8) == 0
    assert count({"CPU": 8, "GPU": 1}, 1) == 1
    assert count({"CPU": 16, "GPU": 2}, 1) == 2
    assert count({"CPU": 16, "GPU": 1}, 1) == 1
    assert count({"CPU": 7, "GPU": 1}, 2) == 0
    assert count({"CPU": 9, "GPU": 2}, 8) == 8
    assert count({"CPU": 16, "GPU": 2}, 2) == 4
    assert count({"CPU": 8, "GPU": 1}, 4) == 4
    assert count({"CPU": 16, "GPU": 2}, 10) == 8  # capped at max_workers


@pytest.mark.parametrize(("per_worker_gpu", "num_workers"), [(0.1, 5), (0.2, 5), (0.3, 3)])
def test_count_possible_workers_fractional_resources(
    per_worker_gpu: float, num_workers: int
) -> None:
    reserved = 0.0
    for _ in range(num_workers):  # as the coordinator adds up a node's bundles
        reserved += per_worker_gpu
    assert (
        workers_that_fit({"n0": {"GPU": reserved}}, {"GPU": per_worker_gpu}, num_workers)
        == num_workers
    )


def test_count_possible_workers_ignores_partial_worker() -> None:
    assert workers_that_fit({"n0": {"GPU": 3.9}}, {"GPU": 1.0}, 8) == 3


def test_count_possible_workers_with_zero_resources() -> None:
    free = {"n0": {"CPU": 1.0, "GPU": 1.0, "memory": 1.0}}
    assert workers_that_fit(free, {"CPU": 0, "GPU": 0, "memory": 0}, 4) == 4


def test_a_wait_is_looked_at_again_every_second() -> None:
    """Ray's policy reads its reservations again at most every second while a start waits
    (``GET_RESERVED_RESOURCES_INTERVAL_S``); wgstore looks again as often."""
    log = _run()
    step(log, cluster=_view(3))
    looks = looks_due(log.run(), None, T0, None, None)
    assert looks.size and looks.next_at == T0 + timedelta(seconds=1)


def _drive_to_running(log: SimLog, world: World) -> None:
    """SCHEDULING -> RUNNING: the executor starts the requested group."""
    world.start(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    step(log)
    assert log.run().controller_state == "RUNNING"


def test_resize() -> None:
    """Ray's ``test_controller.py::test_resize``: a start at 1, then monitor decisions; each
    resize goes RUNNING -> RESIZING -> SCHEDULING -> RUNNING at the new size. Ray's mock policy
    also hands the controller a resize to the size it has (10 -> 10), which Ray's real policy
    never does (same size: ``NoopDecision``); wgstore's decider does not resize to the same size
    either, so that step is a no-op here."""
    log = _run(min_workers=1, max_workers=20)
    world = World(log)
    assert step(log, cluster=ClusterView(fits=0)).run_events  # no room: a wait, no group
    assert log.run().current_group_id is None
    step(log, cluster=ClusterView(fits=1))
    assert log.run().controller_state == "SCHEDULING"
    _drive_to_running(log, world)
    size = 1
    for fits in (None, 2, None, None, 10, None, 10, 20, None, 5):
        if fits is None or fits == size:
            assert step(log, cluster=ClusterView(fits=fits)).empty
            continue
        assert step(log, cluster=ClusterView(fits=fits)).to_state == "RESIZING"
        world.shut_down(log.group(log.run().current_group_id))  # type: ignore[arg-type]
        assert step(log).to_state == "SCHEDULING"
        group = log.group(log.run().current_group_id)
        assert group is not None and group.context.num_workers == fits
        _drive_to_running(log, world)
        size = fits
    assert log.run().failures == 0


def test_failure_handling() -> None:
    """Ray's ``test_failure_handling``: a worker error, RETRY, a restart at the size the policy
    chooses then (4, from 2); then a failure past the budget, RAISE, SHUTTING_DOWN, ERRORED."""
    log = SimLog()
    log.create(
        FailureConfig(max_failures=1),
        scaling=ScalingConfig(num_workers=8, min_workers=1),
    )
    world = World(log)
    step(log, cluster=ClusterView(fits=2))
    _drive_to_running(log, world)
    world.fail(log.group(log.run().current_group_id), [1])  # type: ignore[arg-type]
    assert step(log).to_state == "RESTARTING"
    world.shut_down(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    decision = step(log, cluster=ClusterView(fits=4))
    assert decision.to_state == "RESCHEDULING" and _size(decision) == 4
    _drive_to_running(log, world)
    world.fail(log.group(log.run().current_group_id), [0])  # type: ignore[arg-type]
    assert step(log).to_state == "SHUTTING_DOWN"
    world.shut_down(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    step(log)
    assert log.run().status.value == "ERRORED"


def test_worker_group_start_failure() -> None:
    """Ray's ``test_worker_group_start_failure``: a start that fails is retried (RETRY), and
    the next start succeeds; wgstore records it as a start failure and starts the next attempt
    at what fits. One difference, older than elastic runs: Ray goes SCHEDULING -> RESCHEDULING;
    wgstore's controller goes through RESTARTING (the failed group's release) first."""
    log = _run(min_workers=1, max_workers=4)
    world = World(log)
    step(log, cluster=ClusterView(fits=2))
    world.fail_start(log.group(log.run().current_group_id), retryable=True)  # type: ignore[arg-type]
    assert step(log).to_state == "RESTARTING"
    decision = step(log, cluster=ClusterView(fits=2))
    assert decision.to_state == "RESCHEDULING" and _size(decision) == 2
    _drive_to_running(log, world)
    assert [d.failure_kind for d in log.run().decisions] == ["start"]


def _preempt_once(log: SimLog, world: World, now: Any) -> Any:
    """RUNNING -> PREEMPTING (node-1 going, no deadline) -> past Ray's default wait: the
    failure decision; returns it."""
    step(log, cluster=ClusterView(fits=4, draining={"node-1": None}), now=now)
    decision = step(log, now=now + timedelta(seconds=121))
    return decision.run_events[0].event


def _restart(log: SimLog, world: World) -> None:
    world.shut_down(log.group(log.run().current_group_id))  # type: ignore[arg-type]
    step(log, cluster=ClusterView(fits=4))
    _drive_to_running(log, world)


@pytest.mark.parametrize(("budget", "retries"), [(3, 3), (0, 0), (-1, 6)])
def test_the_preemption_budget_is_its_own(budget: int, retries: int) -> None:
    """Ray's ``test_preemption_unit.py``: ``test_preemption_budget_is_independent_of_max_failures``
    (max_failures=0, 3 preemptions retried, the 4th raises), ``..._zero_budget_raises_immediately``
    and ``..._unlimited_budget``."""
    log = SimLog()
    log.create(
        FailureConfig(max_failures=0, max_preemption_failures=budget),
        scaling=ScalingConfig(num_workers=4, min_workers=1),
    )
    world = World(log)
    step(log, cluster=ClusterView(fits=4))
    _drive_to_running(log, world)
    for n in range(retries):
        decided = _preempt_once(log, world, T0 + timedelta(hours=n))
        assert (decided.decision, decided.failure_kind, decided.failures_so_far) == (
            "RETRY",
            "preemption",
            n + 1,
        )
        _restart(log, world)
    if budget == -1:
        return
    decided = _preempt_once(log, world, T0 + timedelta(hours=retries))
    assert decided.decision == "RAISE" and decided.failure_kind == "preemption"


def test_a_worker_group_error_budget_is_independent_from_preemption() -> None:
    """Ray's ``test_worker_group_error_budget_independent_from_preemption``: worker failures
    spend ``max_failures`` (2), and preemptions after them are still retried."""
    log = SimLog()
    log.create(
        FailureConfig(max_failures=2, max_preemption_failures=5),
        scaling=ScalingConfig(num_workers=4, min_workers=1),
    )
    world = World(log)
    step(log, cluster=ClusterView(fits=4))
    _drive_to_running(log, world)
    for _ in range(2):
        world.fail(log.group(log.run().current_group_id), [0])  # type: ignore[arg-type]
        assert step(log).run_events[0].event.decision == "RETRY"
        _restart(log, world)
    for n in range(3):
        decided = _preempt_once(log, world, T0 + timedelta(hours=n))
        assert (decided.decision, decided.failures_so_far) == ("RETRY", n + 1)
        _restart(log, world)
    assert log.run().failures_of("worker_group") == 2
