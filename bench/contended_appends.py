"""SQLite appends from several processes at once: how long an append waits for the write lock
with the store's own short waits (0.2 ms doubling to 4 ms) beside SQLite's busy handler (1, 2,
5, 10, 15, 20, 25 ... 100 ms), the reference, in the same run.

Each of ``--procs`` processes opens the store on one file and appends ``--appends`` single
events to a stream of its own, pausing a random 0-``--gap-ms`` between appends, and times each
append (``time.perf_counter``). The sides alternate round by round on fresh files; the reference
side is the same code with the writer's busy timeout left to SQLite (``_prepare_writer`` and
``_begin_immediate`` patched back to a plain ``BEGIN IMMEDIATE`` in its processes).

    .venv/bin/python bench/contended_appends.py                 # 4 processes, 3 rounds
    .venv/bin/python bench/contended_appends.py --procs 8 --rounds 5 --json

Numbers, not pass/fail: latencies in ms (p50, p90, p99, max) per side, medians over the rounds.
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

SIDES = ("wgstore", "sqlite-busy-handler")


def _use_sqlite_busy_handler() -> None:
    """The reference: the writer waits in SQLite's busy handler, as before the store's own."""
    import sqlite3

    from wgstore.events.sqlite_recorder import SqliteRecorder

    def begin(self: Any, cursor: sqlite3.Cursor) -> None:
        cursor.execute("BEGIN IMMEDIATE")

    SqliteRecorder._prepare_writer = lambda self, connection: None  # type: ignore[method-assign]
    SqliteRecorder._begin_immediate = begin  # type: ignore[method-assign]


def _appender(url: str, side: str, appends: int, gap_s: float, seed: int, out: Any) -> None:
    from wgstore.events import EventStore, event_type

    if side == "sqlite-busy-handler":
        _use_sqlite_busy_handler()

    @event_type("ContendedProbe", version=1)
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Probe:
        n: int

    rng = random.Random(seed)
    latencies = []
    with EventStore.open(url) as store:
        for n in range(appends):
            time.sleep(rng.uniform(0, gap_s))  # the load's shape: a pause between appends
            started = time.perf_counter()
            store.append(f"proc-{seed}", [Probe(n=n)])
            latencies.append((time.perf_counter() - started) * 1000)
    out.put(latencies)


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)
    return {
        "p50": ordered[n // 2],
        "p90": ordered[int(n * 0.9)],
        "p99": ordered[min(int(n * 0.99), n - 1)],
        "max": ordered[-1],
    }


def one_round(side: str, procs: int, appends: int, gap_s: float) -> dict[str, float]:
    """Every process's appends on a fresh file; the latencies' percentiles in ms."""
    from wgstore.events import EventStore

    url = f"sqlite:///{tempfile.mkdtemp(prefix='wgs-contended-')}/wgstore.db"
    EventStore.open(url).close()  # migrated before the processes race
    out: Any = mp.get_context("spawn").Queue()
    workers = [
        mp.get_context("spawn").Process(
            target=_appender, args=(url, side, appends, gap_s, seed, out)
        )
        for seed in range(procs)
    ]
    for worker in workers:
        worker.start()
    latencies: list[float] = []
    for _ in workers:
        latencies.extend(out.get(timeout=600))
    for worker in workers:
        worker.join()
    return _percentiles(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--appends", type=int, default=300, help="per process and round")
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for index in range(args.rounds):
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        for side in order:
            rounds[side].append(one_round(side, args.procs, args.appends, args.gap_ms / 1000))
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
            print(f"{side:>20}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in numbers.items()))


if __name__ == "__main__":
    main()
