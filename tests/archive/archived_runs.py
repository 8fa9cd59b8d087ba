"""A log of ended and live runs for the archive tests, and what to compare before and after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from run_scenarios import aborted, finished_after_a_retry, running

from wgstore.events import EventStore
from wgstore.events.archive import LogArchived
from wgstore.projections.archiving import ArchivePlan, plan_archive

ENDED = ("fin-a", "fin-b", "abt-a")
"""The runs of :func:`fleet` that have ended (and are not resumable)."""
LIVE = "live-a"


def fleet(store: EventStore) -> None:
    """Two finished runs, an aborted one and a live one, their events interleaved with each
    other's (each scenario appends its own, one after another; the live one last)."""
    finished_after_a_retry(store, "fin-a")
    aborted(store, "abt-a")
    running(store, LIVE)
    finished_after_a_retry(store, "fin-b")


def plan_everything(store: EventStore) -> ArchivePlan:
    """Every ended run, whenever it ended."""
    return plan_archive(store, ended_before=datetime.now(UTC) + timedelta(days=1))


def log_rows(store: EventStore) -> list[tuple[Any, ...]]:
    """Every live row, as verify reads it."""
    return list(
        store.fetch_rows(
            f"SELECT {store.recorder.columns}, log_hash, mac FROM wg_events ORDER BY position",
            (),
        )
    )


def many_finished(store: EventStore, count: int, prefix: str = "fin") -> list[str]:
    """``count`` finished runs (each with a retried attempt), their ids."""
    from run_scenarios import finished_after_a_retry

    ids = [f"{prefix}{i:03d}" for i in range(count)]
    for run_id in ids:
        finished_after_a_retry(store, run_id)
    return ids


def where_every_event_is(store: EventStore) -> dict[int, int]:
    """Each position and in how many places it is: the live log, and every file of every
    batch whose ``LogArchived`` is in the log and not abandoned (files read and checked
    against their manifests)."""
    from wgstore.events.archive import ARCHIVE_STREAM, ArchiveAbandoned
    from wgstore.events.archive_files import ArchiveLocation
    from wgstore.events.archive_manifest import decode_manifest, manifest_sha256

    places: dict[int, int] = {}
    for row in log_rows(store):
        places[int(row[0])] = places.get(int(row[0]), 0) + 1
    batches: dict[str, LogArchived] = {}
    for record in store.read_stream(ARCHIVE_STREAM):
        if isinstance(record.event, LogArchived):
            batches[record.event.batch_id] = record.event
        elif isinstance(record.event, ArchiveAbandoned):
            batches.pop(record.event.batch_id)
    restored = {
        (r.event.batch_id, r.event.run_id)
        for r in store.read_stream(ARCHIVE_STREAM)
        if type(r.event).__name__ == "RunRestored"
    }
    for batch_id, event in batches.items():
        location = ArchiveLocation(event.location)
        data = location.read_bytes(location.manifest_file(batch_id))
        assert manifest_sha256(data) == event.manifest_sha256
        for file in decode_manifest(data).files:
            if (batch_id, file.run_id) in restored:
                continue
            for row in location.read_rows(file.path, file.sha256):
                places[row.position] = places.get(row.position, 0) + 1
    return places
