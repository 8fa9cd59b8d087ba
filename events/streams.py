"""The stream-id scheme, in one place: which stream holds a worker group's or a run's events.

``worker-group-<group id>`` holds one worker group's lifecycle; ``run-<run id>`` one run's.
Everything that names a stream (the store's readers, the projector, the executor, the CLI)
goes through these functions.
"""

from __future__ import annotations

__all__ = [
    "GROUP_STREAM_PREFIX",
    "RUN_STREAM_PREFIX",
    "group_id_of",
    "group_stream",
    "run_stream",
]

GROUP_STREAM_PREFIX = "worker-group-"
"""Every worker group's stream id starts with this (``store.streams(GROUP_STREAM_PREFIX)``)."""
RUN_STREAM_PREFIX = "run-"
"""Every run's stream id starts with this."""


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
