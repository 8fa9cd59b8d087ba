"""wgstore's own elastic run on a Ray cluster that grows, drains and shrinks under it;
``test_elastic_cluster.py`` runs this in a subprocess.

``python -m tests.orchestration.elastic_own_driver STORE_URL OUT_JSON WORK_DIR`` starts a
``ray.cluster_utils.Cluster`` of two nodes of 1 CPU (the head, the driver's, and ``n2``) and
runs ``start_run`` with ``ScalingConfig(num_workers=3, min_workers=1)`` (``--workers 1..3``),
one CPU a worker, looked at every second:

1. once the first group (2 workers: what fits) reported twice, ``n3`` joins: the run grows
   to 3 (the time from the join to the first report at 3 is kept);
2. once the 3-worker group reported, ``n3`` announces its preemption (a drain with a deadline
   4 s away, as a cloud's notice reaches Ray): PREEMPTING, then a restart without ``n3``;
3. once that group reported, ``n2`` is removed: a worker failure, and a restart at what fits
   then (1 worker, on the head) instead of a wait for the lost node;
4. once that group reported twice, the train function is told to stop.

Then run ``short`` asks for 3..4 workers where 1 fits, waits ``min_workers_timeout_s`` (3 s)
and errors naming the shortfall. ``OUT_JSON`` gets the node ids, timings, and what Ray's own
tables still hold of wgstore.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.orchestration.multinode_driver import wait_left_in_ray

FN = "tests.orchestration.controller_fns:elastic_fn"
FAST = {"poll_interval_s": 0.2, "placement_timeout_s": 10.0, "timeout_s": 300.0}


def _groups(url: str, run_id: str) -> list[tuple[int, int, tuple[str, ...]]]:
    """(size, reports, nodes) of each group of ``run_id``, in order."""
    from wgstore.events import EventStore
    from wgstore.events.streams import group_stream
    from wgstore.orchestration.errors import RunNotFoundError
    from wgstore.orchestration.run.controller import read_run
    from wgstore.projections.state import project_worker_group

    with EventStore.open(url) as store:
        try:
            run = read_run(store, run_id)
        except RunNotFoundError:
            return []
        out = []
        for group_id in run.groups:
            records = list(store.read_stream(group_stream(group_id)))
            if records:
                group = project_worker_group(records)
                nodes = tuple(sorted({w.node_id for w in group.workers}))
                out.append((group.context.num_workers, sum(group.report_counts.values()), nodes))
        return out


def _wait(what: str, url: str, ok: Any, timeout_s: float = 180.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if ok(_groups(url, "elastic")):
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"{what}: {_groups(url, 'elastic')}")


def _drain(address: str, node_id: str, in_s: float) -> None:
    """Announce ``node_id``'s preemption in ``in_s`` seconds, as the autoscaler does."""
    import ray
    from ray.core.generated import autoscaler_pb2

    deadline_ms = int((time.time() + in_s) * 1000)
    accepted, why = ray._raylet.GcsClient(address=address).drain_node(
        node_id,
        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "preempted by the test",
        deadline_ms,
    )
    if not accepted:
        raise RuntimeError(f"the drain of {node_id} was refused: {why}")


def main(url: str, out: Path, work: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from wgstore.orchestration import FailureConfig, ScalingConfig, start_run

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    n2 = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.2")
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    stop = work / "stop"
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            start_run(
                url,
                FN,
                run_id="elastic",
                scaling_config=ScalingConfig(
                    num_workers=3,
                    min_workers=1,
                    resources_per_worker={"CPU": 1.0},
                    elastic_resize_monitor_interval_s=1.0,
                    min_workers_timeout_s=60.0,
                ),
                failure_config=FailureConfig(max_failures=1, max_preemption_failures=1),
                train_fn_config={"stop": str(stop), "step_sleep_s": 0.2},
                **FAST,
            )
        except Exception as error:  # noqa: BLE001 - reported to the test
            result["error"] = repr(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    timings: dict[str, float] = {}
    nodes: dict[str, str] = {"head": cluster.head_node.node_id, "n2": n2.node_id}
    try:
        timings["first_reports_s"] = _wait("2 workers report", url, lambda g: g and g[0][1] >= 4)
        n3 = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.3")
        nodes["n3"] = n3.node_id
        timings["grow_s"] = _wait("3 report", url, lambda g: any(s == 3 and r for s, r, _ in g))
        _drain(cluster.address, n3.node_id, in_s=4.0)
        timings["preempted_s"] = _wait(
            "2 workers without n3 report",
            url,
            lambda g: len(g) > 2 and g[-1][0] == 2 and g[-1][1] >= 2 and n3.node_id not in g[-1][2],
        )
        before = len(_groups(url, "elastic"))
        cluster.remove_node(n2)
        timings["shrunk_s"] = _wait(
            "1 worker reports after n2 left",
            url,
            lambda g: len(g) > before and g[-1][0] == 1 and g[-1][1] >= 2,
        )
        stop.touch()
        thread.join(120)
        started = time.monotonic()
        try:
            start_run(
                url,
                FN,
                run_id="short",
                scaling_config=ScalingConfig(
                    num_workers=4, min_workers=3, min_workers_timeout_s=3.0
                ),
                train_fn_config={"stop": str(stop)},
                **FAST,
            )
        except Exception as error:  # noqa: BLE001 - reported to the test
            result["short_error"] = repr(error)
        timings["short_s"] = time.monotonic() - started
        result.update(nodes=nodes, timings=timings, left_in_ray=wait_left_in_ray())
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
        result["driver_error"] = f"{type(error).__name__}: {error}"
    finally:
        out.write_text(json.dumps(result))
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
