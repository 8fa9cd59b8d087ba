"""The live log's side of the archive: a batch's rows and ranges, its delete, a run's restore.

``wgstore archive`` (:mod:`wgstore.projections.archiving`) reads a batch of ended runs with
:func:`read_batch`, writes and verifies their files, appends ``LogArchived`` and then calls
:func:`commit_batch`: one transaction that records the batch (``wg_archive_batches``, its
ranges and streams), checks that no stream of it moved since it was read, and deletes its rows,
snapshots and read-model rows. The immutability triggers pass a DELETE only inside a range
(migration ``0015_archive``). :func:`restore_rows` puts one run's rows back at their positions,
the only INSERT below the log's head the triggers pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from wgstore.events.archive import (
    ARCHIVE_STREAM,
    ArchiveAbandoned,
    ArchiveFilesDropped,
    LogArchived,
    RunRestored,
)
from wgstore.events.archive_files import ArchiveRow
from wgstore.events.archive_manifest import ArchivedRange, Manifest, decode_manifest
from wgstore.events.errors import EventStoreError
from wgstore.events.hashing import GENESIS
from wgstore.events.schema import (
    wg_archive_batches,
    wg_archive_ranges,
    wg_archive_streams,
    wg_events,
    wg_snapshots,
)

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = [
    "ArchiveHistory",
    "BatchMovedError",
    "BatchRows",
    "RunSize",
    "StoredBatch",
    "archive_history",
    "archived_run_ids",
    "commit_batch",
    "read_batch",
    "restore_rows",
    "run_sizes",
    "stored_batches",
]

_PAGE = 5_000
_CHUNK = 500  # ids per IN list


class BatchMovedError(EventStoreError):
    """A stream of the batch changed between its read and its delete (nothing was deleted)."""


@dataclass
class BatchRows:
    """The rows of a batch's runs, by run, in position order, and their ranges."""

    rows: dict[str, list[Sequence[Any]]] = field(default_factory=dict)
    """Each run's rows as read from ``wg_events`` (verify's columns: the recorder's, then
    ``log_hash`` and ``mac``)."""
    ranges: list[ArchivedRange] = field(default_factory=list)
    streams: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """How many events the batch holds."""
        return sum(len(rows) for rows in self.rows.values())


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A row of ``wg_archive_batches``, its manifest decoded."""

    batch_id: str
    location: str
    manifest_text: str
    manifest_sha256: str
    archived_position: int
    events: int
    archived_at: datetime

    @property
    def manifest(self) -> Manifest:
        """The manifest as stored (raises ValueError when it no longer decodes)."""
        return decode_manifest(self.manifest_text)


@dataclass
class ArchiveHistory:
    """What the archive stream says: every batch appended (with its event's position), the
    abandoned ones, the runs restored (batch, run) and the batches whose files were dropped."""

    appended: dict[str, tuple[int, LogArchived]] = field(default_factory=dict)
    abandoned: dict[str, ArchiveAbandoned] = field(default_factory=dict)
    restored: set[tuple[str, str]] = field(default_factory=set)
    dropped: dict[str, ArchiveFilesDropped] = field(default_factory=dict)

    @property
    def batches(self) -> dict[str, tuple[int, LogArchived]]:
        """The batches appended and not abandoned."""
        return {b: v for b, v in self.appended.items() if b not in self.abandoned}

    @property
    def manifest_sha256(self) -> str:
        """The last batch's manifest SHA-256 ("" before the first)."""
        kept = self.batches
        return max(kept.values(), key=lambda item: item[0])[1].manifest_sha256 if kept else ""


def archive_history(store: LogAccess) -> ArchiveHistory:
    """Read the archive stream (:data:`~wgstore.events.archive.ARCHIVE_STREAM`)."""
    history = ArchiveHistory()
    for record in store.read_stream(ARCHIVE_STREAM):
        event = record.event
        if isinstance(event, LogArchived):
            history.appended[event.batch_id] = (record.position, event)
        elif isinstance(event, ArchiveAbandoned):
            history.abandoned[event.batch_id] = event
        elif isinstance(event, RunRestored):
            history.restored.add((event.batch_id, event.run_id))
        elif isinstance(event, ArchiveFilesDropped):
            history.dropped[event.batch_id] = event
    return history


@dataclass(frozen=True, slots=True)
class RunSize:
    """A run's events in the live log and their bytes: the octet lengths of ``data`` and
    ``metadata`` as each backend stores them (indexes and row overhead not counted)."""

    events: int = 0
    bytes: int = 0


def run_sizes(store: LogAccess, runs: Mapping[str, Iterable[str]]) -> dict[str, RunSize]:
    """Each run's :class:`RunSize` (``runs``: run id to its streams), one grouped query per
    500 streams."""
    owner = {stream: run_id for run_id, streams in runs.items() for stream in streams}
    p = store.recorder.param
    if store.is_postgres:
        size = "octet_length(data::text) + octet_length(metadata::text)"
    else:
        size = "length(CAST(data AS BLOB)) + length(CAST(metadata AS BLOB))"
    totals: dict[str, list[int]] = {run_id: [0, 0] for run_id in runs}
    for chunk in _chunks(list(owner)):
        rows = store.fetch_rows(
            f"SELECT stream_id, count(*), sum({size}) FROM wg_events "
            f"WHERE stream_id IN ({', '.join([p] * len(chunk))}) GROUP BY stream_id",
            tuple(chunk),
        )
        for stream_id, events, octets in rows:
            total = totals[owner[stream_id]]
            total[0] += int(events)
            total[1] += int(octets or 0)
    return {run_id: RunSize(events, octets) for run_id, (events, octets) in totals.items()}


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _in(column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
    return column.in_(sa.bindparam(name, expanding=True))


def stored_batches(store: LogAccess, batch_id: str | None = None) -> list[StoredBatch]:
    """Every batch that left the live log, oldest first (or the one ``batch_id``)."""
    t = wg_archive_batches.c
    query = sa.select(
        t.batch_id,
        t.location,
        t.manifest,
        t.manifest_sha256,
        t.archived_position,
        t.events,
        t.archived_at,
    ).order_by(t.archived_position)
    if batch_id is not None:
        query = query.where(t.batch_id == batch_id)
    with store.engine.connect() as connection:
        rows = connection.execute(query).all()
        connection.rollback()
    return [StoredBatch(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), _aware(r[6])) for r in rows]


def _aware(value: Any) -> datetime:
    at: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def archived_run_ids(store: LogAccess) -> dict[str, str]:
    """Each run whose streams are in the archive now, and the batch that holds it."""
    t = wg_archive_streams.c
    query = sa.select(t.run_id, t.batch_id).distinct()
    with store.engine.connect() as connection:
        found = {run_id: batch_id for run_id, batch_id in connection.execute(query)}
        connection.rollback()
    return found


def _span(store: LogAccess, first: int, last: int) -> Iterator[Sequence[Any]]:
    """Position, stream and log hash of every live row from ``first`` to ``last``, a page at a
    time (the light columns: the ranges need no more)."""
    p = store.recorder.param
    after = first - 1
    while True:
        rows = store.fetch_rows(
            f"SELECT position, stream_id, log_hash FROM wg_events WHERE position > {p} AND "
            f"position <= {p} ORDER BY position LIMIT {_PAGE}",
            (after, last),
        )
        yield from rows
        if len(rows) < _PAGE:
            return
        after = int(rows[-1][0])


def _stream_rows(store: LogAccess, streams: Sequence[str]) -> list[Sequence[Any]]:
    """Every row of ``streams`` (verify's columns), by the stream index, in position order."""
    p = store.recorder.param
    columns = f"{store.recorder.columns}, log_hash, mac"
    rows: list[Sequence[Any]] = []
    for chunk in _chunks(list(streams)):
        marks = ", ".join([p] * len(chunk))
        rows += store.fetch_rows(
            f"SELECT {columns} FROM wg_events WHERE stream_id IN ({marks})", tuple(chunk)
        )
    rows.sort(key=lambda row: int(row[0]))
    return rows


def _archived_ranges_between(store: LogAccess, first: int, last: int) -> list[ArchivedRange]:
    """The ranges already archived that lie between ``first`` and ``last``, from the manifests
    of their batches (the log hashes are theirs)."""
    r = wg_archive_ranges.c
    query = sa.select(r.first_position, r.batch_id).where(
        r.last_position >= first, r.first_position <= last
    )
    with store.engine.connect() as connection:
        found = connection.execute(query).all()
        manifests: dict[str, Manifest] = {}
        for batch_id in {b for _, b in found}:
            text = connection.execute(
                sa.select(wg_archive_batches.c.manifest).where(
                    wg_archive_batches.c.batch_id == batch_id
                )
            ).scalar_one()
            manifests[batch_id] = decode_manifest(text)
        connection.rollback()
    wanted = {int(position) for position, _ in found}
    return sorted(
        (
            archived
            for manifest in manifests.values()
            for archived in manifest.ranges
            if archived.first in wanted
        ),
        key=lambda archived: archived.first,
    )


def read_batch(store: LogAccess, runs: Mapping[str, Iterable[str]]) -> BatchRows:
    """The rows of ``runs`` (run id to its streams) and their ranges, read in one pass over
    the log from their first position to their last.

    Raises:
        EventStoreError: a stream's versions are not 1, 2, 3... (part of it is missing).
    """
    run_of = {stream: run_id for run_id, streams in runs.items() for stream in streams}
    bounds = _bounds(store, list(run_of))
    batch = BatchRows()
    if bounds is None:
        return batch
    first, last = bounds
    p = store.recorder.param
    before = store.fetch_rows(
        f"SELECT position, log_hash FROM wg_events WHERE position < {p} "
        "ORDER BY position DESC LIMIT 1",
        (first,),
    )
    start = int(before[0][0]) if before else 0
    previous_hash = before[0][1] if before else GENESIS
    earlier = iter(_archived_ranges_between(store, start, last))
    pending = next(earlier, None)
    current: list[Any] | None = None  # run, first, last, events, hash before, last hash

    def close() -> None:
        nonlocal current
        if current is not None:
            batch.ranges.append(ArchivedRange(*current))
            current = None

    full = {int(row[0]): row for row in _stream_rows(store, list(run_of))}
    for position_, stream_id, logged in _span(store, first, last):
        position = int(position_)
        while pending is not None and pending.first < position:
            close()  # an earlier batch's range lies between: it breaks the current one
            previous_hash = pending.log_hash_last
            pending = next(earlier, None)
        run_id = run_of.get(stream_id)
        if run_id is None:
            close()
        else:
            raw = full[position]
            batch.rows.setdefault(run_id, []).append(raw)
            version = batch.streams.get(stream_id, 0)
            if raw[2] != version + 1:
                raise EventStoreError(
                    f"stream {stream_id!r}: version {raw[2]} at position {position} follows "
                    f"version {version} in the live log: part of the stream is missing; run "
                    "`wgstore verify` before archiving"
                )
            batch.streams[stream_id] = raw[2]
            if current is not None and current[0] == run_id:
                current[2] = position
                current[3] += 1
                current[5] = logged
            else:
                close()
                current = [run_id, position, position, 1, previous_hash, logged]
        previous_hash = logged
    close()
    return batch


def _bounds(store: LogAccess, streams: list[str]) -> tuple[int, int] | None:
    low: int | None = None
    high: int | None = None
    query = sa.select(sa.func.min(wg_events.c.position), sa.func.max(wg_events.c.position)).where(
        _in(wg_events.c.stream_id, "ids")
    )
    with store.engine.connect() as connection:
        for chunk in _chunks(streams):
            first, last = connection.execute(query, {"ids": list(chunk)}).one()
            if first is not None:
                low = int(first) if low is None else min(low, int(first))
                high = int(last) if high is None else max(high, int(last))
        connection.rollback()
    return None if low is None or high is None else (low, high)


def commit_batch(
    store: LogAccess,
    manifest: Manifest,
    manifest_text: str,
    manifest_sha: str,
    location: str,
    archived_position: int,
    also: Callable[[sa.Connection], None] | None = None,
) -> int:
    """Record the batch and delete its rows from the live log, in one transaction; returns
    the rows deleted. ``also`` runs in the same transaction (the read models' delete).

    Raises:
        BatchMovedError: a stream of the batch has other versions now than the manifest says
            (an event was appended to it after it was read): nothing was deleted.
    """
    streams = sorted(manifest.streams)
    with store.engine.begin() as connection:
        if store.is_postgres:  # appends wait (readers do not): no event slips in meanwhile
            connection.exec_driver_sql("LOCK TABLE wg_events IN EXCLUSIVE MODE")
        connection.execute(
            wg_archive_batches.insert(),
            {
                "batch_id": manifest.batch_id,
                "location": location,
                "manifest": manifest_text,
                "manifest_sha256": manifest_sha,
                "archived_position": archived_position,
                "events": manifest.events,
                "archived_at": datetime.now(UTC),
            },
        )
        if manifest.ranges:
            connection.execute(
                wg_archive_ranges.insert(),
                [
                    {
                        "first_position": r.first,
                        "last_position": r.last,
                        "batch_id": manifest.batch_id,
                        "run_id": r.run_id,
                    }
                    for r in manifest.ranges
                ],
            )
        connection.execute(
            wg_archive_streams.insert(),
            [
                {
                    "stream_id": stream,
                    "run_id": file.run_id,
                    "batch_id": manifest.batch_id,
                    "stream_version": version,
                }
                for file in manifest.files
                for stream, version in file.streams.items()
            ],
        )
        _check_unmoved(connection, manifest)
        deleted = 0
        for chunk in _chunks(streams):
            result = connection.execute(
                sa.delete(wg_events).where(_in(wg_events.c.stream_id, "ids")),
                {"ids": list(chunk)},
            )
            deleted += result.rowcount
            connection.execute(
                sa.delete(wg_snapshots).where(_in(wg_snapshots.c.stream_id, "ids")),
                {"ids": list(chunk)},
            )
        if deleted != manifest.events:
            raise BatchMovedError(
                f"batch {manifest.batch_id}: {deleted} rows to delete, the manifest holds "
                f"{manifest.events}: nothing was deleted"
            )
        if also is not None:
            also(connection)
    store.recorder.forget_stream_heads()
    return deleted


def _check_unmoved(connection: sa.Connection, manifest: Manifest) -> None:
    e = wg_events.c
    query = (
        sa.select(e.stream_id, sa.func.max(e.stream_version), sa.func.count())
        .where(_in(e.stream_id, "ids"))
        .group_by(e.stream_id)
    )
    now: dict[str, tuple[int, int]] = {}
    for chunk in _chunks(sorted(manifest.streams)):
        for stream, version, count in connection.execute(query, {"ids": list(chunk)}):
            now[stream] = (int(version), int(count))
    moved = [
        stream
        for stream, version in manifest.streams.items()
        if now.get(stream) != (version, version)
    ]
    if moved:
        raise BatchMovedError(
            f"batch {manifest.batch_id}: {len(moved)} of its streams changed since they were "
            f"read (first: {moved[0]!r}, now {now.get(moved[0])} of version and count, read at "
            f"{manifest.streams[moved[0]]}): nothing was deleted; archive again"
        )


def restore_rows(
    store: LogAccess,
    run_id: str,
    batch_id: str,
    rows: Sequence[ArchiveRow],
    also: Callable[[sa.Connection], None] | None = None,
) -> int:
    """Put run ``run_id``'s archived ``rows`` back at their positions, in one transaction;
    returns how many were inserted (0 when they are live already). ``also`` runs in the same
    transaction, after the insert (the read models' rows)."""
    if not rows:
        return 0
    with store.engine.begin() as connection:
        if store.is_postgres:
            connection.exec_driver_sql("LOCK TABLE wg_events IN EXCLUSIVE MODE")
        live = connection.execute(
            sa.select(sa.func.count()).where(wg_events.c.position == rows[0].position)
        ).scalar_one()
        if live:
            return 0
        s = wg_archive_streams.c
        connection.execute(
            sa.delete(wg_archive_streams).where(s.run_id == run_id, s.batch_id == batch_id)
        )
        connection.execute(_insert_sql(store), [_insert_params(store, row) for row in rows])
        r = wg_archive_ranges.c
        connection.execute(
            sa.delete(wg_archive_ranges).where(r.run_id == run_id, r.batch_id == batch_id)
        )
        if also is not None:
            also(connection)
    store.recorder.forget_stream_heads()
    return len(rows)


_INSERT_COLUMNS = (
    "position, event_id, stream_id, stream_version, event_type, schema_version, data, "
    "metadata, recorded_at, hash, log_hash, mac"
)


def _insert_sql(store: LogAccess) -> sa.TextClause:
    if store.is_postgres:
        values = (
            ":position, CAST(:event_id AS uuid), :stream_id, :stream_version, :event_type, "
            ":schema_version, CAST(:data AS jsonb), CAST(:metadata AS jsonb), :recorded_at, "
            ":hash, :log_hash, :mac"
        )
    else:
        values = (
            ":position, :event_id, :stream_id, :stream_version, :event_type, :schema_version, "
            ":data, :metadata, :recorded_at, :hash, :log_hash, :mac"
        )
    return sa.text(f"INSERT INTO wg_events ({_INSERT_COLUMNS}) VALUES ({values})")


def _insert_params(store: LogAccess, row: ArchiveRow) -> dict[str, Any]:
    at: Any = row.recorded_at
    if not store.is_postgres:  # SQLite's text, as its writer stores it
        at = row.recorded_at.astimezone(UTC).isoformat(" ", "microseconds")[:-6]
    return {
        "position": row.position,
        "event_id": row.event_id,
        "stream_id": row.stream_id,
        "stream_version": row.stream_version,
        "event_type": row.event_type,
        "schema_version": row.schema_version,
        "data": row.data,
        "metadata": row.metadata,
        "recorded_at": at,
        "hash": row.hash,
        "log_hash": row.log_hash,
        "mac": row.mac,
    }
