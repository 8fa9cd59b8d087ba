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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import sqlalchemy as sa

from wgstore.events._translate import translate_errors
from wgstore.events.codec import Codec, canonical_json
from wgstore.events.engine import create_store_engine, mask_url, parse_url
from wgstore.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    SchemaVersionError,
    StoreUnavailableError,
)
from wgstore.events.hashing import chain_hash, epoch_us
from wgstore.events.records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    ExpectedVersion,
    NewEvent,
    RecordedEvent,
    _StreamState,
)
from wgstore.events.registry import REGISTRY, EventRegistry

__all__ = ["EventStore", "VerifyReport"]

_PAGE = 1000
_SQLITE_INSERT = (
    "INSERT INTO wg_events (event_id, stream_id, stream_version, event_type, schema_version, "
    "data, metadata, recorded_at, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EXPECTED_CODES = {ANY: -1, NO_STREAM: -2, STREAM_EXISTS: -3}

_SQLITE_COLUMNS = (
    "position, stream_id, stream_version, event_id, event_type, schema_version, data, metadata, "
    "recorded_at, hash"
)
_PG_COLUMNS = (
    "position, stream_id, stream_version, event_id::text, event_type, schema_version, data::text, "
    "metadata::text, recorded_at, hash"
)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``EventStore.verify`` found: ``ok`` when every hash and version checks out."""

    ok: bool
    problems: list[str] = field(default_factory=list)
    checked: int = 0


@dataclass(frozen=True, slots=True)
class _Pending:
    """One event, encoded, on its way into the log."""

    event: Any
    uuid: uuid.UUID
    event_id: str
    type: str
    schema_version: int
    data: str
    metadata: dict[str, Any]
    metadata_text: str


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
    ) -> None:
        """Wrap an engine made by :func:`~wgstore.events.engine.create_store_engine`.

        Prefer :meth:`open`, which also checks (and migrates) the schema.
        """
        self.engine = engine
        self.url = url
        self.read_only = read_only
        self.backend: str = engine.dialect.name
        self.codec = Codec(registry or REGISTRY)
        self._write_lock = threading.Lock()
        self._writer: Any = None
        self._closed = False
        self._columns = _PG_COLUMNS if self.is_postgres else _SQLITE_COLUMNS
        self._param = "%s" if self.is_postgres else "?"
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
        return cls(engine, url=url, read_only=read_only, registry=registry)

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
    ) -> list[RecordedEvent]:
        """Append ``events`` to ``stream_id`` as one all-or-nothing batch.

        Args:
            stream_id: e.g. ``worker-group-<group_id>`` or ``run-<run_id>``.
            events: registered event objects, or :class:`NewEvent` wrappers that fix the id
                and add metadata.
            expected_version: the version the stream must be at (an int; 0 means no stream),
                or ``NO_STREAM``, ``STREAM_EXISTS`` or ``ANY`` (the default).

        Returns:
            The recorded events, in order. When every event id of the batch is already stored
            in this stream in this order (a retry after a lost reply), the stored records are
            returned and nothing is written.

        Raises:
            ConcurrencyError: the stream is not at ``expected_version``.
            DuplicateEventError: an event id is already stored elsewhere.
            UnknownEventTypeError / EventEncodeError: an event cannot be stored; nothing is.
        """
        self._check_open()
        if self.read_only:
            raise StoreUnavailableError(f"{mask_url(self.url)} was opened read-only; cannot append")
        _check_stream_id(stream_id)
        expected = _expected_code(expected_version)
        pending, check_ids = self._encode_batch(events)
        if not pending:
            return []
        with translate_errors(self.url):
            rows = self._append_with_retry(
                stream_id, expected, expected_version, pending, check_ids
            )
        if rows[0][4]:  # already stored: return what is in the log
            return self._read_positions([row[0] for row in rows])
        self._notifier.local_append()
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

    def _encode_batch(self, events: Sequence[Any]) -> tuple[list[_Pending], bool]:
        if isinstance(events, NewEvent) or not isinstance(events, Sequence | Iterable):
            raise TypeError("append() takes a list of events, e.g. store.append(sid, [event])")
        base, base_text = self._metadata_defaults()
        pending: list[_Pending] = []
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
            event_uuid = fixed_id or uuid.uuid4()
            event_id = str(event_uuid)
            if event_id in seen:
                raise DuplicateEventError(f"event id {event_id} appears twice in one batch")
            seen.add(event_id)
            pending.append(
                _Pending(
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
        stream_id: str,
        expected: int,
        expected_version: ExpectedVersion,
        pending: list[_Pending],
        check_ids: bool,
    ) -> list[tuple[int, int, datetime, str, bool]]:
        with self._write_lock:
            for attempt in (1, 2):
                writer = self._writer_connection()
                try:
                    if self.is_postgres:
                        return self._append_postgres(
                            writer, stream_id, expected, pending, check_ids
                        )
                    return self._append_sqlite(writer, stream_id, expected, pending, check_ids)
                except _StreamVersionMismatch as mismatch:
                    raise ConcurrencyError(stream_id, expected_version, mismatch.actual) from None
                except Exception as error:
                    if attempt == 2 or not self._connection_lost(error):
                        raise
                    # The connection died; the ids are fixed, so resending the batch is safe:
                    # if the first try committed, the idempotency check returns it.
                    self._drop_writer()
                    check_ids = True
        raise AssertionError("unreachable")

    def _writer_connection(self) -> Any:
        if self._writer is None:
            self._writer = self.engine.raw_connection()
            if self.is_postgres:
                self._writer.driver_connection.autocommit = True
        return self._writer

    def _drop_writer(self) -> None:
        if self._writer is not None:
            try:
                self._writer.invalidate()
            finally:
                self._writer = None

    def _connection_lost(self, error: BaseException) -> bool:
        if not self.is_postgres:
            return False
        import psycopg

        return isinstance(error, psycopg.OperationalError) and bool(
            self._writer is None or self._writer.driver_connection.closed
        )

    def _append_postgres(
        self, writer: Any, stream_id: str, expected: int, pending: list[_Pending], check_ids: bool
    ) -> list[tuple[int, int, datetime, str, bool]]:
        import psycopg

        cursor = writer.driver_connection.cursor()
        try:
            cursor.execute(
                "SELECT * FROM wg_append(%s, %s, %s::uuid[], %s, %s::smallint[], %s::jsonb[], "
                "%s::jsonb[], %s, %s)",
                (
                    stream_id,
                    expected,
                    [p.event_id for p in pending],
                    [p.type for p in pending],
                    [p.schema_version for p in pending],
                    [p.data for p in pending],
                    [p.metadata_text for p in pending],
                    check_ids,
                    0,  # p_lock_timeout_ms: unused since 0003 (set per connection)
                ),
            )
            return cursor.fetchall()
        except psycopg.Error as error:
            if error.sqlstate == "WG001":
                actual = int(error.diag.message_detail or 0)
                raise _StreamVersionMismatch(actual) from None
            raise
        finally:
            cursor.close()

    def _append_sqlite(
        self, writer: Any, stream_id: str, expected: int, pending: list[_Pending], check_ids: bool
    ) -> list[tuple[int, int, datetime, str, bool]]:
        connection = writer.driver_connection
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            if check_ids:
                stored = self._sqlite_stored_ids(cursor, stream_id, pending)
                if stored is not None:
                    cursor.execute("ROLLBACK")
                    return stored
            row = cursor.execute(
                "SELECT stream_version, hash FROM wg_events WHERE stream_id = ? "
                "ORDER BY stream_version DESC LIMIT 1",
                (stream_id,),
            ).fetchone()
            version, previous = (row[0], row[1]) if row else (0, "")
            if (
                (expected >= 0 and version != expected)
                or (expected == -2 and version != 0)
                or (expected == -3 and version == 0)
            ):
                raise _StreamVersionMismatch(version)
            now = datetime.now(UTC)
            stored_at = now.replace(tzinfo=None).isoformat(" ", "microseconds")
            recorded_us = epoch_us(now)
            rows = []
            hashes = []
            for item in pending:
                version += 1
                previous = chain_hash(
                    previous, stream_id, version, item.event_id, item.type,
                    item.schema_version, recorded_us, item.data, item.metadata_text,
                )  # fmt: skip
                hashes.append(previous)
                rows.append(
                    (item.event_id, stream_id, version, item.type, item.schema_version,
                     item.data, item.metadata_text, stored_at, previous)
                )  # fmt: skip
            if len(rows) == 1:
                cursor.execute(_SQLITE_INSERT, rows[0])
                last_position = cursor.lastrowid
            else:
                cursor.executemany(_SQLITE_INSERT, rows)
                last_position = cursor.execute("SELECT last_insert_rowid()").fetchone()[0]
            # One writer at a time (BEGIN IMMEDIATE) and AUTOINCREMENT: the batch's positions
            # are consecutive, ending at the last inserted rowid.
            first_position = last_position - len(rows) + 1
            results = [
                (first_position + index, row[2], now, hashes[index], False)
                for index, row in enumerate(rows)
            ]
            cursor.execute("COMMIT")
            return results
        except BaseException:
            if connection.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    @staticmethod
    def _sqlite_stored_ids(
        cursor: Any, stream_id: str, pending: list[_Pending]
    ) -> list[tuple[int, int, datetime, str, bool]] | None:
        ids = [p.event_id for p in pending]
        marks = ",".join("?" * len(ids))
        found = {
            row[0]: row[1:]
            for row in cursor.execute(
                f"SELECT event_id, stream_id, stream_version, position, recorded_at, hash "
                f"FROM wg_events WHERE event_id IN ({marks})",
                ids,
            )
        }
        if not found:
            return None
        in_order = [found.get(event_id) for event_id in ids]
        if all(in_order) and all(row[0] == stream_id for row in in_order):  # type: ignore[index]
            offsets = {row[1] - index for index, row in enumerate(in_order)}  # type: ignore[index]
            if len(offsets) == 1:
                return [
                    (row[2], row[1], _parse_sqlite_time(row[3]), row[4], True)  # type: ignore[index]
                    for row in in_order
                ]
        raise DuplicateEventError(
            f"{len(found)} of {len(ids)} event ids are already stored, but not as this exact "
            "batch in this stream: give each new event a new id, or retry the whole original "
            "batch unchanged"
        )

    # ------------------------------------------------------------------ reading

    def read_stream(
        self, stream_id: str, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        """The events of one stream, from ``from_version`` up to ``to_version`` (inclusive)."""
        self._check_open()
        last = to_version if to_version is not None else 2**31 - 1
        version = max(from_version, 1)
        p = self._param
        sql = (
            f"SELECT {self._columns} FROM wg_events WHERE stream_id = {p} "
            f"AND stream_version >= {p} AND stream_version <= {p} ORDER BY stream_version LIMIT {_PAGE}"
        )
        while version <= last:
            rows = self._fetch(sql, (stream_id, version, last))
            yield from self._decode_rows(rows)
            if len(rows) < _PAGE:
                return
            version = rows[-1][2] + 1

    def read_all(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Iterable[str | type] | None = None,
        *,
        streams: str | None = None,
    ) -> Iterator[RecordedEvent]:
        """Every event after position ``after``, in global order.

        Args:
            after: a position (a checkpoint); 0 reads from the start.
            limit: the most events to return.
            types: only events of these types (names or registered classes).
            streams: only events of streams whose id starts with this prefix, e.g.
                ``"worker-group-"``; the others are skipped before they are decoded.
        """
        self._check_open()
        names = self._type_names(types)
        p = self._param
        where = f"position > {p}"
        if names:
            where += f" AND event_type IN ({','.join([p] * len(names))})"
        remaining = limit if limit is not None else -1
        position = after
        while remaining != 0:
            # The stream filter runs here, not in SQL: a LIKE there can make Postgres' planner
            # trade the position index for a sort of every later row, page after page.
            page = _PAGE if remaining < 0 or streams is not None else min(_PAGE, remaining)
            rows = self._fetch(
                f"SELECT {self._columns} FROM wg_events WHERE {where} ORDER BY position LIMIT {page}",
                (position, *names),
            )
            kept = rows if streams is None else [r for r in rows if r[1].startswith(streams)]
            if remaining > 0:
                kept = kept[:remaining]
                remaining -= len(kept)
            yield from self._decode_rows(kept)
            if len(rows) < page:
                return
            position = rows[-1][0]

    def stream_version(self, stream_id: str) -> int:
        """The version of the stream's last event, 0 when the stream has none."""
        self._check_open()
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
        return [t if isinstance(t, str) else self.codec.registry.by_class(t).name for t in types]

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with translate_errors(self.url):
            connection = self.engine.raw_connection()
            try:
                if self.is_postgres:  # one round trip: no BEGIN/COMMIT around a single SELECT
                    connection.driver_connection.autocommit = True
                cursor = connection.cursor()
                cursor.execute(sql, params)
                rows = cursor.fetchall()
                cursor.close()
                return rows
            finally:
                if self.is_postgres and not connection.driver_connection.closed:
                    connection.driver_connection.autocommit = False
                connection.close()

    def _decode_rows(self, rows: Iterable[Sequence[Any]]) -> Iterator[RecordedEvent]:
        decode = self.codec.decode
        decode_json = msgspec.json.decode
        postgres = self.is_postgres
        last_text, last_time = None, None  # a batch shares one time: parse it once
        for row in rows:
            position, stream_id, version, event_id, type_, schema_version, data, meta, at, hash_ = (
                row
            )
            if not postgres:
                if at != last_text:
                    last_text, last_time = at, _parse_sqlite_time(at)
                at = last_time
            yield RecordedEvent(
                position=position,
                stream_id=stream_id,
                version=version,
                event_id=uuid.UUID(event_id),
                type=type_,
                schema_version=schema_version,
                event=decode(type_, schema_version, data, stream_id=stream_id, position=position),
                metadata=decode_json(meta),
                recorded_at=at,
                hash=hash_,
            )

    # ------------------------------------------------------------------ following

    def wait_for_new(self, after: int, timeout_s: float) -> int:
        """Block until the log has an event past ``after`` or ``timeout_s`` passes.

        Wakes on Postgres ``LISTEN/NOTIFY`` (and at once for appends made through this store
        object), and always falls back to polling. Returns the head position.
        """
        self._check_open()
        return self._notifier.wait(after, timeout_s)

    def subscription(
        self, name: str, *, types: Iterable[str | type] | None = None, streams: str | None = None
    ) -> Any:
        """A named, durable reader of the log; see :class:`~wgstore.events.Subscription`."""
        from wgstore.events.subscriptions import Subscription

        return Subscription(self, name, types=types, streams=streams)

    # ------------------------------------------------------------------ verifying

    def verify(self, stream_id: str | None = None) -> VerifyReport:
        """Recompute every hash chain (or one stream's) from what is stored.

        Finds events that were changed, removed from the middle of a stream, or reordered,
        even when someone disabled the immutability triggers to do it.
        """
        self._check_open()
        p = self._param
        where = f"WHERE stream_id = {p}" if stream_id is not None else ""
        params: tuple[Any, ...] = (stream_id,) if stream_id is not None else ()
        last: dict[str, tuple[int, str]] = {}
        problems: list[str] = []
        checked = 0
        after = 0
        while True:
            rows = self._fetch(
                f"SELECT {self._columns} FROM wg_events {where}"
                f"{' AND' if where else ' WHERE'} position > {p} ORDER BY position LIMIT {_PAGE}",
                (*params, after),
            )
            for position, sid, version, event_id, type_, schema, data, meta, at, stored in rows:
                checked += 1
                previous_version, previous_hash = last.get(sid, (0, ""))
                if version != previous_version + 1:
                    problems.append(
                        f"stream {sid!r}: version {version} at position {position} follows "
                        f"version {previous_version}: events are missing or out of order"
                    )
                moment = at if self.is_postgres else _parse_sqlite_time(at)
                expected = chain_hash(
                    previous_hash,
                    sid,
                    version,
                    event_id,
                    type_,
                    schema,
                    epoch_us(moment),
                    data,
                    meta,
                )
                if expected != stored:
                    problems.append(
                        f"stream {sid!r}: the event at position {position} (version {version}, "
                        f"{type_}) does not match its hash: it, or the event before it, was changed"
                    )
                last[sid] = (version, stored)
            if len(rows) < _PAGE:
                break
            after = rows[-1][0]
        return VerifyReport(ok=not problems, problems=problems, checked=checked)

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("this EventStore is closed; open a new one")


class _StreamVersionMismatch(Exception):
    def __init__(self, actual: int) -> None:
        self.actual = actual


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern (escape character ``\\``) matching ids that start with ``prefix``."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _parse_sqlite_time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _check_stream_id(stream_id: object) -> None:
    if not isinstance(stream_id, str) or not stream_id.strip():
        raise ValueError(f"stream_id must be a non-empty string, got {stream_id!r}")
    if len(stream_id) > 200:
        raise ValueError(f"stream_id is {len(stream_id)} characters; keep it under 200")


def _expected_code(expected: object) -> int:
    if isinstance(expected, _StreamState):
        return _EXPECTED_CODES[expected]
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise ValueError(
            f"expected_version must be an int >= 0, NO_STREAM, STREAM_EXISTS or ANY; got {expected!r}"
        )
    return expected


def _ensure_schema(engine: sa.Engine, url: str, *, migrate: bool) -> None:
    from wgstore.migrations.runner import current_revision, head_revision, upgrade

    head = head_revision()
    with engine.connect() as connection:
        current = current_revision(connection)
        connection.rollback()
    if current == head:
        return
    if not migrate:
        state = "has no wgstore tables" if current is None else f"is at revision {current}"
        raise SchemaVersionError(
            f"the database at {mask_url(url)} {state}, but this wgstore needs {head}: run "
            "`wgstore db upgrade --url ...` (or open the store with migrate=True)"
        )
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            # One migrator at a time; the others wait here, then find the schema at head.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7263524)")
        current = current_revision(connection)
        if current == head:
            return
        _check_known(current, url)
        upgrade(connection)


def _check_known(revision: str | None, url: str) -> None:
    if revision is None:
        return
    from alembic.script import ScriptDirectory

    from wgstore.migrations.runner import alembic_config

    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        raise SchemaVersionError(
            f"the database at {mask_url(url)} is at revision {revision!r}, which this wgstore "
            "does not know: it was migrated by a newer wgstore; upgrade wgstore"
        ) from None
