"""The export events of ``tests/ingest/fixtures`` (one run of ``ray_export_driver``), and an
in-memory log for the mapper's tests (no database)."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wgstore.events.records import RecordedEvent
from wgstore.events.registry import REGISTRY
from wgstore.orchestration.ray_export.files import parse_line
from wgstore.orchestration.ray_export.mapping import ExportEvent, MappedBatch

FIXTURES = Path(__file__).parent / "fixtures"
TRAIN_STATE = FIXTURES / "event_EXPORT_TRAIN_STATE.log"
NODES = FIXTURES / "event_EXPORT_NODE.log"
JOBS = FIXTURES / "event_EXPORT_DRIVER_JOB.log"


RUN_FIELDS = (
    "id",
    "name",
    "job_id",
    "controller_actor_id",
    "status",
    "status_detail",
    "start_time_ns",
    "end_time_ns",
    "controller_log_file_path",
    "framework_versions",
)
"""The fields of Ray's ``TrainRun`` an ingested run gives back equal (``run_settings`` differs in
form: the export writes proto JSON where the state actor has pydantic's)."""
ATTEMPT_FIELDS = (
    "run_id",
    "attempt_id",
    "status",
    "status_detail",
    "start_time_ns",
    "end_time_ns",
    "resources",
)
"""The fields of Ray's ``TrainRunAttempt`` an ingested attempt gives back equal (all but its
workers, compared by :data:`WORKER_FIELDS`)."""
WORKER_FIELDS = (
    "world_rank",
    "local_rank",
    "node_rank",
    "actor_id",
    "node_id",
    "node_ip",
    "pid",
    "gpu_ids",
    "status",
    "resources",
    "log_file_path",
)
"""Every field of Ray's ``TrainWorker``."""


def copy_export(parent: Path) -> Path:
    """The fixture's export files copied into ``parent/export_events`` (to change them)."""
    target = parent / "export_events"
    target.mkdir()
    for path in FIXTURES.glob("event_*.log"):
        shutil.copy(path, target / path.name)
    return target


def ray_state() -> dict[str, Any]:
    """What Ray's state actor held at the end of the fixture's runs, and the cluster's nodes."""
    return json.loads((FIXTURES / "ray_state.json").read_text())  # type: ignore[no-any-return]


def export_events(path: Path) -> list[ExportEvent]:
    """Every export event of one fixture file, in order."""
    events = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        parsed = parse_line(line, f"{path.name}:{number}")
        assert isinstance(parsed, ExportEvent), parsed
        events.append(parsed)
    return events


class MemoryLog:
    """Streams as lists of recorded events: the mapper's loader, and where a batch commits."""

    def __init__(self) -> None:
        self.streams: dict[str, list[RecordedEvent]] = {}
        self.position = 0

    def load(self, stream_id: str) -> Sequence[RecordedEvent]:
        return list(self.streams.get(stream_id, ()))

    def commit(self, batch: MappedBatch) -> None:
        """Append a batch as the store would (checking its expected versions)."""
        for stream_id, events in batch.events.items():
            stored = self.streams.setdefault(stream_id, [])
            assert len(stored) == batch.expected[stream_id], stream_id
            for new in events:
                self.position += 1
                stored.append(
                    RecordedEvent(
                        position=self.position,
                        stream_id=stream_id,
                        version=len(stored) + 1,
                        event_id=new.event_id or uuid.uuid4(),
                        type=REGISTRY.by_class(type(new.event)).name,
                        schema_version=1,
                        event=new.event,
                        metadata=dict(new.metadata),
                        recorded_at=datetime.now(UTC),
                        hash="",
                    )
                )

    def types(self, stream_id: str) -> list[str]:
        return [r.type for r in self.streams.get(stream_id, ())]
