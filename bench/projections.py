"""Benchmark the projections beside a plain read of the same rows, in the same run (issue 4).

Workloads, on SQLite (a file) and PostgreSQL (a fresh schema), each repeated with the median
reported:

- P1 replay: one 10,000-event worker-group stream (8 workers; half polls with a change, half
  reports; ~300-byte payloads) folded into ``WorkerGroupState`` through
  ``project_worker_group(store.read_stream(...))``, beside a plain ``SELECT data ... ORDER BY
  stream_version`` with ``json.loads`` per row (sqlite3 / psycopg). Events/s and the ratio
  wgstore / plain (above 1.0: wgstore is faster).
- P2 latest state of a 1,000,000-event stream: ``worker_group_state`` without snapshots (the whole
  fold) and with a snapshot 100 events behind the head (snapshot + tail). Goal with snapshots:
  under 50 ms. ``--long-events`` scales it down.
- P3 the last hour of a day of 1 Hz polls for 64 workers: 86,400 polls, every one recorded (the
  worst case: a real executor stores only polls that changed something) and one in 600 with a
  change; ``poll_history(store, group, since=<an hour before the end>)``, every poll with the
  full status of all 64 workers, beside a plain read of the hour's rows. Goal: under 50 ms.

P1 appends through ``EventStore.append``. P2 and P3 load their rows with one bulk INSERT/COPY
(with ``recorded_at`` spread over the day for P3, as a real day of appends would have) and a
placeholder hash: only reading is measured here, ``bench/store.py`` measures appends.

Run ``python bench/projections.py --help``; ``--json`` prints the results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.worker_group import (
    ErrorInfo,
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupStarted,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.projections import (
    poll_history,
    project_worker_group,
    save_snapshot,
    worker_group_state,
)

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
META = json.dumps({"host": platform.node(), "pid": os.getpid(), "wgstore": "bench"})


@dataclass
class Result:
    """One measured line of the table; ``events`` counts the events read and folded."""

    backend: str
    workload: str
    events: int
    wgstore_ms: float
    plain_ms: float | None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """wgstore's speed as a share of plain SQL's (plain time / wgstore time)."""
        if self.plain_ms is None or self.wgstore_ms == 0:
            return None
        return self.plain_ms / self.wgstore_ms


# ------------------------------------------------------------------------------- the events


def _workers(n: int) -> tuple[WorkerInfo, ...]:
    return tuple(
        WorkerInfo(
            world_rank=r,
            local_rank=r % 8,
            node_rank=r // 8,
            local_world_size=8,
            world_size=n,
            node_id=f"node-{r // 8:02d}-{'a' * 40}",
            node_ip=f"10.0.{r // 8}.1",
            pid=10_000 + r,
            actor_id=uuid.uuid4().hex,
            actor_name=f"wgstore-bench-{r}",
            gpu_ids=(str(r % 8),),
        )
        for r in range(n)
    )


def _start(group_id: str, n: int, at: datetime) -> list[Any]:
    context = WorkerGroupContext(
        num_workers=n,
        resources_per_worker={"CPU": 1.0, "GPU": 1.0},
        train_fn="examples.train:train_fn",
        train_fn_config={"steps": 1000},
    )
    return [
        WorkerGroupStartRequested(group_id=group_id, run_id="bench", attempt=1, context=context),
        PlacementGroupReserved(
            placement_group_id=uuid.uuid4().hex,
            name=f"wgstore-{group_id}",
            bundles=tuple({"CPU": 1.0, "GPU": 1.0} for _ in range(n)),
            strategy="PACK",
        ),
        SyncActorStarted(actor_id=uuid.uuid4().hex, name=f"wgstore-{group_id}-sync"),
        WorkersStarted(workers=_workers(n)),
        WorkerGroupStarted(start_time=at, startup_s=3.2),
        TrainingLaunched(train_fn="examples.train:train_fn"),
    ]


def _mixed(group_id: str, total: int, n: int, at: datetime) -> list[Any]:
    """A start, then polls (each flipping one worker) and reports, alternating."""
    events = _start(group_id, n, at)
    seq = 0
    running = [True] * n
    index = [0] * n
    i = 0
    while len(events) < total:
        i += 1
        rank = i % n
        if i % 2:
            seq += 4
            running[rank] = not running[rank]
            error = (
                None
                if running[rank] or i % 7
                else ErrorInfo(type="RuntimeError", message=f"step {i} failed")
            )
            events.append(
                WorkerGroupPolled(
                    poll_seq=seq,
                    polled_at=at + timedelta(seconds=seq),
                    changes=(
                        WorkerStatusChange(world_rank=rank, running=running[rank], error=error),
                    ),
                    unchanged_polls=3,
                    unchanged_since=at + timedelta(seconds=seq - 3),
                )
            )
        else:
            index[rank] += 1
            events.append(
                WorkerReported(
                    world_rank=rank,
                    index=index[rank],
                    metrics={"loss": 1.0 / i, "step": i, "lr": 0.0003, "tokens_per_s": 123456.7},
                    checkpoint=None if i % 100 else f"/checkpoints/bench/{i}",
                )
            )
    return events


def _poll_day(group_id: str, n: int, start: datetime, polls: int) -> list[tuple[Any, datetime]]:
    """A day of 1 Hz polls, every one recorded; one in 600 stops or restarts a worker."""
    rows = [(event, start) for event in _start(group_id, n, start)]
    running = [True] * n
    for seq in range(1, polls + 1):
        at = start + timedelta(seconds=seq)
        changes: tuple[WorkerStatusChange, ...] = ()
        if seq % 600 == 0:
            rank = (seq // 600) % n
            running[rank] = not running[rank]
            changes = (WorkerStatusChange(world_rank=rank, running=running[rank]),)
        rows.append((WorkerGroupPolled(poll_seq=seq, polled_at=at, changes=changes), at))
    return rows


# ------------------------------------------------------------------------------- backends


@dataclass
class Backend:
    """A fresh database: the wgstore store on it, and a plain driver connection to it."""

    name: str
    store: EventStore
    plain: Any
    param: str
    url: str


@contextmanager
def _backend(name: str) -> Iterator[Backend]:
    if name == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "bench.db"
            url = f"sqlite:///{path}"
            store = EventStore.open(url, synchronous="NORMAL")
            plain = sqlite3.connect(path, isolation_level=None)
            try:
                yield Backend("sqlite", store, plain, "?", url)
            finally:
                plain.close()
                store.close()
        return
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:10]}"
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    store = EventStore.open(url)
    plain = psycopg.connect(conninfo, autocommit=True, options=f"-csearch_path={schema}")
    try:
        yield Backend("postgres", store, plain, "%s", url)
    finally:
        plain.close()
        store.close()
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _bulk_load(backend: Backend, stream_id: str, rows: list[tuple[Any, datetime]]) -> None:
    """Insert ``rows`` (event, recorded_at) as versions 1..n of ``stream_id`` in one go."""
    codec = backend.store.codec
    placeholder = "0" * 64
    records = []
    for version, (event, at) in enumerate(rows, start=1):
        info, data = codec.encode(event)
        records.append(
            (
                str(uuid.uuid4()),
                stream_id,
                version,
                info.name,
                info.version,
                data,
                META,
                at,
                placeholder,
                placeholder,
            )
        )
    columns = (
        "event_id, stream_id, stream_version, event_type, schema_version, data, metadata, "
        "recorded_at, hash, log_hash"
    )
    if backend.name == "sqlite":
        fmt = "%Y-%m-%d %H:%M:%S.%f"
        backend.plain.execute("BEGIN IMMEDIATE")
        # Positions given, each the last plus one, as the writer does (migration 0012's trigger
        # refuses any other, and an INSERT without one).
        (last,) = backend.plain.execute(
            "SELECT coalesce(max(position), 0) FROM wg_events"
        ).fetchone()
        backend.plain.executemany(
            f"INSERT INTO wg_events (position, {columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(last + i, *r[:7], r[7].strftime(fmt), *r[8:]) for i, r in enumerate(records, 1)],
        )
        backend.plain.execute("COMMIT")
        return
    with backend.plain.transaction(), backend.plain.cursor() as cursor:
        with cursor.copy(f"COPY wg_events ({columns}) FROM STDIN") as copy:
            for record in records:
                copy.write_row(record)
        cursor.execute("ANALYZE wg_events")


def _plain_read(backend: Backend, sql: str, params: tuple[Any, ...]) -> int:
    cursor = backend.plain.cursor()
    cursor.execute(sql, params)
    count = 0
    loads = json.loads
    for (data,) in cursor:
        loads(data)
        count += 1
    cursor.close()
    return count


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


_MEMORY_PROBE = """
import sys, time
from wgstore.events import EventStore
from wgstore.projections import catch_up_read_models

