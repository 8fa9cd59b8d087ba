"""What a backend's recorder does for :class:`~wgstore.events.store.EventStore`.

The store is backend-neutral: it checks input, encodes events, decodes rows and
follows the log. A recorder holds all that differs per database: how a batch is appended (one
``BEGIN IMMEDIATE`` transaction on SQLite, one ``wg_append`` call on Postgres), the columns and
placeholder of its reads, each row's MAC (it needs the position, version and time only the
append knows), how its connections are prepared and how a dropped one is recognised.
The eventsourcing library's split into an application and one recorder per backend is the model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec

from wgstore.events.errors import FencedError
from wgstore.events.records import Fence

__all__ = [
    "AppendResult",
    "Batch",
    "Pending",
    "Recorder",
    "StreamVersionMismatch",
    "fenced",
    "recorder_for",
]

AppendResult = tuple[int, int, datetime, str, bool]
"""One appended (or, with ``True`` last, already stored) event: position, version, recorded
at, hash, already stored."""


class Pending(msgspec.Struct, frozen=True):
    """One event, encoded, on its way into the log (a Struct: cheap to build per event)."""

    event: Any
    uuid: uuid.UUID
    event_id: str
    type: str
    schema_version: int
    data: str
    metadata: dict[str, Any]
    metadata_text: str


class Batch(msgspec.Struct, frozen=True):
    """One stream's encoded events in an append (several make an atomic multi-stream append)."""

    stream_id: str
    expected: int
    pending: list[Pending]


class StreamVersionMismatch(Exception):
    """The stream is not at the expected version (the store raises ``ConcurrencyError``)."""

    def __init__(self, actual: int, stream_id: str | None = None) -> None:
        super().__init__(actual, stream_id)
        self.actual = actual
        self.stream_id = stream_id


def fenced(fence: Fence, holder: str | None, epoch: int | None) -> FencedError | None:
    """The error for an append carrying ``fence`` when the lease row says ``holder``/``epoch``
    (both None: no row); None when the fence holds."""
    if holder == fence.holder and epoch == fence.epoch:
        return None
    return FencedError(fence.lease, fence.holder, fence.epoch, holder, epoch)


class Recorder(Protocol):
    """One database's way of writing and reading the log's rows."""

    columns: str
    """The SELECT list of a record: position, stream_id, stream_version, event_id, event_type,
    schema_version, data, metadata, recorded_at, hash (ids and JSON as text; ``recorded_at`` as
    :meth:`time_of` takes it)."""
    stream_columns: str
    """``columns`` without ``stream_id``, for reads of one stream (which know it)."""
    param: str
    """The driver's placeholder (``?`` or ``%s``)."""
    stream_rows: Callable[[Any, str, Sequence[Any]], Generator[Any, None, None]] | None
    """``stream_rows(cursor, sql, params)``: a SELECT's rows as they arrive, or None when the
    driver cannot hand them over that way. With it, ``read_stream`` yields each event while the
    rest of its page is still on the way, instead of after the whole page."""

    def time_of(self, stored: Any) -> datetime:
        """The aware UTC ``recorded_at`` of a row's ``recorded_at`` column (as ``columns`` reads
        it). Readers call it once per distinct value: a batch shares one time."""
        ...

    def append(
        self,
        writer: Any,
        stream_id: str,
        expected: int,
        pending: list[Pending],
        check_ids: bool,
    ) -> list[AppendResult]:
        """Append one batch on ``writer`` (a pooled DBAPI connection) all-or-nothing.

        ``expected``: a version >= 0, or -1 any, -2 no stream, -3 stream exists. With
        ``check_ids``, a batch whose ids are already stored in this stream in this order is
        returned as stored (last field ``True``) and nothing is written.

        Raises:
            StreamVersionMismatch: the stream is not at ``expected``.
            DuplicateEventError: an id is stored, but not as this exact batch.
        """
        ...

    def append_many(
        self, writer: Any, batches: list[Batch], check_ids: bool, fence: Fence | None
    ) -> list[list[AppendResult]]:
        """Append several streams' batches in one transaction, all or nothing.

        With ``fence``, the lease row is checked in that transaction first. With ``check_ids``,
        batches all already stored as they are come back as stored and nothing is written.

        Raises:
            FencedError: the lease is no longer ``fence.holder``'s at ``fence.epoch``.
            StreamVersionMismatch: a stream (named) is not at its batch's ``expected``.
            DuplicateEventError: an id is stored, but not as these exact batches.
        """
        ...

    def prepare_writer(self, connection: Any) -> None:
        """Set up a new writer connection."""
        ...

    def prepare_read(self, connection: Any) -> None:
        """Set up a connection for one SELECT."""
        ...

    def release(self, connection: Any) -> None:
        """Undo :meth:`prepare_read` before the connection goes back to the pool."""
        ...

    def connection_died(self, connection: Any, error: BaseException) -> bool:
        """True when ``error`` means the server dropped ``connection`` (retry on a new one)."""
        ...


def recorder_for(backend: str, hmac_key: bytes | None = None) -> Recorder:
    """The recorder of SQLAlchemy dialect ``backend`` (``sqlite`` or ``postgresql``).

    With ``hmac_key``, every row it appends carries its MAC
    (:func:`~wgstore.events.hashing.event_mac`), computed under the write lock.
    """
    if backend == "postgresql":
        from wgstore.events.postgres_recorder import PostgresRecorder

        return PostgresRecorder(hmac_key)
    if backend == "sqlite":
        from wgstore.events.sqlite_recorder import SqliteRecorder

        return SqliteRecorder(hmac_key)
    raise ValueError(
        f"no recorder for database {backend!r}; wgstore stores to sqlite or postgresql"
    )
