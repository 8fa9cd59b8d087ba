"""``verify`` across the archive's cut: the archived events of each batch where they stood.

With the files (the default) each batch's Parquet rows are merged by position with the live
rows, so :mod:`wgstore.events.verify`'s one walk checks every chain, MAC and digest across the
cut; each file is checked against its manifest (SHA-256, count, order, ranges, streams) and each
stored manifest against its ``LogArchived`` event and the manifest file. Without them, each
manifest range is an :class:`ArchiveSpan` the walk crosses by its log hashes
(docs/verify.md, "Across the archive").
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import re
import uuid
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from wgstore.events.archive import ARCHIVE_STREAM
from wgstore.events.archive_files import ArchiveLocation, ArchiveRow, parse_rows
from wgstore.events.archive_log import StoredBatch, stored_batches
from wgstore.events.archive_manifest import ArchivedFile, ArchivedRange, manifest_sha256
from wgstore.events.errors import EventStoreError
from wgstore.events.schema import wg_events
from wgstore.events.streams import run_stream

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = ["CANONICAL_ID", "ArchiveCheck", "ArchiveSpan", "plan_archive_check"]

CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""An event id as writers store it: str(uuid.UUID), lower-case and hyphenated (PostgreSQL's
uuid column renders every id so; SQLite keeps the text it was given)."""
_UNREACHABLE_HINT = (
    "pass --without-archive-files (archive_files=False) to check the live log and the "
    "manifests alone"
)


@dataclass(frozen=True, slots=True)
class ArchiveSpan:
    """An archived range the walk crosses by its manifest alone (its files not read)."""

    batch_id: str
    range: ArchivedRange

    def __str__(self) -> str:
        r = self.range
        return (
            f"the archived events at positions {r.first} to {r.last} (run {r.run_id!r}, "
            f"batch {self.batch_id})"
        )


@dataclass(frozen=True, slots=True)
class _PlannedFile:
    """One archive file the walk reads when it reaches its first position."""

    batch_id: str
    location: ArchiveLocation
    file: ArchivedFile
    ranges: list[ArchivedRange]  # its run's ranges in its batch, by position

    def __str__(self) -> str:
        return (
            f"the archive file {self.location.root}/{self.file.path} (batch {self.batch_id}, "
            f"run {self.file.run_id!r})"
        )


@dataclass
class _Cuts:
    """What the archive stream's live events say: each ``LogArchived`` (batch id to its
    position and data), the batches abandoned, the runs restored, the files dropped."""

    named: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    abandoned: set[str] = field(default_factory=set)
    restored: set[tuple[str, str]] = field(default_factory=set)
    dropped: dict[str, int] = field(default_factory=dict)


def _cuts(store: LogAccess) -> _Cuts:
    """The archive stream's events, read from their raw rows (a row whose data no longer reads
    is left out: the checker names it)."""
    data = "data::text" if store.is_postgres else "data"
    rows = store.fetch_rows(
        f"SELECT position, event_type, {data} FROM wg_events WHERE stream_id = "
        f"{store.recorder.param} ORDER BY stream_version",
        (ARCHIVE_STREAM,),
    )
    cuts = _Cuts()
    for position, type_, text in rows:
        try:
            event = json.loads(text)
        except ValueError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("batch_id"), str):
            continue
        batch_id = event["batch_id"]
        if type_ == "LogArchived":
            cuts.named.setdefault(batch_id, (int(position), event))
        elif type_ == "ArchiveAbandoned":
            cuts.abandoned.add(batch_id)
        elif type_ == "RunRestored":
            cuts.restored.add((batch_id, str(event.get("run_id"))))
        elif type_ == "ArchiveFilesDropped":
            cuts.dropped.setdefault(batch_id, int(position))
    return cuts


