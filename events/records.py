"""What goes into the store (``NewEvent``) and what comes out (``RecordedEvent``)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["ANY", "NO_STREAM", "STREAM_EXISTS", "ExpectedVersion", "NewEvent", "RecordedEvent"]


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
        event_id: the idempotency key; a new UUID4 when not given.
        metadata: merged over the store's own metadata (host, pid, wgstore version);
            ``causation_id``, ``correlation_id`` and ``command_id`` are the conventional keys.
    """

    event: Any
    event_id: uuid.UUID | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored: the typed event plus its place in the log."""

    position: int
    stream_id: str
    version: int
    event_id: uuid.UUID
    type: str
    schema_version: int
    event: Any
    metadata: Mapping[str, Any]
    recorded_at: datetime
    hash: str
