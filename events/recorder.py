"""What a backend's recorder does for :class:`~wgstore.events.store.EventStore`.

The store is application-side: it checks input, encodes events, decodes rows, turns a version
mismatch into ``ConcurrencyError`` and keeps the public API. A recorder holds all that talks to
one database: its connections (the pooled writer, one pooled connection per read), the SQL of
every read and write, paging, rows streamed as they arrive, the retry on a connection the server
dropped, and each row's MAC (it needs the position, version and time only the append knows).
How a batch is appended differs most: one ``BEGIN IMMEDIATE`` transaction on SQLite, one
``wg_append`` call on Postgres. The eventsourcing library's split into an application and one
``ApplicationRecorder`` per backend (``insert_events``, ``select_events``,
``select_notifications``, ``max_notification_id``) is the model.

Rows cross between the two as the typed tuples below. They are ``NamedTuple``\\ s: a page's
rows are made from the driver's tuples in C (:data:`as_log_rows`), at a fraction of the decode
each row then costs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import msgspec

from wgstore.events.errors import DuplicateEventError, FencedError
from wgstore.events.records import Fence

if TYPE_CHECKING:
    pass

__all__ = [
    "AppendResult",
    "Batch",
    "LogRow",
    "Pending",
    "Recorder",
    "StoredTime",
    "StreamHead",
    "StreamRow",
    "StreamVersionMismatch",
    "fenced",
    "partly_stored",
]

StoredTime = str | int
"""``recorded_at`` as a recorder reads it (SQLite: UTC text; Postgres: microseconds since the
epoch); :meth:`Recorder.time_of` makes it a datetime. Readers convert each distinct value once:
a batch shares one time."""


class AppendResult(NamedTuple):
    """One appended (or, with ``existed``, already stored) event."""

    position: int
    version: int
    recorded_at: datetime
    hash: str
    existed: bool


class LogRow(NamedTuple):
    """One event as stored, read in log order (``select_notifications``, ``select_positions``)."""

    position: int
    stream_id: str
    version: int
    event_id: str
    type: str
    schema_version: int
    data: str
    metadata: str
    recorded_at: StoredTime
    hash: str


class StreamRow(NamedTuple):
    """One event of a stream read by version (``select_events``): a :class:`LogRow` without the
    stream id, which the reader knows (a column less to send and read per row)."""

    position: int
    version: int
    event_id: str
    type: str
    schema_version: int
    data: str
    metadata: str
    recorded_at: StoredTime
    hash: str


class StreamHead(NamedTuple):
    """A stream and its version (``select_streams``)."""

    stream_id: str
    version: int


# A driver's row tuples as typed rows, made in C (tuple.__new__ through partial; the NamedTuple's
# own __new__ is Python and costs several times more per row).
as_log_rows: Callable[[Iterable[Sequence[Any]]], Iterator[LogRow]] = partial(
    map, partial(tuple.__new__, LogRow)
)
as_stream_rows: Callable[[Iterable[Sequence[Any]]], Iterator[StreamRow]] = partial(
    map, partial(tuple.__new__, StreamRow)
)
as_results: Callable[[Iterable[Sequence[Any]]], Iterator[AppendResult]] = partial(
    map, partial(tuple.__new__, AppendResult)
)


class Pending(msgspec.Struct, frozen=True):
    """One event, encoded, on its way into the log (a Struct: cheap to build per event)."""

    event: Any
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


def partly_stored() -> DuplicateEventError:
    """The error of a retried multi-stream append whose batches are stored in part: an append
    is atomic, so some stored and some not means the ids were used elsewhere."""
    return DuplicateEventError(
        "some of the batches' event ids are already stored and others are not: give each new "
        "event a new id, or retry the whole original append unchanged"
    )


def fenced(fence: Fence, holder: str | None, epoch: int | None) -> FencedError | None:
    """The error for an append carrying ``fence`` when the lease row says ``holder``/``epoch``
    (both None: no row); None when the fence holds."""
    if holder == fence.holder and epoch == fence.epoch:
        return None
    return FencedError(fence.lease, fence.holder, fence.epoch, holder, epoch)


class Recorder(Protocol):
    """One database's way of writing and reading the log's rows.

    Methods raise the driver's own errors (the store turns them into wgstore's); a connection
    the server dropped is retried once, on a new one, inside the recorder.
    """

    columns: str
    """The SELECT list of a :class:`LogRow` (ids and JSON as text; ``recorded_at`` as
    :meth:`time_of` takes it), for readers that add columns of their own (verify)."""
    param: str
    """The driver's placeholder (``?`` or ``%s``)."""

    def time_of(self, stored: StoredTime) -> datetime:
        """The aware UTC ``recorded_at`` of a row's ``recorded_at`` column (as ``columns`` reads
        it). Readers call it once per distinct value: a batch shares one time."""
        ...

    def forget_stream_heads(self) -> None:
        """Drop what this recorder remembers of streams' heads (after rows left the log or came
        back outside its appends: ``wgstore archive`` and ``restore``)."""
        ...

    def append(
        self, stream_id: str, expected: int, pending: list[Pending], check_ids: bool
    ) -> list[AppendResult]:
        """Append one batch on the writer connection, all-or-nothing.

        ``expected``: a version >= 0, or -1 any, -2 no stream, -3 stream exists. With
        ``check_ids``, a batch whose ids are already stored in this stream in this order is
        returned as stored (``existed`` set) and nothing is written. A dropped connection is
        retried once on a new one, with ``check_ids`` (the ids were fixed before the first try).

        Raises:
            StreamVersionMismatch: the stream is not at ``expected``.
            DuplicateEventError: an id is stored, but not as this exact batch.
        """
        ...

    def append_many(
        self, batches: list[Batch], check_ids: bool, fence: Fence | None
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

    def select_events(
        self, stream_id: str, first: int, last: int
    ) -> Generator[StreamRow, None, None]:
        """The rows of ``stream_id`` from version ``first`` to ``last`` (inclusive), in order.

        Read in pages; where the driver can (Postgres, libpq 17+) each row is handed over as it
        arrives, and a page's connection is held until the page is read (closing the iterator
        cancels the rest of its query). A connection dropped mid-page loses and repeats no row.
        """
        ...

    def select_notifications(
        self,
        after: int,
        limit: int,
        types: Sequence[str],
        streams: str | tuple[str, ...] | None,
    ) -> Generator[LogRow, None, None]:
        """The rows after position ``after`` in log order: at most ``limit`` (all when < 0), of
        ``types`` only (all when empty), of streams whose id starts with ``streams`` only (all
        when None). Paged, streamed and retried as :meth:`select_events`."""
        ...

    def select_positions(self, positions: Sequence[int]) -> list[LogRow]:
        """The rows at ``positions``, in log order."""
        ...

    def max_stream_version(self, stream_id: str) -> int:
        """The version of the stream's last event, 0 when it has none."""
        ...

    def max_position(self) -> int:
        """The log's last position, 0 when it is empty."""
        ...

    def select_streams(self, prefix: str) -> list[StreamHead]:
        """Every stream whose id starts with ``prefix``, with its version, in order of first
        appearance."""
        ...

    def fetch(self, sql: str, params: Sequence[Any]) -> Sequence[tuple[Any, ...]]:
        """All the rows of one SELECT of the caller's own (``param`` placeholders), on a pooled
        connection, retried once on a new one when the server dropped it."""
        ...

    def close(self) -> None:
        """Close the writer connection (the store disposes of the engine)."""
        ...
