"""The SQLite recorder: one ``BEGIN IMMEDIATE`` transaction per append on the store's writer.

Positions, stream versions and both hash chains are computed here, in Python, while the
database's write lock is held (one writer at a time); with the heads of this writer's last append
cached, all Python work happens before the lock and only C runs under it (see
:meth:`SqliteRecorder._append_cached`).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, cast

from wgstore.events.engine import SHORT_LOCK_WAITS_OPTION, begin_immediate
from wgstore.events.errors import DuplicateEventError
from wgstore.events.hashing import GENESIS, epoch_us, event_mac
from wgstore.events.pooled_recorder import GroupedWrite, PooledRecorder, at_append_commit
from wgstore.events.recorder import (
    AppendResult,
    Batch,
    Pending,
    StoredTime,
    StreamVersionMismatch,
    fenced,
    partly_stored,
)
from wgstore.events.records import Fence

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["SqliteRecorder", "parse_time"]

_INSERTED = (
    "position, event_id, stream_id, stream_version, event_type, schema_version, data, "
    "metadata, recorded_at, hash, log_hash"
)


def _insert(keyed: bool) -> str:
    """The INSERT of one row: with ``keyed``, of its ``mac`` too; without, the column is left
    out and stored NULL as before (binding a None costs the driver an adapter lookup per row:
    ~0.4 µs, a tenth of a batch's SQL per event)."""
    columns, marks = (f"{_INSERTED}, mac", 12) if keyed else (_INSERTED, 11)
    return f"INSERT INTO wg_events ({columns}) VALUES ({', '.join('?' * marks)})"


def _insert_after(keyed: bool) -> str:
    """The cached-heads append's first row: in only if the log's last position is the one
    before it (given as the last parameter)."""
    columns, marks = (f"{_INSERTED}, mac", 12) if keyed else (_INSERTED, 11)
    return (
        f"INSERT INTO wg_events ({columns}) SELECT {', '.join('?' * marks)} "
        "WHERE (SELECT max(position) FROM wg_events) IS ?"
    )


_HEAD_CACHE_SIZE = 10_000
_CACHED_SKIPS = 8  # appends that skip the cached path after it found the cache stale
# Under BEGIN IMMEDIATE: the stream's head, the log's head and the log's last position.
_HEADS = (
    "SELECT (SELECT stream_version FROM wg_events WHERE stream_id = ? "
    "ORDER BY stream_version DESC LIMIT 1), "
    "(SELECT hash FROM wg_events WHERE stream_id = ? ORDER BY stream_version DESC LIMIT 1), "
    "(SELECT log_hash FROM wg_events ORDER BY position DESC LIMIT 1), "
    "coalesce((SELECT max(position) FROM wg_events), 0)"
)
_LEASE = "SELECT holder, epoch FROM wg_run_leases WHERE run_id = ?"
_AFTER_STREAM_ID = (  # the columns after position and stream_id
    "stream_version, event_id, event_type, schema_version, data, metadata, recorded_at, hash"
)
_COLUMNS = f"position, stream_id, {_AFTER_STREAM_ID}"
_STREAM_COLUMNS = f"position, {_AFTER_STREAM_ID}"


# A row as inserted: position, event_id, stream_id, stream_version, event_type, schema_version,
# data, metadata, recorded_at, hash, log_hash; and with a key, the mac.
_PlainRow = tuple[int, str, str, int, str, int, str, str, str, str, str]
_KeyedRow = tuple[int, str, str, int, str, int, str, str, str, str, str, str]
_Row = _PlainRow | _KeyedRow
_Written = tuple[list[AppendResult], _Row]  # a batch's results and last row, as inserted
# An AppendResult from a tuple, in C (AppendResult's own __new__ is Python).
_result: Callable[[tuple[int, int, datetime, str, bool]], AppendResult] = partial(
    tuple.__new__, AppendResult
)


def parse_time(text: str) -> datetime:
    """A ``recorded_at`` as SQLite stores it (UTC text) as an aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _mismatch(expected: int, version: int) -> bool:
    return (
        (expected >= 0 and version != expected)
        or (expected == -2 and version != 0)
        or (expected == -3 and version == 0)
    )


class SqliteRecorder(PooledRecorder):
    """Appends and reads on SQLite (see the module docstring). Pages are read whole: fetching
    one costs less than its decode, so nothing is gained by handing rows over as they come."""

    columns = _COLUMNS
    stream_columns = _STREAM_COLUMNS
    param = "?"

    def time_of(self, stored: StoredTime) -> datetime:
        """``recorded_at`` as SQLite stores it (UTC text) as an aware datetime."""
        return parse_time(cast(str, stored))

    def __init__(self, engine: sa.Engine, hmac_key: bytes | None = None) -> None:
        super().__init__(engine, hmac_key)
        self._insert = _insert(keyed=hmac_key is not None)
        self._insert_after = _insert_after(keyed=hmac_key is not None)
        # The heads this store's own appends left (a stale entry is caught, not trusted).
        self._stream_heads: dict[str, tuple[int, str]] = {}
        self._log_head: tuple[int, str] | None = None
        self._cached_skips = 0
        self._short_waits_s: float | None = engine.get_execution_options().get(
            SHORT_LOCK_WAITS_OPTION
        )

    def forget_stream_heads(self) -> None:
        """Drop the heads this store's appends left (rows left or came back behind them)."""
        with self._write_lock:
            self._stream_heads.clear()
            self._log_head = None

    def _begin_immediate(self, cursor: sqlite3.Cursor) -> None:
        """Take the write lock, waiting for it as the store's URL says (``lock_wait``,
        :func:`~wgstore.events.engine.begin_immediate`): SQLite's busy handler by default, which
        keeps more appends a second when writers are saturated, or short steps of our own, which
        keep the tail short when many processes append a little each."""
        begin_immediate(cursor.execute, self._short_waits_s)

    def _append(
        self,
        writer: PoolProxiedConnection,
        stream_id: str,
        expected: int,
        pending: list[Pending],
        check_ids: bool,
    ) -> list[AppendResult]:
        connection = cast(sqlite3.Connection, writer.driver_connection)
        if self._cached_skips > 0:
            self._cached_skips -= 1
        elif not check_ids:
            done = self._append_cached(connection, stream_id, expected, pending)
            if done is not None:
                return done
        write = GroupedWrite([Batch(stream_id, expected, pending)], check_ids, None)
        return self._append_locked(connection, [write])[0][0]

    def _append_many(
        self,
        writer: PoolProxiedConnection,
        batches: list[Batch],
        check_ids: bool,
        fence: Fence | None,
    ) -> list[list[AppendResult]]:
        connection = cast(sqlite3.Connection, writer.driver_connection)
        return self._append_locked(connection, [GroupedWrite(batches, check_ids, fence)])[0]

    def _append_group(
        self, writer: PoolProxiedConnection, group: list[GroupedWrite]
    ) -> list[list[list[AppendResult]]]:
        """Independent appends in one ``BEGIN IMMEDIATE`` transaction (group commit, see
        :meth:`PooledRecorder._append_group`)."""
        connection = cast(sqlite3.Connection, writer.driver_connection)
        return self._append_locked(connection, group)

    def _append_locked(
        self, connection: sqlite3.Connection, group: list[GroupedWrite]
    ) -> list[list[list[AppendResult]]]:
        """Appends in one ``BEGIN IMMEDIATE`` transaction, each write's fence read and its
        batches checked by their ids (when it says so) under the write lock, each batch's heads
        read after the previous batch's rows are in."""
        with self._write_transaction(connection) as cursor:
            results: list[list[list[AppendResult]]] = []
            batches: list[Batch] = []
            written: list[_Written] = []
            for write in group:
                if write.fence is not None:
                    _check_fence(cursor, write.fence)
                stored = _stored_batches(cursor, write.batches) if write.check_ids else None
                if stored is None:
                    stored = []
                    for batch in write.batches:
                        batches.append(batch)
                        written.append(self._insert_batch(cursor, batch))
                        stored.append(written[-1][0])
                results.append(stored)
            self._commit(cursor, batches, written)
            return results

    @contextmanager
    def _write_transaction(self, connection: sqlite3.Connection) -> Iterator[sqlite3.Cursor]:
        """A cursor in a ``BEGIN IMMEDIATE`` transaction (the block commits or rolls back),
        rolled back if the block raises."""
        cursor = connection.cursor()
        self._begin_immediate(cursor)
        try:
            yield cursor
        except BaseException:
            if connection.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    def _insert_batch(self, cursor: sqlite3.Cursor, batch: Batch) -> _Written:
        """Insert one batch in the open write transaction, after its stream's and the log's
        heads: its results and its last row."""
        version, previous, log, position = cursor.execute(
            _HEADS, (batch.stream_id, batch.stream_id)
        ).fetchone()
        version, previous, log = version or 0, previous or "", log or GENESIS
        if _mismatch(batch.expected, version):
            raise StreamVersionMismatch(version, batch.stream_id)
        # One writer at a time (BEGIN IMMEDIATE): positions continue from the log's last (rows
        # are never deleted, so none is handed out twice), and so does the log chain; a later
        # batch's heads are read after the earlier batch's rows are in.
        rows, results = _rows(
            batch.stream_id, batch.pending, self.hmac_key, version, previous, log, position
        )
        if len(rows) == 1:
            cursor.execute(self._insert, rows[0])
        else:
            cursor.executemany(self._insert, rows)
        return results, rows[-1]

    def _commit(
        self, cursor: sqlite3.Cursor, batches: list[Batch], written: list[_Written]
    ) -> None:
        """Commit, then cache the heads the ``batches`` (``written`` in this order) left."""
        at_append_commit()
        cursor.execute("COMMIT")
        for batch, (_, last_row) in zip(batches, written, strict=True):
            self._remember_heads(batch.stream_id, last_row)

    def _remember_heads(self, stream_id: str, last_row: _Row) -> None:
        """Cache the heads this writer just made, for :meth:`_append_cached`."""
        if len(self._stream_heads) >= _HEAD_CACHE_SIZE:
            self._stream_heads.clear()
        self._stream_heads[stream_id] = (last_row[3], last_row[9])
        self._log_head = (last_row[0], last_row[10])

    def _append_cached(
        self,
        connection: sqlite3.Connection,
        stream_id: str,
        expected: int,
        pending: list[Pending],
    ) -> list[AppendResult] | None:
        """Append with the heads this writer cached, all Python work before the write lock.

        Under the lock only C runs: the first row's INSERT inserts nothing unless the log's
        last position is still the one it follows (so the log chain continues from the cached
        head), the other rows follow it, and the ``(stream_id, stream_version)`` unique
        constraint refuses a row whose stream moved on. When either shows the cache stale,
        nothing is written and None is returned: the caller takes the locked path, which reads
        the heads.
        """
        stream_head = self._stream_heads.get(stream_id)
        log_head = self._log_head
        if stream_head is None or log_head is None:
            return None
        version, previous = stream_head
        if _mismatch(expected, version):
            return None  # the locked path reads the true version and raises if it must
        rows, results = _rows(stream_id, pending, self.hmac_key, version, previous, *log_head[::-1])
        first = rows[0]
        cursor = connection.cursor()
        try:
            self._begin_immediate(cursor)
            try:
                # Only the first row needs the guard: once it is in, this writer holds the lock
                # and the batch's other rows follow it (a third of a batch's SQLite time).
                cursor.execute(self._insert_after, (*first, first[0] - 1))
                written = cursor.rowcount
                if written == 1 and len(rows) > 1:
                    cursor.executemany(self._insert, rows[1:])
            except sqlite3.IntegrityError:
                written = -1
            if written != 1:
                cursor.execute("ROLLBACK")
                # Other writers are active: take the locked path for the next few appends
                # rather than pay a wasted attempt (and a second lock) on each.
                self._cached_skips = _CACHED_SKIPS
                self._log_head = None
                self._stream_heads.pop(stream_id, None)
                return None
            at_append_commit()
            cursor.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
        self._remember_heads(stream_id, rows[-1])
        return results


def _check_fence(cursor: sqlite3.Cursor, fence: Fence) -> None:
    """Raise :class:`~wgstore.events.errors.FencedError` unless the lease row still says
    ``fence`` (read under the write lock: no takeover can come between it and the commit)."""
    row = cursor.execute(_LEASE, (fence.lease,)).fetchone()
    refused = fenced(fence, *(row or (None, None)))
    if refused is not None:
        raise refused


def _stored_batches(
    cursor: sqlite3.Cursor, batches: list[Batch]
) -> list[list[AppendResult]] | None:
    """Every batch as stored (a retry of an append that committed), or None if none is stored.

    An append is atomic, so a retry finds all of its batches stored or none; some but not all
    means the ids were used elsewhere.
    """
    stored = [_stored_ids(cursor, batch.stream_id, batch.pending) for batch in batches]
    found = [result for result in stored if result is not None]
    if not found:
        return None
    if len(found) < len(stored):
        raise partly_stored()
    return found


def _stored_ids(
    cursor: sqlite3.Cursor, stream_id: str, pending: list[Pending]
) -> list[AppendResult] | None:
    ids = [p.event_id for p in pending]
    marks = ",".join("?" * len(ids))
    found: dict[str, tuple[str, int, int, str, str]] = {
        row[0]: row[1:]
        for row in cursor.execute(
            f"SELECT event_id, stream_id, stream_version, position, recorded_at, hash "
            f"FROM wg_events WHERE event_id IN ({marks})",
            ids,
        )
    }
    if not found:
        return None
    if all(event_id in found for event_id in ids):
        in_order = [found[event_id] for event_id in ids]
        offsets = {row[1] - index for index, row in enumerate(in_order)}
        if all(row[0] == stream_id for row in in_order) and len(offsets) == 1:
            return [
                AppendResult(position, version, parse_time(at), hash_, True)
                for _, version, position, at, hash_ in in_order
            ]
    raise DuplicateEventError(
        f"{len(found)} of {len(ids)} event ids are already stored, but not as this exact "
        "batch in this stream: give each new event a new id, or retry the whole original "
        "batch unchanged"
    )


def _rows(
    stream_id: str,
    pending: list[Pending],
    key: bytes | None,
    version: int,
    previous: str,
    log: str,
    position: int,
) -> tuple[list[_Row], list[AppendResult]]:
    """The rows of a batch that follows the given stream and log heads, and its results.

    The hash inputs are those of hashing.chain_hash and hashing.log_hash, inlined (the calls
    cost more than the hashing); tests/events/test_tamper.py pins them. With a ``key``, each
    row's MAC (hashing.event_mac) covers its position, version and time, known only here.
    """
    now = datetime.now(UTC)
    # recorded_at is UTC text without an offset: "+00:00" is cut off (now.replace(tzinfo=None)
    # before isoformat, the same text, costs ~0.7 µs more per append)
    stored_at = now.isoformat(" ", "microseconds")[:-6]
    now_us = epoch_us(now)
    us = str(now_us)
    sha256 = hashlib.sha256
    rows: list[_Row] = []
    results: list[AppendResult] = []
    for item in pending:
        version += 1
        position += 1
        mac = None
        if key is not None:
            mac = event_mac(
                key, position, stream_id, version, item.event_id, item.type,
                item.schema_version, now_us, item.data, item.metadata_text,
                check_duplicates=False,  # this client's own encoding
            )  # fmt: skip
        previous = sha256(
            f"{previous}\n{stream_id}\n{version}\n{item.event_id}\n{item.type}\n"
            f"{item.schema_version}\n{us}\n{item.data}\n{item.metadata_text}".encode()
        ).hexdigest()
        log = sha256(f"{log}\n{position}\n{previous}\n{mac or ''}".encode()).hexdigest()
        row: _PlainRow = (
            position, item.event_id, stream_id, version, item.type, item.schema_version,
            item.data, item.metadata_text, stored_at, previous, log,
        )  # fmt: skip
        rows.append(row if mac is None else (*row, mac))  # the mac column only with a key
        results.append(_result((position, version, now, previous, False)))
    return rows, results
