"""Verification of the log from its raw rows: stream chains, the log chain, MACs, a digest.

Nothing here decodes an event, so a tampered event whose data no longer decodes is still named
with every other hash failure. See :mod:`wgstore.events.hashing` for what each hash covers.

Archived events (``wgstore archive``) are checked where they stood: their files' rows merged
with the live rows by position into the same walk, or, without the files, each manifest range
crossed by its log hashes; every manifest is checked against its ``LogArchived`` event
(docs/verify.md, "Across the archive").
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import json
import re
import uuid
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
import sqlalchemy as sa

from wgstore.events.archive import ARCHIVE_STREAM
from wgstore.events.archive_files import ArchiveLocation, ArchiveRow, parse_rows
from wgstore.events.archive_log import StoredBatch, stored_batches
from wgstore.events.archive_manifest import ArchivedFile, ArchivedRange, manifest_sha256
from wgstore.events.errors import EventStoreError
from wgstore.events.hashing import (
    DIGEST_PREFIX,
    GENESIS,
    NOT_SEALED,
    DuplicateKeyError,
    canonical_bytes,
    chain_hash,
    content_mac,
    epoch_us,
    event_mac,
    format_digest,
    is_legacy_mac,
    is_untyped_mac,
    log_hash,
    open_snapshot,
)
from wgstore.events.schema import wg_events
from wgstore.events.streams import run_stream

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = ["VerifyReport", "head_digest", "parse_digest", "verify_log"]

_PAGE = 1000
_DIGEST = re.compile(rf"{DIGEST_PREFIX}:(\d+):([0-9a-f]{{64}}|-)")
# An event id as writers store it: str(uuid.UUID), lower-case and hyphenated (PostgreSQL's uuid
# column renders every id so; SQLite keeps the text it was given).
_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_read_id = msgspec.json.Decoder(uuid.UUID).decode  # an id as the readers parse it (decoding.py)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``EventStore.verify`` found: ``ok`` when every hash and version checks out.

    ``digest`` is the digest of the last event checked, when the whole log was checked and
    found ok (None otherwise): a value proven consistent, to keep elsewhere. ``legacy_macs``
    counts the events checked with a key whose MAC predates the MAC over every field: it covers
    their content only, not their position, version or time. ``untyped_macs`` counts those whose
    MAC covers every field with numbers by value alone (``m2:``, written before 2026-12-07): an
    integer and an equal float (``3``, ``3.0``) are one number to it (see docs/verify.md).

    ``checked`` counts every event checked, live or archived; ``archived`` those of them read
    from the archive's files, ``archive_batches`` the archive batches checked (by their files,
    or by their manifests alone). ``notes`` are what is worth saying and is no problem (an
    interrupted archive that ``wgstore archive`` finishes; files dropped on purpose).
    """

    ok: bool
    problems: list[str] = field(default_factory=list)
    checked: int = 0
    digest: str | None = None
    legacy_macs: int = 0
    untyped_macs: int = 0
    archived: int = 0
    archive_batches: int = 0
    notes: list[str] = field(default_factory=list)


def parse_digest(text: str) -> tuple[int, str]:
    """The (position, log hash) of a digest made by ``EventStore.digest``.

    Raises:
        ValueError: ``text`` is not a digest.
    """
    match = _DIGEST.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or (match[1] == "0") != (match[2] == "-"):
        raise ValueError(
            f"{text!r} is not a wgstore digest: expected {DIGEST_PREFIX}:<position>:<64 hex "
            "digits>, as printed by `wgstore verify --digest` or EventStore.digest()"
        )
    return int(match[1]), "" if match[2] == "-" else match[2]


def head_digest(store: LogAccess) -> str:
    """The digest of the log's last event (``wgs1:0:-`` for an empty log)."""
    rows = store.fetch_rows(
        "SELECT position, log_hash FROM wg_events ORDER BY position DESC LIMIT 1", ()
    )
    if not rows:
        return format_digest(0, GENESIS)
    return format_digest(int(rows[0][0]), rows[0][1])


