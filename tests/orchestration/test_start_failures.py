"""A start that fails at any stage releases everything and says where and why.

Failures are real: a placement group that a busy cluster cannot make ready in time, a sync actor
whose process really exits (``os._exit``, through ``RayRuntime``'s failpoints), and an import
error in a real worker. Leaks are checked against Ray's own actor and placement-group tables.

What a failed start records and releases at every stage is the executor's logic, tested on
``FakeRuntime`` (``test_executor.py``); the workers' own deaths at start (exit, SIGKILL) and a
raising launch are real-Ray cells of the fault matrix (``test_fault_matrix.py``), so they are
not repeated here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.orchestration.conftest import REPO, assert_nothing_left, make_context
from wgstore.events.worker_group import StartStage, stream_id_for_group
from wgstore.orchestration import RayExecutor, WorkerGroup, WorkerGroupStartError
from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CASES = {
    StartStage.PLACEMENT_GROUP: (
        {"placement_timeout_s": 1.0},  # the cluster could fit it, but is busy (_busy)
        {},
        "PlacementGroupTimeoutError",
        [],
    ),
    StartStage.SYNC_ACTOR: (
        {},
        {"sync_actor_exit_on_init": True},
        "ActorDiedError",
        ["PlacementGroupReserved"],
    ),
}


@contextlib.contextmanager
def _busy(block: bool) -> Iterator[None]:
    """Hold every CPU of the cluster in a placement group, so a feasible group must wait (and
    time out).

    Every CPU, not ``available_resources()``: that is a view Ray refreshes on its own clock, and a
    previous test's actors and placement group are released asynchronously. Blocking what the view
    called free once left CPUs that came free a moment later, and the group under test started
    (CI, 2026-12-05). Waiting for the whole cluster waits out those releases instead.
    """
    if not block:
        yield
        return
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    total = ray.cluster_resources()["CPU"]
    blocker = placement_group([{"CPU": total}])
    if not blocker.wait(timeout_seconds=120):
        remove_placement_group(blocker)
        pytest.fail(
            f"could not hold all {total} CPUs for 120 s; still in use: "
            f"{total - ray.available_resources().get('CPU', 0.0)}"
        )
    try:
        yield
    finally:
        remove_placement_group(blocker)


@pytest.mark.parametrize("stage", list(CASES), ids=[s.value for s in CASES])
def test_a_start_failing_at_a_stage_records_it_and_leaves_nothing_in_ray(
    store: Any, ray_up: None, stage: StartStage
) -> None:
    overrides, failpoints, error_type, builder_steps = CASES[stage]
    runtime = RayRuntime(failpoints=failpoints)
    executor = RayExecutor(store, runtime=runtime, extra_sys_path=[str(REPO)]).start()
    try:
        with (
            _busy(stage is StartStage.PLACEMENT_GROUP),
            pytest.raises(WorkerGroupStartError) as caught,
        ):
            WorkerGroup.create(store, make_context(2, **overrides), executor=executor, timeout_s=60)
    finally:
        executor.stop()
    error = caught.value
    assert error.stage is stage
    assert error.cause.type == error_type
    assert error.group_id in str(error)

    events = list(store.read_stream(stream_id_for_group(error.group_id)))
    assert [e.type for e in events] == [
        "WorkerGroupStartRequested",
        *builder_steps,
        "WorkerGroupStartFailed",
    ]
    failed = events[-1].event
    assert failed.stage is stage and failed.error == error.cause
    assert f"placement_group:wgstore-{error.group_id}" in failed.released
    if stage is not StartStage.PLACEMENT_GROUP:
        assert failed.released[-1] == f"placement_group:wgstore-{error.group_id}"
    assert_nothing_left(error.group_id)
    assert executor.errors == []


def test_an_import_error_names_the_module_and_keeps_the_remote_traceback(
    store: Any, executor: Any
) -> None:
    with pytest.raises(WorkerGroupStartError) as caught:
        WorkerGroup.create(
            store, make_context(1, train_fn="examples.train:lambda_fn"), executor=executor
        )
    assert caught.value.stage is StartStage.INIT_TRAIN_CONTEXT
    assert "lambda" in caught.value.cause.message
    assert "init_train_context" in caught.value.cause.traceback
    group_id = caught.value.group_id
    assert caught.value.released == (
        f"actor:wgstore-{group_id}-0",
        f"actor:wgstore-{group_id}-sync",
        f"placement_group:wgstore-{group_id}",
    )
    assert_nothing_left(caught.value.group_id)
