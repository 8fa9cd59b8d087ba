"""What goes into the store (``NewEvent``) and what comes out (``RecordedEvent``)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic

import msgspec
from typing_extensions import TypeIs, TypeVar

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AppendRequest",
    "ExpectedVersion",
    "Fence",
    "NewEvent",
    "RecordedEvent",
    "UnknownEvent",
    "is_record_of",
]


class _StreamState(enum.Enum):
    ANY = "ANY"
    NO_STREAM = "NO_STREAM"
    STREAM_EXISTS = "STREAM_EXISTS"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


ANY = _StreamState.ANY
"""Append whatever version the stream is at."""
NO_STREAM = _StreamState.NO_STREAM
"""Append only if the stream has no events yet."""
STREAM_EXISTS = _StreamState.STREAM_EXISTS
"""Append only if the stream already has at least one event."""

ExpectedVersion = int | _StreamState


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append, with a fixed id (for idempotent retries) and extra metadata.

    Args:
        event: an instance of a registered event type.
        event_id: the idempotency key; a new time-ordered UUID (version 7) when not given.
        metadata: merged over the store's own metadata (host, pid, wgstore version);
            ``causation_id``, ``correlation_id`` and ``command_id`` are the conventional keys.
    """

    event: Any
    event_id: uuid.UUID | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fence:
    """A lease as a fencing token, carried by an append (``append(..., fence=...)``).

    The database refuses the append, in its own transaction, unless the lease row ``lease``
    (``wg_run_leases.run_id``) still names ``holder`` at ``epoch``: a process that lost its
    lease cannot write, however long it was paused. :func:`wgstore.events.leases.acquire_lease`
    hands one out (``Lease.fence``).
    """

    lease: str
    holder: str
    epoch: int


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One stream's part of an atomic multi-stream append (:meth:`EventStore.append_many`)."""

    stream_id: str
    events: Sequence[Any]
    expected_version: ExpectedVersion = _StreamState.ANY


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """A stored event whose type this process does not know (no class is registered for it).

    The store is general: any process may append its own event types (docs/python-api.md's
    ``CheckpointPinned``), and a reader that never imported them still reads the log. Such an
    event comes back as ``RecordedEvent(event=UnknownEvent(...))`` instead of raising; readers
    show it raw or skip it, and the folds of the built-in streams step over it. Register the type
    (import the module that defines it) to get the typed event instead.

    Attributes:
        type: the stored type name (``wg_events.event_type``).
        schema_version: the stored schema version.
        data: the payload as stored, decoded from JSON (a dict for any event appended through
            the store); the raw text when it is not valid JSON.
    """

    type: str
    schema_version: int
    data: Any

    def __str__(self) -> str:
        return f"{self.type} (not registered here)"


E = TypeVar("E", covariant=True, default=object)
"""The event type a :class:`RecordedEvent` holds: ``object`` when not named, so a reader names
the type (``isinstance`` on ``.event``, or :func:`is_record_of`) before it reads a field."""
_T = TypeVar("_T")


class RecordedEvent(msgspec.Struct, Generic[E], frozen=True, kw_only=True):
    """An event as stored: the typed event plus its place in the log.

    ``event`` is an instance of the registered class of ``type``, or an :class:`UnknownEvent`
    when no class is registered under that name in the reading process. The record is generic
    in its event: ``RecordedEvent[WorkerReported]`` is what a reader holds once it knows the
    type (:func:`is_record_of`); a bare ``RecordedEvent`` is ``RecordedEvent[object]``, what the
    store's reads return, and is constructed as such (the parameter exists for the checker only;
    covariant: a ``RecordedEvent[WorkerReported]`` is a ``RecordedEvent``).

    A frozen ``msgspec.Struct`` (built in C: a fifth of a frozen dataclass's cost, which every
    append and every read pays per event); construct it with keywords.
    """

    position: int
    stream_id: str
    version: int
    event_id: uuid.UUID
    type: str
    schema_version: int
    event: E
    metadata: Mapping[str, Any]
    recorded_at: datetime
    hash: str


def is_record_of(record: RecordedEvent, cls: type[_T]) -> TypeIs[RecordedEvent[_T]]:
    """Whether ``record`` holds an event of class ``cls``; for the checker, narrows the record to
    ``RecordedEvent[cls]`` (``isinstance(record.event, cls)`` narrows the event only)."""
    return isinstance(record.event, cls)
