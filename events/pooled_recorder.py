"""What both recorders share: connections from a SQLAlchemy engine's pool, the reads' SQL,
paging, streamed pages, the retry on a connection the server dropped, and group commit.

:class:`PooledRecorder` implements every read of :class:`~wgstore.events.recorder.Recorder`
and the writer connection of its appends; a backend's recorder subclasses it with its columns,
its placeholder, how a batch is appended (``_append``, ``_append_many``, ``_append_group``)
and how its connections are prepared and recognised as dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from wgstore.events.append_queue import AppendQueue, Queued
from wgstore.events.recorder import (
    AppendResult,
    Batch,
    LogRow,
    Pending,
    StoredTime,
    StreamHead,
    StreamRow,
    as_log_rows,
    as_stream_rows,
)
from wgstore.events.records import Fence
from wgstore.events.schema import FREQUENT_TYPES, TYPE_INDEX_WHERE

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine.interfaces import DBAPICursor
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["PAGE", "GroupedWrite", "PooledRecorder", "StreamRows", "at_append_commit"]

PAGE = 1000
"""Rows per page of a read."""
_FREQUENT_TYPES = frozenset(FREQUENT_TYPES)  # left out of the type index (schema.py)
_UNSET: Any = object()
_T = TypeVar("_T")

StreamRows = Callable[["DBAPICursor", str, Sequence[Any]], Generator[tuple[Any, ...], None, None]]
"""``stream_rows(cursor, sql, params)``: a SELECT's rows as they arrive."""

before_append_commit: Callable[[], None] | None = None
"""A failpoint for tests, None otherwise: called (by :func:`at_append_commit`) where an append's
writes wait for nothing but this process: just before the ``COMMIT`` of an append transaction,
holding what it holds; for an append that is one statement the server commits by itself (most
on Postgres), just before it is sent. tests/events/test_paused_writer.py stops its writer
process there."""


def at_append_commit() -> None:
    """Call :data:`before_append_commit`, if a test set it."""
    if before_append_commit is not None:
        before_append_commit()


class GroupedWrite(NamedTuple):
    """One append in the group-commit queue: a stream's batch (:meth:`PooledRecorder.append`),
    or several streams' batches, all or nothing, with the writer's lease as its fence or not
    (:meth:`PooledRecorder.append_many`)."""

    batches: list[Batch]
    check_ids: bool
    """Check the batches by their event ids first (they may be stored): a retry."""
    fence: Fence | None


_Results = list[list[AppendResult]]  # a write's results: one list per batch


