"""The ingester on real export files and real SQLite and Postgres: each line once, whatever the
files do (a torn last line, a line that is not JSON, rotation, copytruncate) and whoever else
reads them (a second ingester at the same time, a restart holding lines for the callback)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ingest.exported import TRAIN_STATE, copy_export
from wgstore.events import EventStore
from wgstore.events.ray_cluster import READ_STREAM_PREFIX, RayExportRead
from wgstore.orchestration.ray_export import Ingester

LATE = lambda: 10**20  # noqa: E731 - a clock past every run's claim


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    with EventStore.open(store_url) as opened:
        yield opened


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return copy_export(tmp_path)


def _streams(store: EventStore, prefix: str = "") -> dict[str, list[str]]:
    """Every stream (but the reads) and its event types, in order."""
    return {
        stream_id: [r.type for r in store.read_stream(stream_id)]
        for stream_id, _ in store.streams(prefix)
        if not stream_id.startswith(READ_STREAM_PREFIX)
    }


def _reads(store: EventStore) -> list[RayExportRead]:
    reads = []
    for stream_id, _ in store.streams(READ_STREAM_PREFIX):
        reads += [r.event for r in store.read_stream(stream_id)]
    return reads


def _ingest(store: EventStore, folder: Path, **options: object) -> Ingester:
    ingester = Ingester(store, [folder], claim_wait_s=0, clock_ns=LATE, **options)  # type: ignore[arg-type]
    ingester.run_once()
    return ingester


@pytest.fixture
def reference(tmp_path: Path, folder: Path) -> dict[str, list[str]]:
    """The streams one ingester makes of the fixture files, in a store of its own."""
    with EventStore.open(f"sqlite:///{tmp_path / 'reference.db'}") as store:
        _ingest(store, folder)
        return _streams(store)


def test_a_second_read_of_the_same_files_records_nothing(store: EventStore, folder: Path) -> None:
    first = _ingest(store, folder).stats
    assert first.lines == 31 and first.events > 0 and not first.bad_lines
    head = store.head()
    again = _ingest(store, folder).stats
    assert again.lines == 0 and again.events == 0 and store.head() == head


def test_two_ingesters_at_once_record_each_line_once(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    ingesters = [
        Ingester(store, [folder], claim_wait_s=0, clock_ns=LATE, batch_lines=1) for _ in range(2)
    ]
    threads = [threading.Thread(target=i.run_once) for i in ingesters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert _streams(store) == reference
    assert sum(r.lines for r in _reads(store)) == 31
    assert sum(i.stats.lines for i in ingesters) == 31


def test_a_torn_last_line_waits_until_it_is_whole(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    path = folder / TRAIN_STATE.name
    whole = path.read_bytes()
    cut = whole.rindex(b"\n", 0, len(whole) - 1) + 40  # 40 bytes into the last line
    path.write_bytes(whole[:cut])
    assert _ingest(store, folder).stats.lines == 30
    path.write_bytes(whole)
    assert _ingest(store, folder).stats.lines == 1
    assert _streams(store) == reference


def test_a_line_that_is_not_an_export_event_is_reported_with_its_place_and_skipped(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    path = folder / TRAIN_STATE.name
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3:3] = [b"{not json\n", b"[1, 2]\n", b'{"source_type": "EXPORT_TRAIN_RUN"}\n']
    path.write_bytes(b"".join(lines))
    reported: list[str] = []
    stats = _ingest(store, folder, report=reported.append).stats
    assert len(stats.bad_lines) == 3 and reported == stats.bad_lines
    assert [text.split(": ")[0] for text in reported] == [f"{path}:{n}" for n in (4, 5, 6)]
    assert "not JSON" in reported[0]
    assert _streams(store) == reference
    read = next(r for r in _reads(store) if r.bad_lines)
    assert len(read.bad_lines) == 3


def test_a_rotated_file_is_not_read_again_and_its_successor_is_read(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    path = folder / TRAIN_STATE.name
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:10]))
    _ingest(store, folder)
    path.rename(folder / (TRAIN_STATE.name + ".1"))  # as RotatingFileHandler does
    path.write_bytes(b"".join(lines[10:]))
    assert _ingest(store, folder).stats.lines == 13
    assert _streams(store) == reference


def test_a_file_truncated_and_written_again_is_a_new_file(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    path = folder / TRAIN_STATE.name
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:10]))
    _ingest(store, folder)
    path.write_bytes(b"")  # copytruncate: emptied in place
    assert _ingest(store, folder).stats.lines == 0
    path.write_bytes(b"".join(lines[10:]))
    assert _ingest(store, folder).stats.lines == 13
    assert _streams(store) == reference


def test_lines_held_for_the_callback_survive_the_ingester_and_are_mapped_by_the_next(
    store: EventStore, folder: Path, reference: dict[str, list[str]]
) -> None:
    early = Ingester(store, [folder], claim_wait_s=45, clock_ns=lambda: 0)
    stats = early.run_once()
    assert stats.lines == 31 and stats.held == 23  # every Train line; nodes and jobs mapped
    assert not _streams(store, "run-")
    later = Ingester(store, [folder], claim_wait_s=45, clock_ns=LATE)  # another process
    assert later.run_once().lines == 0
    assert _streams(store) == reference
