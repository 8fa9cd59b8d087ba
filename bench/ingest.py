"""Ray export ingest (issue 45): how fast ``wgstore ingest ray-export`` reads a big export log, and
how soon a run it follows shows in ``wgstore runs``.

Numbers, not pass/fail; each goal is printed beside its number. Goals (issue 45): >= 20,000
lines/s on SQLite and on PostgreSQL; the lag from a run's first line written to the run visible,
while following, p99 < 1 s.

The log is synthetic but made of real lines: the 23 lines of tests/ingest/fixtures/
event_EXPORT_TRAIN_STATE.log (a 3-node Ray 2.60 run's export: two runs, one with two attempts,
the first errored) copied again and again, each copy with fresh ids (run ids and attempt ids
``uuid4().hex``, every line's ``event_id`` unique) and its times (``timestamp``,
``start_time_ns``, ``end_time_ns``) shifted by ``SPACING_S`` seconds from the copy before. The
copies' lines are merged in time order, so about four copies (eight runs) are under way at once,
each run's lines in their own order, as Ray's train state actor writes them; the first
``--lines`` lines are kept (the last runs may be cut short, as a live log's are). Beside it the
fixture's ``event_EXPORT_NODE.log`` (6 lines, the cluster's 3 nodes), so the folder looks like a
head node's.

- **rate**: ``Ingester(store, [folder], claim_wait_s=0, batch_lines=...).run_once()`` on a fresh
  store (a SQLite file, ``synchronous=FULL``; a fresh PostgreSQL schema): lines/s, events/s, ms
  and CPU ms per 1,000 lines. In the same process, two references: the **minimal table** of
  bench/store.py (``(id, stream_id, version, type, payload)``, one unique index, plain driver
  SQL, bench/sides.py's DDL) taking the same rows (every row the ingest wrote, read back: stream,
  version, type, data) in the same transactions (one per batch): the floor of storing what the
  ingest stored; and ``json.loads`` of every line (the floor of reading it). Below the table:
  the ingest's time in Python's garbage collector (``gc.callbacks``) and how much its resident
  memory grew.
- **lag**: a writer thread appends the lines of ``--lag-runs`` runs (built as above, times
  shifted to now) to an export file at ``--lag-rate`` lines/s, flushing each line, while
  ``Ingester(...).follow(stop, interval_s=--interval)`` (``claim_wait_s=0``) runs in another
  thread; the main thread, on a store of its own, polls ``stream_version("run-<id>")`` of every
  run written and not yet seen every 10 ms. Lag: from the run's first line flushed to the poll
  that found its stream. ``wgstore runs`` lists a run once its stream is committed
  (``run_summaries`` folds from the log the runs its read models have not caught up on); at the
  end the bench calls ``run_summaries`` once and checks every run is listed. The three threads
  share one process (and its GIL), as an ingester sidecar's reader would not.

    .venv/bin/python bench/ingest.py                                  # both backends, defaults
    .venv/bin/python bench/ingest.py --backend sqlite --lines 20000 --lag-runs 40   # a quick look
    .venv/bin/python bench/ingest.py --backend postgres --profile ingest.prof     # cProfile of the rate part

Postgres: ``WGSTORE_BENCH_PG_URL`` (default the local ``test`` database); each part runs in fresh
schemas (``wgbench_ingest_<id>`` and ``..._minimal``), dropped afterwards. SQLite: files in a
temporary folder, or in ``--workdir`` (kept, with the export logs: the smoke test reads them).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import os
import platform
import pstats
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sides import DDL, PG_CONNINFO, PG_URL, pg_conninfo

from wgstore.events import EventStore
from wgstore.orchestration.ray_export import Ingester

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "ingest" / "fixtures"
TRAIN_LOG = "event_EXPORT_TRAIN_STATE.log"
NODE_LOG = "event_EXPORT_NODE.log"
SPACING_S = 10  # seconds between one copy of the fixture's runs and the next
LINES_GOAL = 20_000  # lines/s, SQLite and PostgreSQL
LAG_P99_GOAL_S = 1.0
POLL_S = 0.01


# ---------------------------------------------------------------------------- the export log


@dataclass(frozen=True)
class Line:
    """One export line and the run it is about (``first``: the run's first line)."""

    text: str
    run_id: str
    first: bool


def _fixture() -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (FIXTURES / TRAIN_LOG).read_text().splitlines() if raw]


