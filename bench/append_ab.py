"""Append cost of two wgstore installs, A/B, in alternating short rounds on the same machine.

Made to measure what the whole-log chain (migration 0004) costs per append, on a machine shared
with other jobs: each round runs both installs back to back (alternating which goes first), each
in a fresh subprocess against its own database that grows round by round, and the result is the
median over rounds of each install's rate and of the per-round ratio (after / before).

    .venv/bin/python bench/append_ab.py --before /work/main/.venv/bin/python \\
        --after .venv/bin/python --backend sqlite --rounds 9

Each round: 300 single-event appends over 50 streams (W1's shape) and 30 batches of 100 over
1,000 streams (W2's shape), after 20 untimed appends. ``--event`` picks the event type:
``shutdown`` (``WorkerGroupShutdownRequested``, a rare type: the type index holds it) or
``reported`` (``WorkerReported``, the bulk of a real log, which migration 0008 leaves out of the
type index). ``--fenced`` makes every append carry a lease's fence (the appends of controllers,
executors and the Ray Train recorder); ``--keyed`` opens the stores with an HMAC key (each row's
MAC computed in the client). Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _event(kind: str, n: int) -> Any:
    from wgstore.events.worker_group import WorkerGroupShutdownRequested, WorkerReported

    if kind == "reported":
        return WorkerReported(world_rank=n % 4, index=n, metrics={"loss": 1 / (n + 1), "step": n})
    return WorkerGroupShutdownRequested(reason=f"event {n}")


def child(
    url: str, singles: int, batches: int, offset: int, kind: str, fenced: bool, keyed: bool
) -> None:
    """Run one round in this process (the install under test) and print its rates as JSON."""
    from wgstore.events import EventStore
    from wgstore.events.leases import acquire_lease

    with EventStore.open(url, hmac_key=b"bench key" if keyed else None) as store:
        fence = None
        if fenced:
            lease = acquire_lease(store, f"bench-{offset}", "bench", 600)
            assert lease is not None
            fence = lease.fence
        for i in range(20):
            store.append(f"warm-{offset}-{i}", [_event(kind, i)], fence=fence)
        start = time.perf_counter()
        for i in range(singles):
            store.append(f"w1-{i % 50}", [_event(kind, offset + i)], fence=fence)
        single_s = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(batches):
            sid = f"w2-{(offset + i) % 1000}"
            events = [_event(kind, offset + i * 100 + j) for j in range(100)]
            store.append(sid, events, fence=fence)
        batch_s = time.perf_counter() - start
    print(json.dumps({"w1": singles / single_s, "w2": batches * 100 / batch_s}))


def _round(python: str, url: str, args: argparse.Namespace, offset: int) -> dict[str, float]:
    out = subprocess.run(
        [
            python,
            __file__,
            "--child",
            url,
            str(args.singles),
            str(args.batches),
            str(offset),
            args.event,
            str(int(args.fenced)),
            str(int(args.keyed)),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    """Run the rounds and print the medians."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        count_args = (int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        child(sys.argv[2], *count_args, sys.argv[6], sys.argv[7] == "1", sys.argv[8] == "1")
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True, help="python of the install before")
    parser.add_argument("--after", required=True, help="python of the install after")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--singles", type=int, default=300)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--synchronous", default="normal", help="SQLite only (default normal)")
    parser.add_argument("--event", choices=("shutdown", "reported"), default="shutdown")
    parser.add_argument("--fenced", action="store_true", help="every append carries a fence")
    parser.add_argument("--keyed", action="store_true", help="open the stores with an HMAC key")
    args = parser.parse_args()
    import psycopg

    schemas: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wgbench-ab-") as tmp:
        urls = {}
        for side in ("before", "after"):
            if args.backend == "sqlite":
                urls[side] = f"sqlite:///{Path(tmp) / side}.db?synchronous={args.synchronous}"
            else:
                schema = f"wgbench_ab_{uuid.uuid4().hex[:8]}_{side}"
                schemas.append(schema)
                with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
                    admin.execute(f"CREATE SCHEMA {schema}")
                urls[side] = f"{PG_URL}?options=-csearch_path%3D{schema}"
        rates: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        try:
            for n in range(args.rounds):
                order = ("before", "after") if n % 2 == 0 else ("after", "before")
                for side in order:
                    python = args.before if side == "before" else args.after
                    rates[side].append(_round(python, urls[side], args, n * 100_000))
                print(
                    f"round {n + 1}: "
                    + ", ".join(
                        f"{side} W1 {rates[side][-1]['w1']:,.0f}/s W2 {rates[side][-1]['w2']:,.0f}/s"
                        for side in ("before", "after")
                    ),
                    file=sys.stderr,
                )
        finally:
            for schema in schemas:
                with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")
    for workload in ("w1", "w2"):
        before = [r[workload] for r in rates["before"]]
        after = [r[workload] for r in rates["after"]]
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        print(
            f"{args.backend} {workload.upper()}: before {statistics.median(before):,.0f} ev/s "
            f"({1e6 / statistics.median(before):,.0f} us/event), after "
            f"{statistics.median(after):,.0f} ev/s ({1e6 / statistics.median(after):,.0f} "
            f"us/event), after/before median of rounds {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
