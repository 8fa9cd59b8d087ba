"""``EventStore``: append, read, verify and follow the log, on SQLite or PostgreSQL.

The hot paths (append, read) run plain driver SQL on connections SQLAlchemy manages: an append
on Postgres is one call of the ``wg_append`` function (one round trip); on SQLite it is one
``BEGIN IMMEDIATE`` transaction on the store's writer connection.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, TypeVar

import msgspec
import sqlalchemy as sa
from uuid_utils import uuid7

from wgstore.events._translate import translate_errors
from wgstore.events.codec import DECODE_ERRORS, Codec, canonical_json
from wgstore.events.engine import create_store_engine, mask_url, parse_url
from wgstore.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    InvalidArgumentError,
    SchemaVersionError,
    StoreUnavailableError,
)
from wgstore.events.hashing import HMAC_KEY_ENV, normalize_key
from wgstore.events.recorder import (
    AppendResult,
    Batch,
    Pending,
    Recorder,
    StreamVersionMismatch,
    recorder_for,
)
from wgstore.events.records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendRequest,
    ExpectedVersion,
    Fence,
    NewEvent,
    RecordedEvent,
    _StreamState,
)
from wgstore.events.registry import REGISTRY, EventRegistry
from wgstore.events.schema import FREQUENT_TYPES, TYPE_INDEX_WHERE
from wgstore.events.stream_watch import StreamWatch
from wgstore.events.streams import check_reserved_append
from wgstore.events.verify import VerifyReport, head_digest, verify_log

__all__ = ["EventStore", "VerifyReport"]

_PAGE = 1000
_FREQUENT_TYPES = frozenset(FREQUENT_TYPES)  # left out of the type index (schema.py)
# A stdlib UUID from uuid-utils' (Rust) UUIDv7 without uuid.UUID.__init__'s checks, which
# cost more than making the id: the int is a valid UUID by construction.
_UUID = uuid.UUID
_UNKNOWN_SAFETY = uuid.SafeUUID.unknown
_new_uuid = object.__new__
# UUID's slots, set through their descriptors (cheaper than object.__setattr__ by name).
_set_int = vars(uuid.UUID)["int"].__set__
_set_safety = vars(uuid.UUID)["is_safe"].__set__

_UNSET: Any = object()
_T = TypeVar("_T")
# Stored ids as UUIDs, parsed in C: the id in quotes is a JSON string. A third of UUID(text)'s
# cost, and cheaper than msgspec.convert(text, UUID), which resolves the type on every call.
_parse_uuid: Callable[[str], uuid.UUID] = msgspec.json.Decoder(uuid.UUID).decode

_EXPECTED_CODES = {ANY: -1, NO_STREAM: -2, STREAM_EXISTS: -3}


class EventStore:
    """The append-only, hash-chained event log.

    Open one with :meth:`open`; it is safe to share between threads. Use it as a context
    manager or call :meth:`close`.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        url: str,
        read_only: bool = False,
        registry: EventRegistry | None = None,
        hmac_key: bytes | str | None = None,
    ) -> None:
        """Wrap an engine made by :func:`~wgstore.events.engine.create_store_engine`.

        Prefer :meth:`open`, which also checks (and migrates) the schema.
        """
        self._hmac_key = normalize_key(hmac_key)
        self.engine = engine
        self.url = url
        self.read_only = read_only
        self.backend: str = engine.dialect.name
        self.codec = Codec(registry or REGISTRY)
        self._write_lock = threading.Lock()
        self._writer: Any = None
        self._closed = False
        self.recorder: Recorder = recorder_for(self.backend, self._hmac_key)
        """This database's recorder: how batches are appended and rows read."""
        self._columns = self.recorder.columns
        # Set when the recorder can hand rows over as they arrive (Postgres with libpq 17+).
        self._stream_rows = self.recorder.stream_rows
        self._param = self.recorder.param
        self._base_metadata_pid = -1
        self._base_metadata: dict[str, Any] = {}
        self._base_metadata_text = ""
        from wgstore.events.notifier import Notifier

        self._notifier = Notifier(self)

    # ------------------------------------------------------------------ opening and closing

    @classmethod
    def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        read_only: bool = False,
        synchronous: str | None = None,
        busy_timeout_s: float | None = None,
        registry: EventRegistry | None = None,
        hmac_key: bytes | str | None = None,
    ) -> EventStore:
        """Connect to the store at ``url`` and make sure its schema is at head.

        Args:
            url: ``sqlite:///path/to/wgstore.db`` or ``postgresql+psycopg://user@host/db``.
            migrate: upgrade the schema to head when it is behind (default). With False, a
                database that is not at head raises :class:`SchemaVersionError`.
            read_only: open read-only connections (for audit tools); never migrates.
            synchronous: SQLite only: OFF, NORMAL, FULL (default) or EXTRA.
            busy_timeout_s: SQLite only: how long to wait for another writer (default 30).
            registry: the event type registry (default: the global one).
            hmac_key: a secret key: every appended event then carries an HMAC-SHA-256 of every
                field a reader sees (position, stream, version, id, type, schema version, time,
                data, metadata), and :meth:`verify` checks every event's MAC, so a forged,
                backdated, moved or replayed event whose hashes were recomputed is caught by
                anyone holding the key. Computed in the client under the write lock: the key
                never reaches the database. Default: the environment variable
                ``WGSTORE_HMAC_KEY``, else no key.

        Raises:
            StoreUnavailableError: bad URL, or the database cannot be reached.
            SchemaVersionError: the schema is not at head and cannot be migrated here.
        """
        parse_url(url)  # a bad URL fails here, with the password masked
        engine = create_store_engine(
            url, read_only=read_only, synchronous=synchronous, busy_timeout_s=busy_timeout_s
        )
        try:
            with translate_errors(url):
                _ensure_schema(engine, url, migrate=migrate and not read_only)
        except BaseException:
            engine.dispose()
            raise
        if hmac_key is None:
            hmac_key = os.environ.get(HMAC_KEY_ENV) or None
        return cls(engine, url=url, read_only=read_only, registry=registry, hmac_key=hmac_key)

    @property
    def has_hmac_key(self) -> bool:
        """True when appends carry a MAC and :meth:`verify` checks them."""
        return self._hmac_key is not None

    @property
    def hmac_key(self) -> bytes | None:
        """The key appends are MACed with, for other writers of this store (e.g. workers)."""
        return self._hmac_key

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def is_postgres(self) -> bool:
        """True when the store lives in PostgreSQL."""
        return self.backend == "postgresql"

    def close(self) -> None:
        """Release every connection. The store cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        self._notifier.close()
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self.engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventStore({mask_url(self.url)!r})"

    # ------------------------------------------------------------------ appending

    def append(
        self,
        stream_id: str,
        events: Sequence[Any],
        *,
        expected_version: ExpectedVersion = ANY,
        fence: Fence | None = None,
    ) -> list[RecordedEvent]:
        """Append ``events`` to ``stream_id`` as one all-or-nothing batch.

        Args:
            stream_id: e.g. ``worker-group-<group_id>`` or ``run-<run_id>``.
            events: registered event objects, or :class:`NewEvent` wrappers that fix the id
                and add metadata.
            expected_version: the version the stream must be at (an int; 0 means no stream),
                or ``NO_STREAM``, ``STREAM_EXISTS`` or ``ANY`` (the default).
            fence: the writer's lease (``Lease.fence``): the database refuses the append in
                its own transaction unless the lease is still the writer's at that epoch.

        Returns:
            The recorded events, in order. When every event id of the batch is already stored
            in this stream in this order (a retry after a lost reply), the stored records are
            returned and nothing is written.

        Raises:
            ConcurrencyError: the stream is not at ``expected_version``.
            FencedError: ``fence`` no longer holds (another holder took the lease).
            DuplicateEventError: an event id is already stored elsewhere.
            UnknownEventTypeError / EventEncodeError: an event cannot be stored; nothing is.
        """
        if fence is not None:
            request = AppendRequest(stream_id, events, expected_version)
            return self.append_many([request], fence=fence)[0]
        self._check_writable()
        _check_stream_id(stream_id)
        events = check_reserved_append(stream_id, events)  # run-/worker-group-: wgstore's only
        expected = _expected_code(expected_version)
        pending, check_ids = self._encode_batch(events)
        if not pending:
            return []
        with translate_errors(self.url):
            rows = self._append_with_retry(
                lambda writer, check: self.recorder.append(
                    writer, stream_id, expected, pending, check
                ),
                {stream_id: expected_version},
                check_ids,
            )
        if rows[0][4]:  # already stored: return what is in the log
            return self._read_positions([row[0] for row in rows])
        self._notifier.local_append()
        return _recorded(stream_id, pending, rows)

    def append_many(
        self, requests: Sequence[AppendRequest], *, fence: Fence | None = None
    ) -> list[list[RecordedEvent]]:
        """Append to several streams in one transaction: every stream is written, or none.

        For a decision that spans streams (a run's decision and its new attempt's start
        request), with an expected version per stream, and optionally the writer's lease.
        Positions are consecutive, in the order of ``requests``. A request without events
        writes nothing and checks nothing.

        Returns:
            One list of recorded events per request, in order (an empty list for an empty one).
            A retry of an append that committed returns the stored records, unwritten.

        Raises:
            ConcurrencyError: a stream (named in the error) is not at its expected version.
            FencedError: ``fence`` no longer holds. Nothing is written in either case.
            InvalidArgumentError: a stream named twice, or a bad stream id.
        """
        self._check_writable()
        if fence is not None and not isinstance(fence, Fence):
            raise TypeError(f"fence must be a wgstore.events.Fence, got {fence!r}")
        batches: list[Batch] = []
        expected_versions: dict[str, ExpectedVersion] = {}
        check_ids = False
        for request in requests:
            if not isinstance(request, AppendRequest):
                raise TypeError(
                    "append_many() takes AppendRequest(stream_id, events, expected_version) "
                    f"items, got {request!r}"
                )
            _check_stream_id(request.stream_id)
            if request.stream_id in expected_versions:
                raise InvalidArgumentError(
                    f"stream {request.stream_id!r} is named twice in one append_many(): put its "
                    "events in one request"
                )
            expected_versions[request.stream_id] = request.expected_version
            expected = _expected_code(request.expected_version)
            pending, ids = self._encode_batch(request.events)
            check_ids = check_ids or ids
            if pending:
                batches.append(Batch(request.stream_id, expected, pending))
        if not batches:
            return [[] for _ in requests]
        with translate_errors(self.url):
            results = self._append_with_retry(
                lambda writer, check: self.recorder.append_many(writer, batches, check, fence),
                expected_versions,
                check_ids,
            )
        if results[0][0][4]:  # already stored
            appended = [self._read_positions([row[0] for row in rows]) for rows in results]
        else:
            self._notifier.local_append()
            appended = [
                _recorded(batch.stream_id, batch.pending, rows)
                for batch, rows in zip(batches, results, strict=True)
            ]
        by_stream = {
            batch.stream_id: records for batch, records in zip(batches, appended, strict=True)
        }
        return [by_stream.get(request.stream_id, []) for request in requests]

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreUnavailableError(f"{mask_url(self.url)} was opened read-only; cannot append")

    def _encode_batch(self, events: Sequence[Any]) -> tuple[list[Pending], bool]:
        if isinstance(events, NewEvent) or not isinstance(events, Sequence | Iterable):
            raise TypeError("append() takes a list of events, e.g. store.append(sid, [event])")
        base, base_text = self._metadata_defaults()
        pending: list[Pending] = []
        check_ids = False
        seen: set[str] = set()
        for item in events:
            fixed_id: uuid.UUID | None = None
            metadata: dict[str, Any] = base
            metadata_text = base_text
            if isinstance(item, NewEvent):
                event = item.event
                if item.event_id is not None:
                    if not isinstance(item.event_id, uuid.UUID):
                        raise TypeError(
                            f"NewEvent.event_id must be a uuid.UUID, got {item.event_id!r}"
                        )
                    fixed_id = item.event_id
                    check_ids = True
                if item.metadata:
                    metadata = {**base, **dict(item.metadata)}
                    metadata_text = canonical_json(metadata)
            else:
                event = item
            info, data = self.codec.encode(event)
            if fixed_id is None:
                # Time-ordered (UUIDv7): new ids land at the right edge of the unique index
                # instead of scattering across it (bench/README.md, W2).
                made = uuid7()
                event_id = str(made)
                event_uuid = _new_uuid(_UUID)
                _set_int(event_uuid, made.int)
                _set_safety(event_uuid, _UNKNOWN_SAFETY)
            else:
                event_uuid = fixed_id
                event_id = str(event_uuid)
                if event_id in seen:
                    raise DuplicateEventError(f"event id {event_id} appears twice in one batch")
                seen.add(event_id)
            pending.append(
                Pending(
                    event,
                    event_uuid,
                    event_id,
                    info.name,
                    info.version,
                    data,
                    metadata,
                    metadata_text,
                )
            )
        return pending, check_ids

    def _metadata_defaults(self) -> tuple[dict[str, Any], str]:
        pid = os.getpid()
        if pid != self._base_metadata_pid:
            from wgstore import __version__

            self._base_metadata = {"host": socket.gethostname(), "pid": pid, "wgstore": __version__}
            self._base_metadata_text = canonical_json(self._base_metadata)
            self._base_metadata_pid = pid
        return self._base_metadata, self._base_metadata_text

    def _append_with_retry(
        self,
        write: Callable[[Any, bool], _T],
        expected_versions: dict[str, ExpectedVersion],
        check_ids: bool,
    ) -> _T:
        with self._write_lock:
            for attempt in (1, 2):
                writer = self._writer_connection()
                try:
                    return write(writer, check_ids)
                except StreamVersionMismatch as mismatch:
                    stream_id = mismatch.stream_id or next(iter(expected_versions))
                    raise ConcurrencyError(
                        stream_id, expected_versions[stream_id], mismatch.actual
                    ) from None
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

    def _writer_connection(self) -> Any:
        if self._writer is None:
            self._writer = self.engine.raw_connection()
            self.recorder.prepare_writer(self._writer)
        return self._writer

    def _drop_writer(self) -> None:
        if self._writer is not None:
            try:
                self._writer.invalidate()
            finally:
                self._writer = None

    # ------------------------------------------------------------------ reading

    def read_stream(
        self, stream_id: str, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        """The events of one stream, from ``from_version`` up to ``to_version`` (inclusive).

        Read in pages of 1,000 events. On Postgres (with libpq 17 or later, which the
        ``psycopg[binary]`` wheel brings) each event is yielded as its row arrives, so the caller's
        work overlaps the transfer; the iterator then holds one pooled connection until its page
        is read, and dropping it mid-page cancels the rest of that page's query.

        Raises:
            InvalidArgumentError: a stream id that is not a usable string, or a version that is
                not an int in the 64-bit range.
        """
        self._check_open()
        _check_stream_id(stream_id)
        from_version = _check_int("from_version", from_version)
        last = _check_int("to_version", to_version) if to_version is not None else 2**31 - 1
        version = max(from_version, 1)
        p = self._param
        sql = (
            f"SELECT {self.recorder.stream_columns} FROM wg_events WHERE stream_id = {p} "
            f"AND stream_version >= {p} AND stream_version <= {p} ORDER BY stream_version "
            f"LIMIT {_PAGE + 1}"
        )
        # A page asks for one row more than it yields: without that row, a stream ending on a
        # page boundary (a 1,000-event stream, say) costs one more query to find nothing. The
        # rows leave out stream_id, which is known.
        retry = True
        while version <= last:
            if self._stream_rows is not None:
                with self._streamed_page(sql, (stream_id, version, last), retry) as page:
                    yield from self._decode_rows(islice(page.rows, _PAGE), stream_id)
                retry = page.count > 0 or not page.dropped  # dropped twice in a row: give up
                if page.count > _PAGE:  # the row after the page: the next page's first
                    version = page.last[1]
                elif not page.dropped:
                    return
                elif page.last is not None:
                    version = page.last[1] + 1
                continue
            rows = self._fetch(sql, (stream_id, version, last))
            if len(rows) <= _PAGE:
                yield from self._decode_rows(rows, stream_id)
                return
            yield from self._decode_rows(rows[:_PAGE], stream_id)
            version = rows[_PAGE][1]

    @contextmanager
    def _streamed_page(self, sql: str, params: Sequence[Any], retry: bool) -> Iterator[_Page]:
        """One page's query, its rows handed over as they arrive (:meth:`read_stream`,
        :meth:`read_all` on Postgres with libpq 17+).

        The recorder's ``stream_rows`` hands the rows over in chunks: the reader's work on one
        chunk (decoding, and whatever it does with the events, a fold say) overlaps the server
        sending the next, instead of following the whole page. The block reads ``page.rows``;
        the rows it leaves are read after it (not handed over), and the connection is held until
        then (or until the reader drops the iterator, which cancels the rest of the query).

        When the server drops the connection, the block ends (the error is swallowed) with
        ``page.dropped`` set: the page then ends after ``page.last``, the last row handed over,
        and the next one goes on from there. Unless ``retry`` is False and no row came: then the
        error is raised.
        """
        stream_rows = self._stream_rows
        assert stream_rows is not None  # the readers call this only then
        page = _Page()
        with translate_errors(self.url):
            connection = self.engine.raw_connection()
            try:
                self.recorder.prepare_read(connection)
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

    def read_all(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Iterable[str | type] | None = None,
        *,
        streams: str | tuple[str, ...] | None = None,
    ) -> Iterator[RecordedEvent]:
        """Every event after position ``after``, in global order.

        Read in pages of 1,000 rows. On Postgres (libpq 17 or later) each event is yielded as its
        row arrives, as in :meth:`read_stream`: the iterator then holds one pooled connection
        until its page is read, and dropping it mid-page cancels the rest of that page's query.

        Args:
            after: a position (a checkpoint); 0 reads from the start.
            limit: the most events to return.
            types: only events of these types (names or registered classes).
            streams: only events of streams whose id starts with this prefix (or one of these
                prefixes), e.g. ``"worker-group-"``; the others are skipped before they are
                decoded.

        Raises:
            InvalidArgumentError: ``after`` or ``limit`` is not an int in the 64-bit range (or
                ``limit`` is negative), or a type name is not a usable string.
        """
        self._check_open()
        after = _check_int("after", after)
        if limit is not None and _check_int("limit", limit) < 0:
            raise InvalidArgumentError(f"limit must be None or an int >= 0, got {limit!r}")
        names = self._type_names(types)
        p = self._param
        where = f"position > {p}"
        if names:
            where += f" AND event_type IN ({','.join([p] * len(names))})"
            if not _FREQUENT_TYPES.intersection(names):
                where += f" AND {TYPE_INDEX_WHERE}"  # lets the planner use the partial index
        remaining = limit if limit is not None else -1
        position = after
        retry = True
        while remaining != 0:
            # The stream filter runs here, not in SQL: a LIKE there can make Postgres' planner
            # trade the position index for a sort of every later row, page after page.
            page = _PAGE if remaining < 0 or streams is not None else min(_PAGE, remaining)
            sql = f"SELECT {self._columns} FROM wg_events WHERE {where} ORDER BY position LIMIT {page}"
            if self._stream_rows is not None:
                with self._streamed_page(sql, (position, *names), retry) as streamed:
                    for record in self._decode_rows(_kept(streamed.rows, streams, remaining)):
                        yield record
                        if remaining > 0:
                            remaining -= 1
                retry = streamed.count > 0 or not streamed.dropped  # dropped twice: give up
                if streamed.last is not None:  # the next page starts after its last row
                    position = streamed.last[0]
                if streamed.count < page and not streamed.dropped:
                    return
                continue
            rows = self._fetch(sql, (position, *names))
            for record in self._decode_rows(_kept(rows, streams, remaining)):
                yield record
                if remaining > 0:
                    remaining -= 1
            if len(rows) < page:
                return
            position = rows[-1][0]

    def stream_version(self, stream_id: str) -> int:
        """The version of the stream's last event, 0 when the stream has none."""
        self._check_open()
        _check_stream_id(stream_id)
        rows = self._fetch(
            f"SELECT max(stream_version) FROM wg_events WHERE stream_id = {self._param}",
            (stream_id,),
        )
        return int(rows[0][0] or 0)

    def head(self) -> int:
        """The highest position safe to read: nothing below it can still appear later."""
        self._check_open()
        return int(self._fetch("SELECT max(position) FROM wg_events", ())[0][0] or 0)

    def streams(self, prefix: str = "") -> list[tuple[str, int]]:
        """Every stream whose id starts with ``prefix``, with its version."""
        self._check_open()
        if not isinstance(prefix, str):
            raise InvalidArgumentError(f"prefix must be a string, got {prefix!r}")
        _check_text("prefix", prefix)
        return [
            (row[0], int(row[1]))
            for row in self._fetch(
                f"SELECT stream_id, max(stream_version) FROM wg_events "
                f"WHERE stream_id LIKE {self._param} ESCAPE '\\' "
                "GROUP BY stream_id ORDER BY min(position)",
                (_like_prefix(prefix),),
            )
        ]

    def _read_positions(self, positions: list[int]) -> list[RecordedEvent]:
        marks = ",".join([self._param] * len(positions))
        rows = self._fetch(
            f"SELECT {self._columns} FROM wg_events WHERE position IN ({marks}) ORDER BY position",
            tuple(positions),
        )
        return list(self._decode_rows(rows))

    def _type_names(self, types: Iterable[str | type] | None) -> list[str]:
        if types is None:
            return []
        if isinstance(types, str | type):
            types = [types]
        names = [t if isinstance(t, str) else self.codec.registry.by_class(t).name for t in types]
        for name in names:
            _check_text("an event type name", name)
        return names

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with translate_errors(self.url):
            for attempt in (1, 2):
                connection = self.engine.raw_connection()
                try:
                    return self._fetch_on(connection, sql, params)
                except BaseException as error:
                    if not self._connection_died(connection, error):
                        self._release(connection)
                        raise
                    # The server dropped this connection (a restart, say): discard it without
                    # the pool's reset, and read again on a fresh one (reads are idempotent).
                    connection.invalidate()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _fetch_on(self, connection: Any, sql: str, params: Sequence[Any]) -> list[Any]:
        self.recorder.prepare_read(connection)
        cursor = connection.cursor()
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        cursor.close()
        self._release(connection)
        return rows

    def _release(self, connection: Any) -> None:
        self.recorder.release(connection)
        connection.close()

    def _connection_died(self, connection: Any, error: BaseException) -> bool:
        return self.recorder.connection_died(connection, error)

    def _decode_rows(
        self, rows: Iterable[Sequence[Any]], stream: str | None = None
    ) -> Iterator[RecordedEvent]:
        """Records of ``rows`` (``recorder.columns``; ``stream_columns`` when ``stream`` is the
        stream id they all belong to)."""
        codec = self.codec
        decode_json = msgspec.json.decode
        time_of = self.recorder.time_of
        # Values rows share (a batch has one time and one metadata text) are decoded once; the
        # records of a batch then share one metadata dict, as the records append returns do.
        last_at: Any = _UNSET
        last_time: Any = None
        last_meta: Any = _UNSET
        metadata: Any = None
        # One registry lookup per event type of the page, not per row.
        decoders: dict[str, tuple[int, Callable[[Any], Any] | None]] = {}
        parse_uuid = _parse_uuid
        for row in rows:
            if stream is None:
                (
                    position,
                    stream_id,
                    version,
                    event_id,
                    type_,
                    schema_version,
                    data,
                    meta,
                    at,
                    hash_,
                ) = row
            else:
                stream_id = stream
                position, version, event_id, type_, schema_version, data, meta, at, hash_ = row
            if at != last_at:
                last_at, last_time = at, time_of(at)
            if meta != last_meta:
                last_meta, metadata = meta, decode_json(meta)
            known = decoders.get(type_)
            if known is None:
                known = decoders[type_] = (
                    schema_version,
                    codec.current_decoder(type_, schema_version),
                )
            fast = known[1]
            if fast is None or known[0] != schema_version:
                event = codec.decode(
                    type_, schema_version, data, stream_id=stream_id, position=position
                )
            else:
                try:
                    event = fast(data)
                except DECODE_ERRORS:  # decode again to raise the EventDecodeError
                    codec.decode(
                        type_, schema_version, data, stream_id=stream_id, position=position
                    )
                    raise
            yield RecordedEvent(
                position=position,
                stream_id=stream_id,
                version=version,
                event_id=parse_uuid(f'"{event_id}"'),
                type=type_,
                schema_version=schema_version,
                event=event,
                metadata=metadata,
                recorded_at=last_time,
                hash=hash_,
            )

    # ------------------------------------------------------------------ following

    def wait_for_new(
        self, after: int, timeout_s: float, *, stop: threading.Event | None = None
    ) -> int:
        """Block until the log has an event past ``after``, ``timeout_s`` passes, or ``stop``
        is set and :meth:`wake_waiters` called.

        Wakes on Postgres ``LISTEN/NOTIFY`` (and at once for appends made through this store
        object), and always falls back to polling. Returns the head position.
        """
        self._check_open()
        return self._notifier.wait(after, timeout_s, stop)

    def wake_waiters(self) -> None:
        """Make the threads blocked in :meth:`wait_for_new` on this store re-check at once: a
        waiter whose ``stop`` event was set returns (a follower stopping without waiting out
        its poll interval, 0.5 s on Postgres)."""
        self._notifier.wake()

    def watch_streams(
        self, stream_ids: Iterable[str] = (), *, ignore_types: Iterable[str] = ()
    ) -> StreamWatch:
        """Wait for a few streams, not the whole log: a :class:`StreamWatch` whose ``wait``
        returns only when one of ``stream_ids`` (``watch.add`` adds more) gets an event whose
        type is not in ``ignore_types``.

        Take ``token = watch.position()`` before reading the streams and ``watch.wait(token,
        timeout_s)`` after: an event that lands in between still wakes the waiter. One thread
        per store object follows the log for every watch (it reads new events' position, stream
        and type once, not their data), so each append wakes only its streams' waiters. Close
        the watch when done (a context manager). See :mod:`wgstore.events.stream_watch`.
        """
        self._check_open()
        return self._notifier.watch(stream_ids, ignore_types)

    def subscription(
        self,
        name: str,
        *,
        types: Iterable[str | type] | None = None,
        streams: str | tuple[str, ...] | None = None,
    ) -> Any:
        """A named, durable reader of the log; see :class:`~wgstore.events.Subscription`."""
        from wgstore.events.subscriptions import Subscription

        return Subscription(self, name, types=types, streams=streams)

    # ------------------------------------------------------------------ verifying

    def verify(
        self,
        stream_id: str | None = None,
        *,
        against: str | None = None,
        hmac_key: bytes | str | None = None,
    ) -> VerifyReport:
        """Recompute the hash chains from the stored rows (no event is decoded).

        Checks every stream's chain and, for the whole log, the chain over all events in
        position order: finds events changed, removed (from the middle of a stream, its end, or
        a whole stream), reordered, moved to another position or swapped across streams, even
        when someone disabled the immutability triggers to do it. What it cannot see alone:
        the log's last events cut off (check ``against`` a digest kept elsewhere), and a forged
        event whose hashes were all recomputed (give the key the writers used).

        Args:
            stream_id: check only this stream's chain (the log chain is then skipped).
            against: a digest from :meth:`digest`: the log must still extend it (nothing cut
                off or rewritten at or before its position).
            hmac_key: check every event's MAC with this key (default: the store's key, if it
                was opened with one). Events without a MAC are problems then.

        Raises:
            ValueError: ``against`` is not a digest.
        """
        self._check_open()
        key = normalize_key(hmac_key) if hmac_key is not None else self._hmac_key
        return verify_log(self, stream_id, against=against, hmac_key=key)

    def digest(self) -> str:
        """A short digest of the log's head (``wgs1:<position>:<log hash>``) to keep elsewhere.

        ``verify(against=digest)`` later proves the log still extends it: no event at or before
        that position was removed, moved or rewritten. Like QLDB's digest or a CT tree head.
        """
        self._check_open()
        return head_digest(self)

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("this EventStore is closed; open a new one")


