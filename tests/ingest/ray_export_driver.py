"""Real Ray Train runs on a 3-node cluster with Ray's export events on, for ``wgstore ingest``.

``python -m tests.ingest.ray_export_driver OUT_DIR [CALLBACK_URL]`` starts a
``ray.cluster_utils.Cluster`` (the head and two nodes on their own loopback IPs, 1 CPU each)
with ``RAY_enable_export_api_write=1`` and ``RAY_TRAIN_ENABLE_STATE_TRACKING=1``, and runs:

1. ``node-lost``: 2 workers of 0.5 CPU, ``SPREAD``, ``max_failures=1``, no callback; once
   attempt 1 runs, the non-head node of one of its workers is removed (a node's death ends the
   attempt), and the run finishes on the nodes left;
2. ``recorded`` (only with ``CALLBACK_URL``): 2 workers with wgstore's ``RecordingCallback``
   writing to ``CALLBACK_URL``, to its end, so one run is in the store twice over.

``OUT_DIR`` gets the session's ``logs/export_events`` folder as Ray left it, and
``ray_state.json``: what Ray's state actor holds (``TrainRun``/``TrainRunAttempt`` as
``model_dump(mode="json")``), the cluster's node ids and the removed node. The test suite
(``tests/ingest/test_ray_export_cluster.py``) runs it in a subprocess (one Ray per process);
``tests/ingest/fixtures/`` holds the files of one run of it, for the tests that need no Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

ADDED = {"n2": "127.0.0.2", "n3": "127.0.0.3"}
EXPORT_ENV = {"RAY_enable_export_api_write": "1", "RAY_TRAIN_ENABLE_STATE_TRACKING": "1"}


def train_func(config: dict[str, Any]) -> None:
    """Report ``steps`` times; without a checkpoint (attempt 1) wait at step 1 for ``release``."""
    import tempfile

    import ray.train

    release = Path(config["release"])
    resumed = ray.train.get_checkpoint() is not None
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "step").write_text(str(step))
            checkpoint = ray.train.Checkpoint.from_directory(directory) if step == 0 else None
            ray.train.report({"step": step, "loss": 1.0 / (step + 1)}, checkpoint=checkpoint)
        if step == 1 and not resumed:
            deadline = time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.05)


def state_actor_records() -> dict[str, Any]:
    """Ray's state actor's runs and attempts, as JSON."""
    import ray
    from ray.train.v2._internal.state.state_actor import get_or_create_state_actor

    actor = get_or_create_state_actor()
    runs = ray.get(actor.get_train_runs.remote())
    attempts = ray.get(actor.get_train_run_attempts.remote())
    return {
        "runs": {k: v.model_dump(mode="json") for k, v in runs.items()},
        "attempts": {
            run: {a: v.model_dump(mode="json") for a, v in by_attempt.items()}
            for run, by_attempt in attempts.items()
        },
    }


def remove_a_worker_node(
    cluster: Any, nodes: dict[str, Any], release: Path, found: dict[str, Any]
) -> None:
    """Once ``node-lost``'s first attempt runs, remove a non-head node of one of its workers."""
    by_id = {node.node_id: name for name, node in nodes.items()}
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            state = state_actor_records()
            # the run RUNNING too: Ray marks the attempt RUNNING before the train function is
            # launched on its workers, and a worker lost then ends the run without a retry
            running = [
                a
                for run_id, by_attempt in state["attempts"].items()
                if state["runs"].get(run_id, {}).get("name") == "node-lost"
                and state["runs"][run_id]["status"] == "RUNNING"
                for a in by_attempt.values()
                if a["status"] == "RUNNING" and a["workers"]
            ]
            victims = [
                w
                for a in running
                for w in a["workers"]
                if by_id.get(w["node_id"]) not in (None, "head")
            ]
            if victims:
                name = by_id[victims[0]["node_id"]]
                found.update(node_id=victims[0]["node_id"], node=name)
                cluster.remove_node(nodes[name])
                return
            time.sleep(0.1)
        found["error"] = "node-lost's first attempt did not run on a non-head node within 120 s"
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
        found["error"] = f"{type(error).__name__}: {error}"
    finally:
        release.touch()


def trainer(
    name: str, storage: Path, release: Path, max_failures: int, callbacks: list[Any]
) -> Any:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    return DataParallelTrainer(
        train_func,
        train_loop_config={"steps": 4, "release": str(release)},
        scaling_config=ScalingConfig(
            num_workers=2, resources_per_worker={"CPU": 0.5}, placement_strategy="SPREAD"
        ),
        run_config=RunConfig(
            name=name,
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=max_failures),
            callbacks=callbacks,
        ),
    )


def main(out: Path, callback_url: str | None) -> None:
    os.environ.update(EXPORT_ENV)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    nodes = {"head": cluster.head_node}
    for name, ip in ADDED.items():
        nodes[name] = cluster.add_node(num_cpus=1, node_ip_address=ip)
    ray.init(address=cluster.address)
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    try:
        release = work / "released"
        removed: dict[str, Any] = {}
        remover = threading.Thread(
            target=remove_a_worker_node, args=(cluster, nodes, release, removed)
        )
        remover.start()
        trainer("node-lost", work / "storage", release, 1, []).fit()
        remover.join(timeout=60)
        if callback_url:
            from wgstore.orchestration.ray_train import RecordingCallback

            trainer(
                "recorded", work / "storage", release, 0, [RecordingCallback(callback_url)]
            ).fit()
        state = state_actor_records()
        session = Path(ray._private.worker._global_node.get_session_dir_path())
    finally:
        ray.shutdown()
        cluster.shutdown()
    shutil.copytree(session / "logs" / "export_events", out / "export_events", dirs_exist_ok=True)
    result = {
        **state,
        "nodes": {name: node.node_id for name, node in nodes.items()},
        "removed": removed,
    }
    (out / "ray_state.json").write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
