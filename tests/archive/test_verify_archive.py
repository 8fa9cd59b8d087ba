"""``verify`` across the archive's cut, on both backends, with real Parquet files: the archived
events are checked where they stood in the log (from the files), or crossed by their manifests
(``--without-archive-files``); every way of changing the files, the manifests or the live log
around them is named. docs/verify.md, "Across the archive", names each claim's test.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa
from archived_runs import fleet, log_rows, plan_everything
from typer.testing import CliRunner

from tests.events.test_tamper import KEY, _tamper
from wgstore.cli import app
from wgstore.events import EventStore
from wgstore.events.archive import ARCHIVE_STREAM, ArchiveFilesDropped
from wgstore.events.archive_files import ArchiveLocation, ArchiveRow
from wgstore.events.archive_log import StoredBatch, _insert_params, _insert_sql, stored_batches
from wgstore.events.archive_manifest import (
    ArchivedFile,
    Manifest,
    encode_manifest,
    manifest_sha256,
)
from wgstore.events.hashing import GENESIS, chain_hash, epoch_us, format_digest, log_hash
from wgstore.events.streams import run_stream
from wgstore.events.verify import VerifyReport
from wgstore.projections import archiving
from wgstore.projections.archiving import archive_runs, restore_run

_BOTH = (True, False)  # with the files, and by the manifests alone


def _archive(store: EventStore, tmp_path: Path, batch_runs: int = 200) -> list[StoredBatch]:
    """The fleet's ended runs archived under ``tmp_path/archive``; the stored batches."""
    fleet(store)
    archive_runs(store, str(tmp_path / "archive"), plan_everything(store), batch_runs=batch_runs)
    return stored_batches(store)


def _file_of(store: EventStore, run_id: str) -> tuple[StoredBatch, ArchivedFile, ArchiveLocation]:
    """The batch, manifest entry and location of run ``run_id``'s archive file."""
    for batch in stored_batches(store):
        for file in batch.manifest.files:
            if file.run_id == run_id:
                return batch, file, ArchiveLocation(batch.location)
    raise AssertionError(f"run {run_id!r} is not archived")


def _rewrite(store: EventStore, run_id: str, change: Callable[[list[ArchiveRow]], Any]) -> None:
    """Rewrite run ``run_id``'s Parquet file (pyarrow) with ``change`` applied to its rows; its
    manifest left as it is (so the file's SHA-256 no longer matches)."""
    _, file, location = _file_of(store, run_id)
    rows = location.read_rows(file.path)
    change(rows)
    location.write_bytes(file.path, location.parquet_bytes(rows, run_id))


def _register(store: EventStore, run_id: str) -> None:
    """What a forger does next: put the rewritten file's SHA-256 in the batch's manifest, both
    in ``wg_archive_batches`` and beside the files (the signed LogArchived event still names
    the old manifest)."""
    batch, file, location = _file_of(store, run_id)
    data = location.read_bytes(file.path)
    manifest = batch.manifest
    files = tuple(
        msgspec.structs.replace(f, sha256=manifest_sha256(data), bytes=len(data))
        if f.run_id == run_id
        else f
        for f in manifest.files
    )
    _store_manifest(store, batch, msgspec.structs.replace(manifest, files=files))


def _store_manifest(store: EventStore, batch: StoredBatch, manifest: Manifest) -> None:
    data = encode_manifest(manifest)
    location = ArchiveLocation(batch.location)
    location.write_bytes(location.manifest_file(batch.batch_id), data)
    with store.engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE wg_archive_batches SET manifest = :m, manifest_sha256 = :s "
                "WHERE batch_id = :b"
            ),
            {"m": data.decode(), "s": manifest_sha256(data), "b": batch.batch_id},
        )


def _named(report: VerifyReport, *words: str) -> list[str]:
    return [p for p in report.problems if all(word in p for word in words)]


def _changed(row: ArchiveRow) -> ArchiveRow:
    """The row with one more key in its data (any reader reads it)."""
    return row._replace(data=json.dumps({**json.loads(row.data), "forged": True}))


# ---------------------------------------------------------------------- A1, A5: a clean archive