class ArchiveCheck:
    """The archived events the walk merges with the live rows, and what their batches,
    manifests and files were found to be."""

    def __init__(self, store: LogAccess, stream_id: str | None, cuts: _Cuts) -> None:
        self.store = store
        self.stream_id = stream_id
        self.cuts = cuts
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.spans: list[ArchiveSpan] = []
        self.files: list[_PlannedFile] = []
        self.batches = 0
        self.read = 0  # events checked from the files

    def add(self, batch: StoredBatch, files: bool) -> None:
        """Check one stored batch's manifest and plan its files (or its ranges)."""
        self.batches += 1
        self._check_named(batch)
        try:
            manifest = batch.manifest
        except ValueError as error:
            self.problems.append(f"batch {batch.batch_id}: its stored manifest {error}")
            return
        runs: dict[str, list[ArchivedRange]] = {}
        for archived in sorted(manifest.ranges, key=lambda r: r.first):
            if (batch.batch_id, archived.run_id) not in self.cuts.restored:
                runs.setdefault(archived.run_id, []).append(archived)
        kept = [f for f in manifest.files if (batch.batch_id, f.run_id) not in self.cuts.restored]
        location = self._open(batch) if files else None
        if location is None:
            self.spans += [ArchiveSpan(batch.batch_id, r) for rs in runs.values() for r in rs]
            return
        for file in kept:
            if self.stream_id is None or self.stream_id in file.streams:
                ranges = runs.get(file.run_id, [])
                self.files.append(_PlannedFile(batch.batch_id, location, file, ranges))

    def _check_named(self, batch: StoredBatch) -> None:
        named = self.cuts.named.get(batch.batch_id)
        if named is None:
            self.problems.append(
                f"batch {batch.batch_id} is in wg_archive_batches, but no LogArchived event "
                "names it: it was recorded behind the writers' back"
            )
        elif manifest_sha256(batch.manifest_text) != named[1].get("manifest_sha256"):
            self.problems.append(
                f"batch {batch.batch_id}: its manifest in wg_archive_batches is not the one its "
                f"LogArchived event (position {named[0]}) names (its SHA-256 differs): it was "
                "changed or swapped"
            )

    def _open(self, batch: StoredBatch) -> ArchiveLocation | None:
        """The batch's location, when its files are to be read and its manifest file is the
        stored manifest (None: check it by its ranges)."""
        dropped = self.cuts.dropped.get(batch.batch_id)
        if dropped is not None:
            self.notes.append(
                f"batch {batch.batch_id}: its files were dropped on purpose (ArchiveFilesDropped "
                f"at position {dropped}): checked by its manifest alone"
            )
            return None
        try:
            location = ArchiveLocation(batch.location)
            stored = location.read_bytes(location.manifest_file(batch.batch_id))
        except EventStoreError as error:
            self.problems.append(
                f"batch {batch.batch_id}: its archive {batch.location!r} cannot be read "
                f"({error}): its events were not checked; {_UNREACHABLE_HINT}"
            )
            return None
        if stored != batch.manifest_text.encode():
            self.problems.append(
                f"batch {batch.batch_id}: its manifest file {location.root}/"
                f"{location.manifest_file(batch.batch_id)} differs from the manifest in "
                "wg_archive_batches: one of them was changed"
            )
        return location

    def add_unfinished(self, done: set[str]) -> None:
        """A note per batch whose ``LogArchived`` was appended and which did not leave the
        live log (an interrupted archive); a problem when its runs are gone all the same."""
        for batch_id, (position, event) in self.cuts.named.items():
            if batch_id in done or batch_id in self.cuts.abandoned:
                continue
            runs = [str(r) for r in event.get("runs", ()) if isinstance(r, str)]
            gone = [r for r in runs if not _stream_is_live(self.store, run_stream(r))]
            if gone:
                self.problems.append(
                    f"batch {batch_id}: its LogArchived event (position {position}) was "
                    f"appended, no batch of that id left the live log, and run {gone[0]!r}'s "
                    "events are not in the live log: they were removed"
                )
            else:
                self.notes.append(
                    f"batch {batch_id}: its LogArchived event (position {position}) was appended "
                    "but its events are still live (an interrupted archive): `wgstore archive` "
                    "finishes it"
                )

    def merged(self, live: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any] | ArchiveSpan]:
        """The live rows, the archived rows and the ranges crossed by manifest, by position;
        each file is read when the walk reaches its first position."""
        if not self.files and not self.spans:  # nothing archived: the live rows as they come
            yield from live
            return
        heap: list[tuple[int, int, Any, Iterator[Any]]] = []
        order = itertools.count()

        def push(source: Iterator[Any]) -> None:
            item = next(source, None)
            if item is not None:
                heapq.heappush(heap, (_position_of(item), next(order), item, source))

        push(live)
        push(iter(sorted(self.spans, key=lambda span: span.range.first)))
        waiting = deque(sorted(self.files, key=lambda f: f.file.first_position))
        while heap or waiting:
            while waiting and (not heap or waiting[0].file.first_position <= heap[0][0]):
                push(iter(self._load(waiting.popleft())))
            if heap:
                _, _, item, source = heapq.heappop(heap)
                yield item
                push(source)

    def _load(self, planned: _PlannedFile) -> list[ArchiveRow | ArchiveSpan]:
        """The rows of one file, by position (its run's ranges when it cannot be read)."""
        try:
            data = planned.location.read_bytes(planned.file.path)
            rows = parse_rows(data, f"{planned.location.root}/{planned.file.path}")
        except (EventStoreError, ValueError) as error:
            self.problems.append(
                f"{planned} cannot be read ({error}): its {planned.file.events} events were not "
                f"checked; {_UNREACHABLE_HINT}"
            )
            return [ArchiveSpan(planned.batch_id, r) for r in planned.ranges]
        if hashlib.sha256(data).hexdigest() != planned.file.sha256:
            self.problems.append(
                f"{planned} is not the file its manifest names (its SHA-256 differs): it was "
                "changed or swapped"
            )
        self.problems += _file_problems(planned, rows)
        inside, empty = _inside(planned.ranges, rows)
        if self.stream_id is not None:
            inside = [row for row in inside if row.stream_id == self.stream_id]
        self._count(inside)
        # A range the file holds nothing of is crossed by the manifest: its problem is named.
        return [*sorted(inside, key=lambda row: row.position)] + [
            ArchiveSpan(planned.batch_id, r) for r in empty
        ]

    def _count(self, rows: Sequence[ArchiveRow]) -> None:
        """Count a file's walked rows; name an id it holds twice, or that is stored live too."""
        self.read += len(rows)
        ids: dict[str, int] = {}
        for row in rows:
            earlier = ids.setdefault(row.event_id, row.position)
            if earlier != row.position:
                self.problems.append(
                    f"event id {row.event_id} is archived twice (positions {earlier} and "
                    f"{row.position}): an event was copied; each event is stored once"
                )
        self.problems += _archived_ids_live(self.store, ids)