def _kept(
    rows: Iterable[Any], streams: str | tuple[str, ...] | None, remaining: int
) -> Iterable[Any]:
    """The rows of a :meth:`EventStore.read_all` page it hands on: those of the ``streams``
    prefixes (all when None), at most ``remaining`` of them (all when negative)."""
    if streams is not None:
        rows = (row for row in rows if row[1].startswith(streams))
    return rows if remaining < 0 else islice(rows, remaining)


class _Page:
    """The rows of one streamed page (:meth:`EventStore._streamed_page`) as they are handed over:
    how many, the last one, and whether the server dropped the connection meanwhile."""

    __slots__ = ("count", "dropped", "last", "rows")

    def __init__(self) -> None:
        self.count = 0
        self.last: Any = None
        self.dropped = False
        self.rows: Iterator[Any] = iter(())

    def track(self, rows: Iterable[Any]) -> Generator[Any, None, None]:
        for row in rows:
            self.last = row
            self.count += 1
            yield row


def _one_ahead(rows: Generator[Any, None, None]) -> Generator[Any, None, None]:
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


def _recorded(
    stream_id: str, pending: list[Pending], rows: list[AppendResult]
) -> list[RecordedEvent]:
    return [
        RecordedEvent(
            position=row[0],
            stream_id=stream_id,
            version=row[1],
            event_id=item.uuid,
            type=item.type,
            schema_version=item.schema_version,
            event=item.event,
            metadata=item.metadata,
            recorded_at=row[2],
            hash=row[3],
        )
        for item, row in zip(pending, rows, strict=True)
    ]