def verify_log(
    store: LogAccess,
    stream_id: str | None = None,
    *,
    against: str | None = None,
    hmac_key: bytes | None = None,
    archive_files: bool = True,
) -> VerifyReport:
    """Check the stored rows of the log (or one stream); see ``EventStore.verify``.

    The archived events are checked where they stood in the log: read from the archive's
    files (``archive_files``), or, without them, stood in for by their manifests' ranges.
    """
    target = parse_digest(against) if against is not None else None
    checker = _Checker(
        _time_of(store),
        whole_log=stream_id is None,
        key=hmac_key,
        target=target,
        # SQLite stores the text as given: a key named twice is looked for; jsonb keeps one.
        check_json=not store.is_postgres,
    )
    archive = _plan_archive(store, stream_id, files=archive_files)
    for item in archive.merged(_rows(store, stream_id)):
        if isinstance(item, _Span):
            checker.cross(item)
        else:
            checker.check(item)
    if target is not None:
        checker.finish_digest(store, stream_id)
    checker.problems += archive.problems
    checker.problems += _repeated_ids(store, stream_id)
    checker.problems += _repeated_odd_ids(store, checker.odd_ids)
    checker.problems += _snapshot_problems(store, stream_id, hmac_key)
    ok = not checker.problems
    digest = None
    if ok and stream_id is None:
        digest = format_digest(checker.previous_position, checker.recomputed_log)
    return VerifyReport(
        ok=ok,
        problems=checker.problems,
        checked=checker.checked,
        digest=digest,
        legacy_macs=checker.legacy_macs,
        untyped_macs=checker.untyped_macs,
        archived=archive.read,
        archive_batches=archive.batches,
        notes=archive.notes,
    )


def _time_of(store: LogAccess) -> Callable[[Any], datetime]:
    """The checker's reading of a row's time: a live row's as its backend stores it, an
    archived row's (already an aware datetime) as it is."""
    stored = store.recorder.time_of

    def time_of(at: Any) -> datetime:
        return at if isinstance(at, datetime) else stored(at)

    return time_of


def _rows(store: LogAccess, stream_id: str | None) -> Iterator[Sequence[Any]]:
    """Every stored row of the log (or of one stream) in position order, a page at a time.

    Every row, whatever its position: ``read_stream`` reads a stream by version, so a row at a
    position no writer hands out (0, or below) is read like any other and must be checked too.
    """
    p = store.recorder.param
    columns = (
        f"{store.recorder.columns}, log_hash, mac"  # a record's columns, as its backend reads them
    )
    where = [f"stream_id = {p}"] if stream_id is not None else []
    params: tuple[Any, ...] = (stream_id,) if stream_id is not None else ()
    after: tuple[Any, ...] = ()
    while True:
        conditions = " AND ".join([*where, f"position > {p}"] if after else where)
        rows = store.fetch_rows(
            f"SELECT {columns} FROM wg_events {'WHERE ' if conditions else ''}{conditions} "
            f"ORDER BY position LIMIT {_PAGE}",
            (*params, *after),
        )
        yield from rows
        if len(rows) < _PAGE:
            return
        after = (rows[-1][0],)


def _snapshot_problems(store: LogAccess, stream_id: str | None, key: bytes | None) -> list[str]:
    """A problem per sealed ``wg_snapshots`` row whose seal does not match the log.

    Readers check the same seal before they use a snapshot (and fold the log instead), so such a
    row misleads no one, but it was changed, or its stream was rewritten after it was taken.
    Rows of an older wgstore (not sealed) are never used, so they are not problems.
    """
    p = store.recorder.param
    state = "s.state::text" if store.is_postgres else "s.state"
    where, params = "", tuple[str, ...]()
    if stream_id is not None:
        where, params = f"WHERE s.stream_id = {p} ", (stream_id,)
    rows = store.fetch_rows(
        f"SELECT s.name, s.stream_id, s.stream_version, s.schema, {state}, e.hash "
        "FROM wg_snapshots s LEFT JOIN wg_events e ON e.stream_id = s.stream_id "
        f"AND e.stream_version = s.stream_version {where}ORDER BY s.stream_id, s.name",
        params,
    )
    problems = []
    for name, sid, version, schema, text, event_hash in rows:
        state_text, why = open_snapshot(key, name, sid, int(version), schema, event_hash, text)
        if state_text is None and why != NOT_SEALED:  # an unsealed one is never used
            problems.append(
                f"stream {sid!r}: its snapshot {name!r} at version {version} {why}: it was "
                "changed, or the stream was rewritten after it was taken (readers ignore it "
                "and fold the log)"
            )
    return problems


