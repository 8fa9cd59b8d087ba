"""When an event happened, as opposed to when the store recorded it. Pure.

wgstore's own writers append as things happen, so ``recorded_at`` is the time. A recorded Ray
Train run is not: ``RecordingCallback`` buffers Ray's hooks and writes them in batches (the
first after training starts, up to 30 s later), so every event of a batch has the flush's
``recorded_at``. Each carries the time Ray called the hook (metadata ``ray_time_ns``, with
``source="ray_train"``; ``source="ray_export"`` for what ``wgstore ingest ray-export`` read
from Ray's export events, written long after): that is the event's time wherever a state, a read model or a report
shows one. The log's order (positions, ``--at`` time travel) stays the store's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from wgstore.events.records import RecordedEvent

__all__ = ["RAY_EXPORT_SOURCE", "RAY_SOURCES", "RAY_TIME_KEY", "RAY_TRAIN_SOURCE", "event_time"]

RAY_TIME_KEY = "ray_time_ns"
"""The metadata key of the time Ray called the hook, in nanoseconds since the epoch."""

RAY_TRAIN_SOURCE = "ray_train"
"""``metadata["source"]`` of the events ``RecordingCallback`` records from Ray Train."""

RAY_EXPORT_SOURCE = "ray_export"
"""``metadata["source"]`` of the events ``wgstore ingest ray-export`` reads from Ray's export
events."""

RAY_SOURCES = frozenset({RAY_TRAIN_SOURCE, RAY_EXPORT_SOURCE})
"""``metadata["source"]`` of events recorded from Ray: the callback's and the export's. Ray
Train's controller runs their groups, never a wgstore executor."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def event_time(record: RecordedEvent) -> datetime:
    """When ``record``'s event happened: Ray's time for an event recorded from Ray Train
    (``source`` in :data:`RAY_SOURCES` with an integer ``ray_time_ns``), else ``recorded_at``."""
    metadata = record.metadata
    ray_ns = metadata.get(RAY_TIME_KEY)
    if type(ray_ns) is int and metadata.get("source") in RAY_SOURCES:
        return _EPOCH + timedelta(microseconds=ray_ns // 1000)
    return record.recorded_at