def status(key):
    with open("/proc/self/status") as lines:
        return next(int(l.split()[1]) * 1024 for l in lines if l.startswith(key))

url, what = sys.argv[1], sys.argv[2]
store = EventStore.open(url)
store.head()  # connected, migrated, caches warm: the baseline
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # reset the peak (VmHWM) to the current RSS
base = status("VmRSS:")
start = time.perf_counter()
if what == "read_all":
    count = sum(1 for _ in store.read_all())
else:
    count = catch_up_read_models(store)
ms = (time.perf_counter() - start) * 1000
print(ms, max(0, status("VmHWM:") - base), count)
"""


def _memory_probe(url: str, what: str) -> tuple[float, int]:
    """Run ``read_all`` or a projector catch-up in a fresh interpreter on ``url``: its wall time
    in ms and its peak RSS above the RSS it had with the store open (Linux's ``VmHWM``, reset
    just before), so nothing this process allocated before hides or inflates the growth."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, url, what],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def _median_pair(
    wg: Callable[[], Any], plain: Callable[[], Any] | None, repeat: int
) -> tuple[float, float | None]:
    wg_times, plain_times = [], []
    wg()  # warm up (statement caches, page cache)
    if plain is not None:
        plain()
    for _ in range(repeat):
        wg_times.append(_timed(wg))
        if plain is not None:
            plain_times.append(_timed(plain))
    return statistics.median(wg_times), statistics.median(plain_times) if plain_times else None


