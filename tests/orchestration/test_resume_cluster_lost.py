"""A `wgstore run` run resumed after its cluster went with its driver (issue 22, part 3): the
lost group is a controller failure, never charged to ``max_failures`` (fake clusters, both
backends)."""

from __future__ import annotations

from typing import Any

from tests.waiting import wait_until
from wgstore.events import NO_STREAM
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration import RayExecutor
from wgstore.orchestration.orphans.resume import resume_orphan
from wgstore.orchestration.run.controller import RunController
from wgstore.orchestration.run.decide import attempt_group_id
from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime, FakeScript
from wgstore.projections.state import project_worker_group


def _group(store: Any, attempt: int) -> Any:
    stream = group_stream(attempt_group_id("r1", attempt))
    return project_worker_group(store.read_stream(stream)) if store.stream_version(stream) else None


def test_a_group_its_cluster_lost_is_a_controller_failure_not_a_training_failure(
    store: Any,
) -> None:
    context = WorkerGroupContext(
        num_workers=2,
        resources_per_worker={"CPU": 1.0},
        train_fn="examples.train:train_fn",
        poll_interval_s=0.02,
    )
    created = RunCreated(
        run_id="r1",
        scaling_config=ScalingConfig(num_workers=2),
        failure_config=FailureConfig(max_failures=0),  # a training failure would end the run
        context=context,
        lease_s=1.0,
    )
    store.append(run_stream("r1"), [created], expected_version=NO_STREAM)

    # The driver: a controller and its executor on a local cluster, training attempt 1.
    lost_cluster = FakeRuntime(script=FakeScript(reports=100_000))
    first = RayExecutor(store, runtime=lost_cluster, read_models_interval_s=None)
    controller = RunController(store, "r1", executor=first).start()
    controller.step()  # attempt 1 requested
    wait_until(
        lambda: (g := _group(store, 1)) is not None and g.training_launched and g.version >= 10,
        timeout_s=60,
        what="attempt 1 training",
    )
    # The driver dies, and its local cluster with it: nothing renews the lease any more.
    controller._keeper.stop()  # type: ignore[union-attr]
    first.stop()

    new_cluster = FakeRuntime(script=FakeScript(reports=2, return_value="done"))
    second = RayExecutor(store, runtime=new_cluster, read_models_interval_s=None)
    try:
        final = resume_orphan(store, "r1", wait_s=60, executor=second)
    finally:
        second.stop()

    assert final.status.value == "FINISHED"
    (decision,) = final.decisions
    assert (decision.failure_kind, decision.decision) == ("controller", "RETRY")
    assert final.failures_of("worker_group") == 0
    lost = _group(store, 1)
    assert {error.type for error in lost.errors.values()} == {"ClusterLostError"}
    assert "the cluster lost the group" in lost.errors[0].message
    assert [r.by for r in final.resumes] == ["wgstore resume"]