class PooledRecorder:
    """The reads, and the writer connection, of a recorder over a SQLAlchemy engine."""

    columns: str
    """The SELECT list of a :class:`~wgstore.events.recorder.LogRow`."""
    stream_columns: str
    """``columns`` without ``stream_id``: a :class:`~wgstore.events.recorder.StreamRow`."""
    param: str
    """The driver's placeholder."""

    def __init__(self, engine: sa.Engine, hmac_key: bytes | None = None) -> None:
        self.engine = engine
        self.hmac_key = hmac_key
        """The key of each row's MAC (:func:`~wgstore.events.hashing.event_mac`), or None."""
        self.stream_rows: StreamRows | None = None
        """A SELECT's rows as they arrive, or None when the driver cannot hand them over that
        way. With it, a read yields each row while the rest of its page is still on the way,
        instead of after the whole page."""
        self._write_lock = threading.Lock()
        self._writer: PoolProxiedConnection | None = None
        self._appends: AppendQueue[GroupedWrite, _Results] = AppendQueue(
            self._write_group, self._write_lock
        )
        p = self.param
        self._stream_sql = (
            f"SELECT {self.stream_columns} FROM wg_events WHERE stream_id = {p} "
            f"AND stream_version >= {p} AND stream_version <= {p} ORDER BY stream_version "
            f"LIMIT {PAGE + 1}"
        )

    def forget_stream_heads(self) -> None:
        """Nothing remembered here (the SQLite recorder keeps heads)."""

    # ------------------------------------------------------------------ per backend

    def time_of(self, stored: StoredTime) -> datetime:
        """The aware UTC datetime of a stored ``recorded_at``."""
        raise NotImplementedError

    def _append(
        self,
        writer: PoolProxiedConnection,
        stream_id: str,
        expected: int,
        pending: list[Pending],
        check_ids: bool,
    ) -> list[AppendResult]:
        raise NotImplementedError

    def _append_many(
        self,
        writer: PoolProxiedConnection,
        batches: list[Batch],
        check_ids: bool,
        fence: Fence | None,
    ) -> list[list[AppendResult]]:
        raise NotImplementedError

    def _append_group(
        self, writer: PoolProxiedConnection, group: list[GroupedWrite]
    ) -> list[_Results]:
        """Write independent appends in one transaction (group commit): each checked by its
        ids when its flag says so and stored or not on its own, each fenced write's lease
        checked in the transaction (fences in one order, so that two transactions never wait
        for each other's lease rows); any error rolls back them all."""
        raise NotImplementedError

    def _prepare_writer(self, connection: PoolProxiedConnection) -> None:
        """Set up a new writer connection."""

    def _prepare_read(self, connection: PoolProxiedConnection) -> None:
        """Set up a connection for one SELECT."""

    def _release(self, connection: PoolProxiedConnection) -> None:
        """Undo :meth:`_prepare_read` and give the connection back to the pool."""
        connection.close()

    def _connection_died(self, connection: PoolProxiedConnection, error: BaseException) -> bool:
        """True when ``error`` means the server dropped ``connection`` (retry on a new one)."""
        return False

    # ------------------------------------------------------------------ writing

    def append(
        self, stream_id: str, expected: int, pending: list[Pending], check_ids: bool
    ) -> list[AppendResult]:
        """Append one batch (see :meth:`wgstore.events.recorder.Recorder.append`).

        Batches that other threads append while the writer is busy are written with it in one
        transaction (group commit, :class:`~wgstore.events.append_queue.AppendQueue`): one
        commit for all, each batch's outcome its own.
        """
        write = GroupedWrite([Batch(stream_id, expected, pending)], check_ids, None)
        return self._appends.submit(write)[0]

    def append_many(
        self, batches: list[Batch], check_ids: bool, fence: Fence | None
    ) -> list[list[AppendResult]]:
        """Append batches atomically (see :meth:`wgstore.events.recorder.Recorder.append_many`),
        in the group-commit queue like :meth:`append`: a fenced append that waited goes in one
        transaction with the others, its lease checked in it."""
        return self._appends.submit(GroupedWrite(batches, check_ids, fence))

    def _write_group(self, group: list[Queued[GroupedWrite, _Results]]) -> None:
        """Write a group of queued appends (under the write lock): together in one
        transaction; when that fails, none is stored and each is written alone, for its own
        result or error."""
        if len(group) > 1:
            try:
                results = self._on_writer(
                    lambda writer, retry: self._append_group(
                        writer, [_checked(q.item, q.retry or retry) for q in group]
                    ),
                    False,
                )
            except Exception:  # noqa: BLE001 - each append is written alone next, for its own
                # One failed (a version mismatch, a fence refused, say) and the transaction
                # rolled back; or its outcome is unknown: alone, each checks its ids first.
                for queued in group:
                    queued.retry = True
            else:
                for queued, result in zip(group, results, strict=True):
                    queued.result = result
                return
        for queued in group:
            try:
                queued.result = self._write_alone(queued.item, queued.retry)
            except Exception as error:  # noqa: BLE001 - raised in the thread that appended it
                queued.error = error

    def _write_alone(self, write: GroupedWrite, retry: bool) -> _Results:
        batches, check_ids, fence = write
        if len(batches) == 1 and fence is None:
            (batch,) = batches
            return [
                self._on_writer(
                    lambda writer, check: self._append(
                        writer, batch.stream_id, batch.expected, batch.pending, check
                    ),
                    check_ids or retry,
                )
            ]
        return self._on_writer(
            lambda writer, check: self._append_many(writer, batches, check, fence),
            check_ids or retry,
        )

    def _on_writer(self, write: Callable[[PoolProxiedConnection, bool], _T], check_ids: bool) -> _T:
        """``write(writer, check_ids)`` on the writer connection (the caller holds the write
        lock), once more on a new connection when the server dropped it."""
        for attempt in (1, 2):
            writer = self._writer
            if writer is None:
                writer = self._writer = self.engine.raw_connection()
                self._prepare_writer(writer)
            try:
                return write(writer, check_ids)
            except Exception as error:
                if not self._connection_died(writer, error):
                    raise
                # The server dropped the connection (a restart, say). The event ids were
                # fixed before the first try, so sending the batch again is safe: if the
                # first try committed, the idempotency check returns it, unwritten.
                self._drop_writer()
                if attempt == 2:
                    raise
                check_ids = True
        raise AssertionError("unreachable")

    def _drop_writer(self) -> None:
        if self._writer is not None:
            try:
                self._writer.invalidate()
            finally:
                self._writer = None

    def close(self) -> None:
        """Close the writer connection."""
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    # ------------------------------------------------------------------ reading

    def fetch(self, sql: str, params: Sequence[Any]) -> Sequence[tuple[Any, ...]]:
        """All the rows of one SELECT, retried once on a new connection when the server
        dropped the first (reads are idempotent)."""
        for attempt in (1, 2):
            connection = self.engine.raw_connection()
            try:
                self._prepare_read(connection)
                cursor = connection.cursor()
                cursor.execute(sql, params)
                rows: Sequence[tuple[Any, ...]] = cursor.fetchall()
                cursor.close()
                self._release(connection)
                return rows
            except BaseException as error:
                if not self._connection_died(connection, error):
                    self._release(connection)
                    raise
                # Discard it without the pool's reset, and read again on a fresh one.
                connection.invalidate()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def select_events(
        self, stream_id: str, first: int, last: int
    ) -> Generator[StreamRow, None, None]:
        """A stream's rows by version (see :meth:`wgstore.events.recorder.Recorder.select_events`).

        A page asks for one row more than it hands on: without that row, a stream ending on a
        page boundary (a 1,000-event stream, say) costs one more query to find nothing.
        """
        sql = self._stream_sql
        version = max(first, 1)
        retry = True
        while version <= last:
            if self.stream_rows is not None:
                with self._streamed_page(sql, (stream_id, version, last), retry) as page:
                    yield from as_stream_rows(islice(page.rows, PAGE))
                retry = page.count > 0 or not page.dropped  # dropped twice in a row: give up
                if page.count > PAGE:  # the row after the page: the next page's first
                    version = page.last[1]
                elif not page.dropped:
                    return
                elif page.last is not None:
                    version = page.last[1] + 1
                continue
            rows = self.fetch(sql, (stream_id, version, last))
            if len(rows) <= PAGE:
                yield from as_stream_rows(rows)
                return
            yield from as_stream_rows(rows[:PAGE])
            version = rows[PAGE][1]

    def select_notifications(
        self,
        after: int,
        limit: int,
        types: Sequence[str],
        streams: str | tuple[str, ...] | None,
    ) -> Generator[LogRow, None, None]:
        """The log's rows in order (see
        :meth:`wgstore.events.recorder.Recorder.select_notifications`)."""
        p = self.param
        where = f"position > {p}"
        if types:
            where += f" AND event_type IN ({','.join([p] * len(types))})"
            if not _FREQUENT_TYPES.intersection(types):
                where += f" AND {TYPE_INDEX_WHERE}"  # lets the planner use the partial index
        remaining = limit
        position = after
        retry = True
        while remaining != 0:
            # The stream filter runs here, not in SQL: a LIKE there can make Postgres' planner
            # trade the position index for a sort of every later row, page after page.
            page = PAGE if remaining < 0 or streams is not None else min(PAGE, remaining)
            sql = (
                f"SELECT {self.columns} FROM wg_events WHERE {where} ORDER BY position LIMIT {page}"
            )
            if self.stream_rows is not None:
                with self._streamed_page(sql, (position, *types), retry) as streamed:
                    kept = _kept(as_log_rows(streamed.rows), streams, remaining)
                    if remaining < 0:
                        yield from kept
                    else:
                        for row in kept:
                            yield row
                            remaining -= 1
                retry = streamed.count > 0 or not streamed.dropped  # dropped twice: give up
                if streamed.last is not None:  # the next page starts after its last row
                    position = streamed.last[0]
                if streamed.count < page and not streamed.dropped:
                    return
                continue
            rows = self.fetch(sql, (position, *types))
            kept = _kept(as_log_rows(rows), streams, remaining)
            if remaining < 0:
                yield from kept
            else:
                for row in kept:
                    yield row
                    remaining -= 1
            if len(rows) < page:
                return
            position = rows[-1][0]

    def select_positions(self, positions: Sequence[int]) -> list[LogRow]:
        """The rows at ``positions``, in log order."""
        marks = ",".join([self.param] * len(positions))
        rows = self.fetch(
            f"SELECT {self.columns} FROM wg_events WHERE position IN ({marks}) ORDER BY position",
            tuple(positions),
        )
        return list(as_log_rows(rows))

    def max_stream_version(self, stream_id: str) -> int:
        """The version of the stream's last event, 0 when it has none."""
        rows = self.fetch(
            f"SELECT max(stream_version) FROM wg_events WHERE stream_id = {self.param}",
            (stream_id,),
        )
        return int(rows[0][0] or 0)

    def max_position(self) -> int:
        """The log's last position, 0 when it is empty."""
        return int(self.fetch("SELECT max(position) FROM wg_events", ())[0][0] or 0)

    def select_streams(self, prefix: str) -> list[StreamHead]:
        """Every stream whose id starts with ``prefix``, with its version."""
        return [
            StreamHead(row[0], int(row[1]))
            for row in self.fetch(
                f"SELECT stream_id, max(stream_version) FROM wg_events "
                f"WHERE stream_id LIKE {self.param} ESCAPE '\\' "
                "GROUP BY stream_id ORDER BY min(position)",
                (_like_prefix(prefix),),
            )
        ]

    @contextmanager
    def _streamed_page(
        self, sql: str, params: Sequence[Any], retry: bool
    ) -> Generator[_Page, None, None]:
        """One page's query, its rows handed over as they arrive (``stream_rows``).

        The reader's work on one chunk (decoding, and whatever it does with the events, a fold
        say) overlaps the server sending the next, instead of following the whole page. The
        block reads ``page.rows``; the rows it leaves are read after it (not handed over), and
        the connection is held until then (or until the reader drops the iterator, which
        cancels the rest of the query).

        When the server drops the connection, the block ends (the error is swallowed) with
        ``page.dropped`` set: the page then ends after ``page.last``, the last row handed over,
        and the next one goes on from there. Unless ``retry`` is False and no row came: then the
        error is raised.
        """
        stream_rows = self.stream_rows
        assert stream_rows is not None  # the readers call this only then
        page = _Page()
        connection = self.engine.raw_connection()
        try:
            self._prepare_read(connection)
            cursor = connection.cursor()
            rows = _one_ahead(stream_rows(cursor, sql, params))
            page.rows = page.track(rows)
            try:
                yield page
                for _ in page.rows:  # what the block left of the page
                    pass
            finally:
                rows.close()
            cursor.close()
        except BaseException as error:
            if not self._connection_died(connection, error):
                self._release(connection)
                raise
            connection.invalidate()
            if not retry and page.count == 0:
                raise
            page.dropped = True
            return
        self._release(connection)


