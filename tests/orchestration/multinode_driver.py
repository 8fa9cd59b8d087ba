"""Two runs on a simulated 3-node Ray cluster; ``test_multinode.py`` runs this in a subprocess.

``python -m tests.orchestration.multinode_driver STORE_URL OUT_JSON TOUCH_DIR`` starts a
``ray.cluster_utils.Cluster`` of 3 nodes (1 CPU each; custom resources ``head``, ``n2``, ``n3``;
the two added nodes on their own loopback IPs 127.0.0.2 and 127.0.0.3, so Ray Train's per-IP
ranks see 3 machines), connects to it (the driver is on the head node), and records into
``STORE_URL``:

1. run ``spread``: 3 workers of 1 CPU, ``SPREAD`` (one per node), to its end;
2. run ``node-lost``: 3 workers of 0.5 CPU, ``SPREAD``, ``max_failures=1``; once attempt 1
   reported a checkpoint, the non-head node of one of its workers is removed
   (``Cluster.remove_node``), then the run goes on to its end on the 2 nodes left.

It cannot share the pytest session's local Ray (one Ray per process), hence the subprocess.
``OUT_JSON`` gets what only this process can see: the cluster's node ids, the removed node, and
what Ray's own tables still hold of wgstore (actors not DEAD, placement groups not REMOVED) once
both runs ended, and the node each group's sync actor ran on. ``TOUCH_DIR`` gets the file the train function waits for before its last step
(so attempt 1 cannot finish before its node is gone).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

FN = "tests.orchestration.controller_fns:resumable_fn"
FAST = {"poll_interval_s": 0.2, "placement_timeout_s": 60.0, "timeout_s": 120.0}
ADDED = {"n2": "127.0.0.2", "n3": "127.0.0.3"}


def start_cluster() -> tuple[Any, dict[str, Any]]:
    """The 3-node cluster (connected to) and its nodes by name."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False},
    )
    nodes = {"head": cluster.head_node}
    for name, ip in ADDED.items():
        nodes[name] = cluster.add_node(num_cpus=1, resources={name: 1}, node_ip_address=ip)
    ray.init(address=cluster.address)
    return cluster, nodes


def wgstore_left_in_ray() -> list[str]:
    """wgstore actors not DEAD and placement groups not REMOVED, from Ray's own tables."""
    import ray
    from ray._private import state as ray_state

    left = [
        f"actor {info['Name']} {info['State']}"
        for info in ray_state.actors().values()
        if (info.get("Name") or "").startswith("wgstore-") and info.get("State") != "DEAD"
    ]
    left += [
        f"placement group {info['name']} {info['state']}"
        for info in ray.util.placement_group_table().values()
        if info.get("state") != "REMOVED"
    ]
    return left


def sync_actor_nodes() -> dict[str, str]:
    """Each group's sync actor (alive or dead) -> the node id it ran on, from Ray's actor table."""
    from ray._private import state as ray_state

    return {
        info["Name"]: (info.get("Address") or {}).get("NodeID", "")
        for info in ray_state.actors().values()
        if (info.get("Name") or "").startswith("wgstore-") and info["Name"].endswith("-sync")
    }


def wait_left_in_ray(within_s: float = 15.0) -> list[str]:
    """:func:`wgstore_left_in_ray`, allowing the GCS a moment to catch up."""
    deadline = time.monotonic() + within_s
    left = wgstore_left_in_ray()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = wgstore_left_in_ray()
    return left


def remove_a_worker_node(
    url: str, cluster: Any, nodes: dict[str, Any], release: Path, found: dict[str, str]
) -> None:
    """Once attempt 1 of ``node-lost`` reported a checkpoint, remove the node of one of its
    workers that is not the head (the driver's) node; then touch ``release``."""
    from wgstore.events import EventStore
    from wgstore.events.streams import group_stream
    from wgstore.orchestration.run.decide import attempt_group_id
    from wgstore.projections.state import project_worker_group

    group_id = attempt_group_id("node-lost", 1)
    by_id = {node.node_id: name for name, node in nodes.items()}
    deadline = time.monotonic() + 120
    try:
        with EventStore.open(url) as store:
            while time.monotonic() < deadline:
                if store.stream_version(group_stream(group_id)):
                    state = project_worker_group(store.read_stream(group_stream(group_id)))
                    if state.latest_checkpoint is not None and state.workers:
                        break
                time.sleep(0.05)
            else:
                found["error"] = "attempt 1 reported no checkpoint within 120 s"
                return
        victim = next(w for w in state.workers if by_id.get(w.node_id) not in (None, "head"))
        name = by_id[victim.node_id]
        found.update(
            node_id=victim.node_id, node=name, checkpoint_seen=str(state.latest_checkpoint)
        )
        cluster.remove_node(nodes[name])
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
        found["error"] = f"{type(error).__name__}: {error}"
    finally:
        release.touch()


def main(url: str, out: Path, touch_dir: Path) -> None:
    import ray

    from wgstore.orchestration import FailureConfig, ScalingConfig, start_run

    started = time.monotonic()
    cluster, nodes = start_cluster()
    timings = {"cluster_start_s": time.monotonic() - started}
    try:
        started = time.monotonic()
        start_run(
            url,
            FN,
            run_id="spread",
            scaling_config=ScalingConfig(
                num_workers=3, resources_per_worker={"CPU": 1.0}, placement_strategy="SPREAD"
            ),
            failure_config=FailureConfig(max_failures=0),
            train_fn_config={"steps": 3},
            **FAST,
        )
        timings["spread_run_s"] = time.monotonic() - started

        release = touch_dir / "node-removed"
        removed: dict[str, str] = {}
        remover = threading.Thread(
            target=remove_a_worker_node, args=(url, cluster, nodes, release, removed)
        )
        started = time.monotonic()
        remover.start()
        start_run(
            url,
            FN,
            run_id="node-lost",
            scaling_config=ScalingConfig(
                num_workers=3, resources_per_worker={"CPU": 0.5}, placement_strategy="SPREAD"
            ),
            failure_config=FailureConfig(max_failures=1),
            train_fn_config={"steps": 6, "step_sleep_s": 0.1, "wait_for": str(release)},
            **FAST,
        )
        timings["node_lost_run_s"] = time.monotonic() - started
        remover.join(timeout=60)
        result = {
            "nodes": {name: node.node_id for name, node in nodes.items()},
            "driver_node": ray.get_runtime_context().get_node_id(),
            "removed": removed,
            "left_in_ray": wait_left_in_ray(),
            "sync_actor_nodes": sync_actor_nodes(),
            "timings": timings,
        }
        out.write_text(json.dumps(result))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
