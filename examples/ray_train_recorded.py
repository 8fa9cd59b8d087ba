"""A real Ray Train v2 run recorded in wgstore by one callback (no torch needed).

``DataParallelTrainer`` fits ``y = 3x - 2`` by SGD on 2 workers, reporting metrics and a
checkpoint every step; ``RecordingCallback`` writes the run, its attempts, every poll and every
report into the wgstore log. Afterwards every wgstore tool reads it::

    python examples/ray_train_recorded.py --url sqlite:///ray-train.db
    wgstore --url sqlite:///ray-train.db groups
    wgstore --url sqlite:///ray-train.db report <group id> -o report.html

``--fail-once`` makes rank 1 raise once (before the first checkpoint) under
``FailureConfig(max_failures=1)``: the log then holds two attempts under one run, the failure
decision and the run's ending.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from typing import Any

TRUE_W, TRUE_B = 3.0, -2.0


def train_func(config: dict[str, Any]) -> dict[str, float]:
    """SGD on this rank's shard; ``ray.train.report`` metrics and a checkpoint every step."""
    import ray.train

    context = ray.train.get_context()
    rank = context.get_world_rank()
    steps = int(config.get("steps", 5))
    w, b, start = 0.0, 0.0, 0
    # Every rank writes its own file: Ray Train uploads each rank's checkpoint directory into
    # one shared folder, so two ranks writing the same file name would overwrite each other.
    state_file = f"state-rank{rank}.json"
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:  # a retry resumes from the latest checkpoint
        with checkpoint.as_directory() as path, open(os.path.join(path, state_file)) as f:
            state = json.load(f)
        w, b, start = state["w"], state["b"], state["step"] + 1
    rng = random.Random(1234 + rank)
    points = [(x, TRUE_W * x + TRUE_B) for x in (rng.uniform(-1, 1) for _ in range(64))]
    for step in range(start, steps):
        if config.get("fail_once") and checkpoint is None and rank == 1 and step == 1:
            raise RuntimeError("rank 1 fails once, on purpose")
        for x, y in points:
            error = (w * x + b) - y
            w -= 0.05 * error * x
            b -= 0.05 * error
        loss = sum(((w * x + b) - y) ** 2 for x, y in points) / len(points)
        metrics = {"step": step, "loss": loss, "w": w, "b": b}
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, state_file), "w") as f:
                json.dump({"w": w, "b": b, "step": step}, f)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))
    return {"w": w, "b": b}


def make_trainer(
    url: str,
    storage_path: str,
    *,
    steps: int = 5,
    fail_once: bool = False,
    name: str | None = None,
    **callback_options: Any,
) -> Any:
    """A 2-worker ``DataParallelTrainer`` (0.5 CPU each) whose run is recorded in ``url``."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from wgstore.orchestration.ray_train import RecordingCallback

    return DataParallelTrainer(
        train_func,
        train_loop_config={"steps": steps, "fail_once": fail_once},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=FailureConfig(max_failures=1 if fail_once else 0),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=[RecordingCallback(url, **callback_options)],
        ),
    )


def main() -> None:
    """Run the trainer once and print where its record is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="sqlite:///ray-train.db", help="the wgstore database")
    parser.add_argument("--storage", default=None, help="Ray Train's storage_path (a temp dir)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fail-once", action="store_true", help="rank 1 raises once")
    args = parser.parse_args()
    import ray

    url = args.url
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = "sqlite:///" + os.path.abspath(
            url[len("sqlite:///") :]
        )  # the controller's cwd differs
    if os.environ.get("RAY_ADDRESS"):  # a cluster of your own
        ray.init()
    else:  # a local Ray for this script only
        ray.init(address="local", num_cpus=2, include_dashboard=False)
    storage = args.storage or tempfile.mkdtemp(prefix="ray-train-")
    result = make_trainer(url, storage, steps=args.steps, fail_once=args.fail_once).fit()
    print(f"metrics: {result.metrics}")
    print(f"checkpoint: {result.checkpoint.path if result.checkpoint else None}")
    print(f"recorded in {url}: try `wgstore --url {url} groups`")
    ray.shutdown()


if __name__ == "__main__":
    main()
