"""SQLite appends from several processes at once: how long an append waits for another's write
lock, and how many appends a second they make, with each of the store's two ways of waiting
(``lock_wait`` in the URL, docs in ``wgstore.events.engine.SQLITE_LOCK_WAITS``): ``wgstore``,
SQLite's busy handler (the default: it sleeps 1, 2, 5, 10, 15, 20, 25 ... 100 ms between tries),
and ``short-waits`` (``lock_wait=short``: tries after 0.2 ms doubling to 1 ms, at most the busy
timeout), in the same run.

Each of ``--procs`` processes opens the store on one file and appends ``--appends`` single
events to a stream of its own, all starting together, pausing a random 0-``--gap-ms`` between
appends (0: saturated, W5's writers), and times each append (``time.perf_counter``). The sides
alternate round by round on fresh files.

    .venv/bin/python bench/contended_appends.py                 # 4 processes, 3 rounds
    .venv/bin/python bench/contended_appends.py --procs 8 --rounds 5 --json
    .venv/bin/python bench/contended_appends.py --gap-ms 0 --appends 1000 --rounds 7 --sync NORMAL

Numbers, not pass/fail: latencies in ms (p50, p90, p99, max) and appends a second per side,
medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

SIDES = ("wgstore", "short-waits")
LOCK_WAIT = {"wgstore": "sqlite", "short-waits": "short"}


def _appender(
    url: str, appends: int, gap_s: float, seed: int, ready: Any, start: Any, out: Any
) -> None:
    from wgstore.events import EventStore, event_type

    @event_type("ContendedProbe", version=1)
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Probe:
        n: int

    rng = random.Random(seed)
    latencies = []
    with EventStore.open(url) as store:
        ready.put(seed)
        start.wait()
        began = time.perf_counter()
        for n in range(appends):
            time.sleep(rng.uniform(0, gap_s))  # the load's shape: a pause between appends
            started = time.perf_counter()
            store.append(f"proc-{seed}", [Probe(n=n)])
            latencies.append((time.perf_counter() - started) * 1000)
        ended = time.perf_counter()
    out.put((latencies, began, ended))


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)
    return {
        "p50": ordered[n // 2],
        "p90": ordered[int(n * 0.9)],
        "p99": ordered[min(int(n * 0.99), n - 1)],
        "max": ordered[-1],
    }


def one_round(side: str, procs: int, appends: int, gap_s: float, sync: str) -> dict[str, float]:
    """Every process's appends on a fresh file, started together: the latencies' percentiles
    in ms, and the appends a second of all of them (from the first start to the last end; the
    clock is the system's monotonic one, the same in every process)."""
    from wgstore.events import EventStore

    folder = tempfile.mkdtemp(prefix="wgs-contended-")
    url = f"sqlite:///{folder}/wgstore.db?synchronous={sync}&lock_wait={LOCK_WAIT[side]}"
    EventStore.open(url).close()  # migrated before the processes race
    context = mp.get_context("spawn")
    ready, out, start = context.Queue(), context.Queue(), context.Event()
    workers = [
        context.Process(target=_appender, args=(url, appends, gap_s, seed, ready, start, out))
        for seed in range(procs)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=600)  # every process has its store open
    start.set()
    latencies: list[float] = []
    spans: list[tuple[float, float]] = []
    for _ in workers:
        times, began, ended = out.get(timeout=600)
        latencies.extend(times)
        spans.append((began, ended))
    for worker in workers:
        worker.join()
    wall = max(end for _, end in spans) - min(begin for begin, _ in spans)
    return {**_percentiles(latencies), "appends_per_s": len(latencies) / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--appends", type=int, default=300, help="per process and round")
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sync", default="FULL", choices=("FULL", "NORMAL"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for index in range(args.rounds):
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        for side in order:
            rounds[side].append(
                one_round(side, args.procs, args.appends, args.gap_ms / 1000, args.sync)
            )
            print(f"round {index + 1}/{args.rounds} {side}: {rounds[side][-1]}", flush=True)
    result = {
        "config": vars(args),
        "load": os.getloadavg(),
        "sides": {
            side: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
            for side, rs in rounds.items()
        },
    }
    if args.json:
        print(json.dumps(result))
    else:
        for side, numbers in result["sides"].items():
            print(f"{side:>20}: " + ", ".join(f"{k} {v:.2f}" for k, v in numbers.items()))


if __name__ == "__main__":
    main()
