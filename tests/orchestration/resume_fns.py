"""A Ray Train loop and driver for the resume tests (test_ray_train_resume.py).

The loop checkpoints every step and appends ``<rank> <step>`` to a file for every step it runs,
so a test can tell which steps ran twice. The first attempt (no checkpoint yet) stops after its
report of step :data:`PAUSE_AT` and waits there: the test kills the driver while the run stands
at a known committed checkpoint, whatever the machine's speed (it never races the last steps). ``python -m tests.orchestration.resume_fns RAY_ADDRESS
STORE_URL STORAGE_PATH STEPS_FILE`` is the driver the test SIGKILLs mid-training; with
``RAY_ADDRESS`` ``local`` it starts a Ray cluster of its own, which dies with it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any

import cloudpickle

# The loop travels by value wherever this module is imported (the driver, a resume): Ray's
# workers need not import the tests package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

NAME = "resume-me"
STEPS = 8
PAUSE_AT = 3
PAUSE_LIMIT_S = 600.0  # a first attempt nobody killed goes on after this (never in a test)
LEASE_S = 10.0
"""The recorder's lease: the run shows as orphaned this long after its driver is killed. Long
enough that renewals (every third of it) never lapse on a loaded machine, when a lapse would
make the supervisor resume a live run."""


def train_loop(config: dict[str, Any]) -> None:
    """Checkpoint every step; resume from ``ray.train.get_checkpoint()``."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    start = 0
    state_file = f"state-rank{rank}.json"  # one file a rank: the ranks share one folder
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as path, open(os.path.join(path, state_file)) as f:
            start = json.load(f)["step"] + 1
    for step in range(start, int(config["steps"])):
        print(f"the train loop runs step {step} on rank {rank}", flush=True)  # shown by resume
        with open(config["steps_file"], "a") as f:
            f.write(f"{rank} {step}\n")
        time.sleep(float(config["step_s"]))
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, state_file), "w") as f:
                json.dump({"step": step}, f)
            ray.train.report(
                {"step": step}, checkpoint=ray.train.Checkpoint.from_directory(directory)
            )
        if checkpoint is None and step == int(config["pause_at"]):
            _pause(PAUSE_LIMIT_S)


def _pause(limit_s: float) -> None:
    """Wait here (the first attempt, at a committed checkpoint) for the test to kill the driver:
    nothing to wait for in this process, so one bounded sleep that the kill cuts short."""
    time.sleep(limit_s)


def make_trainer(url: str, storage: str, steps_file: str, **callback_options: Any) -> Any:
    """A 2-worker recorded DataParallelTrainer of :data:`STEPS` steps, 0.05 s each."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from wgstore.orchestration.ray_train import RecordingCallback

    return DataParallelTrainer(
        train_loop,
        train_loop_config={
            "steps": STEPS,
            "step_s": 0.05,
            "steps_file": steps_file,
            "pause_at": PAUSE_AT,
        },
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25}),
        run_config=RunConfig(
            name=NAME,
            storage_path=storage,
            callbacks=[RecordingCallback(url, **callback_options)],
        ),
    )


def main() -> None:
    """The driver: connect to the test session's Ray and fit until killed."""
    import ray

    address, url, storage, steps_file = sys.argv[1:5]
    if address == "local":  # a cluster of its own: it goes when this process is killed
        os.environ.pop("RAY_ADDRESS", None)
        for attempt in (1, 2, 3):  # as tests/conftest.py's ray_session does
            try:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                break
            except Exception as error:
                # Ray waits a fixed 30 s for its raylet to register; a loaded machine misses it
                if "timed out during startup" not in str(error) or attempt == 3:
                    raise
                ray.shutdown()
    else:
        ray.init(address=address, log_to_driver=False)
    print("fitting", flush=True)
    make_trainer(url, storage, steps_file, hold_s=0, lease_s=LEASE_S).fit()


if __name__ == "__main__":
    main()
