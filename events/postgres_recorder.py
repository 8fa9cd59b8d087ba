"""The PostgreSQL recorder: one call of the ``wg_append`` function per append (one round trip).

``wg_append`` (its SQL and name are in :mod:`wgstore.events.postgres_functions`, with every
other function and trigger a Postgres store has) locks the table, checks the expected version,
hands out positions with ``nextval`` (in visibility order), computes both hash chains, inserts
the batch with one set-based INSERT and notifies followers (``pg_notify``, on the store's own
channel). The client sends the encoded events as arrays in binary form and gets back one row per
event.

With an HMAC key, each row's MAC must cover its position, version and time, which ``wg_append``
hands out, and the key must never reach the database: such an append builds its rows in Python
instead (:meth:`PostgresRecorder._keyed_transaction`, one transaction that takes the same table
lock, the same chain bytes and the same positions from the same sequence). Appends without a
key still make their one ``wg_append`` call.

A paused writer (SIGSTOP, a VM pause) must not hold the table lock, or a lease row, for as long
as it is paused. So no append transaction ever waits for this client while the server would not
end it on its own: an unkeyed append, fenced, of several streams or a group, is **one
statement** (:func:`_group_statement`: the fence checks, then one ``wg_append`` per batch) that
the server runs to its commit without the client; a transaction that must come back to the
client (a keyed append, which computes its MACs between its statements; a retry of several
streams, read before its commit) waits for it only between statements it has fully received,
where the writer session's ``idle_in_transaction_session_timeout``
(:attr:`PostgresRecorder.writer_idle_s`) ends it. Never a pipeline there: between two pipelined
statements the server waits for the next one as "active", which no timeout ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from inspect import signature
from typing import TYPE_CHECKING, Any, cast

from wgstore.events import pooled_recorder
from wgstore.events.errors import DuplicateEventError
from wgstore.events.hashing import GENESIS, chain_hash, epoch_us, event_mac, log_hash
from wgstore.events.pooled_recorder import GroupedWrite, PooledRecorder
from wgstore.events.postgres_functions import (
    ANALYZE_AT,
    APPEND,
    CHECK_FENCE,
    NOTIFY_CHANNEL_SQL,
)
from wgstore.events.recorder import (
    AppendResult,
    Batch,
    Pending,
    StoredTime,
    StreamVersionMismatch,
    as_results,
    fenced,
    partly_stored,
)
from wgstore.events.records import Fence

if TYPE_CHECKING:
    import psycopg
    import sqlalchemy as sa
    from sqlalchemy.engine.interfaces import DBAPICursor
    from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["PostgresRecorder", "chunked_mode_available"]

# recorded_at as microseconds since the epoch: a reader makes one datetime per batch (a batch
# shares a time) instead of psycopg one per row.
_AFTER_STREAM_ID = (  # the columns after position and stream_id
    "stream_version, event_id::text, event_type, schema_version, data::text, metadata::text, "
    "(extract(epoch FROM recorded_at) * 1000000)::bigint, hash"
)
_COLUMNS = f"position, stream_id, {_AFTER_STREAM_ID}"
_STREAM_COLUMNS = f"position, {_AFTER_STREAM_ID}"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CHUNK = 100  # rows per chunk of a streamed SELECT
_CALL = (
    # The arrays go in binary (%b): psycopg's text format escapes every quote of the JSON with a
    # regex callback, which cost more than the append itself.
    f"SELECT * FROM {APPEND}(%s, %s, %b::uuid[], %b::text[], %b::smallint[], "
    "%b::text[]::jsonb[], %b::text[]::jsonb[], %b::text[], %s)"
)
_CHECK_FENCE = (
    f"SELECT {CHECK_FENCE}({{}}, {{}}, {{}}); "  # the lease, holder and epoch as literals
)

# An unkeyed group (PostgresRecorder._in_one_transaction) as one statement: the fences checked
# in their order (each wg_check_fence locks its lease row FOR SHARE until the commit), then one
# wg_append per batch in request order, each after the one before (a LATERAL reference to what
# the one before returned, or to the fences for the first, orders the calls: each call's
# arguments name a column of it). A failure anywhere rolls back the whole statement.
_GROUP_FENCES = (
    f"f AS MATERIALIZED (SELECT count({CHECK_FENCE}(u.l, u.h, u.e)::text) AS n "
    "FROM unnest(%b::text[], %b::text[], %b::bigint[]) WITH ORDINALITY AS u(l, h, e, i))"
)
_GROUP_BATCH = (
    f"b{{k}} AS MATERIALIZED (SELECT a.* FROM {{after}} AS p, LATERAL {APPEND}(%s, %s, "
    "%b::uuid[], %b::text[], %b::smallint[], %b::text[]::jsonb[], %b::text[]::jsonb[], %b::text[], "
    "%s OR p.n < 0) AS a)"
)

# The keyed append (PostgresRecorder._keyed_transaction), under the table lock wg_append takes.
_KEYED_LOCK = "LOCK TABLE wg_events IN EXCLUSIVE MODE"
_KEYED_STORED = (
    "SELECT e.event_id::text, e.stream_id, e.stream_version, e.position, e.recorded_at, e.hash "
    "FROM wg_events e WHERE e.event_id = ANY(%b::uuid[])"
)
# The heads, the time (wg_append's: the clock to the microsecond), data and metadata as jsonb
# renders them (the stream hash covers the stored text, as wg_append's does), and the batch's
# positions: nextval under the lock, only when the stream is at the expected version (%s -1
# any, -2 no stream, -3 stream exists), so a refused append takes none.
_KEYED_HEADS = (
    "WITH head AS (SELECT stream_version AS v, hash AS h FROM wg_events WHERE stream_id = %s "
    "ORDER BY stream_version DESC LIMIT 1), "
    "state AS (SELECT coalesce((SELECT v FROM head), 0) AS v, %s::bigint AS e) "
    "SELECT (SELECT v FROM state), (SELECT h FROM head), "
    "(SELECT log_hash FROM wg_events ORDER BY position DESC LIMIT 1), "
    "date_trunc('microseconds', clock_timestamp()), "
    "ARRAY(SELECT x::jsonb::text FROM unnest(%b::text[]) WITH ORDINALITY AS u(x, i) ORDER BY i), "
    "ARRAY(SELECT x::jsonb::text FROM unnest(%b::text[]) WITH ORDINALITY AS u(x, i) ORDER BY i), "
    "ARRAY(SELECT nextval(pg_get_serial_sequence('wg_events', 'position')) "
    "FROM generate_series(1, %s), state WHERE (state.e >= 0 AND state.v = state.e) "
    "OR state.e = -1 OR (state.e = -2 AND state.v = 0) OR (state.e = -3 AND state.v > 0))"
)
_KEYED_INSERT = (
    "INSERT INTO wg_events (position, event_id, stream_id, stream_version, event_type, "
    "schema_version, data, metadata, recorded_at, hash, log_hash, mac) "
    "SELECT u.p, u.id, %s, u.v, u.t, u.s, u.d, u.m, %s, u.h, u.l, u.mac "
    "FROM unnest(%b::bigint[], %b::uuid[], %b::integer[], %b::text[], %b::smallint[], "
    "%b::text[]::jsonb[], %b::text[]::jsonb[], %b::text[], %b::text[], %b::text[]) "
    "AS u(p, id, v, t, s, d, m, h, l, mac)"
)
_KEYED_COMMIT = f"SELECT pg_notify({NOTIFY_CHANNEL_SQL}, ''); COMMIT"  # one round trip
_COMMIT = "COMMIT"


def _takes_analyze_position(keyed: list[list[list[AppendResult]]]) -> bool:
    """Whether this transaction appends the event at :data:`ANALYZE_AT`."""
    return any(
        not result.existed and result.position == ANALYZE_AT
        for rows in keyed
        for batch in rows
        for result in batch
    )


@lru_cache(maxsize=256)
def _group_statement(batches: int) -> str:
    """The one statement of an unkeyed group of ``batches`` batches (see ``_GROUP_FENCES``);
    its rows: the batch's index, then ``wg_append``'s columns."""
    ctes = [_GROUP_FENCES]
    for k in range(batches):
        after = "f" if k == 0 else f"(SELECT count(*) AS n FROM b{k - 1})"
        ctes.append(_GROUP_BATCH.format(k=k, after=after))
    rows = " UNION ALL ".join(f"SELECT {k}, b{k}.* FROM b{k}" for k in range(batches))
    return f"WITH {', '.join(ctes)} {rows}"


def chunked_mode_available() -> bool:
    """Whether psycopg can hand a result over in chunks: libpq 17 or later, psycopg 3.2 or later
    (the ``psycopg[binary]`` wheels bring their own libpq; a system libpq may be older)."""
    import psycopg

    return psycopg.pq.version() >= 170000 and "size" in signature(psycopg.Cursor.stream).parameters


def _stream_rows(
    cursor: DBAPICursor, sql: str, params: Sequence[Any]
) -> Generator[tuple[Any, ...], None, None]:
    """The rows of a SELECT as they arrive, ``_CHUNK`` at a time (libpq's chunked mode).

    The reader works on each chunk while the server sends the next, instead of waiting for the
    whole result. Exhaust or close the generator before the connection is used again (closing it
    early cancels the query).
    """
    rows = cast("psycopg.Cursor[tuple[Any, ...]]", cursor).stream(sql, params, size=_CHUNK)
    return cast("Generator[tuple[Any, ...], None, None]", rows)  # a generator, typed Iterator


def _driver(connection: PoolProxiedConnection) -> psycopg.Connection[tuple[Any, ...]]:
    """The psycopg connection under a pooled one."""
    return cast("psycopg.Connection[tuple[Any, ...]]", connection.driver_connection)


class PostgresRecorder(PooledRecorder):
    """Appends and reads on PostgreSQL (see the module docstring)."""

    columns = _COLUMNS
    stream_columns = _STREAM_COLUMNS
    param = "%s"
    writer_idle_s = 5.0
    """How long the server lets the writer's transaction wait for this client between two
    statements (``idle_in_transaction_session_timeout`` of the writer's session, not of the
    server's other sessions): then it ends the session, which rolls the transaction back and
    frees its locks. A paused writer holds the append lock and its lease rows no longer than
    this; another's append or a takeover waits for it up to its ``lock_timeout`` (30 s). When
    the writer goes on, its next statement fails, and the append is sent once more on a new
    connection, as after a dropped connection: its fence decides whether it is written."""

    def time_of(self, stored: StoredTime) -> datetime:
        """``recorded_at`` read as microseconds since the epoch, as an aware UTC datetime."""
        return _EPOCH + timedelta(microseconds=cast(int, stored))

    def __init__(self, engine: sa.Engine, hmac_key: bytes | None = None) -> None:
        super().__init__(engine, hmac_key)
        if chunked_mode_available():
            self.stream_rows = _stream_rows  # see _stream_rows; None without libpq 17

    def _prepare_writer(self, connection: PoolProxiedConnection) -> None:
        """Autocommit: ``wg_append`` is one statement, so one round trip. The session's idle
        bound (:attr:`writer_idle_s`), set once: the writer is this recorder's alone until
        ``close``, after which the engine is disposed."""
        driver = _driver(connection)
        driver.autocommit = True
        driver.execute(
            f"SET idle_in_transaction_session_timeout = {int(self.writer_idle_s * 1000)}"
        )

    def _prepare_read(self, connection: PoolProxiedConnection) -> None:
        """Autocommit: one round trip, no BEGIN/COMMIT around a single SELECT."""
        _driver(connection).autocommit = True

    def _release(self, connection: PoolProxiedConnection) -> None:
        """Back to the pool's default (transactions) for SQLAlchemy's other users."""
        driver = _driver(connection)
        if not driver.closed:
            driver.autocommit = False
        connection.close()

    def _connection_died(self, connection: PoolProxiedConnection, error: BaseException) -> bool:
        """True when ``error`` came from a connection the server closed: a restart, say, or the
        writer's idle bound (``IdleInTransactionSessionTimeout``, which psycopg counts as an
        ``InternalError``, not an ``OperationalError``)."""
        import psycopg

        driver = connection.driver_connection
        return isinstance(error, psycopg.Error) and bool(driver is None or driver.closed)

    def _append(
        self,
        writer: PoolProxiedConnection,
        stream_id: str,
        expected: int,
        pending: list[Pending],
        check_ids: bool,
    ) -> list[AppendResult]:
        import psycopg

        connection = _driver(writer)
        if self.hmac_key is not None:
            write = GroupedWrite([Batch(stream_id, expected, pending)], check_ids, None)
            try:
                return self._keyed_transaction(connection, [], [write])[0][0]
            except psycopg.Error as error:
                raise _translated(error, stream_id) from None
        cursor = connection.cursor()
        try:
            pooled_recorder.at_append_commit()
            cursor.execute(_CALL, _arguments(stream_id, expected, pending, check_ids))
            return list(as_results(cursor.fetchall()))
        except psycopg.Error as error:
            raise _translated(error, stream_id) from None
        finally:
            cursor.close()

    def _keyed_transaction(
        self,
        connection: psycopg.Connection[tuple[Any, ...]],
        fences: list[Fence],
        group: list[GroupedWrite],
    ) -> list[list[list[AppendResult]]]:
        """``wg_append``'s work in one client transaction, so each MAC covers every field.

        The same fences, table lock, expected-version check, idempotent retry, positions
        (``nextval`` under the lock, after the check), time (``clock_timestamp()``), chain bytes
        (data and metadata as jsonb renders them) and notification; the MACs are computed here,
        with the key that never leaves the client. Not pipelined (see the module docstring):
        ``BEGIN``, the fence checks and the lock in one message; per batch the heads (and the
        stored ids of a retry), then the insert; the notification and ``COMMIT`` in one: four
        round trips for one batch. The server waits for the client only between statements it
        has received whole, which the writer's idle bound limits.
        """
        from psycopg.sql import Literal

        checks = "".join(
            _CHECK_FENCE.format(
                *(Literal(v).as_string(connection) for v in (f.lease, f.holder, f.epoch))
            )
            for f in fences
        )
        cursor = connection.cursor()
        try:
            cursor.execute(f"BEGIN; {checks}{_KEYED_LOCK}", prepare=False)
            keyed: list[list[list[AppendResult]]] = []
            for write in group:
                rows = [
                    self._keyed_batch(cursor, b.stream_id, b.expected, b.pending, write.check_ids)
                    for b in write.batches
                ]
                keyed.append(_whole(rows))
            if _takes_analyze_position(keyed):
                cursor.execute("ANALYZE wg_events", prepare=False)
            pooled_recorder.at_append_commit()
            stored = all(rows[0][0].existed for rows in keyed)
            cursor.execute(_COMMIT if stored else _KEYED_COMMIT, prepare=False)
            return keyed
        except BaseException:
            _roll_back(connection)
            raise
        finally:
            cursor.close()

    def _keyed_batch(
        self,
        cursor: psycopg.Cursor[tuple[Any, ...]],
        stream_id: str,
        expected: int,
        pending: list[Pending],
        check_ids: bool,
    ) -> list[AppendResult]:
        """One batch of a keyed append, in a transaction that holds the table lock."""
        assert self.hmac_key is not None
        if check_ids:
            stored = _stored_ids(cursor, stream_id, pending)
            if stored is not None:
                return stored
        cursor.execute(
            _KEYED_HEADS,
            (
                stream_id,
                expected,
                [p.data for p in pending],
                [p.metadata_text for p in pending],
                len(pending),
            ),
        )
        heads = cursor.fetchone()
        assert heads is not None  # one row, always
        version, previous, log, now, data, metadata, positions = heads
        if not positions:
            raise StreamVersionMismatch(version, stream_id)
        previous, log = previous or "", log or GENESIS
        positions.sort()
        us = epoch_us(now)
        columns: list[list[Any]] = [[] for _ in range(10)]
        results: list[AppendResult] = []
        for item, position, text, meta in zip(pending, positions, data, metadata, strict=True):
            version += 1
            previous = chain_hash(
                previous, stream_id, version, item.event_id, item.type,
                item.schema_version, us, text, meta,
            )  # fmt: skip
            mac = event_mac(
                self.hmac_key, position, stream_id, version, item.event_id, item.type,
                item.schema_version, us, text, meta,
                check_duplicates=False,  # jsonb's rendering: one value per key
            )  # fmt: skip
            log = log_hash(log, position, previous, mac)
            row = (position, item.event_id, version, item.type, item.schema_version,
                   text, meta, previous, log, mac)  # fmt: skip
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            results.append(AppendResult(position, version, now, previous, False))
        cursor.execute(_KEYED_INSERT, (stream_id, now, *columns))
        return results

    def _append_many(
        self,
        writer: PoolProxiedConnection,
        batches: list[Batch],
        check_ids: bool,
        fence: Fence | None,
    ) -> list[list[AppendResult]]:
        """Append batches atomically (see :meth:`wgstore.events.recorder.Recorder.append_many`):
        a group of one (:meth:`_in_one_transaction`): ``wg_check_fence`` (its lock on the lease
        row holds a takeover back until the commit), then one ``wg_append`` per batch, pipelined
        in one round trip (two when several batches are checked by their ids)."""
        import psycopg

        try:
            return self._in_one_transaction(writer, [GroupedWrite(batches, check_ids, fence)])[0]
        except psycopg.Error as error:
            raise _translated(error, _failed_stream(error, batches), fence) from None

    def _append_group(
        self, writer: PoolProxiedConnection, group: list[GroupedWrite]
    ) -> list[list[list[AppendResult]]]:
        """Independent appends in one transaction (group commit, see
        :meth:`PooledRecorder._append_group`; :meth:`_in_one_transaction`)."""
        return self._in_one_transaction(writer, group)

    def _in_one_transaction(
        self, writer: PoolProxiedConnection, group: list[GroupedWrite]
    ) -> list[list[list[AppendResult]]]:
        """Appends in one transaction: the fences first, each ``wg_check_fence`` once, in the
        leases' order (a lease renewal locks its rows in that order too, so neither waits for
        the other in a circle), then one ``wg_append`` call per batch (the first takes the
        table lock; their notifications are one at the commit). One statement, which the
        server commits by itself (:func:`_group_statement`): one round trip, and nothing held
        while the client is away. A write of several batches checked by its ids is read before
        the commit (all stored or none): then the statement runs in a transaction of its own
        (``BEGIN``, the statement, ``COMMIT``: three round trips, only for such retries). With
        a key, :meth:`_keyed_transaction`."""
        connection = _driver(writer)
        fences = sorted(
            {write.fence for write in group if write.fence is not None},
            key=lambda fence: (fence.lease, fence.holder, fence.epoch),
        )
        if self.hmac_key is not None:
            return self._keyed_transaction(connection, fences, group)
        batches = [(batch, write.check_ids) for write in group for batch in write.batches]
        params: list[Any] = [
            [fence.lease for fence in fences],
            [fence.holder for fence in fences],
            [fence.epoch for fence in fences],
        ]
        for batch, check_ids in batches:
            params.extend(_arguments(batch.stream_id, batch.expected, batch.pending, check_ids))
        statement = _group_statement(len(batches))
        read_first = any(write.check_ids and len(write.batches) > 1 for write in group)
        with connection.cursor() as cursor:
            if not read_first:
                pooled_recorder.at_append_commit()
                return _split(group, cursor.execute(statement, params).fetchall())
            with connection.transaction():
                results = _split(group, cursor.execute(statement, params).fetchall())
                for write, rows in zip(group, results, strict=True):
                    if write.check_ids and len(rows) > 1:
                        _whole(rows)
                pooled_recorder.at_append_commit()
            return results


def _split(
    group: list[GroupedWrite], rows: list[tuple[Any, ...]]
) -> list[list[list[AppendResult]]]:
    """A group statement's rows (the batch's index first) as each write's results per batch."""
    per_batch: list[list[AppendResult]] = [[] for write in group for _ in write.batches]
    for row in rows:
        per_batch[row[0]].append(AppendResult(*row[1:]))
    results: list[list[list[AppendResult]]] = []
    start = 0
    for write in group:
        results.append(per_batch[start : start + len(write.batches)])
        start += len(write.batches)
    return results