def _position_of(item: Sequence[Any] | ArchiveSpan) -> int:
    return item.range.first if isinstance(item, ArchiveSpan) else int(item[0])


def _stream_is_live(store: LogAccess, stream_id: str) -> bool:
    p = store.recorder.param
    return bool(
        store.fetch_rows(f"SELECT 1 FROM wg_events WHERE stream_id = {p} LIMIT 1", (stream_id,))
    )


def plan_archive_check(store: LogAccess, stream_id: str | None, *, files: bool) -> ArchiveCheck:
    """Every batch that left the live log, checked against the archive stream's events, with
    what the walk merges: the files to read, or the ranges to cross by manifest."""
    batches = stored_batches(store)
    archive = ArchiveCheck(
        store, stream_id, _cuts(store) if batches or stream_id is None else _Cuts()
    )
    for batch in batches:
        archive.add(batch, files)
    if stream_id is None:
        archive.add_unfinished({batch.batch_id for batch in batches})
    return archive


def _file_problems(planned: _PlannedFile, rows: Sequence[ArchiveRow]) -> list[str]:
    """What a file's rows say against its manifest: how many, in order, inside its run's
    ranges with each range's count, of its streams."""
    file = planned.file
    problems = []
    if len(rows) != file.events:
        problems.append(
            f"{planned} holds {len(rows)} events, its manifest {file.events}: events were "
            "removed from it or added to it"
        )
    disorder = next((b for a, b in itertools.pairwise(rows) if b.position <= a.position), None)
    if disorder is not None:
        problems.append(
            f"{planned}: its event at position {disorder.position} comes after a later one: "
            "its rows were reordered"
        )
    strays = sorted({row.stream_id for row in rows} - set(file.streams))
    if strays:
        problems.append(
            f"{planned} holds events of stream {strays[0]!r}, which its manifest does not list"
        )
    return problems + _range_problems(planned, rows)


