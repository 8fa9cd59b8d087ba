"""Verification of the log from its raw rows: stream chains, the log chain, MACs, a digest.

Nothing here decodes an event, so a tampered event whose data no longer decodes is still named
with every other hash failure. See :mod:`wgstore.events.hashing` for what each hash covers.

Archived events (``wgstore archive``) are checked where they stood: their files' rows merged
with the live rows by position into the same walk, or, without the files, each manifest range
crossed by its log hashes; every manifest is checked against its ``LogArchived`` event
(docs/verify.md, "Across the archive").
"""

from __future__ import annotations

import hmac
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

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
from wgstore.events.verify_archive import (
    CANONICAL_ID,
    ArchiveSpan,
    plan_archive_check,
)

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = ["VerifyReport", "head_digest", "parse_digest", "verify_log"]

_PAGE = 1000
_DIGEST = re.compile(rf"{DIGEST_PREFIX}:(\d+):([0-9a-f]{{64}}|-)")
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
    archive = plan_archive_check(store, stream_id, files=archive_files)
    for item in archive.merged(_rows(store, stream_id)):
        if isinstance(item, ArchiveSpan):
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
        self.crossed: ArchiveSpan | None = None  # the last archived range crossed by its manifest
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
        if not CANONICAL_ID.fullmatch(event_id):
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

    def cross(self, span: ArchiveSpan) -> None:
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

    def _cross_digest(self, span: ArchiveSpan) -> None:
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