# ------------------------------------------------------------------------------- workloads


def bench_replay(backend: Backend, events: int, repeat: int) -> list[Result]:
    """P1: fold a stream of ``events`` events into WorkerGroupState beside a plain read."""
    stream = "worker-group-replay"
    batch = _mixed("replay", events, 8, datetime.now(UTC))
    for i in range(0, len(batch), 1000):
        backend.store.append(stream, batch[i : i + 1000])
    data = "data::text" if backend.name == "postgres" else "data"
    sql = f"SELECT {data} FROM wg_events WHERE stream_id = {backend.param} ORDER BY stream_version"
    store = backend.store
    state = project_worker_group(store.read_stream(stream))
    assert state.version == events
    fold, plain = _median_pair(
        lambda: project_worker_group(store.read_stream(stream)),
        lambda: _plain_read(backend, sql, (stream,)),
        repeat,
    )
    decode, _ = _median_pair(lambda: sum(1 for _ in store.read_stream(stream)), None, repeat)
    return [
        Result(backend.name, "P1 replay into WorkerGroupState", events, fold, plain),
        Result(backend.name, "P1 read_stream alone (typed decode)", events, decode, plain),
    ]


def bench_long(backend: Backend, events: int, repeat: int) -> list[Result]:
    """P2: latest state of a long stream, without and with a snapshot 100 events behind."""
    group = "long"
    stream = f"worker-group-{group}"
    now = datetime.now(UTC)
    batch = _mixed(group, events + 100, 8, now)
    tail = batch[events:]  # appended later, after the projector caught up
    _bulk_load(
        backend,
        stream,
        [(e, now + timedelta(microseconds=i)) for i, e in enumerate(batch[:events])],
    )
    del batch
    store = backend.store
    data = "data::text" if backend.name == "postgres" else "data"
    sql = f"SELECT {data} FROM wg_events WHERE stream_id = {backend.param} ORDER BY stream_version"
    full_repeat = max(1, min(repeat, 3))
    full, plain = _median_pair(
        lambda: worker_group_state(store, group, use_snapshots=False),
        lambda: _plain_read(backend, sql, (stream,)),
        full_repeat,
    )
    snapshot_at = events - 100
    save_snapshot(store, project_worker_group(store.read_stream(stream, to_version=snapshot_at)))
    state = worker_group_state(store, group, snapshot_every=10**9)
    assert state.version == events
    with_snapshot, _ = _median_pair(
        lambda: worker_group_state(store, group, snapshot_every=10**9), None, repeat * 4
    )
    read_all_ms, read_all_rss = _memory_probe(backend.url, "read_all")
    # No snapshot by hand: the projector (the executor runs it every few seconds) saves one per
    # batch, and worker_group_state starts from the newest snapshot it finds.
    with store.engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM wg_snapshots"))
    catch_up_ms, catch_up_rss = _memory_probe(backend.url, "catch_up")
    store.append(stream, tail)
    automatic, _ = _median_pair(
        lambda: worker_group_state(store, group, snapshot_every=10**9), None, repeat * 4
    )
    return [
        Result(backend.name, f"P2 latest of {events:,}: no snapshot", events, full, plain),
        Result(
            backend.name,
            f"P2 latest of {events:,}: snapshot + tail",
            100,
            with_snapshot,
            None,
            "goal < 50 ms",
        ),
        Result(
            backend.name,
            "P2 same, projector caught up, +100 appended",
            100,
            automatic,
            None,
            "goal < 50 ms; no snapshot call",
        ),
        Result(
            backend.name,
            f"P4 read_all over {events:,}",
            events,
            read_all_ms,
            None,
            f"peak RSS growth {read_all_rss / 2**20:.1f} MB (goal < 100)",
        ),
        Result(
            backend.name,
            f"P4 projector catch-up of {events:,}",
            events,
            catch_up_ms,
            None,
            f"peak RSS growth {catch_up_rss / 2**20:.1f} MB (goal < 100)",
        ),
    ]


