"""A group the cluster can never fit fails at once, as Ray Train 2.60's check does.

The pure check is compared with Ray's own ``_check_cluster_resources_and_raise_if_insufficient``
(its cluster-config lookup replaced by the table's maximum); on real Ray, impossible groups fail
in under 2 s with a start failure at ``placement_group`` and nothing left in Ray.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from wgstore.orchestration.runtimes.feasibility import insufficient_resources

ray_wg = pytest.importorskip("ray.train.v2._internal.execution.worker_group.worker_group")
ray_exc = pytest.importorskip("ray.train.v2._internal.exceptions")

MAX = {"CPU": 8, "GPU": 2, "memory": 10**9}
RAY_CASES = {
    "a group within the cluster": ({"CPU": 2}, 4),
    "more CPUs than the cluster has": ({"CPU": 3}, 4),
    "more GPUs than the cluster has": ({"CPU": 1, "GPU": 1}, 3),
    "an unknown custom resource": ({"CPU": 1, "tpu_slice": 1}, 1),
    "a fractional request at the limit": ({"CPU": 0.5}, 16),
    "a zero request of an unknown resource": ({"CPU": 1, "tpu_slice": 0}, 1),
}


def _ray_message(resources: dict[str, float], n: int, monkeypatch: Any) -> str | None:
    monkeypatch.setattr(
        ray_wg.ray_state, "get_max_resources_from_cluster_config", lambda: dict(MAX)
    )
    try:
        ray_wg.WorkerGroup._check_cluster_resources_and_raise_if_insufficient(resources, n)
    except ray_exc.InsufficientClusterResourcesError as error:
        return str(error)
    return None


@pytest.mark.parametrize("case", list(RAY_CASES.values()), ids=list(RAY_CASES))
def test_with_a_cluster_config_the_verdict_and_message_are_ray_s(
    case: tuple[dict[str, float], int], monkeypatch: Any
) -> None:
    resources, n = case
    ours = insufficient_resources(resources, n, "PACK", max_cluster_resources=MAX)
    assert ours == _ray_message(resources, n, monkeypatch)


TWO_NODES = [{"CPU": 4.0, "memory": 1e9}, {"CPU": 4.0, "GPU": 1.0, "memory": 1e9}]
NODE_CASES = {
    "fits spread over both nodes": ({"CPU": 2.0}, 4, "PACK", None),
    "more CPUs than both nodes together": ({"CPU": 3.0}, 3, "PACK", '{"CPU": 9.0}'),
    "more GPUs than both nodes together": ({"GPU": 1.0}, 2, "SPREAD", '{"GPU": 2.0}'),
    "an unknown custom resource": ({"CPU": 1.0, "tpu": 1.0}, 1, "PACK", '{"tpu": 1.0}'),
    "one worker larger than any node": ({"CPU": 5.0}, 1, "PACK", "no node of the cluster"),
    "a worker needing CPU and GPU fits the GPU node": ({"CPU": 4.0, "GPU": 1.0}, 1, "PACK", None),
    "STRICT_PACK beyond one node": ({"CPU": 3.0}, 2, "STRICT_PACK", "STRICT_PACK"),
    "STRICT_PACK within one node": ({"CPU": 2.0}, 2, "STRICT_PACK", None),
    "STRICT_SPREAD with more workers than nodes": (
        {"CPU": 1.0},
        3,
        "STRICT_SPREAD",
        "STRICT_SPREAD",
    ),
    "STRICT_SPREAD one worker per node": ({"CPU": 1.0}, 2, "STRICT_SPREAD", None),
}


@pytest.mark.parametrize("case", list(NODE_CASES.values()), ids=list(NODE_CASES))
def test_without_a_cluster_config_the_alive_nodes_are_all_the_cluster_has(
    case: tuple[dict[str, float], int, str, str | None],
) -> None:
    resources, n, strategy, expected = case
    message = insufficient_resources(resources, n, strategy, nodes=TWO_NODES)
    if expected is None:
        assert message is None
    else:
        assert message is not None and expected in message
        assert message.startswith("Insufficient cluster resources to launch training workers.")


def test_with_no_config_and_no_nodes_nothing_is_refused() -> None:
    assert insufficient_resources({"CPU": 1000}, 10, "PACK") is None


IMPOSSIBLE = {
    "more CPUs than all nodes": {"resources_per_worker": {"CPU": 1000.0}},
    "more GPUs than all nodes": {"resources_per_worker": {"CPU": 0.25, "GPU": 8.0}},
    "an unknown custom resource": {"resources_per_worker": {"CPU": 0.25, "no_such_thing": 1.0}},
    "STRICT_SPREAD on more nodes than exist": {"placement_strategy": "STRICT_SPREAD"},
}


@pytest.mark.ray
@pytest.mark.parametrize("overrides", list(IMPOSSIBLE.values()), ids=list(IMPOSSIBLE))
def test_a_group_the_cluster_can_never_fit_fails_at_once_and_leaves_nothing(
    store: Any, executor: Any, overrides: dict[str, Any]
) -> None:
    import ray

    from tests.orchestration.conftest import assert_nothing_left, make_context
    from wgstore.events.worker_group import StartStage, stream_id_for_group
    from wgstore.orchestration import WorkerGroup, WorkerGroupStartError

    n = len([node for node in ray.nodes() if node.get("Alive")]) + 1
    context = make_context(n, placement_timeout_s=60.0, **overrides)
    began = time.monotonic()
    with pytest.raises(WorkerGroupStartError) as caught:
        WorkerGroup.create(store, context, executor=executor, timeout_s=60)
    took = time.monotonic() - began

    # the placement group would time out after 60 s; at once is well under half of that, even
    # on a loaded machine
    assert took < 30.0, f"took {took:.2f}s, as if it waited for the placement group"
    error = caught.value
    assert error.stage is StartStage.PLACEMENT_GROUP
    assert error.cause.type == "InsufficientClusterResourcesError"
    assert "Insufficient cluster resources" in error.cause.message
    events = list(store.read_stream(stream_id_for_group(error.group_id)))
    assert [e.type for e in events] == ["WorkerGroupStartRequested", "WorkerGroupStartFailed"]
    assert events[-1].event.released == ()
    assert_nothing_left(error.group_id)
