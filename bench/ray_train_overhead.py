"""What recording a Ray Train run costs: the same run with and without ``RecordingCallback``.

A ``DataParallelTrainer`` with 2 workers (0.5 CPU each) whose train function calls
``ray.train.report`` ``--reports`` times (metrics only), run alternately without and with the
callback, ``--repeats`` times each. Prints the median wall-clock time of ``fit()`` of each side,
their difference, and the controller's time in the callback's hooks per report (µs; the hooks
that run once per run or attempt apart). The recorded side runs ``RecordingCallback`` with every
hook timed by a subclass made here (the callback itself times nothing); it writes the times to a
file when the controller finishes, and they are read beside the recording note of the run's end
event (``metadata["recording"]``: retries, outage, dropped events). Numbers, not pass/fail.

Two times per run: ``fit()``'s wall clock, and the time from ``fit()`` to the moment the
controller starts shutting the worker group down (a probe callback on both sides notes it).
The second leaves out Ray's own tail: stopping its placement-group cleaner waits for the
cleaner's next check, which comes once a second (``PlacementGroupCleaner``'s queue timeout), so
``fit()`` ends on a 1 s grid and its wall clock moves by up to a second between identical runs.

The database exists before each recorded run (``--fresh-db``: a new file per run, so the first
run's schema creation is counted too).

Ray Train polls the workers every ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` (2 s by default) and a
report waits for the next poll, so this sets it to ``--poll-s`` (0.05) before Ray starts: 200
reports then take seconds, not minutes, and the hooks run 20 times a second.

    .venv/bin/python bench/ray_train_overhead.py                   # 200 reports, 5 of each
    .venv/bin/python bench/ray_train_overhead.py --url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_train_probes import shutdown_probe_class, timed_recorder_class  # next to this file


def train_func(config: dict[str, Any]) -> None:
    """Report ``reports`` times, a few metrics each, as a training loop would."""
    import ray.train

    loss = 1.0
    for step in range(int(config["reports"])):
        loss *= 0.99
        ray.train.report({"step": step, "loss": loss, "lr": 0.01})


def run_once(
    reports: int, url: str | None, storage: str
) -> tuple[float, float, dict[str, Any] | None]:
    """One ``fit()``: its wall-clock seconds, the seconds until the worker group's shutdown
    began, and, when recorded, the recording note with the hooks' times."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from wgstore.events import EventStore

    probe_path = os.path.join(storage, "shutdown-at")
    timings_path = os.path.join(storage, "hook-times.json")
    callbacks: list[Any] = [shutdown_probe_class()(probe_path)]
    if url:
        callbacks.append(timed_recorder_class()(url, timings_path))
    trainer = DataParallelTrainer(
        train_func,
        train_loop_config={"reports": reports},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(storage_path=storage, callbacks=callbacks),
    )
    started = time.monotonic()
    trainer.fit()
    took = time.monotonic() - started
    with open(probe_path) as probe:
        to_shutdown = float(probe.read()) - started
    if not url:
        return took, to_shutdown, None
    with EventStore.open(url) as store:
        last = list(store.read_all())[-1]
    with open(timings_path) as timings:
        return took, to_shutdown, {**last.metadata["recording"], **json.load(timings)}


