"""``RayRuntime`` and ``FakeRuntime`` keep the same contract, so tests on the fake mean something.

One scenario per runtime: reserve, start the sync actor and workers, find them again by name,
list them for the sweep, run their shutdown, release them (in Ray's order), and a placement group
that never becomes ready is left pending for the release. On Ray the leaks are checked against
Ray's own tables.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.orchestration.conftest import assert_nothing_left
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.errors import PlacementGroupTimeoutError
from wgstore.orchestration.runtimes.fake_runtime import FakeFaults, FakeRuntime
from wgstore.orchestration.runtimes.protocol import WorkerGroupRuntime

CONTEXT = WorkerGroupContext(
    num_workers=2, resources_per_worker={"CPU": 0.25}, train_fn="examples.train:train_fn"
)


@pytest.fixture(params=["fake", pytest.param("ray", marks=pytest.mark.ray)])
def runtime(request: pytest.FixtureRequest) -> WorkerGroupRuntime:
    if request.param == "fake":
        return FakeRuntime()
    request.getfixturevalue("ray_up")
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

    ray_runtime = RayRuntime()
    ray_runtime.connect()
    return ray_runtime


def _group_id() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


def test_a_group_s_resources_are_found_by_name_listed_and_released_in_order(
    runtime: WorkerGroupRuntime,
) -> None:
    group_id = _group_id()
    assert isinstance(runtime, WorkerGroupRuntime)
    runtime.check_can_fit(group_id, CONTEXT)

    pg = runtime.reserve_placement_group(group_id, [{"CPU": 0.25}] * 2, "PACK", 20.0)
    sync = runtime.start_sync_actor(group_id, timeout_s=60.0)
    workers = runtime.start_workers(group_id, pg, CONTEXT, timeout_s=60.0)
    names = {i: w.metadata.actor_name for i, w in enumerate(workers)}
    found = runtime.find_workers({**names, 7: f"wgstore-{group_id}-7"})
    listed = sorted(runtime.list_group_resources()[group_id])
    endings = runtime.shutdown_workers(names, patience_s=10.0)
    released = runtime.release_group(group_id)

    assert (pg.name, sync.name) == (f"wgstore-{group_id}", f"wgstore-{group_id}-sync")
    assert pg.placement_group_id and sync.actor_id
    assert names == {0: f"wgstore-{group_id}-0", 1: f"wgstore-{group_id}-1"}
    assert found[0] is not None and found[1] is not None and found[7] is None
    assert listed == sorted(
        [f"actor:{n}" for n in (*names.values(), sync.name)] + [f"placement_group:{pg.name}"]
    )
    assert endings == {0: ("stopped", None), 1: ("stopped", None)}
    assert released == (
        f"actor:wgstore-{group_id}-0",
        f"actor:wgstore-{group_id}-1",
        f"actor:wgstore-{group_id}-sync",
        f"placement_group:wgstore-{group_id}",
    )
    assert group_id not in runtime.list_group_resources()
    assert runtime.release_group(group_id) == ()
    assert runtime.find_workers(names) == {0: None, 1: None}
    if not isinstance(runtime, FakeRuntime):
        assert_nothing_left(group_id)


def test_a_placement_group_never_ready_is_left_pending_for_the_release(
    runtime: WorkerGroupRuntime,
) -> None:
    group_id = _group_id()
    bundles: list[dict[str, Any]] = [{"CPU": 0.25}]
    if isinstance(runtime, FakeRuntime):
        runtime.configure(group_id, faults=FakeFaults(placement_never_ready=True))
    else:
        bundles = [{"CPU": 1000.0}]  # more than the test cluster has: never ready

    with pytest.raises(PlacementGroupTimeoutError, match=f"wgstore-{group_id}"):
        runtime.reserve_placement_group(group_id, bundles, "PACK", 0.5)

    assert runtime.release_group(group_id) == (f"placement_group:wgstore-{group_id}",)
    if not isinstance(runtime, FakeRuntime):
        assert_nothing_left(group_id)


def test_a_release_goes_by_name_and_takes_extra_handles_dead_repeated_or_none(
    runtime: WorkerGroupRuntime,
) -> None:
    """Ray's release kills every extra handle it is given and lets any of those kills fail
    (``ray.kill(None)`` raises ``ValueError``): the names it found say what was released, and
    no handle is refused. The fake takes the same handles the same way."""
    group_id = _group_id()
    pg = runtime.reserve_placement_group(group_id, [{"CPU": 0.25}] * 2, "PACK", 20.0)
    sync = runtime.start_sync_actor(group_id, timeout_s=60.0)
    handles = [w.handle for w in runtime.start_workers(group_id, pg, CONTEXT, timeout_s=60.0)]

    first = runtime.release_group(group_id, extra_handles=[*handles, sync.handle])
    again = runtime.release_group(group_id, extra_handles=[*handles, *handles, None])

    assert first == (
        f"actor:wgstore-{group_id}-0",
        f"actor:wgstore-{group_id}-1",
        f"actor:wgstore-{group_id}-sync",
        f"placement_group:wgstore-{group_id}",
    )
    assert again == ()
    assert group_id not in runtime.list_group_resources()
    if not isinstance(runtime, FakeRuntime):
        assert_nothing_left(group_id)