def _range_of(firsts: list[int], ranges: Sequence[ArchivedRange], position: int) -> int | None:
    """The index of the range (sorted by position; ``firsts`` their first positions) that
    holds ``position``."""
    index = bisect_right(firsts, position) - 1
    return index if index >= 0 and position <= ranges[index].last else None


def _inside(
    ranges: Sequence[ArchivedRange], rows: Sequence[ArchiveRow]
) -> tuple[list[ArchiveRow], list[ArchivedRange]]:
    """The rows inside their run's ranges (the walk's: one outside is named, not walked, so
    it cannot stand for a live or another file's event), and the ranges that hold none."""
    held = [0] * len(ranges)
    inside = []
    firsts = [r.first for r in ranges]
    for row in rows:
        index = _range_of(firsts, ranges, row.position)
        if index is not None:
            held[index] += 1
            inside.append(row)
    return inside, [r for r, count in zip(ranges, held, strict=True) if not count]


def _range_problems(planned: _PlannedFile, rows: Sequence[ArchiveRow]) -> list[str]:
    ranges = planned.ranges
    counts = [0] * len(ranges)
    outside = []
    firsts = [r.first for r in ranges]
    for row in rows:
        index = _range_of(firsts, ranges, row.position)
        if index is None:
            outside.append(row.position)
        else:
            counts[index] += 1
    problems = []
    if outside:
        shown = ", ".join(map(str, outside[:5])) + (", ..." if len(outside) > 5 else "")
        problems.append(
            f"{planned} holds {len(outside)} event(s) outside its run's archived ranges "
            f"(positions {shown}): they are another run's, or were moved"
        )
    problems += [
        f"{planned}: the archived range {r.first} to {r.last} holds {count} of its events, its "
        f"manifest {r.events}: events were removed, added or moved"
        for r, count in zip(ranges, counts, strict=True)
        if count != r.events
    ]
    return problems


def _archived_ids_live(store: LogAccess, ids: dict[str, int]) -> list[str]:
    """A problem per archived event id (of one file: id to position) also stored live, one IN
    query per 500 ids: an archived event copied back into the live log (replayed)."""
    canonical = [event_id for event_id in ids if CANONICAL_ID.fullmatch(event_id)]
    query = sa.select(wg_events.c.event_id, wg_events.c.position).where(
        wg_events.c.event_id.in_(sa.bindparam("ids", expanding=True))
    )
    problems = []
    with store.engine.connect() as connection:
        for start in range(0, len(canonical), 500):
            chunk = canonical[start : start + 500]
            values = [uuid.UUID(i) for i in chunk] if store.is_postgres else chunk
            for event_id, position in connection.execute(query, {"ids": values}):
                problems.append(
                    f"event id {event_id} is archived (position {ids[str(event_id)]}) and "
                    f"stored live at position {position}: an archived event was copied back "
                    "(replayed); each event is stored once"
                )
        connection.rollback()
    return problems