def test_a_clean_archive_verifies_with_and_without_its_files(
    store: EventStore, tmp_path: Path
) -> None:
    """Claims A1 and A5, and D1 across the cut: batches of one run each, so archived ranges
    of different batches meet; a digest taken before the archive is still extended."""
    fleet(store)
    live_before = len(log_rows(store))
    digest = store.digest()
    archive_runs(store, str(tmp_path / "archive"), plan_everything(store), batch_runs=1)
    archived = live_before + 3 - len(log_rows(store))  # three LogArchived events were appended
    batches = stored_batches(store)
    assert len(batches) == 3
    with_files = store.verify()
    assert with_files.ok, with_files.problems
    assert (with_files.archived, with_files.archive_batches) == (archived, 3)
    assert with_files.checked == live_before + 3
    assert with_files.notes == []
    by_manifest = store.verify(archive_files=False)
    assert by_manifest.ok, by_manifest.problems
    assert (by_manifest.archived, by_manifest.archive_batches) == (0, 3)
    assert by_manifest.checked == live_before + 3 - archived
    assert with_files.digest == by_manifest.digest == store.digest()
    for files in _BOTH:
        report = store.verify(against=digest, archive_files=files)
        assert report.ok, report.problems
    # an archived stream checked alone, from its file
    fin_b = store.verify(run_stream("fin-b"))
    assert fin_b.ok and fin_b.archived == fin_b.checked > 0
    # a restored run's events are live again: its file is not read, its ranges not crossed
    restored = restore_run(store, "fin-a")
    for files in _BOTH:
        report = store.verify(against=digest, archive_files=files)
        assert report.ok, report.problems
    assert store.verify().archived == archived - restored


def test_a_digest_inside_an_archived_range_needs_the_files(
    store: EventStore, tmp_path: Path
) -> None:
    """Claims A1 and A5: a digest taken at an event the archive later moved (not the last of
    its range) is checked with the files; by the manifests alone it cannot be, and says so."""
    fleet(store)
    before = log_rows(store)
    archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
    _, file, _ = _file_of(store, "fin-a")
    position = file.first_position + 2
    (row,) = [r for r in before if r[0] == position]
    digest = format_digest(position, row[10])
    assert store.verify(against=digest).ok
    report = store.verify(against=digest, archive_files=False)
    assert report.problems == _named(report, f"the digest's position {position} is inside")
    assert _named(report, "check the digest with the archive files")


def test_the_cli_says_what_it_checked_of_the_archive(store: EventStore, tmp_path: Path) -> None:
    _archive(store, tmp_path)
    runner = CliRunner()
    with_files = runner.invoke(app, ["verify", "--url", store.url, "--no-read-models"])
    assert with_files.exit_code == 0, with_files.output
    report = store.verify()
    assert (
        f"ok  archive: {report.archived} archived event(s) of 1 batch(es) checked from their files"
    ) in with_files.output
    assert f"hash chains: {report.checked - report.archived} events" in with_files.output
    alone = runner.invoke(
        app, ["verify", "--url", store.url, "--no-read-models", "--without-archive-files"]
    )
    assert alone.exit_code == 0, alone.output
    assert "ok  archive: 1 batch(es) checked by their manifests alone" in alone.output
    shutil.rmtree(tmp_path / "archive")
    gone = runner.invoke(app, ["verify", "--url", store.url, "--no-read-models"])
    assert gone.exit_code == 1
    assert "--without-archive-files" in gone.output


# ---------------------------------------------------------------------- A2: the files


def test_an_archived_row_changed_in_its_file_is_caught_by_the_file_and_by_the_chain(
    store: EventStore, tmp_path: Path
) -> None:
    """Claim A2, both layers: the file's SHA-256 in the manifest; the manifest's own SHA-256
    in the signed LogArchived event, with the stream and log chains across the cut behind."""
    _archive(store, tmp_path)
    _, file, _ = _file_of(store, "fin-a")
    position = file.first_position + 3

    def change(rows: list[ArchiveRow]) -> None:
        index = next(i for i, row in enumerate(rows) if row.position == position)
        rows[index] = _changed(rows[index])

    _rewrite(store, "fin-a", change)
    report = store.verify()
    assert _named(report, file.path, "is not the file its manifest names")
    assert _named(report, f"position {position} ", "does not match its hash")
    _register(store, "fin-a")  # the manifest now names the changed file
    report = store.verify()
    assert not _named(report, "is not the file its manifest names")
    assert _named(report, f"position {position} ", "does not match its hash")
    assert _named(report, "its manifest in wg_archive_batches is not the one its LogArchived")
    # without the files, only the manifest is caught (what it names is not read)
    by_manifest = store.verify(archive_files=False)
    assert by_manifest.problems == _named(by_manifest, "is not the one its LogArchived")
    assert len(by_manifest.problems) == 1


