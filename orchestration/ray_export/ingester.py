"""``Ingester``: reads Ray's export event files into the log, each line exactly once.

For each file (known by :func:`~wgstore.orchestration.ray_export.files.file_id`) the log holds
what was read of it: ``RayExportRead`` on ``ray-export-file-<file id>``, with the offset the next
read starts at. A read takes at most ``batch_lines`` whole lines from there, maps them
(:class:`~wgstore.orchestration.ray_export.mapping.ExportMapper`) and appends, in **one
transaction**, the new ``RayExportRead`` (expected at the version it read) and what the lines
produced (each stream expected at the version the mapper folded). So:

- a process killed at any moment has appended a read and its events together, or neither: the
  next ingester starts where the last committed read ended;
- two ingesters on the same files: one's append wins, the other's is refused (its expected
  versions moved), it reads the streams again and goes on after what the first wrote;
- a line that is not an export event is reported with its file and line number, counted in the
  read, and skipped: it never stops the ingester.

Lines of a run the recording callback may still record are held (in the read's ``held``) and
mapped by a later read once its claim has passed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wgstore.events import AppendRequest, ConcurrencyError, EventStore
from wgstore.events.ray_cluster import RayExportRead, read_stream_of
from wgstore.events.records import RecordedEvent
from wgstore.events.schema import TYPE_INDEX_WHERE
from wgstore.events.stored_names import json_field, type_name
from wgstore.events.streams import GROUP_STREAM_PREFIX
from wgstore.events.worker_group import WorkerGroupStartRequested
from wgstore.orchestration.ray_export.files import (
    envelope,
    export_files,
    file_id,
    from_envelope,
    parse_line,
    read_lines,
)
from wgstore.orchestration.ray_export.mapping import ExportEvent, ExportMapper, streams_of

__all__ = ["IngestStats", "Ingester"]

logger = logging.getLogger("wgstore.ingest")

_START_REQUESTED = type_name(WorkerGroupStartRequested)


@dataclass
class IngestStats:
    """What an ingester did: files seen, lines taken, events written, lines reported."""

    files: int = 0
    lines: int = 0
    events: int = 0
    bad_lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    held: int = 0
    conflicts: int = 0

    def as_dict(self) -> dict[str, object]:
        """A JSON-able dict."""
        return {
            "files": self.files,
            "lines": self.lines,
            "events": self.events,
            "bad_lines": list(self.bad_lines),
            "problems": list(self.problems),
            "held": self.held,
            "conflicts": self.conflicts,
        }


@dataclass
class _Cursor:
    offset: int = 0
    line: int = 0
    version: int = 0
    held: list[ExportEvent] = field(default_factory=list)


class Ingester:
    """Reads export files under ``paths`` into ``store``.

    Args:
        store: an open store (writable).
        paths: export folders (``<session>/logs/export_events``) or files.
        claim_wait_s: how long a run's lines wait for the recording callback to record it
            (see :class:`ExportMapper`); 0 when no run on the cluster uses the callback.
        batch_lines: at most this many lines per transaction.
        report: called with each bad line or problem as text (default: logged as a warning).
        clock_ns: the wall clock (for the claim); a test passes its own.
    """

    def __init__(
        self,
        store: EventStore,
        paths: Sequence[Path],
        *,
        claim_wait_s: float = 45.0,
        batch_lines: int = 2000,
        report: Callable[[str], None] | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if batch_lines < 1:
            raise ValueError(f"batch_lines must be at least 1, got {batch_lines}")
        self.store = store
        self.paths = [Path(p) for p in paths]
        self.batch_lines = batch_lines
        self.report = report or (lambda text: logger.warning("%s", text))
        self.clock_ns = clock_ns
        self.mapper = ExportMapper(
            self._load, claim_wait_s=claim_wait_s, attempts_of=self._attempts_of
        )
        self.ingester_id = f"{socket.gethostname()}:{os.getpid()}"
        self._cursors: dict[str, _Cursor] = {}
        self.stats = IngestStats()

    def _load(self, stream_id: str) -> Sequence[RecordedEvent]:
        if not self.store.stream_version(stream_id):
            return ()
        return list(self.store.read_stream(stream_id))

    def _attempts_of(self, run_id: str) -> list[str]:
        """The groups whose ``WorkerGroupStartRequested`` names ``run_id``, in log order."""
        p = self.store.recorder.param
        run = json_field(WorkerGroupStartRequested, "run_id", postgres=self.store.is_postgres)
        rows = self.store.fetch_rows(
            f"SELECT stream_id FROM wg_events WHERE event_type = '{_START_REQUESTED}' "
            f"AND {TYPE_INDEX_WHERE} AND {run} = {p} ORDER BY position",
            (run_id,),
        )
        return [str(row[0])[len(GROUP_STREAM_PREFIX) :] for row in rows]

    def _prefetch(self, events: Sequence[ExportEvent]) -> None:
        """Which of the streams ``events`` touch the log holds, in one query per 500: the mapper
        then reads only those (a new run's streams cost no query each)."""
        wanted = {
            stream_id
            for event in events
            for stream_id in streams_of(event)
            if not self.mapper.cached(stream_id)
        }
        if not wanted:
            return
        p = self.store.recorder.param
        ordered = sorted(wanted)
        found: set[str] = set()
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            rows = self.store.fetch_rows(
                "SELECT DISTINCT stream_id FROM wg_events WHERE stream_id IN "
                f"({', '.join([p] * len(chunk))})",
                chunk,
            )
            found.update(str(row[0]) for row in rows)
        self.mapper.absent(wanted - found)

    def _cursor(self, fid: str) -> _Cursor:
        cursor = self._cursors.get(fid)
        if cursor is None:
            stream = read_stream_of(fid)
            version = self.store.stream_version(stream)
            cursor = _Cursor(version=version)
            if version:
                last = list(self.store.read_stream(stream, from_version=version))[-1].event
                if isinstance(last, RayExportRead):
                    cursor = _Cursor(last.offset, last.line, version, from_envelope(last.held))
            self._cursors[fid] = cursor
        return cursor

    def run_once(self, stop: threading.Event | None = None) -> IngestStats:
        """Read every file to its end (its whole lines) once; returns :attr:`stats`.

        ``stop``: set, the read ends after the transaction under way (a long backlog is read
        in many).
        """
        files = export_files(self.paths)
        self.stats.files = len(files)
        for path in files:
            self._read_file(path, stop)
        self.stats.held = sum(len(c.held) for c in self._cursors.values())
        return self.stats

    def follow(self, stop: threading.Event, interval_s: float = 0.2) -> IngestStats:
        """:meth:`run_once` again and again, ``interval_s`` apart, until ``stop`` is set.

        A pass that fails (the database away, a file unreadable) is reported and tried again
        at the next pass: what it had not committed is read again then, nothing twice.
        """
        while not stop.is_set():
            try:
                self.run_once(stop)
            except Exception as error:  # noqa: BLE001 - a sidecar outlives an outage
                self.report(f"this pass failed, tried again: {type(error).__name__}: {error}")
                self._cursors.clear()
                self.mapper.forget()
            stop.wait(interval_s)
        return self.stats

    def _read_file(self, path: Path, stop: threading.Event | None) -> None:
        fid = file_id(path)
        if fid is None:
            return  # no whole line yet
        while stop is None or not stop.is_set():
            try:
                if not self._read_batch(path, fid):
                    return
            except ConcurrencyError:
                # another ingester (or the callback) wrote: read the streams again, go on
                self.stats.conflicts += 1
                self._cursors.pop(fid, None)
                self.mapper.forget()
            except FileNotFoundError:
                return  # rotated away meanwhile: read under its new name next time

    def _read_batch(self, path: Path, fid: str) -> bool:
        """One transaction's worth of ``path``; False when there was nothing to do."""
        cursor = self._cursor(fid)
        size = path.stat().st_size
        if size < cursor.offset:
            self.report(
                f"{path}: the file shrank below what was read ({cursor.offset} bytes) with its "
                "first line unchanged; reading on from its end"
            )
            cursor.offset = size
        lines, offset = read_lines(path, cursor.offset, cursor.line, self.batch_lines)
        bad: list[str] = []
        events: list[ExportEvent] = list(cursor.held)
        for line in lines:
            parsed = parse_line(line.text, f"{path}:{line.number}")
            if isinstance(parsed, str):
                bad.append(parsed)
            elif parsed is not None:
                events.append(parsed)
        if not lines and not cursor.held:
            return False
        self._prefetch(events)
        mapped = self.mapper.map(events, self.clock_ns())
        held_before = [e.event_id for e in cursor.held]
        if not lines and [e.event_id for e in mapped.held] == held_before:
            return False  # only held lines, still held
        read = RayExportRead(
            file_id=fid,
            path=str(path),
            offset=offset,
            line=cursor.line + len(lines),
            lines=len(lines),
            events=mapped.count,
            bad_lines=tuple(bad),
            ingester=self.ingester_id,
            held=tuple(envelope(e) for e in mapped.held),
        )
        requests = [AppendRequest(read_stream_of(fid), [read], cursor.version)]
        requests += [
            AppendRequest(stream_id, new, mapped.expected[stream_id])
            for stream_id, new in mapped.events.items()
        ]
        self.store.append_many(requests)
        self.mapper.settle()
        cursor.offset, cursor.line, cursor.version = offset, read.line, cursor.version + 1
        cursor.held = list(mapped.held)
        self.stats.lines += len(lines)
        self.stats.events += mapped.count
        for text in (*bad, *mapped.problems):
            self.report(text)
        self.stats.bad_lines += bad
        self.stats.problems += mapped.problems
        return bool(lines)


def ingest(store: EventStore, paths: Iterable[Path], *, claim_wait_s: float = 45.0) -> IngestStats:
    """Read every export file under ``paths`` into ``store`` once (see :class:`Ingester`)."""
    return Ingester(store, list(paths), claim_wait_s=claim_wait_s).run_once()
