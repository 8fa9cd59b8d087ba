"""gc and orphan detection for runs recorded from Ray Train whose driver died (both backends).

The recorder holds the run's lease while Ray's controller lives (``ControllerStarted.lease_s``);
when the driver dies Ray ends the controller, the lease lapses and the run is orphaned. gc then
removes the placement group the log names (on the fake cluster here; on Ray in
test_ray_train_resume.py) and records why, in one fenced append.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from wgstore.events import NewEvent
from wgstore.events.leases import acquire_lease, lease_of
from wgstore.events.run import (
    ControllerStarted,
    ControllerStateChanged,
    FailureConfig,
    RunCreated,
    ScalingConfig,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    WorkerGroupContext,
    WorkerGroupStartRequested,
)
from wgstore.orchestration import RayExecutor
from wgstore.orchestration.orphans.gc import DRIVER_LOST_REASON, collect_garbage, orphaned_runs
from wgstore.orchestration.run.controller import read_run
from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime
from wgstore.projections.state import project_worker_group


def _recorded(store: Any, runtime: FakeRuntime, *, lease_s: float | None = 30.0) -> str:
    """A Ray Train run as RecordingCallback writes it, whose driver died while its first
    attempt held a placement group."""
    reserved = runtime.reserve_placement_group("rt-g1", [{"CPU": 1.0}], "PACK", 5.0)
    store.append(
        run_stream("rt"),
        _as_recorded(
            RunCreated(
                run_id="rt",
                name="ray-run",
                scaling_config=ScalingConfig(num_workers=1),
                failure_config=FailureConfig(max_failures=0),
                context=None,
                ray={"controller_actor_id": "actor-1"},
            ),
            ControllerStarted(controller_id="actor-1", host="h", pid=7, lease_s=lease_s),
            ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING"),
            ControllerStateChanged(from_state="SCHEDULING", to_state="RUNNING", group_id="rt-g1"),
        ),
    )
    store.append(
        group_stream("rt-g1"),
        _as_recorded(
            WorkerGroupStartRequested(
                group_id="rt-g1",
                run_id="rt",
                attempt=1,
                context=WorkerGroupContext(num_workers=1, train_fn="train:loop"),
            ),
            PlacementGroupReserved(
                placement_group_id=reserved.placement_group_id,
                name="ray-train-pg",
                bundles=({"CPU": 1.0},),
                strategy="PACK",
            ),
        ),
    )
    return "rt"


def _as_recorded(*events: Any) -> list[NewEvent]:
    return [NewEvent(event, metadata={"source": "ray_train"}) for event in events]


def test_a_recorded_run_whose_lease_lapsed_is_orphaned_and_one_without_a_lease_never(
    store: Any,
) -> None:
    runtime = FakeRuntime()
    _recorded(store, runtime)
    now = datetime.now(UTC)
    assert acquire_lease(store, "rt", "actor-1", 30.0, now=now)
    assert orphaned_runs(store, now=now) == []  # the controller lives
    ((run, expired),) = orphaned_runs(store, now=now + timedelta(seconds=31))
    assert run.run_id == "rt" and expired == now + timedelta(seconds=30)


def test_runs_recorded_before_recorders_held_leases_are_never_orphaned(store: Any) -> None:
    _recorded(store, FakeRuntime(), lease_s=None)
    assert orphaned_runs(store, now=datetime.now(UTC) + timedelta(days=1)) == []


def test_gc_releases_a_dead_drivers_placement_group_and_records_why(store: Any) -> None:
    runtime = FakeRuntime()
    _recorded(store, runtime)
    assert runtime.list_group_resources()  # the placement group the driver left
    with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as executor:
        (dry,) = collect_garbage(store, dry_run=True, executor=executor)
        assert dry.action == "would abort" and not read_run(store, "rt").ended
        (outcome,) = collect_garbage(store, executor=executor)
    assert (outcome.action, outcome.released) == ("aborted", ("placement_group:ray-train-pg",))
    assert runtime.list_group_resources() == {}
    run = read_run(store, "rt")
    assert (run.status.value, run.abort_reason) == ("ABORTED", DRIVER_LOST_REASON)
    group = project_worker_group(store.read_stream(group_stream("rt-g1")))
    assert (group.status.value, group.shutdown_reason) == ("SHUT_DOWN", DRIVER_LOST_REASON)
    assert group.released == ("placement_group:ray-train-pg",)
    assert lease_of(store, "rt") is None
    assert orphaned_runs(store) == []
    # The executor (it followed the store all along) left Ray Train's group alone: only gc wrote.
    assert [r.type for r in store.read_stream(group_stream("rt-g1"))][2:] == [
        "WorkerGroupShutdownRequested",
        "WorkerGroupShutDown",
    ]
    assert ("release_group", "rt-g1") not in runtime.calls
    assert collect_garbage(store, executor=executor) == []  # nothing left to do
