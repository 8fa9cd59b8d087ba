"""Benchmark the EventStore against three references, side by side in one run.

Workloads (docs/architecture.md, "Performance goals"), on the same ~300-byte poll-like payload:

- W1: 5,000 single-event appends over 50 streams (one transaction each).
- W2: 100,000 events in batches of 100 over 1,000 streams (one transaction per batch).
- W3: replay one 10,000-event stream (``read_stream`` with typed decode vs SELECT + json.loads).
- W4: read the whole log in global order, pages of 1,000 (``read_all`` vs keyset SELECT + json.loads).
- W5: four processes appending single events to their own streams, plus a tailing reader that
  must see every event exactly once, in order.

The references (bench/sides.py): ``minimal``, a minimal plain table ``(id, stream_id, version,
type, payload)`` with one unique index; ``plain``, the same columns and indexes as ``wg_events``
without triggers; ``eventsourcing``, the eventsourcing library's own recorders. Each round runs
every side back to back, the order rotating from round to round; the table reports each side's
median and, per reference, the median of the rounds' ratios. Run ``python bench/store.py --help``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from bench_payload import BenchPolled, make_event, make_payload
from sides import PG_CONNINFO, PG_URL, REFERENCES, SIDES, Side, Target, create_tables, open_side

__all__ = ["BenchPolled", "main", "make_event", "make_payload"]

# Goals (issue 25, part 3, which restated docs/architecture.md's): wgstore / the eventsourcing
# library >= 1.0 on every workload, but >= 0.9 for SQLite's single appends (W1, W5: a commit
# there writes the unique event-id index's page too, which the library has no use for). The
# minimal table is the floor, reported beside them, not a goal.
SQLITE_SINGLE_APPEND_GOAL = {"W1": 0.9, "W5": 0.9}


def goals(backend: str, workload: str) -> dict[str, float]:
    """The goal of each reference for one workload (only the eventsourcing library has one)."""
    single = SQLITE_SINGLE_APPEND_GOAL if backend == "sqlite" else {}
    return {"eventsourcing": single.get(workload, 1.0)}


@contextmanager
def prepared(backend: str, names: list[str], workdir: Path) -> Iterator[Target]:
    """Fresh tables for every side of ``backend`` (Postgres: one schema each, dropped after)."""
    tag = uuid.uuid4().hex[:10]
    if backend == "sqlite":
        places = tuple((side, str(workdir / f"{side}-{tag}.db")) for side in SIDES)
        store = dict(places)["wgstore"]
        target = Target("sqlite", f"sqlite:///{store}?synchronous=full", places, "FULL")
        create_tables(target, names)
        yield target
        return
    import psycopg

    places = tuple((side, f"wgbench_{tag}_{side}") for side in SIDES)
    sep = "&" if "?" in PG_URL else "?"
    store_url = f"{PG_URL}{sep}options=-csearch_path%3D{dict(places)['wgstore']}"
    target = Target("postgres", store_url, places)
    with psycopg.connect(PG_CONNINFO, autocommit=True) as conn:
        for _, schema in places:
            conn.execute(f"CREATE SCHEMA {schema}")
    try:
        create_tables(target, names)
        yield target
    finally:
        with psycopg.connect(PG_CONNINFO, autocommit=True) as conn:
            for _, schema in places:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


# ---------------------------------------------------------------------------- measuring


@dataclass
class Result:
    """One workload on one backend: every side's rates per round, and wgstore's ratios."""

    backend: str
    workload: str
    variant: str
    events: int
    runs: dict[str, list[float]]
    goals: dict[str, float]
    load: float = 0.0  # the 1-minute load average when the workload started
    note: str = ""
    tail_ok: bool | None = None  # W5: the wgstore reader saw every event once, in order

    def eps(self, side: str) -> float:
        """The median events/s of ``side`` (0 when it did not run)."""
        return statistics.median(self.runs[side]) if self.runs.get(side) else 0.0

    def ratio(self, reference: str) -> float:
        """wgstore over ``reference``: the median of the rounds' ratios (0 when not run).

        Other jobs share the machine, so rates drift between rounds; the runs of one round are
        back to back, which makes their ratio steadier than the ratio of the medians.
        """
        ours, theirs = self.runs.get("wgstore", []), self.runs.get(reference, [])
        if not ours or not theirs:
            return 0.0
        return statistics.median(w / r for w, r in zip(ours, theirs, strict=True))

    @property
    def met(self) -> bool:
        """Whether every goal of this workload is met (references that ran)."""
        return self.tail_ok is not False and all(
            self.ratio(ref) >= goal for ref, goal in self.goals.items() if self.runs.get(ref)
        )

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        return {
            "backend": self.backend,
            "workload": self.workload,
            "variant": self.variant,
            "events": self.events,
            "load": self.load,
            "eps": {side: round(self.eps(side)) for side in self.runs},
            "runs": {side: [round(r) for r in rates] for side, rates in self.runs.items()},
            "ratios": {ref: round(self.ratio(ref), 3) for ref in REFERENCES if self.runs.get(ref)},
            "goals": self.goals,
            "met": self.met,
            "note": self.note,
            "tail_ok": self.tail_ok,
        }


def log(message: str) -> None:
    """Progress, on stderr so that ``--json`` output stays clean."""
    print(message, file=sys.stderr, flush=True)


def rounds(
    repeats: int, runs: dict[str, Callable[[int], int]]
) -> tuple[dict[str, list[float]], int]:
    """Run every side ``repeats`` times, the order rotating each round; events/s of each run."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    events = 0
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            events = runs[name](rep)
            rates[name].append(events / (time.perf_counter() - start))
    return rates, events


