"""Following the log: the events appended after a position, as they come (``wgstore events -f``)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator

from wgstore.events import EventStore, RecordedEvent

__all__ = ["follow_events"]


def follow_events(
    store: EventStore,
    after: int,
    *,
    streams: Collection[str] | None = None,
    types: Collection[str] = (),
    stop_after_s: float | None = None,
) -> Iterator[RecordedEvent]:
    """Yield each event appended after position ``after``, oldest first, as it is committed.

    Args:
        store: the store to follow (it wakes on Postgres ``NOTIFY``, else polls).
        after: the position already seen; only later events are yielded.
        streams: only events of these streams (``None``: every stream).
        types: only events of these types (empty: every type).
        stop_after_s: stop after this many seconds; ``None`` follows until the caller stops.
    """
    deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
    while deadline is None or time.monotonic() < deadline:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        head = store.wait_for_new(after, timeout_s=wait)
        if head <= after:
            continue
        fresh = [
            record
            for record in store.read_all(after=after, types=list(types) or None)
            if record.position <= head
        ]
        after = head
        yield from (r for r in fresh if streams is None or r.stream_id in streams)