def test_a_missing_file_is_named_with_the_way_to_check_without_it(
    store: EventStore, tmp_path: Path
) -> None:
    """Claims A3 and A5: a file gone is one problem (its ranges are crossed by the manifest,
    so the chain goes on); without the files the log and the manifests still check out."""
    _archive(store, tmp_path)
    _, file, location = _file_of(store, "abt-a")
    location.remove(file.path)
    report = store.verify()
    assert len(report.problems) == 1, report.problems
    assert _named(report, file.path, "cannot be read", "--without-archive-files")
    assert store.verify(archive_files=False).ok


def test_an_unreachable_archive_is_named_with_its_location(
    store: EventStore, tmp_path: Path
) -> None:
    """Claim A3: the whole location gone."""
    (batch,) = _archive(store, tmp_path)
    (tmp_path / "archive").rename(tmp_path / "elsewhere")
    report = store.verify()
    assert len(report.problems) == 1, report.problems
    assert _named(report, batch.location, "cannot be read", "--without-archive-files")
    assert report.archived == 0
    assert store.verify(archive_files=False).ok


def test_a_file_swapped_for_another_runs_file_is_caught(store: EventStore, tmp_path: Path) -> None:
    """Claim A2."""
    _archive(store, tmp_path)
    _, fin_a, location = _file_of(store, "fin-a")
    _, fin_b, _ = _file_of(store, "fin-b")
    shutil.copyfile(f"{location.root}/{fin_b.path}", f"{location.root}/{fin_a.path}")
    report = store.verify()
    assert _named(report, fin_a.path, "is not the file its manifest names")
    assert _named(report, fin_a.path, "outside its run's archived ranges")
    assert _named(report, fin_a.path, "holds events of stream 'run-fin-b'")
    assert _named(report, fin_a.path, "holds 0 of its events")
    # the rows of another run's positions are named, not walked: no noise of fin-b's twice
    assert not [p for p in report.problems if p.startswith("stream 'run-fin-b'")]


def test_a_row_removed_from_a_file_is_caught(store: EventStore, tmp_path: Path) -> None:
    """Claim A2: by the file's SHA-256; with the manifest rewritten, by the counts, the chains
    and the manifest's SHA-256 in LogArchived."""
    _archive(store, tmp_path)
    _, file, _ = _file_of(store, "fin-b")
    _rewrite(store, "fin-b", lambda rows: rows.pop(4))
    assert _named(store.verify(), file.path, "is not the file its manifest names")
    _register(store, "fin-b")
    report = store.verify()
    assert _named(report, file.path, f"holds {file.events - 1} events, its manifest {file.events}")
    assert _named(report, file.path, "the archived range", "events were removed")
    assert _named(report, "breaks the log chain")
    assert _named(report, "is not the one its LogArchived")


def test_two_rows_reordered_in_a_file_are_caught(store: EventStore, tmp_path: Path) -> None:
    """Claim A2: the order a reader of the file sees is the log's."""
    _archive(store, tmp_path)
    _, file, _ = _file_of(store, "fin-a")

    def swap(rows: list[ArchiveRow]) -> None:
        rows[2], rows[3] = rows[3], rows[2]

    _rewrite(store, "fin-a", swap)
    assert _named(store.verify(), file.path, "is not the file its manifest names")
    _register(store, "fin-a")
    report = store.verify()
    assert _named(report, file.path, "rows were reordered")
    assert _named(report, "is not the one its LogArchived")


def test_a_manifest_edited_in_the_database_is_caught(store: EventStore, tmp_path: Path) -> None:
    """Claim A4, both modes: a range's anchor moved in wg_archive_batches."""
    (batch,) = _archive(store, tmp_path)
    manifest = batch.manifest
    first = msgspec.structs.replace(manifest.ranges[0], log_hash_before="0" * 64)
    edited = msgspec.structs.replace(manifest, ranges=(first, *manifest.ranges[1:]))
    with store.engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE wg_archive_batches SET manifest = :m WHERE batch_id = :b"),
            {"m": encode_manifest(edited).decode(), "b": batch.batch_id},
        )
    for files in _BOTH:
        report = store.verify(archive_files=files)
        assert _named(report, batch.batch_id, "is not the one its LogArchived event")
    assert _named(store.verify(), "its manifest file", "differs from the manifest")
    by_manifest = store.verify(archive_files=False)
    assert _named(by_manifest, f"positions {first.first} to", "log hash before it")