def main() -> None:
    """Alternate the two sides and print the medians (``--json`` for one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--poll-s", type=float, default=0.05)
    parser.add_argument("--url", default=None, help="the wgstore database (a temp SQLite file)")
    parser.add_argument(
        "--fresh-db", action="store_true", help="a new SQLite file per run (without --url)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = str(args.poll_s)
    import ray

    folder = tempfile.mkdtemp(prefix="wgstore-ray-train-bench-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    run_once(5, None, folder)  # warm up: worker processes, imports
    from wgstore.events import EventStore

    plain: list[float] = []
    recorded: list[float] = []
    plain_to_shutdown: list[float] = []
    recorded_to_shutdown: list[float] = []
    notes: list[dict[str, Any]] = []
    load: list[float] = []
    for i in range(args.repeats):
        url = args.url or f"sqlite:///{folder}/wgstore-{i if args.fresh_db else 0}.db"
        if not args.fresh_db:
            EventStore.open(url).close()  # the database exists, as for every run after a first
        load.append(os.getloadavg()[0])
        for side in ("plain", "recorded") if i % 2 == 0 else ("recorded", "plain"):
            took, to_shutdown, note = run_once(
                args.reports, url if side == "recorded" else None, folder
            )
            (recorded if side == "recorded" else plain).append(took)
            (recorded_to_shutdown if side == "recorded" else plain_to_shutdown).append(to_shutdown)
            if note is not None:
                notes.append(note)
    ray.shutdown()
    once = ("after_controller_start", "before_worker_group_start", "after_worker_group_start")

    def steady_s(note: dict[str, Any], key: str = "s") -> float:
        return sum(h[key] for name, h in note["hooks"].items() if name not in once)

    hook_us = [steady_s(n) * 1e6 / args.reports for n in notes]
    cpu_us = [steady_s(n, "cpu_s") * 1e6 / args.reports for n in notes]
    per_call_us = [
        steady_s(n) * 1e6 / max(1, sum(h["calls"] for k, h in n["hooks"].items() if k not in once))
        for n in notes
    ]
    once_ms = [sum(n["hooks"][k]["s"] for k in once if k in n["hooks"]) * 1e3 for n in notes]
    result = {
        "reports": args.reports,
        "repeats": args.repeats,
        "poll_s": args.poll_s,
        "backend": (args.url or "sqlite").split(":", 1)[0],
        "plain_s": plain,
        "recorded_s": recorded,
        "median_plain_s": statistics.median(plain),
        "median_recorded_s": statistics.median(recorded),
        "difference_pct": 100.0 * (statistics.median(recorded) / statistics.median(plain) - 1.0),
        "fresh_db": args.fresh_db,
        "plain_to_shutdown_s": plain_to_shutdown,
        "recorded_to_shutdown_s": recorded_to_shutdown,
        "median_plain_to_shutdown_s": statistics.median(plain_to_shutdown),
        "median_recorded_to_shutdown_s": statistics.median(recorded_to_shutdown),
        "to_shutdown_difference_pct": 100.0
        * (statistics.median(recorded_to_shutdown) / statistics.median(plain_to_shutdown) - 1.0),
        "hook_us_per_report": statistics.median(hook_us),
        "hook_us_per_call": statistics.median(per_call_us),
        "hook_cpu_us_per_report": statistics.median(cpu_us),
        "hook_calls": statistics.median(n["hook_calls"] for n in notes),
        "once_ms": statistics.median(once_ms),
        "hooks": notes[len(notes) // 2]["hooks"],
        "load_1min": load,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.reports} reports, 2 workers, polls every {args.poll_s} s, {args.repeats} of each "
        f"side (load {min(load):.1f}-{max(load):.1f}):\n"
        f"  without the callback: median {result['median_plain_s']:.2f} s  {plain}\n"
        f"  with the callback:    median {result['median_recorded_s']:.2f} s  {recorded}\n"
        f"  difference: {result['difference_pct']:+.1f} %\n"
        f"  until the group's shutdown began: without "
        f"{result['median_plain_to_shutdown_s']:.2f} s, with "
        f"{result['median_recorded_to_shutdown_s']:.2f} s, difference "
        f"{result['to_shutdown_difference_pct']:+.1f} %\n"
        f"  controller time in the callback's hooks: {result['hook_us_per_report']:.0f} µs per "
        f"report, of it {result['hook_cpu_us_per_report']:.0f} µs CPU "
        f"({result['hook_us_per_call']:.0f} µs per hook call, "
        f"{result['hook_calls']:.0f} calls per run); once per run (start, attempt start): "
        f"{result['once_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
