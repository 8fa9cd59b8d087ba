"""Errors raised by wgstore. Every message says what went wrong and what to do about it.

The tree::

    WgstoreError
     └─ EventStoreError
         ├─ ConcurrencyError        the stream was not at the expected version
         ├─ FencedError             the append's lease has passed to another holder
         ├─ DuplicateEventError     an event id is already stored somewhere else
         ├─ UnknownEventTypeError   an event type that is not registered
         ├─ RegistrationError       a type name or upcaster registered twice (also a ValueError)
         ├─ EventEncodeError        an event whose fields cannot be stored as JSON
         ├─ InvalidArgumentError    a bad argument (stream id, version, position); a ValueError
         ├─ EventDecodeError        stored data that no longer decodes (names stream and position)
         ├─ StoreUnavailableError   the database cannot be reached (the URL's password is masked)
         ├─ StoreFullError          the database's disk (or quota) is full: nothing was written
         ├─ ImmutableEventError     an UPDATE or DELETE on the log was refused
         └─ SchemaVersionError      the database is not migrated to head

Driver and SQLAlchemy errors are translated in one place (``wgstore.events._translate``) and
chained with ``raise ... from``. Every class pickles, so errors can cross Ray actor boundaries.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConcurrencyError",
    "DuplicateEventError",
    "EventDecodeError",
    "EventEncodeError",
    "EventStoreError",
    "FencedError",
    "ImmutableEventError",
    "InvalidArgumentError",
    "RegistrationError",
    "SchemaVersionError",
    "StoreFullError",
    "StoreUnavailableError",
    "UnknownEventTypeError",
    "WgstoreError",
]


class WgstoreError(Exception):
    """Base class for every error wgstore raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[WgstoreError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = Exception.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class EventStoreError(WgstoreError):
    """Base class for errors of the event store."""


class ConcurrencyError(EventStoreError):
    """The stream was not at the version the writer expected: someone else appended first."""

    def __init__(self, stream_id: str, expected: object, actual: int) -> None:
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream_id!r} is at version {actual}, but the append expected {expected}: "
            "another writer appended first. Read the stream again, decide again, and retry "
            "with expected_version set to the version you read."
        )


class FencedError(EventStoreError):
    """The append carried a lease (a fencing token) that its holder no longer has.

    The database checked the lease row in the append's own transaction and found another holder
    or a later epoch: the lease passed to someone else (after it expired, say, while this
    process was paused). Nothing was written. The process must stop acting for that lease.
    """

    def __init__(
        self, lease: str, holder: str, epoch: int, now_holder: str | None, now_epoch: int | None
    ) -> None:
        self.lease = lease
        self.holder = holder
        self.epoch = epoch
        self.now_holder = now_holder
        self.now_epoch = now_epoch
        now = (
            f"it is now held by {now_holder} at epoch {now_epoch}"
            if now_holder is not None
            else "it is held by nobody now"
        )
        super().__init__(
            f"lease {lease!r} was held by {holder} at epoch {epoch}, but {now}: this process "
            "lost the lease, nothing was written, and it must stop acting for it"
        )


class DuplicateEventError(EventStoreError):
    """An event id in the batch is already stored in another stream or at another place."""


class UnknownEventTypeError(EventStoreError):
    """An event type name or class that is not registered."""


class RegistrationError(EventStoreError, ValueError):
    """An event type name, or an upcaster, registered twice for different things."""


class EventEncodeError(EventStoreError):
    """An event whose fields cannot be stored as JSON. Nothing was written."""


class InvalidArgumentError(EventStoreError, ValueError):
    """An argument the store cannot use: a stream id, version, position or limit out of range.

    Also a ``ValueError``, so code that catches bad arguments the usual Python way still does.
    Raised the same way on both backends, before anything reaches the database.
    """


class EventDecodeError(EventStoreError):
    """Stored data that no longer decodes into its event type."""

    def __init__(self, message: str, *, stream_id: str, position: int) -> None:
        self.stream_id = stream_id
        self.position = position
        super().__init__(f"event at position {position} in stream {stream_id!r}: {message}")


class StoreUnavailableError(EventStoreError):
    """The database cannot be reached, or the URL is not a usable database URL."""


class StoreFullError(EventStoreError):
    """The database could not write because its disk, or the space it may use, is full.

    Not :class:`StoreUnavailableError`: the database is there and answers (reads still work);
    retrying does not help until space is freed. The write was rolled back.
    """


class ImmutableEventError(EventStoreError):
    """The log refused an UPDATE or DELETE: stored events never change."""


class ArchivedStreamError(ImmutableEventError):
    """The log refused a new event of an archived stream (``wgstore restore RUN`` first)."""


class SchemaVersionError(EventStoreError):
    """The database schema is not at the revision this code needs."""