def test_a_batch_recorded_under_another_id_is_caught(store: EventStore, tmp_path: Path) -> None:
    """Claims A4 and A7: a batch no LogArchived names; a LogArchived whose runs left the live
    log with no batch recorded."""
    (batch,) = _archive(store, tmp_path)
    with store.engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE wg_archive_batches SET batch_id = 'forged' WHERE batch_id = :b"),
            {"b": batch.batch_id},
        )
    for files in _BOTH:
        report = store.verify(archive_files=files)
        assert _named(report, "batch forged is in wg_archive_batches, but no LogArchived")
        assert _named(report, f"batch {batch.batch_id}: its LogArchived event", "were removed")
        assert report.notes == []


# ---------------------------------------------------------------------- the live log around it


def test_an_archived_event_replayed_into_the_live_log_is_caught(
    store: EventStore, tmp_path: Path
) -> None:
    """Claim A6: at a new position, its log hash chained as an append would chain it."""
    _archive(store, tmp_path)
    _, file, location = _file_of(store, "fin-a")
    replayed = location.read_rows(file.path)[0]
    head = log_rows(store)[-1]
    row = replayed._replace(
        position=head[0] + 1,
        log_hash=log_hash(head[10], head[0] + 1, replayed.hash, replayed.mac),
    )
    _tamper(
        store, lambda connection: connection.execute(_insert_sql(store), _insert_params(store, row))
    )
    report = store.verify()
    assert _named(
        report,
        f"event id {replayed.event_id} is archived (position {replayed.position})",
        f"stored live at position {row.position}",
    )


def test_a_hole_no_range_covers_is_caught_without_the_files(
    store: EventStore, tmp_path: Path
) -> None:
    """Claim A5: a live event deleted behind the writers' back, between two live ones."""
    _archive(store, tmp_path)
    positions = [int(row[0]) for row in log_rows(store)]
    gone = next(p for p, q in itertools.pairwise(positions) if q == p + 1 and p - 1 in positions)
    _tamper(store, f"DELETE FROM wg_events WHERE position = {gone}")
    for files in _BOTH:
        report = store.verify(archive_files=files)
        assert _named(
            report,
            f"position {gone + 1} ",
            f"events between position {gone - 1} and it were removed",
        ), report.problems


