"""What migration 0012's INSERT trigger costs an append: the same install, with and without it.

Two stores at head in one process, the trigger dropped from one of them; each round appends to
both back to back (alternating which goes first): 300 single-event appends over 50 streams (W1's
shape) and 30 batches of 100 over 1,000 streams (W2's shape), of ``WorkerReported`` events (the
bulk of a real log). The result is each side's median rate and the median over rounds of the
per-round ratio (with / without), and the median CPU time of this process per event, which on
SQLite holds the database's work (the trigger's included) and is steadier than the wall clock on
a shared machine. SQLite at ``synchronous=NORMAL``; Postgres in fresh schemas.

    .venv/bin/python bench/insert_trigger.py --backend sqlite --rounds 9

Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TRIGGER = "wg_events_handed_out"  # HANDED_OUT of events/postgres_functions.py, sqlite_triggers.py


def _event(n: int) -> Any:
    from wgstore.events.worker_group import WorkerReported

    return WorkerReported(world_rank=n % 4, index=n, metrics={"loss": 1 / (n + 1), "step": n})


def _url(backend: str, name: str, folder: str) -> tuple[str, Callable[[], None]]:
    """A fresh store's URL, and what removes it."""
    if backend == "sqlite":
        return f"sqlite:///{folder}/{name}.db?synchronous=NORMAL", lambda: None
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:8]}_{name}"
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")

    return f"{PG_URL}?options=-csearch_path%3D{schema}", drop


def _round(store: Any, offset: int) -> tuple[float, float, float, float]:
    """W1 and W2 of one round: events/s (wall clock) and this process's CPU µs per event
    (on SQLite the database's work too, trigger included; on Postgres the client's only)."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(300):
        store.append(f"w1-{i % 50}", [_event(offset + i)])
    single = (300 / (time.perf_counter() - started), (time.process_time() - cpu) / 300 * 1e6)
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(30):
        stream = f"w2-{(offset // 100 + i) % 1000}"
        store.append(stream, [_event(offset + i * 100 + j) for j in range(100)])
    batch = (3000 / (time.perf_counter() - started), (time.process_time() - cpu) / 3000 * 1e6)
    return (*single, *batch)


def main() -> None:
    from wgstore.events import EventStore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="wgstore-trigger-")
    stores, drops = {}, []
    for name in ("with", "without"):
        url, drop = _url(args.backend, name, folder)
        drops.append(drop)
        stores[name] = EventStore.open(url)
        for i in range(20):
            stores[name].append(f"warm-{i}", [_event(i)])
    on = " ON wg_events" if args.backend == "postgres" else ""
    with stores["without"].engine.begin() as connection:
        connection.exec_driver_sql(f"DROP TRIGGER {TRIGGER}{on}")
    rates: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in stores}
    try:
        for index in range(args.rounds):
            order = list(stores) if index % 2 == 0 else list(reversed(stores))
            for name in order:
                rates[name].append(_round(stores[name], 100_000 * (index + 1)))
    finally:
        for store in stores.values():
            store.close()
        for drop in drops:
            drop()
    print(f"{args.backend}, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for w, label in ((0, "W1 single appends"), (2, "W2 batches of 100")):
        with_, without = ([r[w] for r in rates[name]] for name in ("with", "without"))
        ratios = [a / b for a, b in zip(with_, without, strict=True)]
        cpu_with, cpu_without = (
            statistics.median(r[w + 1] for r in rates[name]) for name in ("with", "without")
        )
        print(
            f"  {label}: with the trigger {statistics.median(with_):,.0f} ev/s, without "
            f"{statistics.median(without):,.0f} ev/s; with/without {statistics.median(ratios):.3f}"
            f" (range {min(ratios):.2f}-{max(ratios):.2f}); CPU of this process "
            f"{cpu_with:.1f} vs {cpu_without:.1f} us/event"
        )


if __name__ == "__main__":
    main()
