"""Elastic runs, measured beside Ray Train in the same process (issue 40).

One ``ray.cluster_utils.Cluster`` (a head and ``n2``, 1 CPU each; the driver on the head), used
for every trial:

1. **Time to grow**: a run of 1..3 workers (1 CPU each, looked at every ``--interval-s``)
   trains on the 2 nodes; once rank 0 reported ``--warm-steps`` steps at 2 workers, ``n3``
   joins; the time from the join to rank 0's first report at 3 workers is kept. The same train
   loop (a report every ``--step-s``; rank 0 appends ``time world_size`` to a file) under Ray
   Train's controller (``ScalingConfig(num_workers=(1, 3))``, ``elastic_resize_monitor_interval_s``
   the same) and under wgstore's (``ScalingConfig(num_workers=3, min_workers=1)``), alternately,
   ``--repeats`` of each; ``n3`` leaves after each trial. Goal: wgstore at most half of Ray's.
2. **Recording an elastic run**: the Ray Train run with two resizes (``n3``, then ``n4``,
   join after fixed step counts: 2 -> 3 -> 4 workers), with and without ``RecordingCallback``
   (its hooks timed, as bench/ray_train_overhead.py times them), alternately. Kept: the wall
   clock of ``fit()`` of each side (moved by Ray's resize timing, which waits for its
   AutoscalingCoordinator), and the controller's time in the recorder's hooks as a share of the
   run's wall clock (the recording's cost on the controller, not moved by Ray's timing).
   Goal: <= 2 % of the run's wall time.

    .venv/bin/python bench/elastic.py                  # 3 of each, SQLite
    .venv/bin/python bench/elastic.py --url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_train_probes import timed_recorder_class  # next to this file


def ray_loop(config: dict[str, Any]) -> None:
    """Ray Train's side: a report every ``step_s``; rank 0 logs ``time world_size``."""
    import ray.train

    context = ray.train.get_context()
    while not Path(config["stop"]).exists():
        time.sleep(config["step_s"])
        if context.get_world_rank() == 0:
            with open(config["log"], "a") as log:
                log.write(f"{time.time()} {context.get_world_size()}\n")
        ray.train.report({"world_size": context.get_world_size()})


def wgstore_loop(config: dict[str, Any]) -> None:
    """wgstore's side: the same loop with wgstore's ``report``."""
    from wgstore.orchestration import get_context, report

    context = get_context()
    while not Path(config["stop"]).exists():
        time.sleep(config["step_s"])
        if context.world_rank == 0:
            with open(config["log"], "a") as log:
                log.write(f"{time.time()} {context.world_size}\n")
        report({"world_size": context.world_size})


def _lines(log: Path) -> list[tuple[float, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        at, size = line.split()
        out.append((float(at), int(size)))
    return out


def _wait(what: str, check: Any, timeout_s: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise TimeoutError(what)


def grow_trial(side: str, cluster: Any, folder: Path, args: Any, url: str) -> float:
    """One trial: seconds from ``n3`` joining to rank 0's first report at 3 workers."""
    log, stop = folder / f"{side}.log", folder / f"{side}.stop"
    log.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    config = {"log": str(log), "stop": str(stop), "step_s": args.step_s}
    thread = threading.Thread(target=_run_side, args=(side, config, args, url), daemon=True)
    thread.start()
    _wait("2 workers", lambda: sum(1 for _, n in _lines(log) if n == 2) >= args.warm_steps)
    n3 = cluster.add_node(num_cpus=1)
    joined = time.time()
    grown = _wait("3 workers", lambda: next((t for t, n in _lines(log) if n == 3), None))
    stop.touch()
    thread.join(120)
    cluster.remove_node(n3)
    cluster.wait_for_nodes()
    return float(grown) - joined


def _run_side(side: str, config: dict[str, Any], args: Any, url: str) -> None:
    if side == "ray":
        from ray.train import RunConfig, ScalingConfig
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        DataParallelTrainer(
            ray_loop,
            train_loop_config=config,
            scaling_config=ScalingConfig(
                num_workers=(1, 3),
                resources_per_worker={"CPU": 1},
                elastic_resize_monitor_interval_s=args.interval_s,
            ),
            run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="wgstore-elastic-")),
        ).fit()
        return
    from wgstore.orchestration import ScalingConfig, start_run

    start_run(
        url,
        "elastic:wgstore_loop",  # bench/ on the workers' path (runtime_env below)
        scaling_config=ScalingConfig(
            num_workers=3,
            min_workers=1,
            resources_per_worker={"CPU": 1.0},
            elastic_resize_monitor_interval_s=args.interval_s,
        ),
        train_fn_config=config,
        poll_interval_s=0.2,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parent)}},
    )


