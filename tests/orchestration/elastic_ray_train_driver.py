"""An elastic Ray Train run on a growing and shrinking cluster; ``test_ray_train_elastic.py``
runs this in a subprocess.

``python -m tests.orchestration.elastic_ray_train_driver SQLITE_URL PG_URL OUT_JSON WORK_DIR``
starts a ``ray.cluster_utils.Cluster`` of two nodes (1 CPU each), runs a ``DataParallelTrainer``
with ``ScalingConfig(num_workers=(1, 3))`` recorded by two ``RecordingCallback``s at once, one
into each store (one run, both backends), and changes the cluster under it:

1. once the first group (2 workers) reported, a third node joins: Ray grows the group to 3;
2. once the 3-worker group reported, the second node is removed: its worker dies, the failure
   policy retries, and Ray starts again at what fits (after a start that Ray's stale
   reservation made time out, under the same attempt id);
3. once a 2-worker group reported, the train function is told to stop.

It cannot share the pytest session's local Ray (one Ray per process), hence the subprocess.
``OUT_JSON`` gets Ray's state actor's ``TrainRun`` and ``TrainRunAttempt`` of the run (what the
test compares the logs with), the node ids, and how long each step took.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

STEP_S = 0.3


def train_fn(config: dict[str, Any]) -> None:
    """Reports every ``STEP_S`` with a checkpoint from rank 0, from the latest checkpoint on,
    until the stop file exists and this group reported twice."""
    import ray.train

    context = ray.train.get_context()
    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            step = json.loads(Path(folder, "step.json").read_text())["step"] + 1
    reports = 0
    while not (Path(config["stop_file"]).exists() and reports >= 2):
        time.sleep(STEP_S)
        metrics = {"step": step, "world_size": context.get_world_size()}
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step.json").write_text(json.dumps({"step": step}))
            saved = ray.train.Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=saved if context.get_world_rank() == 0 else None)
        step += 1
        reports += 1


def _groups_reporting(url: str) -> list[tuple[int, int]]:
    """(size, reports) of each group of the run recorded in ``url``, in order."""
    from wgstore.events import EventStore
    from wgstore.events.streams import group_stream
    from wgstore.projections.run_state import project_run
    from wgstore.projections.state import project_worker_group

    with EventStore.open(url) as store:
        runs = store.streams("run-")
        if not runs:
            return []
        run = project_run(store.read_stream(runs[0][0]))
        out = []
        for group_id in run.groups:
            records = list(store.read_stream(group_stream(group_id)))
            if records:
                group = project_worker_group(records)
                out.append((group.context.num_workers, sum(group.report_counts.values())))
        return out


def _wait(what: str, url: str, ok: Any, deadline: float) -> float:
    """Seconds until ``ok`` holds of the groups recorded in ``url``; TimeoutError at ``deadline``."""
    started = time.monotonic()
    while time.monotonic() < deadline:
        if ok(_groups_reporting(url)):
            return time.monotonic() - started
        time.sleep(0.2)
    raise TimeoutError(f"{what}: {_groups_reporting(url)}")


def main() -> None:
    sqlite_url, pg_url, out_json, work = sys.argv[1:5]
    # what is left of the test's budget for the driver (840 s) once the steps below are done,
    # less a minute to read Ray's state and write OUT_JSON
    deadline = time.monotonic() + 780
    import cloudpickle
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2._internal.state.state_actor import get_or_create_state_actor
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from wgstore.orchestration.ray_train import RecordingCallback

    os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] = "1"
    os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = "5"
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    n2 = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.2")
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    stop_file = Path(work, "stop")
    trainer = DataParallelTrainer(
        train_fn,
        train_loop_config={"stop_file": str(stop_file)},
        scaling_config=ScalingConfig(
            num_workers=(1, 3), resources_per_worker={"CPU": 1}, elastic_resize_monitor_interval_s=1
        ),
        run_config=RunConfig(
            name="elastic",
            storage_path=str(Path(work, "storage")),
            failure_config=FailureConfig(max_failures=2),
            callbacks=[RecordingCallback(sqlite_url), RecordingCallback(pg_url)],
        ),
    )
    result: dict[str, Any] = {}

    def fit() -> None:
        try:
            result["error"] = str(trainer.fit().error or "")
        except Exception as error:  # noqa: BLE001 - reported to the test
            result["error"] = repr(error)

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    timings = {
        "first_reports": _wait(
            "2 workers report", sqlite_url, lambda g: g and g[0][1] >= 2, deadline
        )
    }
    n3 = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.3")
    timings["grown"] = _wait(
        "3 workers report", sqlite_url, lambda g: any(s == 3 and r for s, r in g), deadline
    )
    cluster.remove_node(n2)
    timings["shrunk"] = _wait(
        "2 workers report after the node left",
        sqlite_url,
        lambda g: len(g) > 2 and g[-1][0] == 2 and g[-1][1] >= 2,
        deadline,
    )
    stop_file.touch()
    stopped = time.monotonic()
    thread.join(max(30.0, deadline - time.monotonic()))  # quiet: seconds; at load 10: minutes
    timings["stopped"] = time.monotonic() - stopped
    actor = get_or_create_state_actor()
    runs = {k: v.model_dump(mode="json") for k, v in ray.get(actor.get_train_runs.remote()).items()}
    attempts = {
        run: {a: v.model_dump(mode="json") for a, v in by_attempt.items()}
        for run, by_attempt in ray.get(actor.get_train_run_attempts.remote()).items()
    }
    Path(out_json).write_text(
        json.dumps(
            {
                "ray_runs": runs,
                "ray_attempts": attempts,
                "fit_error": result.get("error", "fit did not return"),
                "nodes": {"n2": n2.node_id, "n3": n3.node_id},
                "timings": timings,
            }
        )
    )
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
