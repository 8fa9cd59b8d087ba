"""From a lost driver to training again: ``wgstore supervise`` beside Ray re-running the script.

One local Ray for the whole bench. Each round, on each side, a driver process fits a 2-worker
``DataParallelTrainer`` that checkpoints every step (0.3 s a step) and writes ``rank step time``
for every step it runs; once 3 steps are done the driver is SIGKILLed (Ray ends its controller).

- **Ray alone** (the reference): the same script is started again at once, with the same name
  and storage path; Ray restores its checkpoint manager from storage. Measured: from the re-run's
  start to the first step it trains.
- **wgstore**: the run was recorded (``RecordingCallback(lease_s=--lease-s)``); a supervisor
  (``supervise``, one pass a second) in this process sees the run orphaned once the lease has
  lapsed, takes it and starts ``wgstore resume`` as a process of its own, which rebuilds the
  trainer from the log. Measured: **detection** (kill -> orphaned: the lease), **decision**
  (orphaned -> the resume process started), **start** (-> the new Ray Train controller's
  ``ControllerStarted``, Ray's own time of the hook: process start, imports, the trainer rebuilt
  from the log, Ray's controller up), **restore** (-> the first step trained: workers, checkpoint
  restored). "After detection" is decision + start + restore; the goal is <= 1.5 x Ray alone.

Numbers, not pass/fail; run it on a quiet machine and say the load (printed).

    .venv/bin/python bench/resume.py                       # SQLite, lease 30 s (the default)
    .venv/bin/python bench/resume.py --lease-s 10 --rounds 3 --url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STEP_S = 0.3
DRIVER = """
import json, os, sys, tempfile, time
import cloudpickle, ray

