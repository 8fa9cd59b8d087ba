"""What opening a fresh, empty store costs: built in one step, or by running every migration.

``EventStore.open`` of an empty database builds the head schema at once and stamps it
(``migrations/fresh.py``); before, it ran every Alembic revision from 0001 to head. Both sides
here are ``EventStore.open(url).close()`` of a new empty database (a SQLite file; a Postgres
schema), the other side forced by making the runner see the database as not empty, so Alembic
runs every revision, exactly the old path. Rounds alternate which side goes first.

- **warm**: in this process, after one untimed open of each side (Alembic and the revisions
  imported already): the schema work alone. Median of ``--rounds`` opens per side, in ms.
- **cold**: a new Python process per open, timed inside it from before ``import wgstore.events``
  to after ``close()``: what a process that opens one store pays (a test worker's template, a
  CLI call, a Ray Train controller), Alembic's import included. Median of ``--cold`` per side.

    .venv/bin/python bench/fresh_store.py --backend both --rounds 15 --cold 5

Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SIDES = ("one-step", "migrate-all")

_COLD = """
import sys, time
started = time.perf_counter()
from wgstore.events import EventStore
if sys.argv[2] == "migrate-all":
    from wgstore.migrations import runner
    runner.is_empty = lambda connection: False
EventStore.open(sys.argv[1]).close()
print((time.perf_counter() - started) * 1000)
"""


@contextmanager
def _empty(backend: str, folder: str) -> Iterator[str]:
    """The URL of a new, empty database, removed afterwards."""
    if backend == "sqlite":
        path = os.path.join(folder, f"{uuid.uuid4().hex}.db")
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
        return
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:12]}"
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


@contextmanager
def _side(name: str) -> Iterator[None]:
    """``migrate-all``: the runner sees every database as holding a store (the old path)."""
    from wgstore.migrations import runner

    if name == "one-step":
        yield
        return
    one_step = runner.is_empty
    runner.is_empty = lambda connection: False
    try:
        yield
    finally:
        runner.is_empty = one_step


def _warm_open(backend: str, side: str, folder: str) -> float:
    from wgstore.events import EventStore

    with _empty(backend, folder) as url, _side(side):
        started = time.perf_counter()
        EventStore.open(url).close()
        return (time.perf_counter() - started) * 1000


def _cold_open(backend: str, side: str, folder: str) -> float:
    with _empty(backend, folder) as url:
        result = subprocess.run(
            [sys.executable, "-c", _COLD, url, side],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return float(result.stdout.strip().splitlines()[-1])


def _measure(
    backend: str, rounds: int, folder: str, open_one: Callable[[str, str, str], float]
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        order = SIDES if round_ % 2 == 0 else SIDES[::-1]
        for side in order:
            times[side].append(open_one(backend, side, folder))
    return times


def _report(backend: str, kind: str, times: dict[str, list[float]]) -> None:
    medians = {side: statistics.median(values) for side, values in times.items()}
    line = ", ".join(f"{side} {medians[side]:.1f} ms" for side in SIDES)
    ratio = medians["migrate-all"] / medians["one-step"]
    n = len(times["one-step"])
    print(f"{backend:8} {kind:4} (median of {n}): {line}; migrate-all / one-step {ratio:.1f}x")


def main() -> None:
    """Measure and print both sides' medians per backend."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15, help="warm opens per side")
    parser.add_argument("--cold", type=int, default=5, help="cold opens (processes) per side")
    args = parser.parse_args()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    with tempfile.TemporaryDirectory(prefix="wgs-fresh-") as folder:
        for backend in backends:
            for side in SIDES:  # untimed: imports, the first connection
                _warm_open(backend, side, folder)
            _report(backend, "warm", _measure(backend, args.rounds, folder, _warm_open))
            if args.cold:
                _report(backend, "cold", _measure(backend, args.cold, folder, _cold_open))


if __name__ == "__main__":
    main()