def make_lines(count: int, *, shift_s: int = 0) -> list[Line]:
    """``count`` export lines: copies of the fixture's runs, fresh ids, times shifted by
    ``shift_s`` plus ``SPACING_S`` per copy, merged in time order (each run's lines in order)."""
    fixture = _fixture()
    copies = math.ceil(count / len(fixture))
    keyed: list[tuple[int, int, int, Line]] = []
    for copy in range(copies):
        delta_s = shift_s + copy * SPACING_S
        ids: dict[str, str] = {}  # the fixture's run and attempt ids -> this copy's
        seen: set[str] = set()
        for index, envelope in enumerate(fixture):
            data = dict(envelope["event_data"])
            for key in ("id", "run_id", "attempt_id"):
                if key in data:
                    old = str(data[key])
                    data[key] = ids.setdefault(old, uuid.uuid4().hex)
            for key in ("start_time_ns", "end_time_ns"):
                if data.get(key):
                    data[key] = str(int(data[key]) + delta_s * 1_000_000_000)
            run_id = str(data.get("run_id") or data.get("id"))
            timestamp = int(envelope["timestamp"]) + delta_s
            text = json.dumps(
                {
                    "event_id": uuid.uuid4().hex[:18],
                    "timestamp": timestamp,
                    "source_type": envelope["source_type"],
                    "event_data": data,
                }
            )
            keyed.append((timestamp, copy, index, Line(text, run_id, run_id not in seen)))
            seen.add(run_id)
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed[:count]]


def write_log(folder: Path, lines: list[Line]) -> Path:
    """The export folder: ``lines`` as Ray's train state file, the fixture's node file beside."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TRAIN_LOG
    path.write_text("".join(f"{line.text}\n" for line in lines))
    (folder / NODE_LOG).write_bytes((FIXTURES / NODE_LOG).read_bytes())
    return path


# ---------------------------------------------------------------------------- stores


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def fresh_places(backend: str, workdir: Path, name: str) -> Iterator[tuple[str, str]]:
    """(the store's URL, the minimal table's place: a SQLite file or a Postgres schema)."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir / f'{name}.db'}", str(workdir / f"{name}-minimal.db")
        return
    schema = f"wgbench_ingest_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE SCHEMA {schema}; CREATE SCHEMA {schema}_minimal")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}", f"{schema}_minimal"
    finally:
        _admin(f"DROP SCHEMA {schema} CASCADE; DROP SCHEMA {schema}_minimal CASCADE")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _rss_mb() -> float:
    """This process's resident memory (Linux; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Collector:
    """Time spent in Python's cyclic garbage collector (``gc.callbacks``), by generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# ---------------------------------------------------------------------------- rate


def _stored_rows(store: EventStore) -> list[list[tuple[str, int, str, str]]]:
    """Every row the ingest wrote, in the transactions it wrote them (each begins with its
    ``RayExportRead``: the ingester puts the read first)."""
    data = "data::text" if store.backend == "postgresql" else "data"
    sql = sa.text(
        f"SELECT stream_id, stream_version, event_type, {data} FROM wg_events ORDER BY position"
    )
    groups: list[list[tuple[str, int, str, str]]] = []
    with store.engine.connect() as conn:
        for stream_id, version, event_type, payload in conn.execute(sql):
            if event_type == "RayExportRead" or not groups:
                groups.append([])
            groups[-1].append((stream_id, version, event_type, payload))
    return groups


