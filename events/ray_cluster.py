"""Event types of what Ray's export events say about a cluster, and of reading them.

``wgstore ingest ray-export`` (:mod:`wgstore.orchestration.ray_export`) turns the JSON lines Ray
writes to ``<session>/logs/export_events/`` into the log. Train runs and attempts become the same
``run-*`` and ``worker-group-*`` events the recording callback writes; what Ray says of nodes and
driver jobs becomes facts of their own, on ``ray-node-<node id>`` and
``ray-job-<job id>-<start ms>`` (ids in Ray's hex form, as Ray's state API shows them). What
was read of each export file is
``RayExportRead`` on ``ray-export-file-<file id>``, appended in the same transaction as what the
lines produced: a file is read exactly once, however many ingesters read it and wherever one is
killed. A line of a newer export schema (or with fields this wgstore does not know) is kept as
Ray wrote it, ``RayExportEventKept``, and mapped as far as it can be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wgstore.events.registry import event_type

__all__ = [
    "JOB_STREAM_PREFIX",
    "KEPT_STREAM_PREFIX",
    "NODE_STREAM_PREFIX",
    "READ_STREAM_PREFIX",
    "RayExportEventKept",
    "RayExportRead",
    "RayJobEnded",
    "RayJobStarted",
    "RayNodeDied",
    "RayNodeStarted",
    "job_stream",
    "kept_stream",
    "node_stream",
    "read_stream_of",
]

NODE_STREAM_PREFIX = "ray-node-"
JOB_STREAM_PREFIX = "ray-job-"
READ_STREAM_PREFIX = "ray-export-file-"
KEPT_STREAM_PREFIX = "ray-export-kept-"


def node_stream(node_id: str) -> str:
    """The stream of a Ray node's facts (``node_id`` in hex)."""
    return NODE_STREAM_PREFIX + node_id


def job_stream(job_id: str, start_time_ms: int) -> str:
    """The stream of a Ray driver job's facts: ``job_id`` in hex and when the job started (a
    job id is a counter of its cluster, ``01000000`` the first job of every cluster, so the id
    alone would merge the jobs of several clusters, or of one cluster started again)."""
    return f"{JOB_STREAM_PREFIX}{job_id}-{start_time_ms}"


def read_stream_of(file_id: str) -> str:
    """The stream of what was read of one export file (``file_id``: its first line's digest)."""
    return READ_STREAM_PREFIX + file_id


def kept_stream(source_type: str) -> str:
    """The stream of kept export events of one source type (``EXPORT_TRAIN_RUN``, ...)."""
    return KEPT_STREAM_PREFIX + source_type.lower().replace("_", "-")


@event_type("RayNodeStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayNodeStarted:
    """Ray's GCS saw a node alive (``EXPORT_NODE``, state ``ALIVE``).

    ``start_time_ms``: Ray's wall clock in ms; ``resources_total`` as Ray reports them.
    """

    node_id: str
    node_ip: str = ""
    node_name: str = ""
    is_head_node: bool = False
    start_time_ms: int = 0
    resources_total: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@event_type("RayNodeDied", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayNodeDied:
    """Ray's GCS marked a node dead (``EXPORT_NODE``, state ``DEAD``): when and why, as Ray says
    (``reason``: ``EXPECTED_TERMINATION``, ``UNEXPECTED_TERMINATION``, ``AUTOSCALER_DRAIN_*``...)."""

    node_id: str
    end_time_ms: int = 0
    reason: str = ""
    reason_message: str = ""


@event_type("RayJobStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayJobStarted:
    """A Ray driver job (``EXPORT_DRIVER_JOB``): its entrypoint and where its driver ran."""

    job_id: str
    entrypoint: str = ""
    driver_ip: str = ""
    driver_pid: int = 0
    start_time_ms: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)


@event_type("RayJobEnded", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayJobEnded:
    """A Ray driver job ended (``EXPORT_DRIVER_JOB`` with ``is_dead``)."""

    job_id: str
    end_time_ms: int = 0


@event_type("RayExportRead", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayExportRead:
    """What one ingester read of one export file, in the transaction of what it produced.

    ``offset`` is where the next read starts (bytes, after the last whole line taken);
    ``line`` the number of lines taken so far; ``path`` where the file was when it was read
    (Ray renames a file it rotates: the file is known by ``file_id``, its first line's SHA-256).
    ``bad_lines``: lines of this read that were not an export event (reported, not mapped).
    """

    file_id: str
    path: str
    offset: int
    line: int
    lines: int
    events: int = 0
    bad_lines: tuple[str, ...] = ()
    ingester: str = ""
    held: tuple[Mapping[str, Any], ...] = ()
    """Lines of runs the recording callback may still record, as Ray wrote them: mapped by the
    next read (``wgstore ingest ray-export --claim-wait-s``), wherever it runs."""


@event_type("RayExportEventKept", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RayExportEventKept:
    """An export event kept as Ray wrote it: its schema is newer than this wgstore knows, or it
    has fields this wgstore does not map (``unknown_fields``). Mapped as far as it could be."""

    event_id: str
    source_type: str
    timestamp: int
    schema_version: int
    unknown_fields: tuple[str, ...] = ()
    event_data: Mapping[str, Any] = field(default_factory=dict)
