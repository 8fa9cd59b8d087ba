"""``EventStore``: append, read, verify and follow the log, on SQLite or PostgreSQL.

The application side of the log, as the eventsourcing library's ``Application`` is of its
recorders: the store checks input, encodes and decodes events, turns a version mismatch into
:class:`ConcurrencyError`, and keeps the public API. Everything that talks to the database (its
connections, the SQL of every read and write, paging, streamed reads, the retry on a dropped
connection) is the backend's recorder's (:mod:`wgstore.events.recorder`): an append on
Postgres is one call of the ``wg_append`` function (one round trip); on SQLite it is one
``BEGIN IMMEDIATE`` transaction on the recorder's writer connection.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import sqlalchemy as sa
from uuid_utils import uuid7

from wgstore.events._translate import translate_errors
from wgstore.events.codec import Codec, canonical_json
from wgstore.events.decoding import decode_log, decode_stream
from wgstore.events.engine import create_store_engine, mask_url, parse_url, require_sqlite_file
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
    LogRow,
    Pending,
    Recorder,
    StreamRow,
    StreamVersionMismatch,
)
from wgstore.events.recorders import recorder_for
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
from wgstore.events.stream_watch import StreamWatch
from wgstore.events.streams import check_reserved_append
from wgstore.events.verify import VerifyReport, head_digest, verify_log

if TYPE_CHECKING:
    from wgstore.events.notifier import Notifier

__all__ = ["EventStore", "VerifyReport"]

_ID = msgspec.json.Decoder(uuid.UUID)
_ID_LIST = msgspec.json.Decoder(list[uuid.UUID])


def _event_uuids(pending: list[Pending]) -> list[uuid.UUID]:
    """The event ids of ``pending`` as stdlib UUIDs, for the records an append returns.

    Decoded from their text by msgspec in C, a batch's in one call: ~0.15 µs an id (a single
    one ~0.25), where a UUID built from uuid-utils' int through its slots costs ~0.3 and
    ``uuid.UUID(text)`` ~1.
    """
    if len(pending) == 1:
        return [_ID.decode(f'"{pending[0].event_id}"')]
    return _ID_LIST.decode('["' + '","'.join([item.event_id for item in pending]) + '"]')


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
        self._closed = False
        self.recorder: Recorder = recorder_for(engine, self._hmac_key)
        """This database's recorder: its connections, and the SQL of every read and write."""
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
            migrate: create the tables, or upgrade the schema to head when it is behind
                (default). With False, nothing is created: a database that is not at head
                raises :class:`SchemaVersionError`, a SQLite file that does not exist
                :class:`StoreUnavailableError`.
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
        parsed = parse_url(url)  # a bad URL fails here, with the password masked
        if parsed.get_backend_name() == "sqlite" and (read_only or not migrate):
            require_sqlite_file(Path(parsed.database or ""))  # an open that may not create
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
        self.recorder.close()
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
        try:
            with translate_errors(self.url):
                rows = self.recorder.append(stream_id, expected, pending, check_ids)
        except StreamVersionMismatch as mismatch:
            raise ConcurrencyError(stream_id, expected_version, mismatch.actual) from None
        if rows[0].existed:  # already stored: return what is in the log
            return self._read_positions([row.position for row in rows])
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
        try:
            with translate_errors(self.url):
                results = self.recorder.append_many(batches, check_ids, fence)
        except StreamVersionMismatch as mismatch:
            stream_id = mismatch.stream_id or batches[0].stream_id
            raise ConcurrencyError(
                stream_id, expected_versions[stream_id], mismatch.actual
            ) from None
        if results[0][0].existed:  # already stored
            appended = [self._read_positions([row.position for row in rows]) for rows in results]
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
                event_id = str(uuid7())
            else:
                event_id = str(fixed_id)
                if event_id in seen:
                    raise DuplicateEventError(f"event id {event_id} appears twice in one batch")
                seen.add(event_id)
            pending.append(
                Pending(event, event_id, info.name, info.version, data, metadata, metadata_text)
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
        rows = self.recorder.select_events(stream_id, from_version, last)
        try:
            with translate_errors(self.url):
                yield from self._decode_stream(rows, stream_id)
        finally:
            rows.close()

    def read_all(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Iterable[str | type] | None = None,
        *,
        streams: str | tuple[str, ...] | None = None,
        keep: Callable[[int, str, str], bool] | None = None,
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
            keep: called with each row's position, stream id and type, in order, before the
                row is decoded; rows it returns False for are skipped. A follower that serves
                some streams skips decoding the others' events and still sees every position
                (its checkpoint moves past what it skipped).

        Raises:
            InvalidArgumentError: ``after`` or ``limit`` is not an int in the 64-bit range (or
                ``limit`` is negative), or a type name is not a usable string.
        """
        self._check_open()
        after = _check_int("after", after)
        if limit is not None and _check_int("limit", limit) < 0:
            raise InvalidArgumentError(f"limit must be None or an int >= 0, got {limit!r}")
        names = self._type_names(types)
        rows = self.recorder.select_notifications(
            after, limit if limit is not None else -1, names, streams
        )
        try:
            with translate_errors(self.url):
                if keep is None:
                    yield from self._decode_log(rows)
                else:
                    yield from self._decode_log(row for row in rows if keep(row[0], row[1], row[4]))
        finally:
            rows.close()

    def stream_version(self, stream_id: str) -> int:
        """The version of the stream's last event, 0 when the stream has none."""
        self._check_open()
        _check_stream_id(stream_id)
        with translate_errors(self.url):
            return self.recorder.max_stream_version(stream_id)

    def head(self) -> int:
        """The highest position safe to read: nothing below it can still appear later."""
        self._check_open()
        with translate_errors(self.url):
            return self.recorder.max_position()

    def streams(self, prefix: str = "") -> list[tuple[str, int]]:
        """Every stream whose id starts with ``prefix``, with its version."""
        self._check_open()
        if not isinstance(prefix, str):
            raise InvalidArgumentError(f"prefix must be a string, got {prefix!r}")
        _check_text("prefix", prefix)
        with translate_errors(self.url):
            return [(head.stream_id, head.version) for head in self.recorder.select_streams(prefix)]

    def _read_positions(self, positions: list[int]) -> list[RecordedEvent]:
        with translate_errors(self.url):
            rows = self.recorder.select_positions(positions)
        return list(self._decode_log(rows))

    def _type_names(self, types: Iterable[str | type] | None) -> list[str]:
        if types is None:
            return []
        if isinstance(types, str | type):
            types = [types]
        names = [t if isinstance(t, str) else self.codec.registry.by_class(t).name for t in types]
        for name in names:
            _check_text("an event type name", name)
        return names

    def fetch_rows(self, sql: str, params: Sequence[Any]) -> Sequence[tuple[Any, ...]]:
        """The rows of one SELECT of the caller's own (verify's), through the recorder."""
        with translate_errors(self.url):
            return self.recorder.fetch(sql, params)

    def _decode_log(self, rows: Iterable[LogRow]) -> Iterator[RecordedEvent]:
        return decode_log(self.codec, self.recorder.time_of, rows)

    def _decode_stream(self, rows: Iterable[StreamRow], stream_id: str) -> Iterator[RecordedEvent]:
        return decode_stream(self.codec, self.recorder.time_of, rows, stream_id)

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

    @property
    def notifier(self) -> Notifier:
        """The store's wake-ups, for a follower that reads what is new itself, on a connection
        of its own (``wgstore serve``'s): ``generation`` before reading, ``wait_for_wake(
        generation, timeout_s)`` after. Other processes' appends wake it only on Postgres
        (``LISTEN/NOTIFY``, after ``ensure_listening()``); on SQLite only appends made through
        this object do, so a follower there reads again after a short timeout (serve's: 10 ms).
        Most code wants :meth:`wait_for_new`, which also reads the head and polls."""
        self._check_open()
        return self._notifier

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
        archive_files: bool = True,
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
            archive_files: read the archive's files (``wgstore archive``) and check every
                archived event where it stood in the log, as if nothing was archived; a batch
                whose files cannot be read is a problem. False: cross each archived range by
                its manifest alone (its log hashes where it meets the live log; the manifest
                itself checked against the SHA-256 in its ``LogArchived`` event).

        Raises:
            ValueError: ``against`` is not a digest.
        """
        self._check_open()
        key = normalize_key(hmac_key) if hmac_key is not None else self._hmac_key
        return verify_log(
            self, stream_id, against=against, hmac_key=key, archive_files=archive_files
        )

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


def _recorded(
    stream_id: str, pending: list[Pending], rows: list[AppendResult]
) -> list[RecordedEvent]:
    event_ids = _event_uuids(pending)
    return [
        RecordedEvent(
            position=row.position,
            stream_id=stream_id,
            version=row.version,
            event_id=event_id,
            type=item.type,
            schema_version=item.schema_version,
            event=item.event,
            metadata=item.metadata,
            recorded_at=row.recorded_at,
            hash=row.hash,
        )
        for item, event_id, row in zip(pending, event_ids, rows, strict=True)
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