def _repeated_ids(store: LogAccess, stream_id: str | None) -> list[str]:
    """A problem per event id stored more than once (of the stream's ids, with ``stream_id``).

    The unique constraint prevents it; one dropped, a signed event replayed elsewhere in the
    log would otherwise read as a second occurrence of it.
    """
    p = store.recorder.param
    event_id = "event_id::text" if store.is_postgres else "event_id"
    where, params = "", tuple[str, ...]()
    if stream_id is not None:
        where = f"WHERE event_id IN (SELECT event_id FROM wg_events WHERE stream_id = {p}) "
        params = (stream_id,)
    rows = store.fetch_rows(
        f"SELECT {event_id}, count(*), min(position), max(position) FROM wg_events {where}"
        "GROUP BY event_id HAVING count(*) > 1 ORDER BY min(position)",
        params,
    )
    return [
        f"event id {eid} is stored {count} times (positions {first} to {last}): an event was "
        "copied (replayed); each event is stored once"
        for eid, count, first, last in rows
    ]


def _repeated_odd_ids(store: LogAccess, odd: list[tuple[int, uuid.UUID]]) -> list[str]:
    """A problem per event id stored more than once, counting the ids not stored in the form
    writers store (``odd``: position and the UUID readers read): ``0190...`` and ``0190...``
    upper-cased are two texts to the unique constraint and one id to every reader."""
    p = store.recorder.param
    found: dict[uuid.UUID, list[int]] = {}
    for position, event_id in odd:
        found.setdefault(event_id, []).append(position)
    problems = []
    for event_id, positions in found.items():
        rows = store.fetch_rows(
            f"SELECT position FROM wg_events WHERE event_id = {p}", (str(event_id),)
        )
        every = sorted({*positions, *(int(row[0]) for row in rows)})
        if len(every) > 1:
            problems.append(
                f"event id {event_id} is stored {len(every)} times (positions "
                f"{', '.join(map(str, every))}; readers read each as this id): an event was "
                "copied (replayed); each event is stored once"
            )
    return problems


