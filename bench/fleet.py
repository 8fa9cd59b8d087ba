"""Fleet benchmark (issue 25, part 1): many concurrent runs on one store, through the real paths.

Numbers, not pass/fail. Each configuration creates ``--runs`` runs (``RunCreated``, ``FailureConfig
(max_failures=1)``) of ``--workers`` workers polled every ``--interval`` seconds, and drives them
with the real code on :class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime` (no Ray): in each
of ``--procs`` processes one :class:`RayExecutor` (``runtime=FakeRuntime(...)``, scoped to that
process's runs) and one :class:`RunController` per run in a thread (``controller.run()``).
FakeRuntime's scripted workers make one report per poll, appended by the worker itself through
``EventStore.append`` (``WorkerReported``, its derived event id and metadata, as real workers do;
outside FakeRuntime's lock since 2026-12-05, so polls of different groups append concurrently,
as real workers do in their own processes: before, a process made one report at a time);
the bench replaces only the script's report body, to carry ``--metrics`` metrics and to time that
append. A share ``--fail-share`` of runs has attempt 1 raise on rank 0 a third of the way in, so
the controller retries (attempt 2 makes the remaining reports). Runs last about ``--duration``
seconds of reports.

The parent process is the reader: it runs ``catch_up_read_models`` in a loop in a thread (as the
executor does every 2 s; the executors here have theirs off, so one reader owns the lag), samples
the log's head and the read models' checkpoint every 0.2 s, and on Postgres the CPU time of the
server backends of this bench (``pg_stat_activity`` by ``application_name`` + ``/proc/<pid>/stat``).

Measured per configuration, with ``os.getloadavg()`` at start and end:

- events/s sustained (the log's head over the middle 80 % of the measured window), and reports/s
  achieved against offered (``runs * workers / interval``): polls that fall behind show here;
- ``report()`` latency p50/p99: the worker's ``EventStore.append`` of its ``WorkerReported``,
  over the whole run and at the steady rate (``report_ms_steady``: once every run has started,
  before the last interval). The runs start spread evenly over ``--stagger-s`` (default one
  interval: their polls and reports spread over it, as a platform's runs that started at
  different times are); ``--stagger-s 0`` starts them all at once (the start storm: every
  run's claims, decisions and first reports in the same seconds, then reports in bursts);
- the executor's poll appends p50/p99 (``GroupPolls``' ``store.append``, timed by a proxy);
- read-model lag, max over the run: events (head - checkpoint) and seconds (from a head sample to
  the end of the first catch-up whose checkpoint reached it);
- CPU per 1,000 events: the client processes (``time.process_time``) and the Postgres backends;
- database bytes per run-hour (``pg_total_relation_size`` of the schema's tables / the SQLite file
  with its WAL) and per event type (rows' share by ``pg_column_size`` / ``length``);
- nothing lost or duplicated: every group stream folded at the end, its reports counted per rank
  against what the workers appended, event ids distinct, every run ``FINISHED``, and the read
  models' ``wg_reports`` holding one row per report.

    .venv/bin/python bench/fleet.py --backend sqlite --runs 10 --workers 4 --interval 1 --duration 30
    .venv/bin/python bench/fleet.py --backend postgres --runs 100 --workers 8 --interval 10 \\
        --duration 60 --procs 4 --json
    .venv/bin/python bench/fleet.py ... --profile prof.out   # cProfile of worker process 0

Postgres: ``--url`` or ``WGSTORE_BENCH_PG_URL`` (default the local ``test`` database); each
configuration runs in a fresh schema, dropped afterwards (``--keep`` keeps it). SQLite: ``--url
sqlite:///path`` or a fresh file in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TRAIN_FN = "examples.train:train_fn"
REPORT_KEYS = (
    "log_bytes",
    "config",
    "load_start",
    "load_end",
    "wall_s",
    "events",
    "events_per_s",
    "reports_per_s",
    "offered_reports_per_s",
    "report_ms",
    "report_ms_steady",
    "poll_append_ms",
    "scheduling_late_ms",
    "read_model_lag",
    "cpu_ms_per_1000_events",
    "bytes",
    "bytes_per_run_hour",
    "by_type",
    "phases_s",
    "check",
)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _ms(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": _round(_pct(values, 0.50)),
        "p99": _round(_pct(values, 0.99)),
        "max": _round(max(values) if values else None),
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------------------- the worker side


class _TimedStore:
    """A proxy of the executor's store for ``GroupPolls``: times each ``append``."""

    def __init__(self, store: Any, sink: list[float]) -> None:
        self._store = store
        self._sink = sink

    def append(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._store.append(*args, **kwargs)
        finally:
            self._sink.append((time.perf_counter() - t0) * 1000.0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _SchedulingProbe:
    """A thread that asks to sleep ``PROBE_SLEEP_S`` over and over and records how much longer
    each sleep took (ms): the wait of a thread of this process that is ready to run, for a core
    and the GIL. A ``report()`` or an append of this process cannot take less than that to
    return once its own work is done, whatever the store does."""

    PROBE_SLEEP_S = 0.002

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduling-probe", daemon=True)

    def start(self) -> _SchedulingProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.PROBE_SLEEP_S)
            self.late_ms.append((time.perf_counter() - t0 - self.PROBE_SLEEP_S) * 1000.0)


def _patch_reports(
    metrics: int, latencies: list[float], times: list[float], made: Counter[str]
) -> None:
    """FakeRuntime's report, with ``metrics`` metrics, its append timed (``latencies``, ms;
    ``times``, when it was made: wall clock, s) and counted."""
    from wgstore.events import NewEvent
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import WorkerReported
    from wgstore.orchestration.runtimes import fake_runtime
    from wgstore.orchestration.train_fn.report_writer import report_event_id

    names = [f"metric_{k}" for k in range(max(0, metrics - 1))]

    def _report(self: Any, index: int, script: Any) -> Callable[[], None]:
        rank = self.context.world_rank
        values: dict[str, Any] = {"index": index}
        for k, name in enumerate(names):
            values[name] = index * 0.001 + k
        event = NewEvent(
            WorkerReported(world_rank=rank, index=index, metrics=values, checkpoint=None),
            event_id=report_event_id(self.group_id, rank, index),
            metadata={
                **dict(self.setup.report_metadata),
                "actor": self.name,
                "source": "worker",
                "world_rank": rank,
            },
        )
        store, stream_id = self.setup.store, group_stream(self.group_id)

        def append() -> None:  # made by the poll, outside FakeRuntime's lock
            t0 = time.perf_counter()
            store.append(stream_id, [event])
            latencies.append((time.perf_counter() - t0) * 1000.0)
            times.append(time.time())
            made[f"{self.group_id}/{rank}"] += 1

        return append

    fake_runtime._Worker._report = _report  # type: ignore[method-assign]


class _WholeLogWatch:
    """``--wake all``, a reference only: the controllers' wait as it was before issue 25's fix
    (every append anywhere wakes every controller of the process, which re-reads its streams;
    at most 1 s between re-checks), behind the ``watch_streams`` interface the controller uses
    now, so the same fleet can be run both ways at the same load."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def position(self) -> int:
        return int(self._store.head())

    def add(self, *stream_ids: str) -> None:
        pass

    def wait(self, token: int, timeout_s: float, stop: Any = None) -> bool:
        return int(self._store.wait_for_new(token, min(timeout_s, 1.0))) > token

    def close(self) -> None:
        pass


class _WholeLogStore:
    """The store as a controller sees it under ``--wake all``."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def watch_streams(self, *_args: Any, **_kwargs: Any) -> _WholeLogWatch:
        return _WholeLogWatch(self._store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def worker_process(spec: dict[str, Any], out_path: str) -> None:
    """One process: an executor on FakeRuntime and a controller thread per run."""
    if spec.get("profile"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    from wgstore.events import EventStore
    from wgstore.orchestration.executor.ray_executor import RayExecutor
    from wgstore.orchestration.run.controller import RunController
    from wgstore.orchestration.run.decide import attempt_group_id
    from wgstore.orchestration.runtimes.fake_runtime import FakeFaults, FakeRuntime, FakeScript

    report_ms: list[float] = []
    report_at: list[float] = []
    poll_ms: list[float] = []
    made: Counter[str] = Counter()
    _patch_reports(spec["metrics"], report_ms, report_at, made)
    reports = spec["reports"]
    runtime = FakeRuntime(script=FakeScript(reports=reports))
    fail_at = spec["fail_at"]
    for run_id in spec["failing"]:
        runtime.configure(
            attempt_group_id(run_id, 1),
            script=FakeScript(reports=reports),
            faults=FakeFaults(raise_at_poll={0: fail_at}),
        )
        # attempt 2 makes what attempt 1 did not get to (its first poll starts it)
        runtime.configure(
            attempt_group_id(run_id, 2), script=FakeScript(reports=reports - (fail_at - 2))
        )
    errors: list[str] = []
    cpu0 = time.process_time()
    with EventStore.open(spec["url"]) as store:
        store.recorder._appends.limit = spec["group_limit"]  # type: ignore[attr-defined]
        executor = RayExecutor(
            store,
            runtime=runtime,
            run_ids=set(spec["runs"]),
            from_position=0,
            read_models_interval_s=None,
            max_threads=spec["threads"],
        )
        executor._polls.store = _TimedStore(store, poll_ms)  # a proxy timing its appends
        while time.time() < spec["start_at"]:
            time.sleep(0.01)
        executor.start()
        probe = _SchedulingProbe().start()
        finished: dict[str, str] = {}

        seen = store if spec["wake"] == "streams" else _WholeLogStore(store)

        def drive(run_id: str, delay_s: float) -> None:
            time.sleep(delay_s)  # the run's start in the stagger (a schedule, not a wait)
            try:
                with RunController(seen, run_id, executor=executor) as controller:
                    finished[run_id] = controller.run(timeout_s=spec["timeout_s"]).status.value
            except Exception as error:  # noqa: BLE001 - recorded and reported
                errors.append(f"{run_id}: {type(error).__name__}: {error}")

        threads = [
            threading.Thread(target=drive, args=(run_id, spec["delays_s"][k]), daemon=True)
            for k, run_id in enumerate(spec["runs"])
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        probe.stop()
        executor.wait_idle(30.0)
        executor.stop()
        errors.extend(executor.errors)
        queue = store.recorder._appends  # type: ignore[attr-defined]
        groups = {"groups": queue.groups, "appends": queue.appends}
    cpu = time.process_time() - cpu0
    if spec.get("profile"):
        profiler.disable()
        profiler.dump_stats(spec["profile"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(out_path).write_text(
        json.dumps(
            {
                "report_ms": report_ms,
                "report_at": report_at,
                "poll_ms": poll_ms,
                "scheduling_late_ms": probe.late_ms,
                "made": dict(made),
                "finished": finished,
                "errors": errors[:20],
                "cpu_s": cpu,
                "maxrss_kb": usage.ru_maxrss,
                "group_commit": groups,
            }
        )
    )


def _steady(results: list[dict[str, Any]], after: float, interval: float) -> list[float]:
    """The reports' latencies once every run has started (made at or after ``after``, wall
    clock) and before the last interval of reports (when the first runs end and the runs'
    finishing appends come): the fleet at its steady rate, without its start and end."""
    made = [at for r in results for at in r["report_at"]]
    if not made:
        return []
    before = max(made) - interval
    return [
        ms
        for r in results
        for ms, at in zip(r["report_ms"], r["report_at"], strict=True)
        if after <= at < before
    ]


def _appends_per_commit(results: list[dict[str, Any]]) -> float | None:
    """The worker processes' mean group (appends a transaction, group commit)."""
    groups = sum(r["group_commit"]["groups"] for r in results)
    appends = sum(r["group_commit"]["appends"] for r in results)
    return round(appends / groups, 2) if groups else None


# ---------------------------------------------------------------------------------- backends


def _pg_conninfo(url: str) -> str:
    base = url.split("?", 1)[0]
    return base.replace("postgresql+psycopg://", "postgresql://")


class Backend:
    """A fresh store for one configuration, and what it costs on disk and in server CPU."""

    def __init__(self, name: str, url: str | None, keep: bool, lock_wait: str = "sqlite") -> None:
        self.name = name
        self.keep = keep
        self.tag = f"wgfleet_{uuid.uuid4().hex[:10]}"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if name == "sqlite":
            if url is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="wgfleet-")
                url = f"sqlite:///{self._tmp.name}/fleet.db"
            self.path = Path(url.removeprefix("sqlite:///").partition("?")[0])
            sep = "&" if "?" in url else "?"
            self.url = f"{url}{sep}lock_wait={lock_wait}"
        else:
            import psycopg

            base = url or PG_URL
            self.conninfo = _pg_conninfo(base)
            with psycopg.connect(self.conninfo, autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {self.tag}")
            sep = "&" if "?" in base else "?"
            self.url = f"{base}{sep}options=-csearch_path%3D{self.tag}&application_name={self.tag}"

    def close(self) -> None:
        if self.name == "postgres" and not self.keep:
            import psycopg

            with psycopg.connect(self.conninfo, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {self.tag} CASCADE")
        if self._tmp is not None and not self.keep:
            self._tmp.cleanup()

    def backend_cpu(self) -> dict[int, float]:
        """CPU seconds so far of each server backend of this bench (Postgres), by pid."""
        if self.name != "postgres":
            return {}
        import psycopg

        ticks = os.sysconf("SC_CLK_TCK")
        found: dict[int, float] = {}
        with psycopg.connect(self.conninfo, autocommit=True) as admin:
            pids = [
                r[0]
                for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.tag,)
                )
            ]
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[pid] = (int(fields[11]) + int(fields[12])) / ticks
        return found

    def reset_statements(self) -> None:
        """Postgres: zero ``pg_stat_statements`` (the extension must be loaded and created:
        bench/pg_profile.py starts a server that has it)."""
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as admin:
            try:
                admin.execute("SELECT public.pg_stat_statements_reset()")
            except psycopg.errors.UndefinedFunction as error:
                raise SystemExit(
                    "--statements needs pg_stat_statements in the database (loaded with "
                    "shared_preload_libraries, then CREATE EXTENSION pg_stat_statements): "
                    "bench/pg_profile.py starts a private server that has it"
                ) from error

    def statements(self) -> list[dict[str, Any]]:
        """Postgres: every statement ``pg_stat_statements`` saw since the reset, this database's
        (``toplevel`` false: run inside a function, such as ``wg_append``'s INSERT)."""
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT toplevel, calls, total_exec_time, rows, query "
                "FROM public.pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchall()
        return [
            {
                "toplevel": bool(toplevel),
                "calls": int(calls),
                "exec_ms": float(exec_ms),
                "rows": int(count),
                "query": " ".join(str(query).split()),
            }
            for toplevel, calls, exec_ms, count, query in rows
        ]

    def sizes(self, store: Any) -> tuple[int, int, dict[str, dict[str, int]]]:
        """Bytes of every table with its indexes, of ``wg_events`` with its indexes, and per
        event type: events and their rows' bytes (``pg_column_size`` / ``length`` of columns)."""
        import sqlalchemy as sa

        by_type: dict[str, dict[str, int]] = {}
        with store.engine.connect() as connection:
            if self.name == "postgres":
                total = connection.execute(
                    sa.text(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = :s AND c.relkind IN ('r', 'm')"
                    ),
                    {"s": self.tag},
                ).scalar_one()
                log_bytes = connection.execute(
                    sa.text("SELECT pg_total_relation_size('wg_events')")
                ).scalar_one()
                rows = connection.execute(
                    sa.text(
                        "SELECT event_type, count(*), sum(pg_column_size(e.*)) "
                        "FROM wg_events e GROUP BY event_type"
                    )
                )
            else:
                total = connection.execute(
                    sa.text(
                        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
                    )
                ).scalar_one()
                log_bytes = connection.execute(
                    sa.text(
                        "SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM "
                        "sqlite_master WHERE tbl_name = 'wg_events')"
                    )
                ).scalar_one()
                rows = connection.execute(
                    sa.text(
                        "SELECT event_type, count(*), sum(length(data) + length(metadata) + "
                        "length(stream_id) + length(event_type) + length(hash) + length(log_hash) + 40) "
                        "FROM wg_events GROUP BY event_type"
                    )
                )
            for event_type, count, size in rows:
                by_type[event_type] = {"events": int(count), "row_bytes": int(size or 0)}
        return int(total), int(log_bytes or 0), by_type


# ---------------------------------------------------------------------------------- the reader


class Reader:
    """The read-model catch-up in a thread, and samples of head, checkpoint and backend CPU."""

    def __init__(self, store: Any, backend: Backend) -> None:
        self.store = store
        self.backend = backend
        self.stop = threading.Event()
        self.heads: list[tuple[float, int]] = []
        self.catch_ups: list[tuple[float, int]] = []
        self.lag_events: list[int] = []
        self.cpu: dict[int, float] = {}
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._catch_up, daemon=True),
            threading.Thread(target=self._sample, daemon=True),
        ]

    def start(self) -> Reader:
        for thread in self._threads:
            thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(120)
        self._catch_up_once()

    def _checkpoint(self) -> int:
        from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION

        return self.store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()

    def _catch_up_once(self) -> None:
        from wgstore.projections.projector import catch_up_read_models

        catch_up_read_models(self.store)
        self.catch_ups.append((time.monotonic(), self._checkpoint()))

    def _catch_up(self) -> None:
        while not self.stop.is_set():
            try:
                self._catch_up_once()
            except Exception as error:  # noqa: BLE001 - reported
                self.errors.append(f"{type(error).__name__}: {error}")
            self.stop.wait(0.2)

    def _sample(self) -> None:
        next_cpu = 0.0
        while not self.stop.is_set():
            try:
                now = time.monotonic()
                head = self.store.head()
                self.heads.append((now, head))
                self.lag_events.append(head - self._checkpoint())
                if now >= next_cpu:
                    next_cpu = now + 1.0
                    for pid, cpu in self.backend.backend_cpu().items():
                        self.cpu[pid] = max(cpu, self.cpu.get(pid, 0.0))
            except Exception as error:  # noqa: BLE001 - reported
                self.errors.append(f"{type(error).__name__}: {error}")
            self.stop.wait(0.2)

    def lag_seconds(self) -> tuple[float | None, float | None]:
        """Max over head samples of the time until a catch-up's checkpoint reached that head,
        and when that head was sampled (seconds after the first sample)."""
        worst, at = 0.0, None
        ups = self.catch_ups
        j = 0
        for t, head in self.heads:
            while j < len(ups) and (ups[j][0] < t or ups[j][1] < head):
                if ups[j][0] >= t and ups[j][1] >= head:
                    break
                j += 1
            if j == len(ups):
                return None, None
            if ups[j][0] - t >= worst:
                worst, at = ups[j][0] - t, t - self.heads[0][0]
        return worst, at


# ---------------------------------------------------------------------------------- one configuration


def _create_runs(store: Any, run_ids: list[str], args: argparse.Namespace) -> None:
    from wgstore.events import NO_STREAM, AppendRequest
    from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
    from wgstore.events.streams import run_stream
    from wgstore.events.worker_group import WorkerGroupContext

    context = WorkerGroupContext(
        num_workers=args.workers,
        train_fn=TRAIN_FN,
        poll_interval_s=args.interval,
        resources_per_worker={"CPU": 0.0},
        shutdown_patience_s=0.5,
    )
    requests = [
        AppendRequest(
            run_stream(run_id),
            [
                RunCreated(
                    run_id=run_id,
                    scaling_config=ScalingConfig(num_workers=args.workers),
                    failure_config=FailureConfig(max_failures=1),
                    context=context,
                    lease_s=60.0,
                )
            ],
            NO_STREAM,
        )
        for run_id in run_ids
    ]
    for k in range(0, len(requests), 200):
        store.append_many(requests[k : k + 200])


PHASE_TYPES = ("WorkerGroupStartRequested", "TrainingLaunched", "WorkerReported", "RunFinished")


def _phases(store: Any, after: int) -> dict[str, dict[str, float]]:
    """When the fleet's runs got where, from the log's own times: for each of ``PHASE_TYPES``,
    seconds from the window's first event to the 10th, 50th and 90th percentile and the last of
    that type (a fleet whose starts lag shows its launches spread over the window)."""
    times: dict[str, list[float]] = {name: [] for name in PHASE_TYPES}
    first: float | None = None
    for record in store.read_all(after, types=(*PHASE_TYPES, "ControllerStarted")):
        at = record.recorded_at.timestamp()
        first = at if first is None else min(first, at)
        if record.type in times:
            times[record.type].append(at)
    if first is None:
        return {}
    quantiles = (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("last", 1.0))
    return {
        name: {label: round(_pct(ts, q) - first, 1) for label, q in quantiles}
        for name, ts in times.items()
        if ts
    }


def _check(store: Any, run_ids: list[str], made: Counter[str]) -> dict[str, Any]:
    """Fold every stream: reports per (group, rank) against what workers appended."""
    import sqlalchemy as sa

    from wgstore.events.streams import group_stream
    from wgstore.orchestration.run.controller import read_run
    from wgstore.projections.state import project_worker_group

    logged: Counter[str] = Counter()
    ids: set[Any] = set()
    duplicates = 0
    statuses: Counter[str] = Counter()
    folded_reports = 0
    for run_id in run_ids:
        run = read_run(store, run_id)
        statuses[run.status.value] += 1
        for group_id in run.groups:
            records = list(store.read_stream(group_stream(group_id)))
            for record in records:
                if record.event_id in ids:
                    duplicates += 1
                ids.add(record.event_id)
                if record.type == "WorkerReported":
                    logged[f"{group_id}/{record.event.world_rank}"] += 1
            state = project_worker_group(records)
            folded_reports += sum(1 for r in records if r.type == "WorkerReported")
            del state
    with store.engine.connect() as connection:
        read_model_reports = connection.execute(
            sa.text("SELECT count(*) FROM wg_reports")
        ).scalar_one()
    lost = sum((made - logged).values())
    extra = sum((logged - made).values())
    return {
        "reports_made": sum(made.values()),
        "reports_in_log": sum(logged.values()),
        "lost": lost,
        "unexpected": extra,
        "duplicate_event_ids": duplicates,
        "read_model_reports": int(read_model_reports),
        "runs": dict(statuses),
        "ok": lost == 0
        and extra == 0
        and duplicates == 0
        and int(read_model_reports) == sum(logged.values())
        and statuses.get("FINISHED", 0) == len(run_ids),
    }


def _grow(store: Any, run_ids: list[str], target: int, metrics: int) -> dict[str, Any]:
    """Pad the log to ``target`` events with reports of the fleet's shape (``--metrics``
    metrics, the workers' metadata, each rank's indexes going on from its last report) appended
    400 at a time to the fleet's group streams, for the log-growth measurements at size."""
    from wgstore.events import AppendRequest, NewEvent
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import WorkerReported
    from wgstore.orchestration.run.controller import read_run
    from wgstore.projections.state import project_worker_group

    groups: list[tuple[str, int, dict[int, int]]] = []
    for run_id in run_ids:
        for group_id in read_run(store, run_id).groups:
            state = project_worker_group(store.read_stream(group_stream(group_id)))
            last = {
                rank: state.last_report_index.get(rank, 0) for rank in range(len(state.workers))
            }
            groups.append((group_id, len(state.workers), last))
    names = [f"metric_{k}" for k in range(max(0, metrics - 1))]
    t0 = time.perf_counter()
    appended = 0
    g = 0
    while store.head() < target:
        group_id, workers, last = groups[g % len(groups)]
        g += 1
        events = []
        for _ in range(400 // workers):
            for rank in range(workers):
                last[rank] += 1
                index = last[rank]
                values: dict[str, Any] = {"index": index}
                for k, name in enumerate(names):
                    values[name] = index * 0.001 + k
                events.append(
                    NewEvent(
                        WorkerReported(world_rank=rank, index=index, metrics=values),
                        metadata={
                            "actor": f"{group_id}-w{rank}",
                            "source": "worker",
                            "world_rank": rank,
                        },
                    )
                )
        store.append_many([AppendRequest(group_stream(group_id), events)])
        appended += len(events)
    return {"appended": appended, "append_s": round(time.perf_counter() - t0, 1)}


def _timed_at_size(store: Any, url: str) -> dict[str, Any]:
    """What a user runs on a log of this size, timed: the read models' catch-up (in this
    process), then ``wgstore verify`` (hash chains and read models against a rebuild) and
    ``wgstore verify --no-read-models`` (the chains), each in a fresh process."""
    import subprocess

    from wgstore.projections.projector import catch_up_read_models

    t0 = time.perf_counter()
    catch_up_read_models(store)
    caught = time.perf_counter() - t0
    wgstore = str(Path(sys.executable).with_name("wgstore"))
    timed: dict[str, Any] = {"events": store.head(), "catch_up_s": round(caught, 1)}
    for label, extra in (("verify_s", []), ("verify_chains_s", ["--no-read-models"])):
        t0 = time.perf_counter()
        done = subprocess.run(
            [wgstore, "--url", url, "verify", *extra], capture_output=True, text=True, check=False
        )
        timed[label] = round(time.perf_counter() - t0, 1)
        timed[label.replace("_s", "_exit")] = done.returncode
        if done.returncode != 0:
            timed[label.replace("_s", "_output")] = (done.stdout + done.stderr)[-500:]
    timed["load"] = [round(x, 1) for x in os.getloadavg()]
    return timed


def run_config(args: argparse.Namespace, backend_name: str) -> dict[str, Any]:
    """Run one configuration on one backend; returns its report (``REPORT_KEYS``)."""
    from wgstore.events import EventStore
    from wgstore.projections.projector import catch_up_read_models

    load_start = os.getloadavg()
    backend = Backend(backend_name, args.url if args.url else None, args.keep, args.lock_wait)
    try:
        with EventStore.open(backend.url) as store:
            run_ids = [f"fleet-{k:05d}" for k in range(args.runs)]
            _create_runs(store, run_ids, args)
            # The read models take in the runs created before the clock starts: the lag
            # measured is the fleet's, not the reader's first fold of a thousand runs (which, at
            # the start, made the max of some runs: 1,000 events behind at t = 0).
            catch_up_read_models(store)
            failing = run_ids[: round(args.fail_share * args.runs)]
            reports = max(3, round(args.duration / args.interval))
            procs = max(1, min(args.procs, args.runs))
            start_at = time.time() + args.spawn_s
            with tempfile.TemporaryDirectory(prefix="wgfleet-out-") as out:
                ctx = multiprocessing.get_context("spawn")
                children = []
                # run k of n starts k/n of the stagger after the others' common start
                delays = {r: args.stagger_s * k / len(run_ids) for k, r in enumerate(run_ids)}
                for p in range(procs):
                    mine = run_ids[p::procs]
                    spec = {
                        "url": backend.url,
                        "runs": mine,
                        "delays_s": [delays[r] for r in mine],
                        "failing": [r for r in failing if r in set(mine)],
                        "fail_at": max(3, reports // 3),
                        "reports": reports,
                        "metrics": args.metrics,
                        "threads": args.threads,
                        "wake": args.wake,
                        "group_limit": args.group_limit,
                        "start_at": start_at,
                        "timeout_s": args.duration * 3 + 600,
                        "profile": args.profile if p == 0 and args.profile else None,
                    }
                    child = ctx.Process(target=worker_process, args=(spec, f"{out}/{p}.json"))
                    child.start()
                    children.append(child)
                while time.time() < start_at:
                    time.sleep(0.05)
                if args.statements:
                    backend.reset_statements()
                head0 = store.head()
                t0 = time.monotonic()
                cpu0 = time.process_time()
                reader = Reader(store, backend).start()
                for child in children:
                    child.join()
                wall = time.monotonic() - t0
                reader.finish()
                reader_cpu = time.process_time() - cpu0
                statements = backend.statements() if args.statements else None
                results = []
                for p, child in enumerate(children):
                    path = Path(f"{out}/{p}.json")
                    if child.exitcode != 0 or not path.exists():
                        raise RuntimeError(f"worker process {p} failed (exit {child.exitcode})")
                    results.append(json.loads(path.read_text()))
            head = store.head()
            made: Counter[str] = Counter()
            for result in results:
                made.update(result["made"])
            check = _check(store, run_ids, made)
            phases = _phases(store, head0)
            total_bytes, log_bytes, by_type = backend.sizes(store)
            v0 = time.perf_counter()
            verified = store.verify()
            verify_s = time.perf_counter() - v0
            at_size = None
            if args.verify_at:
                at_size = _grow(store, run_ids, args.verify_at, args.metrics)
                at_size.update(_timed_at_size(store, backend.url))
                at_size["bytes"], at_size["log_bytes"], _ = backend.sizes(store)
    finally:
        backend.close()
    load_end = os.getloadavg()
    events = head - head0
    report_ms = [x for r in results for x in r["report_ms"]]
    steady_ms = _steady(results, start_at + args.stagger_s + args.interval, args.interval)
    poll_ms = [x for r in results for x in r["poll_ms"]]
    client_cpu = sum(r["cpu_s"] for r in results) + reader_cpu
    server_cpu = sum(reader.cpu.values()) if backend_name == "postgres" else None
    # sustained: the middle 80 % of the window the head moved in
    heads = reader.heads
    sustained = None
    if len(heads) >= 5:
        a, b = heads[len(heads) // 10], heads[len(heads) * 9 // 10]
        if b[0] > a[0]:
            sustained = (b[1] - a[1]) / (b[0] - a[0])
    run_hours = args.runs * wall / 3600.0
    row_total = sum(v["row_bytes"] for v in by_type.values()) or 1
    types = {
        name: {
            "events": v["events"],
            "bytes_per_event": round(log_bytes * v["row_bytes"] / row_total / v["events"]),
            "events_per_run_hour": round(v["events"] / run_hours, 1),
            "bytes_per_run_hour": round(log_bytes * v["row_bytes"] / row_total / run_hours),
        }
        for name, v in sorted(by_type.items(), key=lambda kv: -kv[1]["row_bytes"])
    }
    lag_s, lag_at = reader.lag_seconds()
    return {
        "config": {
            "backend": backend_name,
            "runs": args.runs,
            "workers": args.workers,
            "interval_s": args.interval,
            "metrics": args.metrics,
            "fail_share": args.fail_share,
            "duration_s": args.duration,
            "stagger_s": args.stagger_s,
            "procs": procs,
            "threads": args.threads,
            "wake": args.wake,
            "group_limit": args.group_limit,
            "lock_wait": args.lock_wait if backend_name == "sqlite" else None,
            "reports_per_worker": reports,
        },
        "load_start": [round(x, 1) for x in load_start],
        "load_end": [round(x, 1) for x in load_end],
        "wall_s": round(wall, 1),
        "events": events,
        "events_per_s": _round(sustained, 1),
        "reports_per_s": round(len(report_ms) / wall, 1),
        "offered_reports_per_s": round(args.runs * args.workers / args.interval, 1),
        "report_ms": _ms(report_ms),
        "report_ms_steady": _ms(steady_ms),
        "poll_append_ms": _ms(poll_ms),
        "appends_per_commit": _appends_per_commit(results),
        "scheduling_late_ms": _ms([x for r in results for x in r["scheduling_late_ms"]]),
        "read_model_lag": {
            "events_max": max(reader.lag_events) if reader.lag_events else None,
            "seconds_max": _round(lag_s),
            "seconds_max_at_s": _round(lag_at),
            "catch_ups": len(reader.catch_ups),
            "errors": reader.errors[:5],
        },
        "cpu_ms_per_1000_events": {
            "client": round(client_cpu * 1e6 / max(events, 1), 1),
            "client_workers": round((client_cpu - reader_cpu) * 1e6 / max(events, 1), 1),
            "client_reader": round(reader_cpu * 1e6 / max(events, 1), 1),
            "server": None if server_cpu is None else round(server_cpu * 1e6 / max(events, 1), 1),
            "server_note": (
                "Postgres backends of this bench (/proc/<pid>/stat, sampled each second)"
                if backend_name == "postgres"
                else "in-process (SQLite): inside client"
            ),
        },
        "statements": None
        if statements is None
        else _by_statement(statements, events, server_cpu, args.statements),
        "bytes": total_bytes,
        "log_bytes": log_bytes,
        "bytes_per_run_hour": round(total_bytes / run_hours),
        "by_type": types,
        "phases_s": phases,
        "verify": {"s": round(verify_s, 3), "events": head, "ok": bool(verified.ok)},
        "at_size": at_size,
        "check": {**check, "errors": [e for r in results for e in r["errors"]][:10]},
    }


def _by_statement(
    statements: list[dict[str, Any]], events: int, server_cpu: float | None, top: int
) -> dict[str, Any]:
    """The ``top`` statements by execution time over the measured window, each per appended
    event: calls per 1,000 events, µs of execution per event and its share of all top-level
    execution; nested statements (inside functions) apart, their time part of their caller's.
    The server's CPU (``/proc``) is the same window's, for scale: execution time is wall time
    in the executor (waits for locks and the WAL flush included), not CPU."""
    per_event = max(events, 1)

    def rows(toplevel: bool, total_ms: float) -> list[dict[str, Any]]:
        chosen = sorted(
            (s for s in statements if s["toplevel"] is toplevel), key=lambda s: -s["exec_ms"]
        )
        return [
            {
                "calls_per_1000_events": round(s["calls"] * 1000 / per_event, 1),
                "exec_us_per_event": round(s["exec_ms"] * 1000 / per_event, 1),
                "share": round(s["exec_ms"] / total_ms, 3) if total_ms else None,
                "ms_per_call": round(s["exec_ms"] / s["calls"], 3) if s["calls"] else None,
                "rows_per_call": round(s["rows"] / s["calls"], 1) if s["calls"] else None,
                "query": s["query"][:300],
            }
            for s in chosen[:top]
        ]

    total_ms = sum(s["exec_ms"] for s in statements if s["toplevel"])
    return {
        "events": events,
        "toplevel_exec_us_per_event": round(total_ms * 1000 / per_event, 1),
        "toplevel_calls_per_event": round(
            sum(s["calls"] for s in statements if s["toplevel"]) / per_event, 2
        ),
        "server_cpu_us_per_event": None
        if server_cpu is None
        else round(server_cpu * 1e6 / per_event, 1),
        "toplevel": rows(True, total_ms),
        "nested": rows(False, total_ms),
    }


def _print(report: dict[str, Any]) -> None:
    c = report["config"]
    lag = report["read_model_lag"]
    cpu = report["cpu_ms_per_1000_events"]
    print(
        f"{c['backend']:8} runs={c['runs']} workers={c['workers']} every {c['interval_s']}s "
        f"metrics={c['metrics']} fail={c['fail_share']} procs={c['procs']} wake={c['wake']} "
        f"load {report['load_start'][0]}->{report['load_end'][0]}"
    )
    print(
        f"  wall {report['wall_s']} s, {report['events']} events, sustained "
        f"{report['events_per_s']} ev/s; reports {report['reports_per_s']}/s of "
        f"{report['offered_reports_per_s']} offered"
    )
    print(
        f"  report() ms p50 {report['report_ms']['p50']} p99 {report['report_ms']['p99']} "
        f"max {report['report_ms']['max']} (steady: p50 {report['report_ms_steady']['p50']} "
        f"p99 {report['report_ms_steady']['p99']}); poll appends p50 "
        f"{report['poll_append_ms']['p50']} "
        f"p99 {report['poll_append_ms']['p99']}; a ready thread's wait p99 "
        f"{report['scheduling_late_ms']['p99']} max {report['scheduling_late_ms']['max']}"
    )
    print(
        f"  read-model lag max {lag['events_max']} events, {lag['seconds_max']} s; CPU per 1,000 "
        f"events client {cpu['client']} ms (workers {cpu.get('client_workers')}, reader "
        f"{cpu.get('client_reader')}), server {cpu['server']} ms"
    )
    print(
        f"  {report['bytes']:,} bytes ({report['log_bytes']:,} of wg_events), "
        f"{report['bytes_per_run_hour']:,} bytes per run-hour (by type: wg_events' share)"
    )
    for name, t in report["by_type"].items():
        print(
            f"    {name:28} {t['events']:7} events {t['bytes_per_event']:6} B/event "
            f"{t['events_per_run_hour']:9} /run-h {t['bytes_per_run_hour']:11,} B/run-h"
        )
    print(f"  verify: {report['verify']}")
    if report.get("at_size"):
        print(f"  at size: {report['at_size']}")
    print(f"  check: {report['check']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--url", help="backend URL (default: a fresh file / schema)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4, help="workers per run")
    parser.add_argument("--interval", type=float, default=1.0, help="report/poll interval, s")
    parser.add_argument("--metrics", type=int, default=10, help="metrics per report")
    parser.add_argument("--fail-share", type=float, default=0.1, help="share of runs retried")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of reports")
    parser.add_argument("--procs", type=int, default=2, help="worker processes")
    parser.add_argument("--threads", type=int, default=8, help="executor threads per process")
    parser.add_argument("--spawn-s", type=float, default=8.0, help="time given to spawn")
    parser.add_argument(
        "--stagger-s",
        type=float,
        help="start the runs spread evenly over this many seconds (default: one --interval, "
        "so their polls and reports are spread over it, as a platform's runs started at "
        "different times are; 0: every run at once, the fleet's start storm)",
    )
    parser.add_argument("--profile", help="cProfile output of worker process 0")
    parser.add_argument(
        "--lock-wait",
        choices=("sqlite", "short"),
        default="sqlite",
        help="SQLite: how a writer waits for another's lock (the store URL's lock_wait)",
    )
    parser.add_argument(
        "--group-limit",
        type=int,
        default=64,
        help="appends a worker process's store writes in one transaction at most (group "
        "commit; 1: each alone, as before it, for an A/B)",
    )
    parser.add_argument(
        "--wake",
        choices=["streams", "all"],
        default="streams",
        help="streams: the library's controllers (woken for their own streams); all: a "
        "reference, the controllers' whole-log wait from before issue 25's fix, for an A/B at "
        "the same load",
    )
    parser.add_argument(
        "--verify-at",
        type=int,
        metavar="EVENTS",
        help="afterwards, pad the log with reports of the fleet's shape to EVENTS events and "
        "time the read models' catch-up, `wgstore verify` and `wgstore verify "
        "--no-read-models` at that size",
    )
    parser.add_argument(
        "--statements",
        type=int,
        metavar="N",
        help="Postgres: the N statements that took the server's time over the measured window, "
        "from pg_stat_statements (bench/pg_profile.py starts a private server that loads it)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the schema / file")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    for name in ("runs", "workers", "metrics", "procs", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.interval <= 0 or args.duration <= 0:
        parser.error("--interval and --duration must be > 0")
    if args.statements is not None and (args.backend != "postgres" or args.statements < 1):
        parser.error("--statements N: N >= 1, with --backend postgres")
    if args.stagger_s is None:
        args.stagger_s = args.interval
    if args.stagger_s < 0:
        parser.error("--stagger-s must be >= 0")
    if not 0 <= args.fail_share <= 1:
        parser.error("--fail-share is a share of runs, between 0 and 1")
    report = run_config(args, args.backend)
    report["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0 if report["check"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
