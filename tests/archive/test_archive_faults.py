"""Nothing lost, whatever happens to an archive: killed with SIGKILL at random moments, a
location that refuses the files, a run that moves on while its batch is written, a second
archive at the same time. Every event is live or in a complete, verified file (both only
until the batch commits), and a rerun finishes the job (both backends)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from archived_runs import log_rows, many_finished, plan_everything, where_every_event_is

import wgstore.projections.archiving as archiving
from tests.waiting import wait_until
from wgstore.events import EventStore, StoreUnavailableError
from wgstore.events.archive import ARCHIVE_STREAM, ArchiveAbandoned, LogArchived
from wgstore.events.archive_log import archived_run_ids
from wgstore.events.run import RunAborted
from wgstore.events.streams import run_stream
from wgstore.projections.archiving import ArchiveRunsBusyError, archive_runs, plan_archive

DRIVER = Path(__file__).with_name("archive_driver.py")


def _kill_point(
    store: EventStore, location: str, *, mid_batch: bool, more: int
) -> Callable[[], bool]:
    """When to kill the archiver: right after it named one more batch (``LogArchived``, its
    delete not yet committed), or, ``mid_batch``, once ``more`` files were written."""
    if mid_batch:
        files = _files(location)
        return lambda: _files(location) >= files + more
    before = _archived_batches(store)
    return lambda: _archived_batches(store) > before


def _files(location: str) -> int:
    """Files under the archive location (the run files, manifests and partial writes)."""
    folder = Path(location)
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _archived_batches(store: EventStore) -> int:
    return sum(isinstance(r.event, LogArchived) for r in store.read_stream(ARCHIVE_STREAM))


def test_sigkill_at_random_moments_loses_nothing_and_a_rerun_finishes(
    store: EventStore, store_url: str, tmp_path: Path
) -> None:
    runs = many_finished(store, 24)
    positions = {int(row[0]) for row in log_rows(store)}
    location = str(tmp_path / "archive")
    rng = random.Random(43)
    kills = 0
    for round_ in range(4):
        reached = _kill_point(store, location, mid_batch=round_ % 2 == 1, more=rng.randint(1, 4))
        child = subprocess.Popen([sys.executable, str(DRIVER), store_url, location])
        try:
            wait_until(
                lambda child=child, reached=reached: child.poll() is not None or reached(),
                timeout_s=120,
                what="the archiver to reach its kill point",
            )
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                kills += 1
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        places = where_every_event_is(store)
        # every event of before is somewhere; in two places only while its batch commits
        assert positions <= set(places)
        assert all(count <= 2 for count in places.values())
    assert kills >= 1
    plan = plan_everything(store)
    archive_runs(store, location, plan)
    places = where_every_event_is(store)
    assert positions <= set(places)
    assert all(places[p] == 1 for p in positions), "each event in exactly one place"
    assert set(archived_run_ids(store)) == set(runs)
    assert not [r for r in log_rows(store) if r[1] == run_stream(runs[0])]


def test_a_location_that_refuses_the_files_deletes_nothing(
    store: EventStore, tmp_path: Path
) -> None:
    many_finished(store, 3)
    before = log_rows(store)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreUnavailableError, match="cannot write"):
        archive_runs(store, str(blocker / "archive"), plan_everything(store))
    assert log_rows(store) == before
    assert not list(store.read_stream(ARCHIVE_STREAM))


def test_a_run_that_moves_on_while_its_batch_is_written_is_abandoned(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = many_finished(store, 1)
    real_commit = archiving.commit_batch

    def late_event_then_commit(*args: Any, **kwargs: Any) -> int:
        store.append(run_stream(run_id), [RunAborted(reason="a late event")])
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(archiving, "commit_batch", late_event_then_commit)
    location = tmp_path / "archive"
    result = archive_runs(store, str(location), plan_everything(store))
    assert result.runs == [] and len(result.abandoned) == 1
    events = [r.event for r in store.read_stream(ARCHIVE_STREAM)]
    assert isinstance(events[-1], ArchiveAbandoned) and "changed since" in events[-1].reason
    assert not list(location.rglob("*.parquet")), "the abandoned batch's files are removed"
    assert store.stream_version(run_stream(run_id)) > 0
    assert archived_run_ids(store) == {}


def test_a_second_archive_at_the_same_time_loses_the_race_and_removes_its_files(
    store: EventStore, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many_finished(store, 2)
    first = tmp_path / "first"
    second = tmp_path / "second"
    real_write = archiving._write_batch
    other = EventStore.open(store_url)

    def the_other_one_goes_first(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(archiving, "_write_batch", real_write)
        plan = plan_archive(other, ended_before=datetime.now(UTC) + timedelta(days=1))
        archive_runs(other, str(first), plan, batch_runs=1)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(archiving, "_write_batch", the_other_one_goes_first)
    try:
        with pytest.raises(ArchiveRunsBusyError, match="another `wgstore archive`"):
            archive_runs(store, str(second), plan_everything(store))
    finally:
        other.close()
    assert not list(second.rglob("*.parquet"))
    places = where_every_event_is(store)
    assert all(count == 1 for count in places.values())