class _Checker:
    """Walks the rows in position order and collects every problem."""

    def __init__(
        self,
        time_of: Callable[[Any], datetime],
        *,
        whole_log: bool,
        key: bytes | None,
        target: tuple[int, str] | None,
        check_json: bool = False,
    ) -> None:
        self.time_of = time_of
        self.check_json = check_json
        self.legacy_macs = 0
        self.untyped_macs = 0
        self.odd_ids: list[tuple[int, uuid.UUID]] = []  # ids not in the form writers store them
        self.first_position: int | None = None
        self.whole_log = whole_log
        self.key = key
        self.target = target
        self.problems: list[str] = []
        self.checked = 0
        self.streams: dict[str, tuple[int, str]] = {}
        self.previous_position = 0
        self.stored_log = GENESIS  # the stored log hash of the row before: localizes problems
        self.recomputed_log = GENESIS  # the chain from the start: what a digest must match
        self.digest_seen = False
        self.crossed: _Span | None = None  # the last archived range crossed by its manifest
        self.walked = 0  # rows and ranges walked before the current one

    def check(self, row: Sequence[Any]) -> None:
        position, sid, version, event_id, type_, schema, data, meta, at, stored, logged, mac = row
        self.checked += 1
        where = f"stream {sid!r}: the event at position {position} (version {version}, {type_})"
        if self.first_position is None:
            self.first_position = position
        if position < 1:
            self.problems.append(
                f"{where} is at a position no writer hands out (they start at 1), yet readers "
                "read it as the stream's event at that version: it was inserted behind the "
                "writers' back"
            )
        if not _CANONICAL_ID.fullmatch(event_id):
            self._check_odd_id(where, position, event_id)
        previous_version, previous_hash = self.streams.get(sid, (0, ""))
        if version != previous_version + 1:
            self.problems.append(
                f"stream {sid!r}: version {version} at position {position} follows "
                f"version {previous_version}: events are missing or out of order"
            )
        us = None
        try:
            us = epoch_us(self.time_of(at))
            expected = chain_hash(
                previous_hash, sid, version, event_id, type_, schema, us, data, meta
            )
        except (TypeError, ValueError) as error:
            expected = None
            self.problems.append(f"{where} is malformed ({error}): it was changed")
        if expected is not None and expected != stored:
            self.problems.append(
                f"{where} does not match its hash: it, or the event before it, was changed"
            )
        self.streams[sid] = (version, stored)
        if self.key is not None:
            fields = (position, sid, version, event_id, type_, schema, us, data, meta)
            self._check_mac(where, fields, mac)
        if self.whole_log:
            self._check_log(where, position, stored, logged, mac)
        self.walked += 1

    def _check_odd_id(self, where: str, position: int, event_id: str) -> None:
        """An event id stored in another form than writers store (only SQLite can hold one)."""
        try:
            read_as = _read_id(msgspec.json.encode(event_id))
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.problems.append(
                f"{where} has the event id {event_id!r}, which is not a UUID: no writer stored "
                "it, and readers cannot read it"
            )
            return
        self.odd_ids.append((position, read_as))
        self.problems.append(
            f"{where} has its event id stored as {event_id!r}, not in the lower-case form "
            f"writers store: readers read it as {read_as}, which the unique constraint (it "
            "compares the text) does not see, so it was inserted behind the writers' back"
        )

    def _check_mac(self, where: str, fields: tuple[Any, ...], mac: str | None) -> None:
        assert self.key is not None
        position, sid, version, event_id, type_, schema, us, data, meta = fields
        if not mac:
            self.problems.append(
                f"{where} has no MAC: it was not written with the key (forged, or written "
                "before the key was in use)"
            )
            return
        try:
            if is_legacy_mac(mac):
                self.legacy_macs += 1
                if self.check_json:  # the old MAC's parser kept the last of two equal keys
                    canonical_bytes(data)
                    canonical_bytes(meta)
                expected = content_mac(self.key, sid, event_id, type_, schema, data, meta)
            elif us is None:
                return  # its time is malformed: already a problem
            else:
                if is_untyped_mac(mac):
                    self.untyped_macs += 1
                expected = event_mac(
                    self.key, position, sid, version, event_id, type_, schema, us, data, meta,
                    check_duplicates=self.check_json, form=mac[:3],
                )  # fmt: skip
        except DuplicateKeyError as error:
            self.problems.append(
                f"{where}: its stored JSON names a key twice ({error}), so readers disagree on "
                "its value: it was changed"
            )
            return
        except (TypeError, ValueError, msgspec.DecodeError):
            self.problems.append(f"{where}: its data is not valid JSON, so its MAC cannot match")
            return
        if not hmac.compare_digest(expected, mac):
            self.problems.append(
                f"{where} does not match its MAC: its content was forged or changed without the "
                "key (or this is not the key it was written with)"
            )

    def cross(self, span: _Span) -> None:
        """Cross an archived range by its manifest (its files not read): it must follow the
        log hash the walk holds, and the walk goes on from its last event's."""
        if not self.whole_log:
            return
        archived = span.range
        if archived.log_hash_before != self.stored_log:
            self.problems.append(
                f"{span}: its manifest's log hash before it is not the one stored at "
                f"{self._after()}: events between were removed, or the event before it was "
                "changed"
            )
        if self.target is not None and archived.first <= self.target[0] <= archived.last:
            self._cross_digest(span)
        self.stored_log = self.recomputed_log = archived.log_hash_last
        self.previous_position = archived.last
        self.crossed = span
        self.walked += 1

    def _cross_digest(self, span: _Span) -> None:
        assert self.target is not None
        self.digest_seen = True
        if span.range.last != self.target[0]:
            self.problems.append(
                f"the digest's position {self.target[0]} is inside {span}, whose files were not "
                "read: check the digest with the archive files"
            )
        elif span.range.log_hash_last != self.target[1]:
            self.problems.append(
                f"the log no longer extends the digest {format_digest(*self.target)}: {span} "
                "ends with another log hash (by its manifest): events at or before it were "
                "removed, inserted, moved or rewritten"
            )

    def _after(self) -> str:
        """Where the walk stands, for a problem of the next item."""
        return f"position {self.previous_position}" if self.walked else "the start"

    def _check_log(
        self, where: str, position: int, stored: str, logged: str | None, mac: str | None
    ) -> None:
        if self.crossed is not None and position <= self.crossed.range.last:
            self.problems.append(
                f"{where} lies inside {self.crossed}: it was put there behind the writers' back"
            )
        mine = log_hash(self.stored_log, position, stored, mac)
        if mine != logged:
            after = self._after()
            self.problems.append(
                f"{where} breaks the log chain: events between {after} and it were removed, "
                "moved or swapped, or it was changed"
            )
        self.stored_log = logged or ""
        self.previous_position = position
        self.recomputed_log = log_hash(self.recomputed_log, position, stored, mac)
        if self.target is not None and position == self.target[0] != 0:
            self.digest_seen = True
            if self.recomputed_log != self.target[1]:
                self.problems.append(
                    f"the log no longer extends the digest {format_digest(*self.target)}: "
                    f"events at or before position {position} were removed, inserted, moved or "
                    "rewritten"
                )

    def finish_digest(self, store: LogAccess, stream_id: str | None) -> None:
        assert self.target is not None
        position, _ = self.target
        if position == 0:
            if self.first_position is not None and self.first_position <= 0:
                self.problems.append(
                    f"the log no longer extends the digest {format_digest(*self.target)} (an "
                    f"empty log): it has events at or before position 0 "
                    f"(from {self.first_position}), which were inserted"
                )
            return
        if self.digest_seen:
            return
        if stream_id is not None:
            self.problems.append("a digest covers the whole log: check it without a stream")
            return
        if self.previous_position < position:
            self.problems.append(
                f"the log ends at position {self.previous_position}, before the digest's "
                f"position {position}: events were cut off the end of the log"
            )
        else:
            self.problems.append(
                f"the log has no event at the digest's position {position}: it was removed or "
                "moved, so the log no longer extends the digest"
            )