def bench_poll_day(backend: Backend, polls: int, workers: int, repeat: int) -> list[Result]:
    """P3: the last hour of a day of 1 Hz polls (every poll recorded) for ``workers`` workers."""
    group = "day"
    stream = f"worker-group-{group}"
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=polls + 60)
    _bulk_load(backend, stream, _poll_day(group, workers, start, polls))
    end = start + timedelta(seconds=polls)
    since = end - timedelta(hours=1)
    store = backend.store
    started = time.perf_counter()
    history = poll_history(store, group, since=since)
    cold = (time.perf_counter() - started) * 1000
    assert len(history) == min(3601, polls), len(history)
    assert len(history[-1].status.worker_statuses) == workers
    data = "data::text" if backend.name == "postgres" else "data"
    cutoff: Any = since if backend.name == "postgres" else since.strftime("%Y-%m-%d %H:%M:%S.%f")
    sql = (
        f"SELECT {data} FROM wg_events WHERE stream_id = {backend.param} AND event_type = "
        f"{backend.param} AND recorded_at >= {backend.param} ORDER BY stream_version"
    )
    hour, plain = _median_pair(
        lambda: poll_history(store, group, since=since),
        lambda: _plain_read(backend, sql, (stream, "WorkerGroupPolled", cutoff)),
        repeat,
    )
    return [
        Result(
            backend.name,
            f"P3 last hour of {polls:,} polls x {workers} workers",
            len(history),
            hour,
            plain,
            "goal < 50 ms; plain reads the hour's rows only",
        ),
        Result(
            backend.name,
            "P3 same, first call (no saved base yet)",
            len(history),
            cold,
            None,
            "once: scans the day's polls that changed something",
        ),
    ]


# ------------------------------------------------------------------------------- main


def _table(results: list[Result], header: str) -> str:
    lines = [header, ""]
    lines.append(
        f"{'backend':9} {'workload':48} {'events':>10} {'wgstore ms':>11} "
        f"{'ev/s':>11} {'plain ms':>9} {'ratio':>6}  note"
    )
    for r in results:
        rate = r.events / (r.wgstore_ms / 1000) if r.wgstore_ms else 0
        plain = f"{r.plain_ms:9.1f}" if r.plain_ms is not None else f"{'-':>9}"
        ratio = f"{r.ratio:6.2f}" if r.ratio is not None else f"{'-':>6}"
        lines.append(
            f"{r.backend:9} {r.workload:48} {r.events:>10,} {r.wgstore_ms:11.1f} "
            f"{rate:11,.0f} {plain} {ratio}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print a table (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backends",
        default="sqlite,postgres",
        help="comma-separated: sqlite, postgres (default: both)",
    )
    parser.add_argument("--replay-events", type=int, default=10_000)
    parser.add_argument(
        "--long-events",
        type=int,
        default=1_000_000,
        help="events in the P2 stream (scale down if it takes too long)",
    )
    parser.add_argument("--day-polls", type=int, default=86_400)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="P2 with 100,000 events and 3 repetitions"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.quick:
        args.long_events = min(args.long_events, 100_000)
        args.repeat = min(args.repeat, 3)
    results: list[Result] = []
    for name in args.backends.split(","):
        with _backend(name.strip()) as backend:
            results += bench_replay(backend, args.replay_events, args.repeat)
            results += bench_long(backend, args.long_events, args.repeat)
            results += bench_poll_day(backend, args.day_polls, args.workers, args.repeat)
    header = (
        f"wgstore projections bench, {platform.platform()}, Python "
        f"{platform.python_version()}, median of {args.repeat}"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "header": header,
                    "args": vars(args),
                    "results": [{**asdict(r), "ratio": r.ratio} for r in results],
                },
                indent=2,
            )
        )
    else:
        print(_table(results, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
