"""What each step of a SQLite append costs per event, in CPU time, beside the eventsourcing
library's append of the same payload (issue 25 part 3).

Every step runs alone in a hot loop over the events of W2's batches (100 events, the same
``BenchPolled`` payload bench/store.py appends) and of W1's single appends, timed with
``time.process_time`` (user + system CPU of this process: the fsync's wait is not in it, its
system call is), median of ``--rounds`` rounds. Steps, ours: the codec's encode (type lookup,
msgspec encode, NUL and exactness checks), the event id, the ``Pending``, the recorder's
``_rows`` (two SHA-256 per event, the row tuple, the result), the SQL (``BEGIN IMMEDIATE``, the
guarded first INSERT, ``executemany`` of the rest, ``COMMIT``, on rows made beforehand), the
``RecordedEvent`` returned; then the whole ``EventStore.append``. The library's: the payload's
JSON (bench/sides.py's ``json.dumps``), its ``StoredEvent``, its recorder's ``insert_events``
(``BEGIN``, one ``execute`` and ``lastrowid`` per event, ``COMMIT``) on StoredEvents made
beforehand; then the whole append as bench/sides.py makes it.

Also the bytes: the average row and index bytes per event (``dbstat``) and the WAL frames (pages)
a commit writes, for both tables.

    .venv/bin/python bench/append_steps.py                  # synchronous=NORMAL, 7 rounds
    .venv/bin/python bench/append_steps.py --sync FULL --rounds 9 --json

Numbers, not pass/fail. The steps' sum is below the whole append's: what is left is the calls
between them (the store's checks, the writer lock, error translation, the notifier).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_payload import make_event, make_payload
from sides import EventsourcingSide, Target

from wgstore.events import EventStore
from wgstore.events.recorder import Pending

BATCH = 100
_COLUMNS = [
    "position",
    "event_id",
    "stream_id",
    "stream_version",
    "event_type",
    "schema_version",
    "data",
    "metadata",
    "recorded_at",
    "hash",
    "log_hash",
    "mac",
]


def _insert(width: int) -> str:
    """The recorder's INSERT of rows of ``width`` columns (with the MAC or without it)."""
    return (
        f"INSERT INTO wg_events ({', '.join(_COLUMNS[:width])}) VALUES ({', '.join('?' * width)})"
    )


def _insert_after(width: int) -> str:
    """The cached-heads append's guarded first INSERT."""
    return (
        f"INSERT INTO wg_events ({', '.join(_COLUMNS[:width])}) "
        f"SELECT {', '.join('?' * width)} WHERE (SELECT max(position) FROM wg_events) IS ?"
    )


Step = Callable[[], tuple[int, float]]
"""One round of a step: the events it handled and the CPU seconds they took."""


def timed(body: Callable[[], int]) -> Step:
    """A step whose whole ``body`` (returning its events) is timed."""

    def run() -> tuple[int, float]:
        started = time.process_time()
        events = body()
        return events, time.process_time() - started

    return run


def cpu_us_per_event(step: Step, rounds: int) -> float:
    """The median over ``rounds`` of the step's CPU µs per event."""
    costs = []
    for _ in range(rounds):
        events, seconds = step()
        costs.append(seconds / events * 1e6)
    return statistics.median(costs)