# ---------------------------------------------------------------------- across the archive

_UNREACHABLE_HINT = (
    "pass --without-archive-files (archive_files=False) to check the live log and the "
    "manifests alone"
)


@dataclass(frozen=True, slots=True)
class _Span:
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


class _Archive:
    """The archived events the walk merges with the live rows, and what their batches,
    manifests and files were found to be."""

    def __init__(self, store: LogAccess, stream_id: str | None, cuts: _Cuts) -> None:
        self.store = store
        self.stream_id = stream_id
        self.cuts = cuts
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.spans: list[_Span] = []
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
            self.spans += [_Span(batch.batch_id, r) for rs in runs.values() for r in rs]
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

    def merged(self, live: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any] | _Span]:
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

    def _load(self, planned: _PlannedFile) -> list[ArchiveRow | _Span]:
        """The rows of one file, by position (its run's ranges when it cannot be read)."""
        try:
            data = planned.location.read_bytes(planned.file.path)
            rows = parse_rows(data, f"{planned.location.root}/{planned.file.path}")
        except (EventStoreError, ValueError) as error:
            self.problems.append(
                f"{planned} cannot be read ({error}): its {planned.file.events} events were not "
                f"checked; {_UNREACHABLE_HINT}"
            )
            return [_Span(planned.batch_id, r) for r in planned.ranges]
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
            _Span(planned.batch_id, r) for r in empty
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


def _position_of(item: Sequence[Any] | _Span) -> int:
    return item.range.first if isinstance(item, _Span) else int(item[0])


def _stream_is_live(store: LogAccess, stream_id: str) -> bool:
    p = store.recorder.param
    return bool(
        store.fetch_rows(f"SELECT 1 FROM wg_events WHERE stream_id = {p} LIMIT 1", (stream_id,))
    )


def _plan_archive(store: LogAccess, stream_id: str | None, *, files: bool) -> _Archive:
    """Every batch that left the live log, checked against the archive stream's events, with
    what the walk merges: the files to read, or the ranges to cross by manifest."""
    batches = stored_batches(store)
    archive = _Archive(store, stream_id, _cuts(store) if batches or stream_id is None else _Cuts())
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
    canonical = [event_id for event_id in ids if _CANONICAL_ID.fullmatch(event_id)]
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
