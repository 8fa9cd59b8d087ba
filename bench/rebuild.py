"""Benchmark ``rebuild_read_models`` (one transaction since issue 8) and what writers wait meanwhile.

Workload: ``--groups`` worker groups of 4 workers, each started, then ``--reports`` report steps
(4 reports and one poll each), then shut down; plus one event of an unregistered type per group
and a ``run-*`` stream per group (neither is read by the projector). Measured on SQLite (a file)
and PostgreSQL (a fresh schema):

- R1 rebuild: ``rebuild_read_models`` wall time, median of ``--repeat``; events/s.
- R2 writer wait: while a rebuild runs, another thread appends one event every 20 ms to its own
  stream; the longest single append (SQLite: the rebuild folds into a scratch file and holds the
  write lock only to swap the rows in; Postgres appends never wait for it).

Run ``python bench/rebuild.py --help``; ``--json`` prints the results as JSON.
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
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wgstore.events import EventRegistry, EventStore, event_type
from wgstore.events.run import RunCreated
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkersStarted,
)
from wgstore.projections import rebuild_read_models

PG_URL = os.environ.get("WGSTORE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
WORKERS = 4
OTHER_PROGRAM = EventRegistry()


@event_type("BenchNote", registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class BenchNote:
    text: str


# wgstore's streams take only wgstore's types (events/streams.py): the unknown event inside each
# group's stream stands for a type a newer wgstore wrote, which this reader does not know.
BenchNote.__module__ = "wgstore.events.newer"


def _workers(group_id: str) -> tuple[WorkerInfo, ...]:
    return tuple(
        WorkerInfo(
            world_rank=rank,
            local_rank=rank,
            node_rank=0,
            local_world_size=WORKERS,
            world_size=WORKERS,
            node_id="node-0",
            node_ip="10.0.0.1",
            pid=1000 + rank,
            actor_id=f"actor-{rank}",
            actor_name=f"w-{group_id}-{rank}",
        )
        for rank in range(WORKERS)
    )


def fill(url: str, groups: int, reports: int, unknown: bool = True) -> int:
    """Record the workload; return how many events the log holds."""
    with EventStore.open(url) as store, EventStore.open(url, registry=OTHER_PROGRAM) as other:
        for index in range(groups):
            group_id = uuid.uuid4().hex
            stream = f"worker-group-{group_id}"
            now = datetime.now(UTC)
            context = WorkerGroupContext(num_workers=WORKERS, train_fn="examples.train:train_fn")
            store.append(
                stream,
                [
                    WorkerGroupStartRequested(
                        group_id=group_id, run_id=f"r{index}", context=context
                    ),
                    PlacementGroupReserved(
                        placement_group_id="pg",
                        name="pg",
                        bundles=({"CPU": 1.0},) * WORKERS,
                        strategy="PACK",
                    ),
                    SyncActorStarted(actor_id="sync", name="sync"),
                    WorkersStarted(workers=_workers(group_id)),
                    WorkerGroupStarted(start_time=now, startup_s=0.1),
                    TrainingLaunched(train_fn="examples.train:train_fn"),
                ],
            )
            if unknown:
                other.append(stream, [BenchNote(text="pinned")])
            batch: list[Any] = []
            for step in range(reports):
                batch.extend(
                    WorkerReported(world_rank=rank, index=step, metrics={"loss": 1.0 / (step + 1)})
                    for rank in range(WORKERS)
                )
                batch.append(WorkerGroupPolled(poll_seq=step + 1, polled_at=now))
                if len(batch) >= 500:
                    store.append(stream, batch)
                    batch = []
            store.append(
                stream,
                [
                    *batch,
                    WorkerGroupShutdownRequested(reason="done"),
                    WorkerGroupShutDown(duration_s=0.1),
                ],
            )
            store.append(f"run-r{index}", [RunCreated(run_id=f"r{index}", name="bench")])
        return store.head()


def measure(url: str, repeat: int) -> dict[str, float]:
    """R1 and R2 on the store at ``url``."""
    times: list[float] = []
    waits: list[float] = []
    with EventStore.open(url) as store:
        head = store.head()
        for _ in range(repeat):
            stop = threading.Event()
            longest = [0.0]

            def writer(stop: threading.Event = stop, longest: list[float] = longest) -> None:
                with EventStore.open(url) as own:
                    while not stop.is_set():
                        started = time.perf_counter()
                        own.append("bench-writer", [WorkerGroupShutdownRequested(reason="tick")])
                        longest[0] = max(longest[0], time.perf_counter() - started)
                        stop.wait(0.02)

            thread = threading.Thread(target=writer)
            thread.start()
            time.sleep(0.1)  # let the writer start appending before the rebuild begins
            started = time.perf_counter()
            rebuild_read_models(store)
            times.append(time.perf_counter() - started)
            stop.set()
            thread.join()
            waits.append(longest[0])
    rebuild_s = statistics.median(times)
    return {
        "events": head,
        "rebuild_s": round(rebuild_s, 3),
        "events_per_s": round(head / rebuild_s),
        "longest_append_during_rebuild_s": round(statistics.median(waits), 3),
    }


def _postgres_schema() -> tuple[str, Any]:
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:10]}"
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}", drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--reports", type=int, default=200, help="report steps per group")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--no-unknown", action="store_true", help="leave out the unregistered events (older code)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{Path(folder) / 'bench.db'}?synchronous=normal"
            fill(url, args.groups, args.reports, unknown=not args.no_unknown)
            results["sqlite"] = measure(url, args.repeat)
    if args.backend in ("postgres", "both"):
        url, drop = _postgres_schema()
        try:
            fill(url, args.groups, args.reports, unknown=not args.no_unknown)
            results["postgres"] = measure(url, args.repeat)
        finally:
            drop()
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return
    for backend, numbers in results.items():
        print(
            f"{backend:9} {numbers['events']:>7} events  rebuild {numbers['rebuild_s']:.2f} s "
            f"({numbers['events_per_s']} events/s)  longest append meanwhile "
            f"{numbers['longest_append_during_rebuild_s'] * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
