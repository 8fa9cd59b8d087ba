"""``RayClusterProbe`` against the session's real Ray (one node, 4 CPUs): what fits of an elastic
run, its own placement group counted as its, and no node going. The multi-node cases (a node
joining, draining, removed) are in test_elastic_cluster.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from wgstore.events.records import RecordedEvent
from wgstore.events.run import RunCreated, ScalingConfig
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.run.cluster_probe import RayClusterProbe
from wgstore.projections.run_state import RunState, project_run

pytestmark = [pytest.mark.ray]


def _run(cpus_per_worker: float, max_workers: int) -> RunState:
    scaling = ScalingConfig(
        num_workers=max_workers, min_workers=1, resources_per_worker={"CPU": cpus_per_worker}
    )
    context = WorkerGroupContext(
        num_workers=max_workers,
        resources_per_worker={"CPU": cpus_per_worker},
        train_fn="examples.train:train_fn",
    )
    created = RunCreated(run_id="r1", scaling_config=scaling, context=context)
    record = RecordedEvent(
        position=1,
        stream_id="run-r1",
        version=1,
        event_id=uuid.uuid4(),
        type="RunCreated",
        schema_version=1,
        event=created,
        metadata={},
        recorded_at=datetime.now(UTC),
        hash="",
    )
    return project_run([record])


def _free_cpus() -> float:
    import ray

    per_node = ray._private.state.available_resources_per_node()  # type: ignore[no-untyped-call]
    return float(sum(resources.get("CPU", 0.0) for resources in per_node.values()))


def test_the_probe_counts_the_free_cpus_of_the_sessions_ray(ray_session: None) -> None:
    before = _free_cpus()
    view = RayClusterProbe().look(_run(0.5, 64), None, size=True)
    after = _free_cpus()  # (an earlier test's actors may still be going away)
    fits = sorted(int(free / 0.5 + 1e-9) for free in (before, after))
    assert view.fits is not None and fits[0] <= view.fits <= fits[1]
    assert view.draining == {}
    capped = RayClusterProbe().look(_run(0.5, 1), None, size=True)
    assert capped.fits in {min(1, n) for n in fits}  # never more than the run's maximum
    assert RayClusterProbe().look(_run(0.5, 2), None, size=False).fits is None