def minimal_insert(backend: str, place: str, groups: list[list[tuple[Any, ...]]]) -> float:
    """Seconds to insert ``groups`` into bench/store.py's minimal table, one transaction each."""
    if backend == "sqlite":
        conn: Any = sqlite3.connect(place, timeout=30)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")  # the store's default
        for statement in DDL[("minimal", "sqlite")]:
            conn.execute(statement)
        conn.commit()
        sql = "INSERT INTO minimal_events (stream_id, version, type, payload) VALUES (?, ?, ?, ?)"
        start = time.perf_counter()
        for rows in groups:
            with conn:
                conn.executemany(sql, rows)
        took = time.perf_counter() - start
        conn.close()
        return took
    import psycopg

    with psycopg.connect(pg_conninfo(place), autocommit=True) as conn:
        for statement in DDL[("minimal", "postgres")]:
            conn.execute(statement)
        sql = (
            "INSERT INTO minimal_events (stream_id, version, type, payload) "
            "VALUES (%s, %s, %s, %s::jsonb)"
        )
        start = time.perf_counter()
        for rows in groups:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(sql, rows)  # psycopg pipelines executemany
        return time.perf_counter() - start


def parse_only(path: Path) -> float:
    """Seconds to read the file and ``json.loads`` every line."""
    start = time.perf_counter()
    with path.open("rb") as handle:
        for raw in handle:
            json.loads(raw)
    return time.perf_counter() - start


def measure_rate(
    backend: str, folder: Path, workdir: Path, batch_lines: int, profile: str | None
) -> dict[str, Any]:
    """Ingest ``folder`` once into a fresh store; the references beside it."""
    load_start = _load()
    with fresh_places(backend, workdir, f"rate-{backend}") as (url, minimal):
        with EventStore.open(url) as store:
            problems: list[str] = []
            ingester = Ingester(
                store, [folder], claim_wait_s=0, batch_lines=batch_lines, report=problems.append
            )
            profiler = cProfile.Profile() if profile else None
            gc.collect()
            rss = _rss_mb()
            collector = _Collector()
            gc.callbacks.append(collector)
            start, cpu = time.perf_counter(), time.process_time()
            if profiler:
                profiler.enable()
            stats = ingester.run_once()
            if profiler:
                profiler.disable()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            gc.callbacks.remove(collector)
            rss = _rss_mb() - rss
            groups = _stored_rows(store)
            runs = len(store.streams("run-"))
        rows = sum(len(g) for g in groups)
        minimal_s = minimal_insert(backend, minimal, groups)
    parse_s = parse_only(folder / TRAIN_LOG)
    if profiler is not None:
        target = f"{profile}.{backend}"
        profiler.dump_stats(target)
        out = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
        print(
            f"profile of the {backend} ingest (by cumulative time), in {target}:", file=sys.stderr
        )
        out.print_stats(25)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    lines = stats.lines
    return {
        "backend": backend,
        "lines": lines,
        "events": stats.events,
        "rows": rows,
        "transactions": len(groups),
        "runs": runs,
        "problems": len(stats.bad_lines) + len(stats.problems) + len(problems),
        "held": stats.held,
        "wall_s": round(wall, 3),
        "lines_per_s": round(lines / wall),
        "events_per_s": round(stats.events / wall),
        "ms_per_1000_lines": round(wall / lines * 1e6, 2),
        "cpu_ms_per_1000_lines": round(cpu / lines * 1e6, 2),
        "minimal_s": round(minimal_s, 3),
        "minimal_rows_per_s": round(rows / minimal_s),
        "minimal_ms_per_1000_lines": round(minimal_s / lines * 1e6, 2),
        "parse_ms_per_1000_lines": round(parse_s / lines * 1e6, 2),
        "x_minimal": round(wall / minimal_s, 1),
        "gc_s": round(collector.seconds, 2),
        "gc_collections": collector.collections,
        "rss_growth_mb": round(rss),
        "goal_met": lines / wall >= LINES_GOAL,
        "load": [load_start, _load()],
    }


# ---------------------------------------------------------------------------- lag


