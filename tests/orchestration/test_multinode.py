"""More than one machine: runs on a simulated 3-node Ray cluster, and a node lost mid-training.

The cluster (``ray.cluster_utils.Cluster``: 3 nodes of 1 CPU, each with a custom resource, the
two added nodes on their own loopback IPs) and both runs live in a subprocess
(``tests/orchestration/multinode_driver.py``): a process has one Ray, and this session's is the
local one of ``ray_session``. The subprocess gets its own ``RAY_TMPDIR``, so the cluster's
address file never makes another process's ``ray.init()`` join it. It records into a SQLite file
that the test reads here with the normal wgstore API; what only a process on the cluster can see
(node ids, which node was removed, what Ray's tables still hold) it writes to a JSON file.

One cluster start for both cases (most of this file's time; ~17-40 s on a busy machine).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.orchestration.conftest import run_cluster_driver
from wgstore.events import EventStore
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerInfo
from wgstore.orchestration.run.controller import read_run
from wgstore.projections.state import WorkerGroupState, project_worker_group

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
]


@dataclass(frozen=True)
class ClusterRuns:
    """The store the driver recorded into, and what it saw of the cluster."""

    url: str
    nodes: dict[str, str]  # "head"/"n2"/"n3" -> node id
    driver_node: str  # the node id the driver (controller + executor) is connected to
    removed: dict[str, str]  # node_id, node, checkpoint_seen (or error)
    left_in_ray: list[str]
    sync_actor_nodes: dict[str, str]  # actor name -> node id
    timings: dict[str, float]

    def group(self, store: EventStore, group_id: str) -> WorkerGroupState:
        return project_worker_group(store.read_stream(group_stream(group_id)))


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRuns]:
    """Runs the driver once for the module: both cases on one cluster start."""
    work = tmp_path_factory.mktemp("multinode")
    url = f"sqlite:///{work / 'runs.db'}"
    out = work / "out.json"
    proc = run_cluster_driver(
        "tests.orchestration.multinode_driver", url, str(out), str(work), timeout_s=300
    )
    assert proc.returncode == 0 and out.exists(), proc.stdout[-4000:] + proc.stderr[-8000:]
    data: dict[str, Any] = json.loads(out.read_text())
    yield ClusterRuns(url=url, **data)


def _by_node(workers: tuple[WorkerInfo, ...]) -> dict[str, list[WorkerInfo]]:
    nodes: dict[str, list[WorkerInfo]] = {}
    for worker in workers:
        nodes.setdefault(worker.node_id, []).append(worker)
    return nodes


def assert_ranks_per_node(workers: tuple[WorkerInfo, ...]) -> None:
    """Ray Train's ranks: world ranks contiguous per node, local ranks 0.. on each node,
    local_world_size the node's worker count, node_rank the node's first-seen index."""
    assert [w.world_rank for w in workers] == list(range(len(workers)))
    for node_rank, (node_id, on_node) in enumerate(_by_node(workers).items()):
        assert [w.local_rank for w in on_node] == list(range(len(on_node))), node_id
        assert {w.local_world_size for w in on_node} == {len(on_node)}
        assert {w.node_rank for w in on_node} == {node_rank}
        assert len({w.node_ip for w in on_node}) == 1  # a node is one IP here


def test_a_spread_run_puts_one_worker_on_each_of_three_nodes_and_finishes(
    cluster_runs: ClusterRuns,
) -> None:
    with EventStore.open(cluster_runs.url) as store:
        run = read_run(store, "spread")
        assert (run.status.value, run.attempts, run.failures) == ("FINISHED", 1, 0)
        group = cluster_runs.group(store, run.groups[0])
    workers = group.workers
    assert group.context.placement_strategy == "SPREAD"
    assert {w.node_id for w in workers} == set(cluster_runs.nodes.values())  # one per node
    assert len({w.node_ip for w in workers}) == 3
    assert [(w.node_rank, w.local_rank, w.local_world_size) for w in workers] == [
        (0, 0, 1),
        (1, 0, 1),
        (2, 0, 1),
    ]
    assert_ranks_per_node(workers)
    assert group.return_values == {r: {"start": 0, "end": 3} for r in range(3)}


def test_a_node_removed_mid_training_fails_the_attempt_and_the_run_finishes_on_the_rest(
    cluster_runs: ClusterRuns,
) -> None:
    removed = cluster_runs.removed
    assert "error" not in removed, removed
    lost = removed["node_id"]
    assert removed["node"] in ("n2", "n3") and lost == cluster_runs.nodes[removed["node"]]
    with EventStore.open(cluster_runs.url) as store:
        run = read_run(store, "node-lost")
        first, second = (cluster_runs.group(store, g) for g in run.groups)
    assert (run.status.value, run.attempts, run.failures) == ("FINISHED", 2, 1)

    # Attempt 1: spread over the nodes, the lost one among them; its workers died with it. Ray's
    # SPREAD is best effort: 3 x 0.5 CPU bundles on 3 x 1 CPU nodes may put two on one node
    # (seen once in CI), so one worker per node is not guaranteed here (the SPREAD test with
    # 1 CPU workers shows one per node where capacity forces it).
    assert len({w.node_id for w in first.workers}) >= 2
    assert any(w.node_id == lost for w in first.workers)
    (decision,) = run.decisions
    # Ray counts a removed node against max_failures (preempted=False): a worker_group failure.
    assert (decision.decision, decision.failure_kind, decision.failures_so_far) == (
        "RETRY",
        "worker_group",
        1,
    )
    lost_ranks = [w.world_rank for w in first.workers if w.node_id == lost]
    assert [e.world_rank for e in decision.errors] == lost_ranks
    error = decision.errors[0].error
    assert error.type == "WorkerHealthCheckFailedError"
    assert "its node has died" in error.message and lost in error.message  # names the node

    # Attempt 2: on the two nodes left, from attempt 1's latest checkpoint, ranks per node.
    assert first.latest_checkpoint is not None
    assert second.context.resume_checkpoint == first.latest_checkpoint
    resumed_at = int(first.latest_checkpoint.rsplit("step", 1)[1])
    assert 1 <= resumed_at < 6
    assert second.return_values == {r: {"start": resumed_at, "end": 6} for r in range(3)}
    on_nodes = _by_node(second.workers)
    assert lost not in on_nodes and len(on_nodes) == 2
    assert sorted(len(ws) for ws in on_nodes.values()) == [1, 2]  # 3 x 0.5 CPU on 2 x 1 CPU
    assert_ranks_per_node(second.workers)

    assert cluster_runs.left_in_ray == []  # 0 wgstore actors, 0 placement groups


def test_every_sync_actor_runs_on_the_drivers_node(cluster_runs: ClusterRuns) -> None:
    # As Ray Train pins its SynchronizationActor: elsewhere, losing that node would fail every
    # rank of the group (their reports could not reach it), not only the ranks on it.
    assert cluster_runs.driver_node == cluster_runs.nodes["head"]
    assert len(cluster_runs.sync_actor_nodes) == 3  # spread, node-lost x 2 attempts
    assert set(cluster_runs.sync_actor_nodes.values()) == {cluster_runs.driver_node}