def _checked(write: GroupedWrite, retry: bool) -> GroupedWrite:
    """``write``, checked by its ids when it is a retry."""
    return write._replace(check_ids=True) if retry and not write.check_ids else write


def _kept(
    rows: Iterator[LogRow], streams: str | tuple[str, ...] | None, remaining: int
) -> Iterator[LogRow]:
    """The rows of a page that are handed on: those of the ``streams`` prefixes (all when None),
    at most ``remaining`` of them (all when negative)."""
    if streams is not None:
        rows = (row for row in rows if row[1].startswith(streams))
    return rows if remaining < 0 else islice(rows, remaining)


class _Page:
    """The rows of one streamed page (:meth:`PooledRecorder._streamed_page`) as they are handed
    over: how many, the last one, and whether the server dropped the connection meanwhile."""

    __slots__ = ("count", "dropped", "last", "rows")

    def __init__(self) -> None:
        self.count = 0
        self.last: Any = None
        self.dropped = False
        self.rows: Iterator[tuple[Any, ...]] = iter(())

    def track(self, rows: Iterable[tuple[Any, ...]]) -> Generator[tuple[Any, ...], None, None]:
        for row in rows:
            self.last = row
            self.count += 1
            yield row


def _one_ahead(
    rows: Generator[tuple[Any, ...], None, None],
) -> Generator[tuple[Any, ...], None, None]:
    """``rows``, each handed on once the row after it (or the end) has been read.

    A reader that stops after the last row then leaves no query running, to be cancelled (a
    round trip on a new connection): ``next(iter(store.read_stream(sid, v, v)))``, say.
    """
    try:
        held = next(rows, _UNSET)
        for row in rows:
            yield held
            held = row
        if held is not _UNSET:
            yield held
    finally:
        rows.close()


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern (escape character ``\\``) matching ids that start with ``prefix``."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
