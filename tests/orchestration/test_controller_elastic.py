"""The controller of an elastic run on a real store (SQLite and Postgres), without Ray.

The executor's side is played by hand (``decide_sim.World`` appending to the store), and the
cluster by a scripted probe: these tests are about the loop, when it looks at the cluster and
that it acts on what it saw without the log moving (a node that joins writes nothing to the
log). ``test_elastic_cluster.py`` runs the same on a real multi-node Ray.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.orchestration.decide_sim import World
from tests.orchestration.test_controller import StoreLog, _group
from tests.waiting import wait_until
from wgstore.events import NO_STREAM
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.orchestration.run.scaling import ClusterView
from wgstore.projections.run_state import RunState
from wgstore.projections.state import WorkerGroupState


class Probe:
    """The cluster as a test says it is: ``fits`` workers, ``draining`` nodes; counts looks."""

    def __init__(self, fits: int) -> None:
        self.fits = fits
        self.draining: dict[str, int | None] = {}
        self.looks: list[bool] = []

    def look(self, run: RunState, group: WorkerGroupState | None, *, size: bool) -> ClusterView:
        self.looks.append(size)
        return ClusterView(fits=self.fits if size else None, draining=dict(self.draining))


def _create(store: Any, interval_s: float, timeout_s: float | None = 60.0) -> None:
    scaling = ScalingConfig(
        num_workers=4,
        min_workers=2,
        elastic_resize_monitor_interval_s=interval_s,
        min_workers_timeout_s=timeout_s,
    )
    context = WorkerGroupContext(num_workers=4, train_fn="examples.train:train_fn")
    created = RunCreated(
        run_id="r1",
        scaling_config=scaling,
        failure_config=FailureConfig(max_failures=1),
        context=context,
    )
    store.append(run_stream("r1"), [created], expected_version=NO_STREAM)


def test_the_controller_looks_before_a_start_and_starts_at_what_fits(store: Any) -> None:
    _create(store, interval_s=60)
    probe = Probe(fits=3)
    with RunController(store, "r1", executor="external", probe=probe) as controller:
        decision = controller.step()
        assert probe.looks == [True]
        assert decision.group_events[0].event.context.num_workers == 3
        assert controller.step().empty and probe.looks == [True]  # starting: no look


def test_a_node_joining_grows_the_run_without_anything_written_to_the_log(store: Any) -> None:
    """The controller wakes at its next look by itself: nothing in the log moves when a node
    joins, yet the run grows within about one interval."""
    _create(store, interval_s=0.3)
    probe = Probe(fits=2)
    controller = RunController(store, "r1", executor="external", probe=probe)
    thread = threading.Thread(target=lambda: controller.run(timeout_s=120), daemon=True)
    thread.start()
    world = World(StoreLog(store))  # type: ignore[arg-type]

    def state() -> RunState:
        return read_run(store, "r1")

    wait_until(lambda: bool(state().groups), timeout_s=30, what="attempt 1 requested")
    first = state().groups[0]
    world.start(_group(store, first))
    wait_until(lambda: state().controller_state == "RUNNING", timeout_s=30, what="RUNNING")
    probe.fits = 4  # a node joined
    wait_until(lambda: state().controller_state == "RESIZING", timeout_s=30, what="RESIZING")
    assert _group(store, first).resized_to == 4
    world.shut_down(_group(store, first))
    wait_until(lambda: len(state().groups) == 2, timeout_s=30, what="attempt 2 requested")
    run = state()
    second = _group(store, run.groups[1])
    assert second.context.num_workers == 4
    assert [(d.cause, d.num_workers) for d in run.scaling_decisions] == [
        ("initial", 2),
        ("grew", 4),
    ]
    assert run.failures == 0
    world.start(second)
    world.finish(_group(store, run.groups[1]))
    wait_until(
        lambda: state().controller_state == "SHUTTING_DOWN", timeout_s=30, what="SHUTTING_DOWN"
    )
    world.shut_down(_group(store, run.groups[1]))
    thread.join(60)
    assert read_run(store, "r1").status.value == "FINISHED"


def test_a_run_waiting_for_its_minimum_errors_at_its_timeout(store: Any) -> None:
    _create(store, interval_s=60, timeout_s=0.5)
    probe = Probe(fits=1)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    controller = RunController(store, "r1", executor="external", probe=probe, clock=lambda: now[0])
    with controller:
        assert [type(e.event).__name__ for e in controller.step().run_events] == ["StartDeferred"]
        assert controller.step().empty  # still waiting, nothing written again
        now[0] += timedelta(seconds=1)
        controller.step()
    run = read_run(store, "r1")
    assert run.status.value == "ERRORED"
    assert run.error is not None and "1 of the run's 2..4 workers fit" in run.error.message
