"""What a ``wgstore sql`` query costs before its first row: opening the read-only session.

On PostgreSQL each query connects as the URL's user, prepares the reader role (grants and a fresh
password, one transaction), then logs in as the reader and checks it; on SQLite it opens the file
read-only. This measures ``run_read_only(url, "SELECT count(*) FROM wg_events")`` end to end
(rows read, session closed) on both backends, against a store holding a few events, and prints
p50 / p99 in milliseconds. Numbers, not pass/fail.

    .venv/bin/python bench/sql_reader.py                # both backends, 50 queries each
    .venv/bin/python bench/sql_reader.py --backend sqlite --queries 200
    .venv/bin/python bench/sql_reader.py --json

Postgres: ``WGSTORE_BENCH_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``);
the run uses a fresh schema and drops it, and its reader role, afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wgstore.events import EventStore, NewEvent
from wgstore.events.run import RunCreated, stream_id_for_run
from wgstore.events.sql_reader import prepare_reader, reader_role_name, run_read_only

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def _sqlite_store() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield f"sqlite:///{Path(folder) / 'bench.db'}"


@contextmanager
def _postgres_store() -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    schema = f"wgbench_{uuid.uuid4().hex[:10]}"
    admin_url = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in PG_URL else "?"
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        role = reader_role_name(make_url(PG_URL).database or "", schema)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
            if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


def _fill(url: str) -> None:
    with EventStore.open(url) as store:
        for n in range(10):
            run_id = f"bench-{n}"
            store.append(
                stream_id_for_run(run_id),
                [NewEvent(RunCreated(run_id=run_id, name="bench"))],
            )


def measure(url: str, queries: int) -> dict[str, float]:
    """p50 / p99 / mean milliseconds of ``queries`` read-only queries on the store at ``url``."""
    _fill(url)
    if not url.startswith("sqlite"):
        prepare_reader(url)  # `wgstore db reader`, once: wgstore sql reads as the role it makes
    for _ in range(3):  # warm up
        list(run_read_only(url, "SELECT count(*) FROM wg_events").rows)
    times = []
    for _ in range(queries):
        started = time.perf_counter()
        result = run_read_only(url, "SELECT count(*) FROM wg_events", behind_of="read-models")
        list(result.rows)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2),
        "mean_ms": round(statistics.fmean(times), 2),
        "queries": queries,
    }


def main() -> None:
    """Parse the options, measure each backend, print a line (or JSON) per backend."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    stores = {"sqlite": _sqlite_store, "postgres": _postgres_store}
    for backend in ("sqlite", "postgres"):
        if args.backend in (backend, "both"):
            with stores[backend]() as url:
                results[backend] = measure(url, args.queries)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for backend, numbers in results.items():
        print(
            f"{backend:9} p50 {numbers['p50_ms']:7.2f} ms  p99 {numbers['p99_ms']:7.2f} ms  "
            f"mean {numbers['mean_ms']:7.2f} ms  ({numbers['queries']} queries)"
        )


if __name__ == "__main__":
    main()