def measure_lag(
    backend: str, workdir: Path, runs: int, rate: float, interval_s: float, batch_lines: int
) -> dict[str, Any]:
    """Lines written at ``rate`` while an ingester follows; each run's first line to its stream."""
    fixture = _fixture()
    fixture_runs = len(
        {str(e["event_data"].get("run_id") or e["event_data"]["id"]) for e in fixture}
    )
    shift = int(time.time()) - int(fixture[0]["timestamp"])
    lines = make_lines(math.ceil(runs / fixture_runs) * len(fixture), shift_s=shift)
    run_ids = list(dict.fromkeys(line.run_id for line in lines))
    folder = workdir / f"lag-{backend}" / "export_events"
    folder.mkdir(parents=True)
    path = folder / TRAIN_LOG
    written: dict[str, float] = {}
    seen: dict[str, float] = {}
    load_start = _load()
    with fresh_places(backend, workdir, f"lag-{backend}") as (url, _):
        EventStore.open(url).close()  # the schema, before the threads
        stop = threading.Event()
        writer_done = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                with path.open("a") as handle:
                    start = time.perf_counter()
                    for i, line in enumerate(lines):
                        delay = start + i / rate - time.perf_counter()
                        if delay > 0:
                            time.sleep(delay)
                        handle.write(f"{line.text}\n")
                        handle.flush()
                        if line.first:
                            written[line.run_id] = time.perf_counter()
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                errors.append(error)
            finally:
                writer_done.set()

        ingest_store = EventStore.open(url)
        ingester = Ingester(ingest_store, [folder], claim_wait_s=0, batch_lines=batch_lines)

        def follow() -> None:
            try:
                ingester.follow(stop, interval_s=interval_s)
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=write), threading.Thread(target=follow)]
        with EventStore.open(url) as reader:
            for thread in threads:
                thread.start()
            deadline = None
            while len(seen) < len(run_ids) and not errors:
                if writer_done.is_set() and deadline is None:
                    deadline = time.perf_counter() + 30 + 2 * interval_s
                if deadline is not None and time.perf_counter() > deadline:
                    break
                for run_id in [r for r in list(written) if r not in seen]:
                    if reader.stream_version(f"run-{run_id}"):
                        seen[run_id] = time.perf_counter()
                time.sleep(POLL_S)
            stop.set()
            for thread in threads:
                thread.join()
            ingest_store.close()
            if errors:
                raise errors[0]
            from wgstore.projections.run_views import run_summaries

            start = time.perf_counter()
            listed = {s.run_id for s in run_summaries(reader)}
            summaries_ms = (time.perf_counter() - start) * 1000
    lags = [seen[r] - written[r] for r in run_ids if r in seen]
    if not lags:
        lags = [math.inf]
    p99 = _pct(lags, 0.99)
    return {
        "backend": backend,
        "runs": len(run_ids),
        "lines": len(lines),
        "lines_ingested": ingester.stats.lines,
        "rate": rate,
        "interval_s": interval_s,
        "seen": len(seen),
        "listed": len(listed & set(run_ids)),
        "run_summaries_ms": round(summaries_ms, 1),
        "p50_ms": round(_pct(lags, 0.5) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(max(lags) * 1000, 1),
        "goal_met": p99 < LAG_P99_GOAL_S and len(seen) == len(run_ids),
        "load": [load_start, _load()],
    }


# ---------------------------------------------------------------------------- report


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def print_report(report: dict[str, Any]) -> None:
    config = report["config"]
    if report["rate"]:
        print(
            f"rate: {config['lines']:,} train-state lines + the node file's "
            f"({report['log_runs']:,} runs), batches of {config['batch_lines']:,} lines"
        )
        print(
            "| backend | lines | events | rows | wall s | lines/s | events/s | ms / 1,000 lines "
            "| CPU ms / 1,000 lines | minimal table, same rows: ms / 1,000 lines | json.loads "
            "only: ms / 1,000 lines | x minimal | runs | load | goal >= 20,000 lines/s |"
        )
        print("|---" * 15 + "|")
        for r in report["rate"]:
            print(
                f"| {r['backend']} | {r['lines']:,} | {r['events']:,} | {r['rows']:,} "
                f"| {r['wall_s']:.2f} | {r['lines_per_s']:,} | {r['events_per_s']:,} "
                f"| {r['ms_per_1000_lines']:.1f} | {r['cpu_ms_per_1000_lines']:.1f} "
                f"| {r['minimal_ms_per_1000_lines']:.1f} | {r['parse_ms_per_1000_lines']:.1f} "
                f"| {r['x_minimal']} | {r['runs']:,} | {r['load'][0]}-{r['load'][1]} "
                f"| {_met(r['goal_met'])} |"
            )
        for r in report["rate"]:
            print(
                f"{r['backend']}: {r['gc_s']:.1f} s of the ingest's {r['wall_s']:.1f} s in the "
                f"garbage collector (collections by generation {r['gc_collections']}); resident "
                f"memory grew {r['rss_growth_mb']:,} MB"
            )
    if report["lag"]:
        print()
        print(
            f"lag: lines written at {config['lag_rate']:g}/s, the ingester following every "
            f"{config['interval']:g} s (claim_wait_s=0), polled every {POLL_S * 1000:g} ms"
        )
        print(
            "| backend | runs | lines | seen | listed by run_summaries | p50 ms | p99 ms | max ms "
            "| load | goal p99 < 1 s |"
        )
        print("|---" * 10 + "|")
        for r in report["lag"]:
            print(
                f"| {r['backend']} | {r['runs']} | {r['lines']:,} | {r['seen']} "
                f"| {r['listed']} ({r['run_summaries_ms']:.0f} ms) | {r['p50_ms']:.0f} "
                f"| {r['p99_ms']:.0f} | {r['max_ms']:.0f} | {r['load'][0]}-{r['load'][1]} "
                f"| {_met(r['goal_met'])} |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--lines", type=int, default=100_000, help="train-state lines to ingest")
    parser.add_argument(
        "--batch-lines", type=int, default=2000, help="the ingester's lines per transaction"
    )
    parser.add_argument("--lag-runs", type=int, default=200, help="runs written while following")
    parser.add_argument("--lag-rate", type=float, default=50.0, help="lines/s written")
    parser.add_argument("--interval", type=float, default=0.2, help="the follow interval, s")
    parser.add_argument("--parts", default="rate,lag", help="rate, lag or both (comma-separated)")
    parser.add_argument("--workdir", help="write the logs and SQLite files here and keep them")
    parser.add_argument("--profile", help="cProfile of each rate ingest: PATH.<backend>")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= {"rate", "lag"}:
        parser.error("--parts: rate, lag or rate,lag")
    if args.lines < 1 or args.batch_lines < 1 or args.lag_runs < 1 or args.lag_rate <= 0:
        parser.error("--lines, --batch-lines, --lag-runs and --lag-rate must be positive")
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory(prefix="wgbench-ingest-") as temp:
        workdir = Path(args.workdir or temp)
        workdir.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {
            "config": {
                "lines": args.lines,
                "batch_lines": args.batch_lines,
                "lag_runs": args.lag_runs,
                "lag_rate": args.lag_rate,
                "interval": args.interval,
            },
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "load_start": [round(x, 2) for x in os.getloadavg()],
            "rate": [],
            "lag": [],
        }
        if "rate" in parts:
            lines = make_lines(args.lines)
            folder = workdir / "rate" / "export_events"
            write_log(folder, lines)
            report["log_runs"] = len({line.run_id for line in lines})
            report["log_bytes"] = (folder / TRAIN_LOG).stat().st_size
            del lines  # not alive while measured: the collector would walk them too
            for backend in backends:
                report["rate"].append(
                    measure_rate(backend, folder, workdir, args.batch_lines, args.profile)
                )
        if "lag" in parts:
            for backend in backends:
                report["lag"].append(
                    measure_lag(
                        backend,
                        workdir,
                        args.lag_runs,
                        args.lag_rate,
                        args.interval,
                        args.batch_lines,
                    )
                )
        report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
