"""What ``wgstore archive`` costs and gives back (issue 43), on a fleet-shaped log.

Workload: ``--runs`` runs of one attempt each (4 workers, ``--steps`` report steps of 4 reports
and a poll), ``--concurrent`` of them at a time so their events interleave in the log as a
fleet's do; the last tenth stay running (the live part). Then, on each backend:

- A1 archive rate: ``archive_runs`` of every ended run (90 % of the events), wall time and
  events/s end to end (read, write Parquet, read back and compare, append ``LogArchived``,
  delete), plus the plan (``plan_archive``) on its own.
- A2 bytes: the Parquet files' bytes against the same events' bytes in the database (SQLite:
  the file's pages; Postgres: ``wg_events`` table + indexes, per event times the events moved).
- A3 space back: the database's bytes before, after the archive, and after ``VACUUM`` on SQLite
  (Postgres: after the archive without VACUUM FULL; the freed rows are reused by new ones).
- A4 verify over the archive: ``store.verify()`` (the files read and checked with the live log)
  in events/s.
- A5 appends during the archive: another thread appends one event every 10 ms to its own
  stream; p50/p99 latency while the archive runs against the same before it.
- A6 one run read back: ``wgstore serve``'s run page data (``run_page``) of one run while live
  and once archived (its file read, checked and folded), median of 5 each.

Run ``python bench/archive.py --help``; ``--json`` prints the results.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.run import (
    ControllerStarted,
    ControllerStateChanged,
    FailureConfig,
    RunCreated,
    RunFinished,
    ScalingConfig,
)
from wgstore.events.streams import group_stream, run_stream
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
    WorkerReported,
    WorkersStarted,
)
from wgstore.projections.archiving import archive_runs, plan_archive
from wgstore.serve.views import run_page

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rebuild import WORKERS
from rebuild import _workers as group_workers

PG_URL = os.environ.get("WGSTORE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TRAIN_FN = "examples.train:train_fn"


def _context() -> WorkerGroupContext:
    return WorkerGroupContext(
        num_workers=WORKERS, resources_per_worker={"CPU": 1.0}, train_fn=TRAIN_FN
    )


def _start(store: EventStore, run_id: str) -> None:
    group_id = f"{run_id}-g1"
    store.append(
        run_stream(run_id),
        [
            RunCreated(
                run_id=run_id,
                name=run_id,
                scaling_config=ScalingConfig(num_workers=WORKERS),
                failure_config=FailureConfig(max_failures=1),
                context=_context(),
                lease_s=60.0,
            ),
            ControllerStarted(controller_id="bench", host="h", pid=1),
            ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING"),
            ControllerStateChanged(from_state="SCHEDULING", to_state="RUNNING", group_id=group_id),
        ],
    )
    workers = group_workers(group_id)  # bench/rebuild.py's: 4 workers on one node
    now = datetime.now(UTC)
    store.append(
        group_stream(group_id),
        [
            WorkerGroupStartRequested(group_id=group_id, run_id=run_id, context=_context()),
            PlacementGroupReserved(
                placement_group_id="pg", name="pg", bundles=({"CPU": 1.0},) * WORKERS,
                strategy="PACK",
            ),
            SyncActorStarted(actor_id="sync", name="sync"),
            WorkersStarted(workers=workers),
            WorkerGroupStarted(start_time=now, startup_s=0.1),
            TrainingLaunched(train_fn=TRAIN_FN),
        ],
    )  # fmt: skip


def _step(store: EventStore, run_id: str, step: int) -> None:
    events: list[Any] = [
        WorkerReported(world_rank=rank, index=step, metrics={"loss": 1.0 / (step + 1)})
        for rank in range(WORKERS)
    ]
    events.append(WorkerGroupPolled(poll_seq=step + 1, polled_at=datetime.now(UTC)))
    store.append(group_stream(f"{run_id}-g1"), events)


def _finish(store: EventStore, run_id: str) -> None:
    group_id = f"{run_id}-g1"
    store.append(
        group_stream(group_id),
        [WorkerGroupShutdownRequested(reason="done"), WorkerGroupShutDown(duration_s=0.1)],
    )
    store.append(
        run_stream(run_id),
        [
            ControllerStateChanged(from_state="RUNNING", to_state="SHUTTING_DOWN"),
            ControllerStateChanged(from_state="SHUTTING_DOWN", to_state="FINISHED"),
            RunFinished(group_id=group_id),
        ],
    )


def fill(url: str, runs: int, steps: int, concurrent: int) -> int:
    """Record the workload (``concurrent`` runs interleaved at a time); the log's events."""
    with EventStore.open(url) as store:
        ids = [f"r{index:05d}-{uuid.uuid4().hex[:6]}" for index in range(runs)]
        live = set(ids[runs - max(1, runs // 10) :])
        for start in range(0, runs, concurrent):
            wave = ids[start : start + concurrent]
            for run_id in wave:
                _start(store, run_id)
            for step in range(steps):
                for run_id in wave:
                    _step(store, run_id, step)
            for run_id in wave:
                if run_id not in live:
                    _finish(store, run_id)
        return store.head()


def _database_bytes(store: EventStore, url: str) -> int:
    if store.is_postgres:
        with store.engine.connect() as connection:
            return int(
                connection.execute(
                    sa.text("SELECT pg_total_relation_size('wg_events')")
                ).scalar_one()
            )
    return Path(sa.make_url(url).database or "").stat().st_size


def _appender(store: EventStore, stop: threading.Event, latencies: list[float]) -> None:
    stream = f"bench-appender-{uuid.uuid4().hex[:8]}"
    while not stop.is_set():
        started = time.perf_counter()
        store.append(stream, [WorkerGroupShutdownRequested(reason="tick")])
        latencies.append((time.perf_counter() - started) * 1000)
        stop.wait(0.01)


def _percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"n": len(values)}
    q = statistics.quantiles(values, n=100)
    return {"n": len(values), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2)}


def measure(url: str, location: str, batch_events: int) -> dict[str, Any]:
    """A1-A5 on the filled store at ``url`` (its read models caught up first, as a fleet's
    projector keeps them; pyarrow imported first: a process pays that once, ~0.3-0.9 s)."""
    import pyarrow.parquet  # noqa: F401

    from wgstore.projections import catch_up_read_models

    result: dict[str, Any] = {}
    with EventStore.open(url) as store:
        catch_up_read_models(store)
        events = len(store.fetch_rows("SELECT position FROM wg_events", ()))
        result["events"] = events
        before = _database_bytes(store, url)
        result["db_bytes_before"] = before
        # A5 baseline: 3 s of appends with nothing else running
        stop, baseline = threading.Event(), []
        thread = threading.Thread(target=_appender, args=(store, stop, baseline))
        thread.start()
        stop.wait(3.0)
        stop.set()
        thread.join()
        started = time.perf_counter()
        plan = plan_archive(store, ended_before=datetime.now(UTC) + timedelta(days=1))
        result["plan_s"] = round(time.perf_counter() - started, 3)
        one = next(iter(plan.runs))
        live_page_ms = _median_ms(lambda: run_page(store, one))
        stop, during = threading.Event(), []
        thread = threading.Thread(target=_appender, args=(store, stop, during))
        thread.start()
        started = time.perf_counter()
        archived = archive_runs(store, location, plan, batch_events=batch_events)
        took = time.perf_counter() - started
        stop.set()
        thread.join()
        result["archive"] = {
            "runs": len(archived.runs),
            "events": archived.events,
            "s": round(took, 2),
            "events_per_s": round(archived.events / took),
            "parquet_bytes": archived.bytes,
        }
        per_event = before / events
        result["parquet_vs_db_bytes"] = round(archived.bytes / (per_event * archived.events), 3)
        result["db_bytes_after"] = _database_bytes(store, url)
        if not store.is_postgres:
            vacuum = sqlite3.connect(sa.make_url(url).database or "", isolation_level=None)
            vacuum.execute("VACUUM")
            vacuum.close()
            result["db_bytes_after_vacuum"] = _database_bytes(store, url)
        result["appends_without"] = _percentiles(baseline)
        result["appends_during"] = _percentiles(during)
        result["run_page_ms"] = {
            "live": live_page_ms,
            "archived": _median_ms(lambda: run_page(store, one)),
        }
        started = time.perf_counter()
        report = store.verify()
        took = time.perf_counter() - started
        result["verify"] = {
            "ok": report.ok,
            "events": report.checked,
            "s": round(took, 2),
            "events_per_s": round(report.checked / took),
        }
    return result


def _median_ms(call: Any, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def _pg_schema_url() -> tuple[str, str]:
    schema = f"bench_archive_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(PG_URL)
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE SCHEMA {schema}")
    engine.dispose()
    return f"{PG_URL}?options=-csearch_path%3D{schema}", schema


def _drop_pg_schema(schema: str) -> None:
    engine = sa.create_engine(PG_URL)
    with engine.begin() as connection:
        connection.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200, help="report steps a run (5 events)")
    parser.add_argument("--concurrent", type=int, default=100, help="runs interleaved at a time")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--batch-events", type=int, default=10_000, help="archive_runs' batch_events"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "load_before": os.getloadavg(),
        "workload": {
            "runs": args.runs,
            "steps": args.steps,
            "concurrent": args.concurrent,
            "batch_events": args.batch_events,
        },
    }
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            schema = None
            if backend == "sqlite":
                url = f"sqlite:///{folder}/archive-bench.db"
            else:
                url, schema = _pg_schema_url()
            try:
                started = time.perf_counter()
                fill(url, args.runs, args.steps, args.concurrent)
                fill_s = time.perf_counter() - started
                results[backend] = measure(url, f"{folder}/archive-{backend}", args.batch_events)
                results[backend]["fill_s"] = round(fill_s, 1)
            finally:
                if schema is not None:
                    _drop_pg_schema(schema)
            if not args.json:
                print(backend, json.dumps(results[backend], indent=2), flush=True)
    results["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
