"""A retention bound for the archive itself: a batch's Parquet files are deleted only when
asked (a dry run lists them), the deletion is in the log before it happens, the manifests stay,
and a run whose files were dropped says so instead of being restored (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from archived_runs import ENDED, fleet, plan_everything

from wgstore.events import EventStore
from wgstore.events.archive import ARCHIVE_STREAM, ArchiveFilesDropped
from wgstore.projections.archiving import archive_runs, drop_archived_files, restore_run


def test_files_are_dropped_only_when_asked_and_the_manifests_stay(
    store: EventStore, tmp_path: Path
) -> None:
    fleet(store)
    later = datetime.now(UTC) + timedelta(days=1)
    location = tmp_path / "archive"
    archive_runs(store, str(location), plan_everything(store))
    files = sorted(location.rglob("*.parquet"))
    assert len(files) == len(ENDED)
    # nothing archived before an hour ago: nothing to drop
    assert drop_archived_files(store, archived_before=datetime.now(UTC) - timedelta(hours=1)) == []
    (listed,) = drop_archived_files(store, archived_before=later)  # a dry run by default
    assert len(listed.files) == len(ENDED) and listed.bytes == sum(f.stat().st_size for f in files)
    assert sorted(location.rglob("*.parquet")) == files
    (dropped,) = drop_archived_files(store, archived_before=later, dry_run=False)
    assert dropped.batch_id == listed.batch_id
    assert not list(location.rglob("*.parquet"))
    assert len(list(location.glob("manifests/*.json"))) == 1, "the manifest stays"
    last = list(store.read_stream(ARCHIVE_STREAM))[-1].event
    assert isinstance(last, ArchiveFilesDropped) and last.batch_id == dropped.batch_id
    assert drop_archived_files(store, archived_before=later, dry_run=False) == []
    with pytest.raises(ValueError, match="dropped on purpose"):
        restore_run(store, ENDED[0])
