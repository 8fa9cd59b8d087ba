"""How often a writer stopped at a random moment holds up every other writer (issue 41, item 5).

A child process appends back to back (fenced by a lease or not, with an HMAC key or not, single
events or batches); the parent stops it (SIGSTOP) at a random moment, ``--stops`` times, and
each time looks at what the stopped process still holds ``--hold-s`` later: on SQLite the
database's write lock (``wgstore.events.sqlite_lock``: the process holding it, from the -shm
file's lock); on PostgreSQL, locks of the child's session (the append lock on ``wg_events``, or a
transaction: a lease row locked ``FOR SHARE``). When it holds them, the parent waits (at most
``--cap-s``) for the server to take them back, and notes how long the stop held the store. Then
it continues the child.

    .venv/bin/python bench/paused_writer.py --backend sqlite --stops 100
    .venv/bin/python bench/paused_writer.py --backend postgres --fenced --keyed
    .venv/bin/python bench/paused_writer.py --backend postgres --fenced --python /other/.venv/bin/python

``--gap-s`` pauses the child between appends (a recorder or a controller appends now and then;
0, back to back, is the worst case); ``--sync`` is SQLite's ``synchronous`` (``full``, the
default, fsyncs each commit under the write lock). ``--python`` runs the child with another install (the parent's checks need only this one), so
the code before a change can be measured the same way. Numbers, not pass/fail: the stops that
held, and how long the longest held (``>= cap`` when it outlasted ``--cap-s``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def child(url: str, fenced: bool, keyed: bool, batch: int, gap_s: float) -> None:
    """Append until killed, ``gap_s`` apart (0: back to back)."""
    from wgstore.events import EventStore
    from wgstore.events.leases import acquire_lease
    from wgstore.events.worker_group import WorkerGroupShutdownRequested

    with EventStore.open(url, hmac_key=b"bench key" if keyed else None) as store:
        fence = None
        if fenced:
            lease = acquire_lease(store, f"bench-{os.getpid()}", "bench", 3600)
            assert lease is not None
            fence = lease.fence
        n = 0
        while True:
            events = [WorkerGroupShutdownRequested(reason=f"e{n + i}") for i in range(batch)]
            store.append(f"run-{n % 50}", events, fence=fence)
            n += batch
            if gap_s:
                time.sleep(gap_s)  # a writer that appends now and then


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :][:1]


def _holds(backend: str, target: str, pid: int) -> bool:
    """Whether the stopped child still holds what other writers wait for."""
    if backend == "sqlite":
        from wgstore.events.sqlite_lock import write_lock_holder

        holder = write_lock_holder(target)
        return holder is not None and holder.pid == pid
    import psycopg

    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as watcher:
        row = watcher.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.application_name = %s AND l.granted AND (l.locktype = 'transactionid' "
            "OR (l.relation::regclass::text LIKE '%%wg_events' AND l.mode = 'ExclusiveLock'))",
            (target,),
        ).fetchone()
    return bool(row and row[0])


def main() -> int:
    """Stop the child ``--stops`` times and print what the stops held."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(
            sys.argv[2],
            sys.argv[3] == "1",
            sys.argv[4] == "1",
            int(sys.argv[5]),
            float(sys.argv[6]),
        )
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--stops", type=int, default=100)
    parser.add_argument("--fenced", action="store_true", help="appends carry a lease's fence")
    parser.add_argument("--keyed", action="store_true", help="open the store with an HMAC key")
    parser.add_argument("--batch", type=int, default=1, help="events an append")
    parser.add_argument("--gap-s", type=float, default=0.0, help="pause between appends")
    parser.add_argument("--sync", default="full", help="SQLite's synchronous (default full)")
    parser.add_argument("--hold-s", type=float, default=1.0, help="look this long after a stop")
    parser.add_argument("--cap-s", type=float, default=10.0, help="wait at most this for a release")
    parser.add_argument("--python", default=sys.executable, help="the child's python")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import psycopg

    schema = f"wgbench_paused_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="wgbench-paused-") as tmp:
        if args.backend == "sqlite":
            target = str(Path(tmp) / "paused.db")
            url = f"sqlite:///{target}?synchronous={args.sync}"
        else:
            with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {schema}")
            target = f"wgbench-paused-{uuid.uuid4().hex[:8]}"
            url = f"{PG_URL}?options=-csearch_path%3D{schema}&application_name={target}"
        from wgstore.events import EventStore

        EventStore.open(url).close()  # migrated before the child starts
        flags = (str(int(args.fenced)), str(int(args.keyed)), str(args.batch), str(args.gap_s))
        process = subprocess.Popen([args.python, __file__, "--child", url, *flags])
        held: list[float] = []
        try:
            time.sleep(3)  # imports, the first appends
            for _ in range(args.stops):
                time.sleep(random.uniform(0.05, 0.25))
                os.kill(process.pid, signal.SIGSTOP)
                while _state(process.pid) != "T":
                    time.sleep(0.001)
                stopped = time.monotonic()
                time.sleep(args.hold_s)
                if _holds(args.backend, target, process.pid):
                    while time.monotonic() - stopped < args.cap_s and _holds(
                        args.backend, target, process.pid
                    ):
                        time.sleep(0.1)
                    held.append(time.monotonic() - stopped)
                os.kill(process.pid, signal.SIGCONT)
                if process.poll() is not None:
                    raise SystemExit(f"the child ended: {process.returncode}")
        finally:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
            if args.backend == "postgres":
                with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")
    result = {
        "backend": args.backend,
        "fenced": args.fenced,
        "keyed": args.keyed,
        "batch": args.batch,
        "gap_s": args.gap_s,
        "sync": args.sync if args.backend == "sqlite" else None,
        "stops": args.stops,
        "held": len(held),
        "longest_s": round(max(held), 1) if held else 0.0,
        "outlasted_cap": sum(1 for s in held if s >= args.cap_s),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.backend} fenced={args.fenced} keyed={args.keyed} batch={args.batch} "
            f"gap={args.gap_s:g}s"
            + (f" sync={args.sync}" if args.backend == "sqlite" else "")
            + ": "
            f"{len(held)} of {args.stops} stops held the store {args.hold_s:g} s later; "
            f"longest {result['longest_s']} s, {result['outlasted_cap']} past {args.cap_s:g} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
