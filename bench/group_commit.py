"""W6: threads of one process appending single events at once, with and without group commit.

What a store object shared by many threads sees (an executor polling many groups, a controller
host serving many runs, the fleet benchmark's simulated workers): ``--threads`` threads, each
appending ``--appends`` single events to a stream of its own, all starting together. Sides, in
the same process, the order rotating round by round:

- **wgstore**: the store as shipped; appends that wait for the writer are written together
  (group commit, ``wgstore.events.append_queue``);
- **wgstore-alone**: the same store object with the queue's group limit set to 1, so each
  append is its own transaction (wgstore before group commit, same code otherwise);
- **eventsourcing**: the library's application recorder (the ``bench`` extra), shared by the
  threads, one ``insert_events`` per event.

Prints events/s per side, the ratio of wgstore to each, and each side's append latency
(p50 / p99 ms). Numbers, not pass/fail.

    .venv/bin/python bench/group_commit.py                       # both backends
    .venv/bin/python bench/group_commit.py --backend sqlite --threads 16 --json
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

from fleet import _pct
from sides import Side, open_side
from store import log, machine, prepared

SIDES = ("wgstore", "wgstore-alone", "eventsourcing")


def _group_limit(side: Side, limit: int) -> None:
    side.store.recorder._appends.limit = limit  # type: ignore[attr-defined]  # the A/B switch


def one_run(side: Side, threads: int, appends: int, tag: str) -> tuple[float, list[float]]:
    """``threads`` threads append ``appends`` single events each; events/s and latencies (ms)."""
    items = side.items(range(1))
    start = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        timed = latencies[index]
        try:
            start.wait()
            for _ in range(appends):
                began = time.perf_counter()
                side.append(f"{tag}-{index}", items)
                timed.append((time.perf_counter() - began) * 1000)
        except BaseException as error:  # noqa: BLE001 - raised below, in the bench's thread
            errors.append(error)

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return threads * appends / elapsed, [ms for timed in latencies for ms in timed]


def run_backend(backend: str, threads: int, appends: int, repeats: int) -> dict[str, Any]:
    """Every side ``repeats`` times on fresh tables of ``backend``, the order rotating."""
    names = ["wgstore", "eventsourcing"]
    with tempfile.TemporaryDirectory() as workdir, prepared(backend, names, Path(workdir)) as t:
        store = open_side("wgstore", t)
        sides: dict[str, Side] = {
            "wgstore": store,
            "wgstore-alone": store,
            "eventsourcing": open_side("eventsourcing", t),
        }
        rates: dict[str, list[float]] = {name: [] for name in SIDES}
        latencies: dict[str, list[float]] = {name: [] for name in SIDES}
        loads = []
        try:
            for name, side in sides.items():  # warm up: connections, statements
                _group_limit(store, 1 if name == "wgstore-alone" else 64)
                one_run(side, threads, max(1, appends // 10), f"warm-{name}")
            for rep in range(repeats):
                loads.append(os.getloadavg()[0])
                order = list(SIDES[rep % 3 :] + SIDES[: rep % 3])
                for name in order:
                    _group_limit(store, 1 if name == "wgstore-alone" else 64)
                    rate, times = one_run(sides[name], threads, appends, f"{name}-{rep}")
                    rates[name].append(rate)
                    latencies[name] += times
                log(
                    f"  {backend} round {rep + 1}: "
                    + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in SIDES)
                )
        finally:
            _group_limit(store, 64)
            for side in {id(s): s for s in sides.values()}.values():
                side.close()
    result: dict[str, Any] = {
        "backend": backend,
        "threads": threads,
        "appends_per_thread": appends,
        "rounds": repeats,
        "load": [round(x, 2) for x in loads],
        "events_per_s": {n: round(statistics.median(r)) for n, r in rates.items()},
        "latency_ms": {
            n: {"p50": round(_pct(v, 0.5) or 0, 2), "p99": round(_pct(v, 0.99) or 0, 2)}
            for n, v in latencies.items()
        },
    }
    result["ratio"] = {  # medians of the per-round ratios
        ref: round(
            statistics.median(a / b for a, b in zip(rates["wgstore"], rates[ref], strict=True)), 2
        )
        for ref in ("wgstore-alone", "eventsourcing")
    }
    return result


def main(argv: list[str] | None = None) -> int:
    """Run W6 on the backends asked for; print a summary (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--appends", type=int, default=300, help="appends per thread a round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = [run_backend(b, args.threads, args.appends, args.repeats) for b in backends]
    report = {"machine": machine(), "results": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for result in results:
        print(
            f"{result['backend']} W6 {result['threads']} threads (load {result['load']}): "
            + ", ".join(
                f"{n} {result['events_per_s'][n]:,}/s "
                f"(p50 {result['latency_ms'][n]['p50']} / p99 {result['latency_ms'][n]['p99']} ms)"
                for n in SIDES
            )
            + f"; wgstore / alone {result['ratio']['wgstore-alone']}, "
            f"/ eventsourcing {result['ratio']['eventsourcing']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