class Steps:
    """Both sides' databases in one folder and the events they append."""

    def __init__(self, folder: Path, sync: str, batches: int) -> None:
        self.batches = batches
        self.path = folder / "wgstore.db"
        self.sync = sync
        self.url = f"sqlite:///{self.path}?synchronous={sync.lower()}"
        self.store = EventStore.open(self.url)
        places = (("eventsourcing", str(folder / "eventsourcing.db")),)
        target = Target("sqlite", self.url, places, sync)
        self.library = EventsourcingSide(target, create=True)
        self.events = [make_event(i) for i in range(BATCH)]
        self.payloads = [make_payload(i) for i in range(BATCH)]
        self.stream = 0

    def next_stream(self) -> str:
        """A fresh stream id (each round appends to its own streams)."""
        self.stream += 1
        return f"s-{self.stream}"

    # ------------------------------------------------------------------ ours

    def encode(self, size: int) -> Step:
        """``Codec.encode`` alone."""
        encode = self.store.codec.encode
        events = self.events[:size]

        @timed
        def run() -> int:
            for _ in range(self.batches):
                for event in events:
                    encode(event)
            return self.batches * size

        return run

    def encode_batch(self, size: int) -> Step:
        """``EventStore._encode_batch``: encode, ids, ``Pending``s."""
        encode_batch = self.store._encode_batch
        events = self.events[:size]

        @timed
        def run() -> int:
            for _ in range(self.batches):
                encode_batch(events)
            return self.batches * size

        return run

    def rows(self, size: int) -> Step:
        """``_rows``: two SHA-256 per event, the row tuples and the results."""
        from wgstore.events.sqlite_recorder import _rows

        pending = self.store._encode_batch(self.events[:size])[0]

        @timed
        def run() -> int:
            for index in range(self.batches):
                _rows("s-rows", pending, None, index * size, "ab" * 32, "cd" * 32, index * size)
            return self.batches * size

        return run

    def sql(self, size: int) -> Step:
        """The SQL of a cached-heads append (the guarded first INSERT, ``executemany`` of the
        rest) on rows ``_rows`` made beforehand, on a connection of its own to the store's file
        with the store's settings."""
        connection = sqlite3.connect(self.path, isolation_level=None)
        connection.execute(f"PRAGMA synchronous = {self.sync}")

        def run() -> tuple[int, float]:
            prepared = self._batches_after(connection, size)
            cursor = connection.cursor()
            started = time.process_time()
            for rows in prepared:
                first = rows[0]
                cursor.execute("BEGIN IMMEDIATE")
                cursor.execute(_insert_after(len(first)), (*first, first[0] - 1))
                if len(rows) > 1:
                    cursor.executemany(_insert(len(first)), rows[1:])
                cursor.execute("COMMIT")
            spent = time.process_time() - started
            cursor.close()
            return self.batches * size, spent

        return run

    def _batches_after(self, connection: sqlite3.Connection, size: int) -> list[list[Any]]:
        """The rows of ``self.batches`` batches to new streams after the log's last row."""
        from wgstore.events.sqlite_recorder import _rows

        position, log = connection.execute(
            "SELECT position, log_hash FROM wg_events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        batches = []
        for _ in range(self.batches):
            pending = self.store._encode_batch(self.events[:size])[0]
            rows, _ = _rows(self.next_stream(), pending, None, 0, "", log, position)
            position, log = rows[-1][0], rows[-1][10]
            batches.append(rows)
        return batches

    def recorded(self, size: int) -> Step:
        """The ``RecordedEvent``s an append returns."""
        from wgstore.events.sqlite_recorder import _rows
        from wgstore.events.store import _recorded

        pending: list[Pending] = self.store._encode_batch(self.events[:size])[0]
        _, results = _rows("s-rec", pending, None, 0, "", "", 0)

        @timed
        def run() -> int:
            for _ in range(self.batches):
                _recorded("s-rec", pending, results)
            return self.batches * size

        return run

    def append(self, size: int) -> Step:
        """The whole ``EventStore.append``."""
        append = self.store.append
        events = self.events[:size]

        @timed
        def run() -> int:
            for index in range(self.batches):  # W1: 50 streams; W2: a new stream a batch
                append(self.next_stream() if size > 1 else f"w1-{index % 50}", events)
            return self.batches * size

        return run

    # ------------------------------------------------------------------ the library's

    def library_encode(self, size: int) -> Step:
        """The payload's JSON, as bench/sides.py makes it."""
        payloads = self.payloads[:size]
        dumps = json.dumps

        @timed
        def run() -> int:
            for _ in range(self.batches):
                for payload in payloads:
                    dumps(payload, separators=(",", ":")).encode()
            return self.batches * size

        return run

    def library_stored(self, size: int) -> Step:
        """The library's ``StoredEvent`` per event."""
        stored = self.library._stored
        state = json.dumps(self.payloads[0], separators=(",", ":")).encode()

        @timed
        def run() -> int:
            for _ in range(self.batches):
                for version in range(size):
                    stored(
                        originator_id="s", originator_version=version, topic="BenchPolled",
                        state=state,
                    )  # fmt: skip
            return self.batches * size

        return run

    def library_insert(self, size: int) -> Step:
        """The library recorder's ``insert_events`` on StoredEvents made beforehand."""
        stored_event = self.library._stored
        state = json.dumps(self.payloads[0], separators=(",", ":")).encode()
        insert = self.library.recorder.insert_events

        def run() -> tuple[int, float]:
            prepared = []
            for _ in range(self.batches):
                stream = self.next_stream()
                prepared.append(
                    [
                        stored_event(
                            originator_id=stream,
                            originator_version=v + 1,
                            topic="BenchPolled",
                            state=state,
                        )
                        for v in range(size)
                    ]
                )
            started = time.process_time()
            for batch in prepared:
                insert(batch)
            spent = time.process_time() - started
            return self.batches * size, spent

        return run

    def library_append(self, size: int) -> Step:
        """The library's whole append, as bench/sides.py makes it."""
        payloads = self.payloads[:size]

        @timed
        def run() -> int:
            for _ in range(self.batches):
                self.library.append(self.next_stream(), payloads)
            return self.batches * size

        return run

    def close(self) -> None:
        """Close both sides."""
        self.store.close()
        self.library.close()


def storage(folder: Path) -> dict[str, float]:
    """Bytes per event of each side's table and indexes (``dbstat``, leaf and interior pages)."""
    sizes: dict[str, float] = {}
    for side, table, count_sql in (
        ("wgstore", "wg_events", "SELECT count(*) FROM wg_events"),
        ("eventsourcing", "stored_events", "SELECT count(*) FROM stored_events"),
    ):
        conn = sqlite3.connect(folder / f"{side}.db")
        events = conn.execute(count_sql).fetchone()[0]
        rows = conn.execute(
            "SELECT name, sum(pgsize), sum(payload) FROM dbstat WHERE name = ? OR name IN "
            "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?) "
            "GROUP BY name",
            (table, table),
        ).fetchall()
        for name, pages, payload in rows:
            sizes[f"{side} {name} page B/event"] = round(pages / events, 1)
            sizes[f"{side} {name} payload B/event"] = round(payload / events, 1)
        conn.close()
    return sizes


def wal_frames(folder: Path, steps: Steps, size: int, commits: int) -> dict[str, float]:
    """WAL frames (pages) written per commit by each side, checkpoints held off meanwhile."""
    frames: dict[str, float] = {}
    for side, append in (
        ("wgstore", steps.append(size)),
        ("eventsourcing", steps.library_append(size)),
    ):
        conn = sqlite3.connect(folder / f"{side}.db")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # an empty WAL to count from
        conn.execute("BEGIN")  # a read snapshot: no checkpoint can reset the WAL meanwhile
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        wal = folder / f"{side}.db-wal"
        before = wal.stat().st_size if wal.exists() else 0
        batches, steps.batches = steps.batches, commits
        append()
        steps.batches = batches
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        frames[f"{side} WAL frames/commit, batch {size}"] = round(
            (wal.stat().st_size - before) / (page + 24) / commits, 2
        )
        conn.rollback()
        conn.close()
    return frames


def main(argv: list[str] | None = None) -> int:
    """Run every step and print µs per event (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sync", default="NORMAL", choices=("OFF", "NORMAL", "FULL"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=40, help="batches of 100 per round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"sync": args.sync, "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="wgsteps-") as tmp:
        folder = Path(tmp)
        steps = Steps(folder, args.sync, args.batches)
        try:
            for name, size, batches in (("W2 batch of 100", BATCH, args.batches),
                                        ("W1 single", 1, args.batches * 20)):  # fmt: skip
                steps.batches = batches
                for warm in (steps.append(size), steps.library_append(size)):
                    warm()
                measured = {
                    "ours: encode": cpu_us_per_event(steps.encode(size), args.rounds),
                    "ours: _encode_batch (encode, id, Pending)": cpu_us_per_event(
                        steps.encode_batch(size), args.rounds
                    ),
                    "ours: _rows (2 SHA-256, row, result)": cpu_us_per_event(
                        steps.rows(size), args.rounds
                    ),
                    "ours: SQL (BEGIN, INSERTs, COMMIT)": cpu_us_per_event(
                        steps.sql(size), args.rounds
                    ),
                    "ours: RecordedEvent": cpu_us_per_event(steps.recorded(size), args.rounds),
                    "ours: whole append": cpu_us_per_event(steps.append(size), args.rounds),
                    "library: json.dumps": cpu_us_per_event(
                        steps.library_encode(size), args.rounds
                    ),
                    "library: StoredEvent": cpu_us_per_event(
                        steps.library_stored(size), args.rounds
                    ),
                    "library: insert_events (SQL)": cpu_us_per_event(
                        steps.library_insert(size), args.rounds
                    ),
                    "library: whole append": cpu_us_per_event(
                        steps.library_append(size), args.rounds
                    ),
                }
                results[name] = {k: round(v, 2) for k, v in measured.items()}
            steps.batches = args.batches
            results["bytes"] = storage(folder)
            results["wal"] = {
                **wal_frames(folder, steps, BATCH, 20),
                **wal_frames(folder, steps, 1, 200),
            }
        finally:
            steps.close()
    results["load_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"synchronous={args.sync}, load {results['load']:.1f} -> {results['load_end']:.1f}")
    for name in ("W2 batch of 100", "W1 single"):
        print(f"\n{name}: CPU µs per event (median of {args.rounds})")
        for step, value in results[name].items():
            print(f"  {step:45s} {value:8.2f}")
    print("\nbytes")
    for key, value in {**results["bytes"], **results["wal"]}.items():
        print(f"  {key:60s} {value:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