def test_an_interrupted_archive_is_a_note_and_a_rerun_finishes_it(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claim A7: LogArchived appended, the delete never ran; every event still live."""
    fleet(store)

    def killed(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(archiving, "commit_batch", killed)
    with pytest.raises(KeyboardInterrupt):
        archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
    report = store.verify()
    assert report.ok, report.problems
    (note,) = report.notes
    assert "an interrupted archive" in note and "`wgstore archive` finishes it" in note
    monkeypatch.undo()
    assert archive_runs(store, str(tmp_path / "archive"), plan_everything(store)).finished
    finished = store.verify()
    assert finished.ok and finished.notes == [] and finished.archive_batches == 1


# ---------------------------------------------------------------------- A8: with the key


def _rehash_across(store: EventStore, forge: Callable[[ArchiveRow], ArchiveRow]) -> int:
    """A forger with this code and no key: ``forge`` fin-a's third archived row, then recompute
    every stream hash and log hash after it, live and archived, rewrite the files, the manifest
    and its SHA-256 in the LogArchived event, so that every hash of the log and of the cut
    matches. Returns the forged row's position."""
    (batch,) = stored_batches(store)
    location = ArchiveLocation(batch.location)
    archived = {f.run_id: location.read_rows(f.path) for f in batch.manifest.files}
    live = [_live_row(store, raw) for raw in log_rows(store)]
    rows = sorted([*live, *(r for rs in archived.values() for r in rs)], key=lambda r: r.position)
    target = archived["fin-a"][2].position
    streams: dict[str, str] = {}
    before: dict[int, str] = {}  # each position's previous log hash
    fixed: dict[int, ArchiveRow] = {}
    for row in rows:
        if row.position == target:
            row = forge(row)
        if row.stream_id == ARCHIVE_STREAM and row.event_type == "LogArchived":
            row = row._replace(data=_new_manifest(store, batch, archived, fixed, before))
        stream_hash = chain_hash(
            streams.get(row.stream_id, GENESIS), row.stream_id, row.stream_version, row.event_id,
            row.event_type, row.schema_version, epoch_us(row.recorded_at), row.data, row.metadata,
        )  # fmt: skip
        streams[row.stream_id] = stream_hash
        before[row.position] = fixed[max(fixed)].log_hash if fixed else GENESIS
        chained = log_hash(before[row.position], row.position, stream_hash, row.mac)
        fixed[row.position] = row._replace(hash=stream_hash, log_hash=chained)
    _tamper(store, _live_updates(store, [fixed[r.position] for r in live]))
    return target


def _live_row(store: EventStore, raw: Any) -> ArchiveRow:
    return ArchiveRow(
        int(raw[0]), raw[1], int(raw[2]), str(raw[3]), raw[4], int(raw[5]), raw[6], raw[7],
        store.recorder.time_of(raw[8]), raw[9], raw[10], raw[11],
    )  # fmt: skip


def _new_manifest(
    store: EventStore,
    batch: StoredBatch,
    archived: dict[str, list[ArchiveRow]],
    fixed: dict[int, ArchiveRow],
    before: dict[int, str],
) -> str:
    """Write the files of the rehashed rows and their manifest; returns the LogArchived data
    naming it, as the backend stores it (every archived row lies before the LogArchived event,
    so ``fixed`` holds them all)."""
    location = ArchiveLocation(batch.location)
    manifest = batch.manifest
    files = []
    for file in manifest.files:
        rows = [fixed[r.position] for r in archived[file.run_id]]
        data = location.parquet_bytes(rows, file.run_id)
        location.write_bytes(file.path, data)
        files.append(msgspec.structs.replace(file, sha256=manifest_sha256(data), bytes=len(data)))
    ranges = tuple(
        msgspec.structs.replace(
            r, log_hash_before=before[r.first], log_hash_last=fixed[r.last].log_hash
        )
        for r in manifest.ranges
    )
    new = msgspec.structs.replace(manifest, files=tuple(files), ranges=ranges)
    _store_manifest(store, batch, new)
    data = "data::text" if store.is_postgres else "data"
    (text,) = store.fetch_rows(
        f"SELECT {data} FROM wg_events WHERE event_type = 'LogArchived'", ()
    )[0]
    event = json.loads(text)
    event["manifest_sha256"] = manifest_sha256(encode_manifest(new))
    if not store.is_postgres:
        return json.dumps(event)
    with store.engine.connect() as connection:  # the text jsonb renders, which the hash covers
        rendered: str = connection.execute(
            sa.text("SELECT CAST(:d AS jsonb)::text"), {"d": json.dumps(event)}
        ).scalar_one()
    return rendered


def _live_updates(store: EventStore, rows: list[ArchiveRow]) -> Callable[[sa.Connection], None]:
    cast = "CAST(:d AS jsonb)" if store.is_postgres else ":d"

    def update(connection: sa.Connection) -> None:
        for row in rows:
            connection.execute(
                sa.text(
                    f"UPDATE wg_events SET data = {cast}, hash = :h, log_hash = :l "
                    "WHERE position = :p"
                ),
                {"d": row.data, "h": row.hash, "l": row.log_hash, "p": row.position},
            )

    return update


def test_with_the_key_a_forged_archived_row_with_every_hash_recomputed_is_caught(
    store_url: str, tmp_path: Path
) -> None:
    """Claim A8: without the key a forger who recomputes every hash across the cut passes
    (A1's limit); with it, the forged row's MAC and LogArchived's MAC name it. Without the key,
    a digest taken after the archive names it too, in both modes."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _archive(store, tmp_path)
        digest = store.digest()  # taken after the archive: its head is the LogArchived event
        position = _rehash_across(store, _changed)
    with EventStore.open(store_url) as keyless:
        for files in _BOTH:
            report = keyless.verify(archive_files=files)
            assert report.ok, report.problems
            # a digest kept since the archive pins LogArchived, so the manifest: caught keyless
            pinned = keyless.verify(against=digest, archive_files=files)
            assert _named(pinned, "the log no longer extends the digest"), pinned.problems
        keyed = keyless.verify(hmac_key=KEY)
    assert _named(keyed, f"the event at position {position} ", "does not match its MAC")
    assert _named(keyed, f"stream '{ARCHIVE_STREAM}'", "LogArchived) does not match its MAC")
    assert len(keyed.problems) == 2, keyed.problems


def test_files_dropped_on_purpose_are_a_note_and_checked_by_the_manifest(
    store: EventStore, tmp_path: Path
) -> None:
    """Claim A7: ArchiveFilesDropped says the files went on purpose; the cut is still checked
    by the manifest."""
    (batch,) = _archive(store, tmp_path)
    files = tuple(f.path for f in batch.manifest.files)
    store.append(
        ARCHIVE_STREAM,
        [ArchiveFilesDropped(batch_id=batch.batch_id, files=files, reason="retention")],
    )
    location = ArchiveLocation(batch.location)
    for path in files:
        location.remove(path)
    report = store.verify()
    assert report.ok, report.problems
    assert report.archived == 0 and report.archive_batches == 1
    (note,) = report.notes
    assert batch.batch_id in note and "dropped on purpose" in note