def _check_stream_id(stream_id: object) -> None:
    if not isinstance(stream_id, str) or not stream_id.strip():
        raise InvalidArgumentError(f"stream_id must be a non-empty string, got {stream_id!r}")
    if len(stream_id) > 200:
        raise InvalidArgumentError(f"stream_id is {len(stream_id)} characters; keep it under 200")
    _check_text("stream_id", stream_id)


def _check_text(what: str, text: str) -> None:
    """Refuse text the databases cannot store: NUL characters and lone surrogates."""
    if "\x00" in text:
        raise InvalidArgumentError(
            f"{what} {text!r} contains a NUL character (\\x00), which PostgreSQL cannot store (so "
            "neither backend accepts it); "
            "remove it"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(
            f"{what} {text!r} contains {error.object[error.start : error.end]!r}, a lone UTF-16 "
            "surrogate that is not valid Unicode text; decode the text properly first"
        ) from None


_INT64 = 2**63


def _check_int(what: str, value: object) -> int:
    """``value`` when it is an int that fits the database's 64-bit integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {value!r}")
    if not -_INT64 <= value < _INT64:
        raise InvalidArgumentError(
            f"{what}={value} is outside the 64-bit range the database stores "
            f"(-2**63 to 2**63 - 1); no stream version or position can be that large"
        )
    return value


def _expected_code(expected: object) -> int:
    if isinstance(expected, _StreamState):
        return _EXPECTED_CODES[expected]
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise InvalidArgumentError(
            f"expected_version must be an int >= 0, NO_STREAM, STREAM_EXISTS or ANY; got {expected!r}"
        )
    return _check_int("expected_version", expected)


SchemaGuard = Callable[[sa.Engine, str, bool], None]
"""Checks (and, when the bool is True, migrates) the schema of a store being opened."""

SCHEMA_GUARD_ENTRY_POINT = "wgstore.schema_guard"
"""The entry-point group that names the schema guard (pyproject.toml: the migrations')."""

_schema_guard: SchemaGuard | None = None


def set_schema_guard(guard: SchemaGuard) -> None:
    """Use ``guard`` as the step :meth:`EventStore.open` runs to bring the schema to head.

    Without a call, the guard is the one pyproject.toml declares under the entry-point group
    :data:`SCHEMA_GUARD_ENTRY_POINT` (``wgstore.migrations.runner:ensure_schema``): ``events``
    never imports the migrations, which sit above it (docs/architecture.md, "Layers").
    """
    global _schema_guard
    _schema_guard = guard


def _ensure_schema(engine: sa.Engine, url: str, *, migrate: bool) -> None:
    global _schema_guard
    if _schema_guard is None:
        from importlib.metadata import entry_points

        found = sorted(entry_points(group=SCHEMA_GUARD_ENTRY_POINT), key=lambda e: e.name)
        if not found:
            raise SchemaVersionError(
                f"no {SCHEMA_GUARD_ENTRY_POINT} entry point: wgstore is not installed "
                "(pip install -e . in the clone), so its migrations cannot be found"
            )
        _schema_guard = found[0].load()
    _schema_guard(engine, url, migrate)
