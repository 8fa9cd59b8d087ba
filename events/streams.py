"""The stream-id scheme, in one place: which stream holds a worker group's or a run's events.

``worker-group-<group id>`` holds one worker group's lifecycle; ``run-<run id>`` one run's.
Everything that names a stream (the store's readers, the projector, the executor, the CLI)
goes through these functions.

The two prefixes are wgstore's namespace (:data:`RESERVED_PREFIXES`): the folds, the projector
and the CLI read every stream under them as a group or a run. ``EventStore.append`` refuses an
event of another program's type there (:func:`check_reserved_append`); such events go in
streams of the program's own (``myapp-42``), where every reader shows them raw.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from wgstore.events.errors import InvalidArgumentError
from wgstore.events.records import NewEvent, UnknownEvent

__all__ = [
    "GROUP_STREAM_PREFIX",
    "RESERVED_PREFIXES",
    "RUN_STREAM_PREFIX",
    "check_reserved_append",
    "group_id_of",
    "group_stream",
    "run_stream",
]

GROUP_STREAM_PREFIX = "worker-group-"
"""Every worker group's stream id starts with this (``store.streams(GROUP_STREAM_PREFIX)``)."""
RUN_STREAM_PREFIX = "run-"
"""Every run's stream id starts with this."""
RESERVED_PREFIXES = (GROUP_STREAM_PREFIX, RUN_STREAM_PREFIX)
"""wgstore's stream namespace: only wgstore's own event types are appended under these."""


def group_stream(group_id: str) -> str:
    """The stream that holds the events of worker group ``group_id``."""
    return f"{GROUP_STREAM_PREFIX}{group_id}"


def run_stream(run_id: str) -> str:
    """The stream that holds the events of run ``run_id``."""
    return f"{RUN_STREAM_PREFIX}{run_id}"


def group_id_of(stream_id: str) -> str | None:
    """The worker group whose stream is ``stream_id``; None for any other stream."""
    if stream_id.startswith(GROUP_STREAM_PREFIX):
        return stream_id[len(GROUP_STREAM_PREFIX) :]
    return None


def _is_wgstore_type(event: Any) -> bool:
    return not isinstance(event, UnknownEvent) and type(event).__module__.startswith("wgstore.")


def check_reserved_append(stream_id: str, events: Any) -> Any:
    """``events``, once checked: in a stream under :data:`RESERVED_PREFIXES` only wgstore's own
    event types may be appended.

    wgstore's types are the classes of its own modules (``wgstore.*``), so a newer wgstore's
    types pass; another program's (docs/python-api.md's ``CheckpointPinned``, an
    :class:`~wgstore.events.UnknownEvent` copied from a log) do not. Returns ``events`` (as a
    list when it was an iterator that had to be read), for the append to encode.

    Raises:
        InvalidArgumentError: such an event, named with the stream and what to do instead.
    """
    if not stream_id.startswith(RESERVED_PREFIXES) or isinstance(events, NewEvent):
        return events  # not ours to check; append() refuses a bare NewEvent itself
    if not isinstance(events, Iterable):
        return events
    events = events if isinstance(events, Sequence) else list(events)
    for item in events:
        event = item.event if isinstance(item, NewEvent) else item
        if not _is_wgstore_type(event):
            name = getattr(event, "type", None) if isinstance(event, UnknownEvent) else None
            name = name or type(event).__qualname__
            prefix = next(p for p in RESERVED_PREFIXES if stream_id.startswith(p))
            raise InvalidArgumentError(
                f"cannot append {name} to {stream_id!r}: streams starting with "
                f"{' or '.join(repr(p) for p in RESERVED_PREFIXES)} are wgstore's own (its worker "
                f"groups and runs) and hold only wgstore's event types; append your events to a "
                f"stream of your own, e.g. {'myapp-' + stream_id[len(prefix) :]!r}"
            )
    return events