def _roll_back(connection: psycopg.Connection[tuple[Any, ...]]) -> None:
    """End a transaction this recorder began, if the connection still has one open."""
    import psycopg

    if connection.closed:
        return
    if connection.info.transaction_status in (
        psycopg.pq.TransactionStatus.INTRANS,
        psycopg.pq.TransactionStatus.INERROR,
    ):
        with contextlib.suppress(psycopg.Error):  # the error that brought us here counts
            connection.execute("ROLLBACK", prepare=False)


def _whole(results: list[list[AppendResult]]) -> list[list[AppendResult]]:
    """An atomic append's results, unless some of its batches were stored and others not (its
    transaction then rolls back on the way out of the error)."""
    if len({rows[0].existed for rows in results}) > 1:
        raise partly_stored()
    return results


def _failed_stream(error: psycopg.Error, batches: list[Batch]) -> str | None:
    """The stream whose expected version ``wg_append`` refused (its message names it)."""
    message = error.diag.message_primary or ""
    for batch in batches:
        if message.startswith(f"wgstore: stream {batch.stream_id} is at version "):
            return batch.stream_id
    return None


def _arguments(
    stream_id: str, expected: int, pending: list[Pending], check_ids: bool
) -> tuple[Any, ...]:
    return (
        stream_id,
        expected,
        [p.event_id for p in pending],
        [p.type for p in pending],
        [p.schema_version for p in pending],
        [p.data for p in pending],
        [p.metadata_text for p in pending],
        [None] * len(pending),  # MACs: a keyed append computes them itself (_keyed_batch)
        check_ids,
    )