def train_loop(config):
    import ray.train
    rank = ray.train.get_context().get_world_rank()
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as path, open(os.path.join(path, f"s{rank}.json")) as f:
            start = json.load(f)["step"] + 1
    for step in range(start, 10_000):
        time.sleep(config["step_s"])
        with open(config["steps_file"], "a") as f:
            f.write(f"{rank} {step} {time.time()}\\n")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"s{rank}.json"), "w") as f:  # a file a rank: one shared folder
                json.dump({"step": step}, f)
            ray.train.report({"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d))

address, url, storage, name, steps_file, lease_s = sys.argv[1:7]
ray.init(address=address, log_to_driver=False)
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
callbacks = []
if url != "-":
    from wgstore.orchestration.ray_train import RecordingCallback
    callbacks = [RecordingCallback(url, hold_s=0, lease_s=float(lease_s))]
DataParallelTrainer(
    train_loop,
    train_loop_config={"step_s": %(step_s)s, "steps_file": steps_file},
    scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
    run_config=RunConfig(name=name, storage_path=storage, callbacks=callbacks),
).fit()
"""


def _steps(path: Path) -> list[tuple[int, int, float]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((int(parts[0]), int(parts[1]), float(parts[2])))
    return rows


def _until(condition, timeout_s: float = 600.0, every_s: float = 0.05) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long")
        time.sleep(every_s)
    return time.time()


def _driver(script: Path, address: str, url: str, storage: Path, name: str, steps: Path,
            lease_s: float) -> subprocess.Popen[bytes]:  # fmt: skip
    return subprocess.Popen(
        [sys.executable, str(script), address, url, str(storage), name, str(steps), str(lease_s)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _kill_after_three_steps(driver: subprocess.Popen[bytes], steps: Path) -> float:
    _until(lambda: len({s for _r, s, _t in _steps(steps)}) >= 3 or driver.poll() is not None)
    if driver.poll() is not None:
        raise RuntimeError("the driver ended before it trained three steps")
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    return time.time()


def _cluster_free() -> bool:
    """True once the killed driver's actors are gone (its CPUs back), as after a lease."""
    import ray

    return ray.available_resources().get("CPU", 0) >= ray.cluster_resources().get("CPU", 0)


def ray_alone(script: Path, address: str, work: Path, lease_s: float) -> float:
    """Seconds from re-running the script (once the killed run's actors are gone, as they are
    by the time a lease lapses) to its first trained step."""
    steps = work / "ray-steps.txt"
    _kill_after_three_steps(
        _driver(script, address, "-", work / "storage", "ray-alone", steps, lease_s), steps
    )
    _until(_cluster_free, every_s=0.2)
    before = len(_steps(steps))
    rerun_at = time.time()
    again = _driver(script, address, "-", work / "storage", "ray-alone", steps, lease_s)
    trained = _until(lambda: len(_steps(steps)) > before)
    again.send_signal(signal.SIGKILL)
    again.wait()
    return trained - rerun_at


def with_wgstore(
    script: Path, address: str, work: Path, url: str, lease_s: float
) -> dict[str, float]:
    """The phases of a supervisor's resume, in seconds."""
    from wgstore.events import EventStore
    from wgstore.orchestration.orphans.gc import orphaned_runs
    from wgstore.orchestration.orphans.supervise import start_resume, supervise

    steps = work / "wg-steps.txt"
    killed_at = _kill_after_three_steps(
        _driver(script, address, url, work / "storage", "wgstore-resume", steps, lease_s), steps
    )
    before = len(_steps(steps))
    spawned: list[tuple[float, subprocess.Popen[bytes]]] = []
    with EventStore.open(url) as store:
        detected_at = _until(lambda: bool(orphaned_runs(store)), every_s=0.1)
        stop = threading.Event()

        def spawn(url: str, run_id: str, holder: str, epoch: int) -> None:
            spawned.append((time.time(), start_resume(url, run_id, holder, epoch)))
            stop.set()

        supervise(store, stop=stop, interval_s=1.0, spawn=spawn)
        decided_at, resumer = spawned[0]
        trained_at = _until(lambda: len(_steps(steps)) > before)
        ((stream, _),) = store.streams("run-")

        def resumed() -> list[Any]:  # its writer holds events until training starts
            return [
                r
                for r in store.read_stream(stream)
                if r.type == "ControllerStarted" and r.event.resumed
            ]

        _until(lambda: bool(resumed()), every_s=0.2)
        controller_at = resumed()[-1].metadata["ray_time_ns"] / 1e9
    resumer.send_signal(signal.SIGKILL)
    resumer.wait()
    return {
        "detection": detected_at - killed_at,
        "decision": decided_at - detected_at,
        "start": controller_at - decided_at,
        "restore": trained_at - controller_at,
        "after detection": trained_at - detected_at,
    }


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="the store (default: a new SQLite file per round)")
    parser.add_argument("--lease-s", type=float, default=30.0, help="the recorder's lease")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    os.environ["RAY_ADDRESS"] = address
    load = os.getloadavg()
    ray_s: list[float] = []
    phases: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "driver.py"
        script.write_text(DRIVER % {"step_s": STEP_S})
        for n in range(args.rounds):
            work = Path(tmp) / f"round{n}"
            work.mkdir()
            url = args.url or f"sqlite:///{work / 'wgstore.db'}"
            ray_s.append(ray_alone(script, address, work, args.lease_s))
            for phase, seconds in with_wgstore(script, address, work, url, args.lease_s).items():
                phases.setdefault(phase, []).append(seconds)
            print(f"round {n + 1}: ray alone {ray_s[-1]:.1f} s; wgstore "
                  + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in phases.items()), flush=True)  # fmt: skip
    ray.shutdown()
    after = statistics.median(phases["after detection"])
    print(f"\nload {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; {args.rounds} rounds, medians:")
    print(f"  Ray re-running the script: {statistics.median(ray_s):.1f} s to the first step")
    for phase, values in phases.items():
        print(f"  wgstore {phase}: {statistics.median(values):.1f} s")
    print(f"  after detection / Ray alone: {after / statistics.median(ray_s):.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