def _result(
    target: Target,
    workload: str,
    measured: tuple[dict[str, list[float]], int],
    load: float,
    variant: str = "",
    note: str = "",
) -> Result:
    rates, events = measured
    result = Result(
        target.backend,
        workload,
        variant or (f"sync={target.synchronous}" if target.backend == "sqlite" else ""),
        events,
        rates,
        goals(target.backend, workload),
        round(load, 2),
        note,
    )
    sides = ", ".join(f"{side} {result.eps(side):,.0f}/s" for side in rates)
    ratios = ", ".join(f"/{ref} {result.ratio(ref):.2f}" for ref in REFERENCES if ref in rates)
    log(f"  {workload} {result.variant} (load {load:.1f}): {sides}; wgstore{ratios}")
    return result


def bench_writes(
    target: Target, sides: dict[str, Side], scale: float, repeats: int
) -> list[Result]:
    """W1 (single appends over 50 streams) and W2 (batches of 100 over 1,000 streams)."""
    results = []
    for name, full, stream_count, batch in (("W1", 5_000, 50, 1), ("W2", 100_000, 1_000, 100)):
        total = max(batch * 10, int(full * scale))
        streams = max(1, min(stream_count, total // batch))
        runs = {}
        for side_name, side in sides.items():
            items = side.items(range(batch))

            def run(
                rep: int, n: int = total, w: str = name, s: int = streams, it: Any = items,
                side: Side = side,
            ) -> int:  # fmt: skip
                for i in range(n // len(it)):
                    side.append(f"{w}-{target.synchronous}-{rep}-{i % s}", it)
                return n

            runs[side_name] = run
        warm = min(total, 50 * batch)
        rounds(1, {k: (lambda _rep, f=f, n=warm: f(-1, n)) for k, f in runs.items()})
        load = os.getloadavg()[0]
        results.append(_result(target, name, rounds(repeats, runs), load))
    return results


def bench_reads(target: Target, sides: dict[str, Side], scale: float, repeats: int) -> list[Result]:
    """W3 (replay one 10,000-event stream) and W4 (the whole log, pages of 1,000)."""
    size = max(1_000, int(10_000 * scale))
    for side in sides.values():
        for i in range(0, size, 100):
            side.append("replay", side.items(range(i, i + 100)))
    replay = {k: (lambda _rep, s=s: s.read_stream("replay")) for k, s in sides.items()}
    rounds(1, replay)
    load = os.getloadavg()[0]
    w3 = _result(target, "W3", rounds(repeats, replay), load, variant="-")
    everything = {k: (lambda _rep, s=s: sum(1 for _ in s.read_all())) for k, s in sides.items()}
    rounds(1, everything)
    load = os.getloadavg()[0]
    measured = rounds(repeats, everything)
    w4 = _result(target, "W4", measured, load, variant="-", note=f"log of {measured[1]:,} events")
    return [w3, w4]


# ---------------------------------------------------------------------------- W5: processes


def _w5_writer(side: str, target: Target, stream_id: str, n: int, start: Any, queue: Any) -> None:
    """One W5 writer process: warm up, wait for the start, append ``n`` single events."""
    opened = open_side(side, target)
    opened.append(f"warm-{stream_id}", opened.items(range(20)))
    items = opened.items(range(n))
    queue.put(("ready", stream_id))
    start.wait()
    began = time.monotonic()
    for i in range(n):
        opened.append(stream_id, [items[i]])
    queue.put(("done", stream_id, began, time.monotonic()))
    opened.close()


def _w5_reader(side: str, target: Target, prefix: str, start: Any, stop: Any, queue: Any) -> None:
    """The W5 tailing reader: follows ``position > checkpoint`` until the writers are done."""
    opened = open_side(side, target)
    checkpoint = opened.head()
    seen: list[tuple[int, str, int]] = []
    queue.put(("ready", "reader"))
    start.wait()
    while True:
        finished = stop.is_set()  # a pass that starts after the writers finished sees everything
        got = 0
        for position, stream_id, version in opened.read_all(after=checkpoint):
            checkpoint = position
            got += 1
            if stream_id.startswith(prefix):
                seen.append((position, stream_id, version))
        if finished:
            break
        if not got:
            time.sleep(0.002)
    queue.put(("seen", seen))
    opened.close()


def _check_tail(seen: list[tuple[int, str, int]], stored: set[int]) -> tuple[bool, str]:
    """Compare what the reader saw with what is stored: order, duplicates, misses, versions."""
    positions = [p for p, _, _ in seen]
    in_order = all(a < b for a, b in itertools.pairwise(positions))
    missed = len(stored - set(positions))
    duplicates = len(positions) - len(set(positions))
    versions: dict[str, int] = defaultdict(int)
    gaps = 0
    for _, stream_id, version in seen:
        gaps += version != versions[stream_id] + 1
        versions[stream_id] = version
    ok = in_order and not missed and not duplicates and not gaps
    return ok, (
        f"saw {len(set(positions))}/{len(stored)}, {missed} missed, {duplicates} twice, "
        f"{'in order' if in_order else 'OUT OF ORDER'}"
    )


def _receive(queue: Any, processes: list[Any], timeout_s: float = 600) -> Any:
    """The next message from a W5 process; fails fast when one of them died."""
    import queue as queues

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=0.5)
        except queues.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a W5 process failed (exit code {dead[0].exitcode})") from None
    raise TimeoutError("W5 processes did not answer in time")


def _w5_side(side: str, target: Target, per_writer: int, rep: int) -> tuple[float, bool, str]:
    """One W5 run of one side: events/s of the four writers together, and the reader's check."""
    ctx = mp.get_context("spawn")
    start, stop, queue = ctx.Event(), ctx.Event(), ctx.Queue()
    prefix = f"W5-{target.synchronous}-{side}-{rep}-"
    writers = [
        ctx.Process(
            target=_w5_writer, args=(side, target, f"{prefix}{k}", per_writer, start, queue)
        )
        for k in range(4)
    ]
    reader = ctx.Process(target=_w5_reader, args=(side, target, prefix, start, stop, queue))
    for process in writers:
        process.start()
    for _ in writers:
        _receive(queue, writers)
    reader.start()  # after the writers' warm-ups, so that its checkpoint is before the run
    _receive(queue, [*writers, reader])
    start.set()
    spans = [_receive(queue, [*writers, reader]) for _ in writers]
    stop.set()
    seen = _receive(queue, [reader])[1]
    for process in [*writers, reader]:
        process.join(timeout=60)
    elapsed = max(span[3] for span in spans) - min(span[2] for span in spans)
    opened = open_side(side, target)
    stored = opened.positions(prefix)
    opened.close()
    return (4 * per_writer / elapsed, *_check_tail(seen, stored))


def bench_concurrent(target: Target, names: list[str], scale: float, repeats: int) -> Result:
    """W5: four writer processes and a tailing reader, each side in turn."""
    per_writer = max(50, int(1_000 * scale))
    rates: dict[str, list[float]] = {name: [] for name in names}
    checks: dict[str, list[tuple[bool, str]]] = {name: [] for name in names}
    load = os.getloadavg()[0]
    for rep in range(repeats):
        shift = rep % len(names)
        for side in names[shift:] + names[:shift]:
            rate, ok, text = _w5_side(side, target, per_writer, rep)
            rates[side].append(rate)
            checks[side].append((ok, text))
    # Show the worst check of each side: a failure, if there was one.
    note = "; ".join(f"{name} tail {min(checks[name])[1]}" for name in names)
    result = _result(target, "W5", (rates, 4 * per_writer), load, note=note)
    if "wgstore" in checks:
        result.tail_ok = all(ok for ok, _ in checks["wgstore"])
    return result


# ---------------------------------------------------------------------------- running


def run_backend(
    backend: str,
    names: list[str],
    scale: float,
    repeats: int,
    workdir: Path,
    *,
    writes_only: bool = False,
    modes: list[str] | None = None,
) -> list[Result]:
    """Every workload on one backend (SQLite: W1, W2 and W5 at FULL and NORMAL).

    ``writes_only``: W1 and W2 only (e.g. to compare the cost of an append before and after).
    """
    results: list[Result] = []
    if backend != "sqlite":
        modes = ["FULL"]
    with prepared(backend, names, workdir) as base:
        for mode in modes or ["FULL", "NORMAL"]:
            target = base.with_synchronous(mode)
            log(f"{backend} {'sync=' + mode if backend == 'sqlite' else ''}")
            sides = {name: open_side(name, target) for name in names}
            try:
                results += bench_writes(target, sides, scale, repeats)
                if mode == "FULL" and not writes_only:
                    results += bench_reads(target, sides, scale, repeats)
            finally:
                for side in sides.values():
                    side.close()
            if not writes_only:
                results.append(bench_concurrent(target, names, scale, repeats))
    return results


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    info: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "payload_bytes": len(msgspec.json.encode(make_event(12345))),
    }
    try:
        from importlib.metadata import version

        info["eventsourcing"] = version("eventsourcing")
    except Exception:  # noqa: BLE001 - only informational
        info["eventsourcing"] = "not installed (pip install -e '.[bench]')"
    try:
        import psycopg

        with psycopg.connect(PG_CONNINFO) as conn:
            info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    except Exception as error:  # noqa: BLE001 - only informational
        info["postgres"] = f"unreachable: {error}"
    return info


def print_table(results: list[Result], info: dict[str, Any]) -> None:
    """The results as a Rich table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"wgstore vs three references ({info['cpus']} CPUs, {info['cpu']})")
    names = [side for side in SIDES if any(r.runs.get(side) for r in results)]
    refs = [ref for ref in REFERENCES if ref in names]
    columns = ["backend", "workload", "variant", "events", "load"]
    columns += [f"{side} ev/s" for side in names] + [f"/{ref}" for ref in refs]
    columns += ["goals", "met", "note"]
    for column in columns:
        numeric = column in ("events", "load") or "/" in column
        table.add_column(column, justify="right" if numeric else "left")
    for r in results:
        goal_text = " ".join(f"{ref[:3]}≥{goal}" for ref, goal in r.goals.items())
        table.add_row(
            r.backend,
            r.workload,
            r.variant,
            f"{r.events:,}",
            f"{r.load:.1f}",
            *[f"{r.eps(side):,.0f}" for side in names],
            *[f"{r.ratio(ref):.2f}" for ref in refs],
            goal_text,
            "yes" if r.met else "NO",
            r.note,
        )
    Console(width=240).print(table)


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the workloads, print a table (or JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the workloads, e.g. 0.1")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per workload; medians count")
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument("--writes-only", action="store_true", help="run only W1 and W2")
    parser.add_argument(
        "--sides",
        default=",".join(SIDES),
        help=f"comma-separated, from {', '.join(SIDES)} (default: all)",
    )
    parser.add_argument(
        "--sync", default="FULL,NORMAL", help="SQLite synchronous levels (default FULL,NORMAL)"
    )
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.sides.split(",") if name.strip()]
    unknown = sorted(set(names) - set(SIDES))
    if unknown or "wgstore" not in names:
        parser.error(f"--sides takes wgstore plus any of {', '.join(REFERENCES)}; got {args.sides}")
    info = machine()
    log(f"machine: {info}")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="wgbench-") as tmp:
        for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
            results += run_backend(
                backend,
                names,
                args.scale,
                args.repeats,
                Path(tmp),
                writes_only=args.writes_only,
                modes=[mode.strip().upper() for mode in args.sync.split(",")],
            )
    if args.json:
        print(
            json.dumps(
                {
                    "machine": info,
                    "scale": args.scale,
                    "repeats": args.repeats,
                    "results": [r.as_dict() for r in results],
                },
                indent=2,
            )
        )
    else:
        print_table(results, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