def _translated(
    error: psycopg.Error, stream_id: str | None, fence: Fence | None = None
) -> BaseException:
    """``wg_append``'s and ``wg_check_fence``'s own errors as the recorder's; others as they are."""
    if error.sqlstate == "WG001":
        return StreamVersionMismatch(int(error.diag.message_detail or 0), stream_id)
    if error.sqlstate == "WG004" and fence is not None:
        holder, _, epoch = (error.diag.message_detail or "").partition("\n")
        refused = fenced(fence, holder or None, int(epoch) if epoch else None)
        if refused is not None:
            return refused
    return error


def _stored_ids(
    cursor: psycopg.Cursor[tuple[Any, ...]], stream_id: str, pending: list[Pending]
) -> list[AppendResult] | None:
    """The stored rows of a batch retried after a lost reply, as ``wg_append`` finds them."""
    cursor.execute(_KEYED_STORED, ([p.event_id for p in pending],))
    found: dict[str, tuple[str, int, int, datetime, str]] = {
        row[0]: row[1:] for row in cursor.fetchall()
    }
    if not found:
        return None
    if all(p.event_id in found for p in pending):
        in_order = [found[p.event_id] for p in pending]
        offsets = {row[1] - index for index, row in enumerate(in_order)}
        if all(row[0] == stream_id for row in in_order) and len(offsets) == 1:
            return [
                AppendResult(position, version, at, hash_, True)
                for _, version, position, at, hash_ in in_order
            ]
    raise DuplicateEventError(
        f"{len(found)} of {len(pending)} event ids are already stored, but not as this exact "
        "batch in this stream: give each new event a new id, or retry the whole original "
        "batch unchanged"
    )