def recording_trial(recorded: bool, cluster: Any, folder: Path, args: Any, url: str) -> Any:
    """One Ray Train run with two resizes (n3 joins, then n4): its wall clock and, recorded,
    the controller's seconds in the recorder's hooks."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    log, stop = folder / "rec.log", folder / "rec.stop"
    log.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    timings = folder / "hook-times.json"
    callbacks = [timed_recorder_class()(url, str(timings))] if recorded else []
    trainer = DataParallelTrainer(
        ray_loop,
        train_loop_config={"log": str(log), "stop": str(stop), "step_s": args.step_s},
        scaling_config=ScalingConfig(
            num_workers=(1, 4),
            resources_per_worker={"CPU": 1},
            elastic_resize_monitor_interval_s=args.interval_s,
        ),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(prefix="wgstore-elastic-"), callbacks=callbacks
        ),
    )
    added: list[Any] = []
    result: dict[str, float] = {}

    def fit() -> None:  # Ray's Cluster adds nodes from the main thread only: fit() runs here
        started = time.monotonic()
        trainer.fit()
        result["wall"] = time.monotonic() - started

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    for size in (2, 3):  # n3 joins once 2 report, n4 once 3 report
        _wait(f"{size} workers", lambda s=size: sum(1 for _, n in _lines(log) if n == s) >= 5)
        added.append(cluster.add_node(num_cpus=1))
    _wait("4 workers", lambda: sum(1 for _, n in _lines(log) if n == 4) >= args.warm_steps)
    stop.touch()
    thread.join(300)
    wall = result["wall"]
    for node in added:
        cluster.remove_node(node)
    cluster.wait_for_nodes()
    time.sleep(args.settle_s)  # a bench, not a test: Ray's 20 s tick has no event to wait for
    hooks = json.loads(timings.read_text())["hook_s"] if recorded else None
    return wall, hooks


def main() -> None:
    """Run both parts and print (or ``--json``) the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--step-s", type=float, default=0.2)
    parser.add_argument("--warm-steps", type=int, default=5)
    parser.add_argument("--url", default=None, help="the wgstore database (a temp SQLite file)")
    parser.add_argument("--skip-recording", action="store_true")
    parser.add_argument("--skip-grow", action="store_true")
    parser.add_argument(
        "--settle-s",
        type=float,
        default=25.0,
        help="wait after the nodes a recording trial added leave: Ray's AutoscalingCoordinator "
        "sees them gone only at its next 20 s tick, and a run started before that asks for them",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    folder = Path(tempfile.mkdtemp(prefix="wgstore-elastic-bench-"))
    url = args.url or f"sqlite:///{folder}/wgstore.db"
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    load: list[float] = []
    grow: dict[str, list[float]] = {"ray": [], "wgstore": []}
    for i in range(0 if args.skip_grow else args.repeats):
        for side in ("ray", "wgstore") if i % 2 == 0 else ("wgstore", "ray"):
            load.append(os.getloadavg()[0])
            grow[side].append(grow_trial(side, cluster, folder, args, url))
    rec: dict[str, list[float]] = {"plain": [], "recorded": [], "hook_s": []}
    if not args.skip_recording:
        for i in range(args.repeats):
            for recorded in (False, True) if i % 2 == 0 else (True, False):
                load.append(os.getloadavg()[0])
                wall, hooks = recording_trial(recorded, cluster, folder, args, url)
                rec["recorded" if recorded else "plain"].append(wall)
                if hooks is not None:
                    rec["hook_s"].append(hooks / wall * 100)
    ray.shutdown()
    cluster.shutdown()
    result = {
        "repeats": args.repeats,
        "interval_s": args.interval_s,
        "step_s": args.step_s,
        "backend": url.split(":", 1)[0],
        "grow_s": grow,
        "median_grow_s": {
            side: statistics.median(times) if times else None for side, times in grow.items()
        },
        "recording": rec,
        "load_1min": load,
    }
    if rec["plain"]:
        result["median_wall_s"] = {
            "plain": statistics.median(rec["plain"]),
            "recorded": statistics.median(rec["recorded"]),
        }
        result["median_hook_pct_of_wall"] = statistics.median(rec["hook_s"])
    if args.json:
        print(json.dumps(result))
        return
    ray_s, ours_s = result["median_grow_s"]["ray"], result["median_grow_s"]["wgstore"]
    if ray_s is not None and ours_s is not None:
        print(
            f"time from a node joining to training at the new size ({args.repeats} of each, "
            f"looked at every {args.interval_s} s, load {min(load):.1f}-{max(load):.1f}):\n"
            f"  Ray Train:  median {ray_s:.1f} s  {[round(t, 1) for t in grow['ray']]}\n"
            f"  wgstore:    median {ours_s:.1f} s  {[round(t, 1) for t in grow['wgstore']]}\n"
            f"  wgstore / Ray: {ours_s / ray_s:.2f} (goal <= 0.5)"
        )
    if rec["plain"]:
        print(
            f"an elastic Ray Train run with two resizes, recorded into {result['backend']}:\n"
            f"  fit() without the recorder: median {result['median_wall_s']['plain']:.1f} s "
            f"{[round(t, 1) for t in rec['plain']]}\n"
            f"  fit() with it:              median {result['median_wall_s']['recorded']:.1f} s "
            f"{[round(t, 1) for t in rec['recorded']]}\n"
            f"  the recorder's hooks: median {result['median_hook_pct_of_wall']:.2f} % of the "
            f"run's wall clock (goal <= 2 %)"
        )


if __name__ == "__main__":
    main()
