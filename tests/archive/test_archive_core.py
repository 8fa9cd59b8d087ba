"""Archive ended runs to Parquet and restore one (both backends): the live log loses exactly
the archived runs' rows, the files hold them as they were, the cut is in the log, restore puts
every row back where it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from archived_runs import ENDED, LIVE, fleet, log_rows, plan_everything

from wgstore.events import ArchivedStreamError, EventStore
from wgstore.events.archive import ARCHIVE_STREAM, LogArchived, RunRestored
from wgstore.events.archive_files import ArchiveLocation
from wgstore.events.archive_log import archived_run_ids, stored_batches
from wgstore.events.leases import acquire_lease
from wgstore.events.streams import run_stream
from wgstore.projections.archiving import archive_runs, restore_run
from wgstore.projections.run_views import run_summaries


def test_ended_runs_move_to_parquet_and_restore_puts_them_back(
    store: EventStore, tmp_path: Path
) -> None:
    fleet(store)
    assert acquire_lease(store, "fin-a", "c9", 60.0)  # a lease an ended run kept
    before = log_rows(store)
    plan = plan_everything(store)
    assert sorted(plan.runs) == sorted(ENDED)
    assert LIVE in {run_id for run_id, _ in plan.kept}
    result = archive_runs(store, str(tmp_path / "archive"), plan)
    assert sorted(result.runs) == sorted(ENDED)
    after = log_rows(store)
    archived = {row[1] for row in before} - {row[1] for row in after}
    assert {run_stream(r) for r in ENDED} <= archived
    kept_positions = {row[0] for row in after}
    # every live row is untouched; the LogArchived event is the one new row
    assert [r for r in before if r[0] in kept_positions] == after[:-1]
    (cut,) = store.read_stream(ARCHIVE_STREAM)
    assert isinstance(cut.event, LogArchived) and sorted(cut.event.runs) == sorted(ENDED)
    assert set(archived_run_ids(store)) == set(ENDED)
    # the files hold exactly the rows that left, as they were
    (batch,) = stored_batches(store)
    location = ArchiveLocation(batch.location)
    in_files = sorted(
        (tuple(row) for f in batch.manifest.files for row in location.read_rows(f.path, f.sha256)),
        key=lambda row: row[0],
    )
    gone = [r for r in before if r[0] not in kept_positions]
    assert [row[:8] + row[9:] for row in in_files] == [r[:8] + r[9:] for r in gone]
    assert {r.run_id for r in run_summaries(store)} == {LIVE}
    assert _read_model_groups(store) == {f"{LIVE}-g1"}, "archived groups' rows went with them"
    leases = {str(r[0]) for r in store.fetch_rows("SELECT run_id FROM wg_run_leases", ())}
    assert leases == {LIVE}, "the archived runs' leases went with them"
    # an archived stream takes no new event until it is restored
    with pytest.raises(ArchivedStreamError, match="archived"):
        store.append(run_stream("fin-a"), [cut.event])
    fin_a = [r for r in gone if r[1] in {run_stream("fin-a"), *_groups(gone, "fin-a")}]
    assert restore_run(store, "fin-a") == len(fin_a)
    assert restore_run(store, "fin-a") == 0  # idempotent
    restored = log_rows(store)
    assert [r for r in restored if r[1] in {row[1] for row in fin_a}] == fin_a
    assert {r.run_id for r in run_summaries(store)} == {LIVE, "fin-a"}
    assert _read_model_groups(store) == {f"{LIVE}-g1", "fin-a-g1", "fin-a-g2"}
    assert set(archived_run_ids(store)) == {"fin-b", "abt-a"}
    last = list(store.read_stream(ARCHIVE_STREAM))[-1].event
    assert isinstance(last, RunRestored) and last.run_id == "fin-a"
    assert last.events == len(fin_a)
    # a restored stream takes new events again
    store.append(run_stream("fin-a"), [last])


def _groups(rows: list[tuple[object, ...]], run_id: str) -> set[str]:
    return {str(r[1]) for r in rows if str(r[1]).startswith(f"worker-group-{run_id}-")}


def _read_model_groups(store: EventStore) -> set[str]:
    """The groups ``wg_worker_groups`` and ``wg_workers`` hold rows of (the same set)."""
    groups = {str(r[0]) for r in store.fetch_rows("SELECT group_id FROM wg_worker_groups", ())}
    workers = {str(r[0]) for r in store.fetch_rows("SELECT group_id FROM wg_workers", ())}
    assert groups == workers
    return groups
