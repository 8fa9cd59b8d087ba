"""Archive ended runs out of the live log, and restore one: the steps, in the order that loses
nothing (issue 43).

For each batch of runs (:func:`archive_runs`):

1. their rows and ranges are read in one pass (:func:`~wgstore.events.archive_log.read_batch`);
2. one Parquet file per run is written under a temporary name and moved into place, then read
   back whole and compared with the rows, column by column; the manifest likewise;
3. ``LogArchived`` (signed like any event) names the manifest by its SHA-256, appended at the
   archive stream's expected version: a second ``wgstore archive`` at the same time loses the
   race there and removes its files;
4. one transaction records the batch and deletes its rows, snapshots and read-model rows
   (:func:`~wgstore.events.archive_log.commit_batch`). If a stream moved since step 1, nothing
   is deleted and ``ArchiveAbandoned`` says so.

Killed anywhere, every event is live or in a complete, verified file: before step 3 a file no
manifest names is left (a rerun writes the batch again under a new id); between 3 and 4 the
rows are live and in the files, and the next run finishes the batch (:func:`finish_pending`).
Runs not ended (running, orphaned, or resumable: ``wgstore resume`` takes only a run that has
not ended) are never archived.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.archive import (
    ARCHIVE_STREAM,
    ArchiveAbandoned,
    ArchiveFilesDropped,
    LogArchived,
    RunRestored,
)
from wgstore.events.archive_files import (
    ArchiveLocation,
    ArchiveRow,
    parse_table,
    records_of,
    rows_table,
    table_bytes,
)
from wgstore.events.archive_log import (
    BatchMovedError,
    BatchRows,
    RunSize,
    StoredBatch,
    archive_history,
    archived_run_ids,
    commit_batch,
    read_batch,
    restore_rows,
    run_sizes,
    stored_batches,
)
from wgstore.events.archive_manifest import (
    ArchivedFile,
    Manifest,
    decode_manifest,
    encode_manifest,
    manifest_sha256,
)
from wgstore.events.engine import parse_url
from wgstore.events.errors import (
    ConcurrencyError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from wgstore.events.records import NO_STREAM, RecordedEvent
from wgstore.events.schema import (
    READ_MODEL_TABLES,
    wg_archive_streams,
    wg_run_leases,
)
from wgstore.events.streams import GROUP_STREAM_PREFIX, group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupStartRequested
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.projector import apply_restored_events, catch_up_read_models
from wgstore.projections.rows import RunSummary
from wgstore.projections.run_state import RunStatus
from wgstore.projections.run_views import run_summaries
from wgstore.projections.state import WorkerGroupState, project_worker_group
from wgstore.projections.values import to_utc
from wgstore.projections.views import resolve_group_id

__all__ = [
    "BATCH_EVENTS",
    "ArchivePlan",
    "ArchiveResult",
    "ArchiveRunsBusyError",
    "DroppedFiles",
    "archive_runs",
    "archived_group_state",
    "archived_rows",
    "archived_stream_ids",
    "archived_stream_records",
    "drop_archived_files",
    "finish_pending",
    "plan_archive",
    "resolve_group_or_archived",
    "restore_run",
    "vacuum_store",
]

_ENDED = {RunStatus.FINISHED.value, RunStatus.ERRORED.value, RunStatus.ABORTED.value}


class ArchiveRunsBusyError(InvalidArgumentError):
    """Another ``wgstore archive`` appended a batch first (this one's files were removed)."""


@dataclass(frozen=True, slots=True)
class ArchivePlan:
    """What :func:`archive_runs` would move (``runs``, each with its streams, its summary and
    its size in the live log) and what it keeps (run id and why)."""

    runs: dict[str, tuple[str, ...]]
    kept: list[tuple[str, str]]
    summaries: dict[str, RunSummary]
    sizes: dict[str, RunSize]


@dataclass
class ArchiveResult:
    """What one :func:`archive_runs` did."""

    batches: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    events: int = 0
    bytes: int = 0
    abandoned: list[tuple[str, str]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    """Batches an earlier, interrupted archive had appended and this one completed."""


def _group_streams(store: EventStore) -> dict[str, list[str]]:
    """Each run's worker-group streams (one read of the log's start requests)."""
    found: dict[str, list[str]] = {}
    for record in store.read_all(types=[WorkerGroupStartRequested]):
        event = record.event
        if isinstance(event, WorkerGroupStartRequested) and event.run_id:
            found.setdefault(event.run_id, []).append(group_stream(event.group_id))
    return found


def plan_archive(
    store: EventStore,
    *,
    ended_before: datetime,
    runs: str | None = None,
    now: datetime | None = None,
) -> ArchivePlan:
    """The runs that ended before ``ended_before`` (and whose id matches the glob ``runs``):
    to move, or kept with the reason (not ended, so possibly resumed; orphaned)."""
    moving: dict[str, tuple[str, ...]] = {}
    kept: list[tuple[str, str]] = []
    summaries: dict[str, RunSummary] = {}
    groups = _group_streams(store)
    for run in run_summaries(store, from_log=False, now=now):
        if runs is not None and not fnmatch.fnmatchcase(run.run_id, runs):
            continue
        if run.status not in _ENDED:
            kept.append((run.run_id, f"not ended ({run.status})"))
            continue
        if run.orphaned:
            kept.append((run.run_id, "orphaned (no controller holds it)"))
            continue
        if run.ended_at is None or run.ended_at >= ended_before:
            continue
        moving[run.run_id] = (run_stream(run.run_id), *groups.get(run.run_id, ()))
        summaries[run.run_id] = run
    return ArchivePlan(moving, kept, summaries, run_sizes(store, moving))


def _read_models_of(runs: Sequence[str], streams: Iterable[str]) -> Callable[[sa.Connection], None]:
    """The delete of ``runs``' read-model rows and leases (run in the caller's transaction):
    every such table is keyed first by its group or its run."""
    keys = {
        "group_id": [
            s.removeprefix(GROUP_STREAM_PREFIX)
            for s in streams
            if s.startswith(GROUP_STREAM_PREFIX)
        ],
        "run_id": list(runs),
    }

    def delete(connection: sa.Connection) -> None:
        # and the runs' leases: coordination of runs that had not ended, which these have
        for table in (*READ_MODEL_TABLES, wg_run_leases):
            key = next(iter(table.primary_key.columns))
            ids = keys[key.name]
            for start in range(0, len(ids), 500):
                connection.execute(sa.delete(table).where(key.in_(ids[start : start + 500])))

    return delete


def _write_batch(
    location: ArchiveLocation,
    batch_id: str,
    batch: BatchRows,
    previous: str,
    facts: Mapping[str, RunSummary] | None = None,
) -> tuple[Manifest, bytes]:
    """Write, read back and check the batch's files and manifest; a failure removes what this
    batch wrote (no file is left that no manifest names) and raises."""
    written: list[str] = []
    try:
        return _write_files(location, batch_id, batch, previous, written, facts or {})
    except BaseException:
        for relative in written:  # a failing location: the rerun writes it under a new id
            with contextlib.suppress(StoreUnavailableError):
                location.remove(relative)
        raise


def _write_files(
    location: ArchiveLocation,
    batch_id: str,
    batch: BatchRows,
    previous: str,
    written: list[str],
    facts: Mapping[str, RunSummary],
) -> tuple[Manifest, bytes]:
    files: list[ArchivedFile] = []
    for run_id, rows in batch.rows.items():
        relative = location.run_file(batch_id, run_id)
        table = rows_table(rows, run_id)
        data = table_bytes(table)
        written.append(relative)
        location.write_bytes(relative, data)
        back = location.read_bytes(relative)
        if back != data or not parse_table(back, relative).equals(table):
            raise StoreUnavailableError(
                f"{relative} in the archive {location.location!r} read back differs from what "
                "was written: nothing was deleted; check the location and archive again"
            )
        files.append(
            ArchivedFile(
                path=relative,
                run_id=run_id,
                sha256=hashlib.sha256(data).hexdigest(),
                events=len(rows),
                bytes=len(data),
                first_position=int(rows[0][0]),
                last_position=int(rows[-1][0]),
                streams={s: batch.streams[s] for s in sorted({row[1] for row in rows})},
                **_facts(facts.get(run_id)),
            )
        )
    positions = [int(row[0]) for rows in batch.rows.values() for row in rows]
    manifest = Manifest(
        batch_id=batch_id,
        created_at=datetime.now(UTC).isoformat(),
        runs=tuple(batch.rows),
        events=len(positions),
        first_position=min(positions),
        last_position=max(positions),
        ranges=tuple(batch.ranges),
        files=tuple(files),
        previous_manifest_sha256=previous,
    )
    data = encode_manifest(manifest)
    written.append(location.manifest_file(batch_id))
    location.write_bytes(location.manifest_file(batch_id), data)
    if location.read_bytes(location.manifest_file(batch_id)) != data:
        raise StoreUnavailableError(
            f"the manifest of batch {batch_id} read back differs from what was written: "
            "nothing was deleted; check the location and archive again"
        )
    return manifest, data


def _facts(run: RunSummary | None) -> dict[str, str]:
    """What a listing shows of an archived run without its file (the manifest keeps it)."""
    if run is None:
        return {}
    return {
        "name": run.name or "",
        "status": run.status,
        "created_at": run.created_at.isoformat() if run.created_at else "",
        "ended_at": run.ended_at.isoformat() if run.ended_at else "",
    }


def _remove_batch_files(location: ArchiveLocation, manifest: Manifest) -> None:
    for file in manifest.files:
        location.remove(file.path)
    location.remove(location.manifest_file(manifest.batch_id))


def _archive_head(store: EventStore) -> tuple[int, str]:
    """The archive stream's version and the last batch's manifest SHA-256 ("" for none)."""
    return store.stream_version(ARCHIVE_STREAM), archive_history(store).manifest_sha256


def finish_pending(store: EventStore) -> list[str]:
    """Complete the batches an interrupted archive appended but did not delete (their files
    checked again first); a batch whose files are gone, or whose runs moved, is abandoned.
    Returns the batches completed."""
    done = {batch.batch_id for batch in stored_batches(store)}
    finished = []
    for batch_id, (position, event) in archive_history(store).batches.items():
        if batch_id in done:
            continue
        location = ArchiveLocation(event.location)
        try:
            data = location.read_bytes(location.manifest_file(batch_id))
            if manifest_sha256(data) != event.manifest_sha256:
                raise ValueError("its manifest is not the one LogArchived names")
            manifest = decode_manifest(data)
            runs = {f.run_id: tuple(f.streams) for f in manifest.files}
            batch = read_batch(store, runs)
            for file in manifest.files:
                content = location.read_bytes(file.path)
                live = rows_table(batch.rows.get(file.run_id, []), file.run_id)
                if hashlib.sha256(content).hexdigest() != file.sha256 or not parse_table(
                    content, file.path
                ).equals(live):
                    raise ValueError(f"{file.path} no longer holds the run's live rows")
            commit_batch(
                store,
                manifest,
                data.decode(),
                event.manifest_sha256,
                event.location,
                position,
                also=_read_models_of(list(runs), manifest.streams),
            )
        except (ValueError, BatchMovedError, StoreUnavailableError) as error:
            store.append(ARCHIVE_STREAM, [ArchiveAbandoned(batch_id=batch_id, reason=str(error))])
            continue
        finished.append(batch_id)
    return finished


BATCH_EVENTS = 10_000
"""Events a batch holds at most (unless one run has more): its delete is one transaction, and
appends wait while it runs (SQLite's write lock; Postgres' DELETE holds ROW EXCLUSIVE, which
the append's table lock waits for), so a batch is bounded by what a writer may wait."""


def archive_runs(
    store: EventStore,
    location: str,
    plan: ArchivePlan,
    *,
    batch_runs: int = 200,
    batch_events: int = BATCH_EVENTS,
    progress: Callable[[int, int], None] | None = None,
) -> ArchiveResult:
    """Move ``plan``'s runs to ``location`` (see the module docstring), at most ``batch_runs``
    runs and ``batch_events`` events a batch (a run with more is a batch of its own);
    ``progress(runs done, runs planned)`` after each batch.

    Raises:
        ArchiveRunsBusyError: another archive appended a batch meanwhile.
        StoreUnavailableError: the location refused a write or a read (nothing was deleted
            of the batch it was writing).
    """
    if batch_runs < 1 or batch_events < 1:
        raise InvalidArgumentError(
            f"batch_runs and batch_events must be at least 1, not {batch_runs} and {batch_events}"
        )
    opened = ArchiveLocation(location)
    result = ArchiveResult(finished=finish_pending(store))
    catch_up_read_models(store)
    archived = archived_run_ids(store)
    names = [run_id for run_id in plan.runs if run_id not in archived]
    done = 0
    for chunk in _chunks(names, plan, batch_runs, batch_events):
        runs = {run_id: plan.runs[run_id] for run_id in chunk}
        _archive_batch(store, opened, runs, plan.summaries, result)
        done += len(chunk)
        if progress is not None:
            progress(done, len(names))
    return result


def _chunks(
    names: list[str], plan: ArchivePlan, most_runs: int, most_events: int
) -> Iterator[list[str]]:
    """``names`` in batches of at most ``most_runs`` runs and ``most_events`` events (the
    plan's sizes)."""
    chunk: list[str] = []
    events = 0
    for run_id in names:
        size = plan.sizes[run_id].events
        if chunk and (len(chunk) >= most_runs or events + size > most_events):
            yield chunk
            chunk, events = [], 0
        chunk.append(run_id)
        events += size
    if chunk:
        yield chunk


def _archive_batch(
    store: EventStore,
    opened: ArchiveLocation,
    runs: dict[str, tuple[str, ...]],
    facts: Mapping[str, RunSummary],
    result: ArchiveResult,
) -> None:
    """Read, write, name and delete one batch (the module docstring's steps 1-4)."""
    version, previous = _archive_head(store)
    batch = read_batch(store, runs)
    if not batch.rows:
        return
    batch_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}"
    manifest, data = _write_batch(opened, batch_id, batch, previous, facts)
    sha = manifest_sha256(data)
    event = LogArchived(
        batch_id=batch_id,
        manifest_sha256=sha,
        location=opened.location,
        runs=manifest.runs,
        events=manifest.events,
        first_position=manifest.first_position,
        last_position=manifest.last_position,
        previous_manifest_sha256=previous,
    )
    try:
        (appended,) = store.append(ARCHIVE_STREAM, [event], expected_version=version or NO_STREAM)
    except ConcurrencyError:
        _remove_batch_files(opened, manifest)
        raise ArchiveRunsBusyError(
            "another `wgstore archive` appended a batch while this one wrote its files: "
            "this batch's files were removed and nothing was deleted; run one archive at "
            "a time (run it again to carry on)"
        ) from None
    try:
        commit_batch(
            store,
            manifest,
            data.decode(),
            sha,
            opened.location,
            appended.position,
            also=_read_models_of(list(batch.rows), manifest.streams),
        )
    except BatchMovedError as error:
        store.append(ARCHIVE_STREAM, [ArchiveAbandoned(batch_id=batch_id, reason=str(error))])
        _remove_batch_files(opened, manifest)
        result.abandoned.append((batch_id, str(error)))
        return
    result.batches.append(batch_id)
    result.runs.extend(batch.rows)
    result.events += manifest.events
    result.bytes += sum(f.bytes for f in manifest.files)


def _batch_of(store: EventStore, run_id: str) -> StoredBatch:
    holder = archived_run_ids(store).get(run_id)
    if holder is None:
        raise InvalidArgumentError(
            f"run {run_id!r} is not in the archive (`wgstore runs --archived` lists those that are)"
        )
    (batch,) = stored_batches(store, holder)
    return batch


def archived_rows(store: EventStore, run_id: str) -> tuple[StoredBatch, list[ArchiveRow]]:
    """The archived events of ``run_id`` (its batch's file, checked against the manifest).

    Raises:
        InvalidArgumentError: the run is not in the archive.
        ValueError: the manifest or the file is not what the log says.
    """
    batch = _batch_of(store, run_id)
    history = archive_history(store)
    named = history.batches.get(batch.batch_id)
    if named is None or manifest_sha256(batch.manifest_text) != named[1].manifest_sha256:
        raise ValueError(
            f"batch {batch.batch_id}: its stored manifest is not the one LogArchived names"
        )
    dropped = history.dropped.get(batch.batch_id)
    if dropped is not None:
        raise ValueError(
            f"run {run_id!r}: the files of batch {batch.batch_id} were dropped on purpose "
            f"({dropped.reason}); its manifest proves what was there, the events are gone"
        )
    manifest = batch.manifest
    file = next(f for f in manifest.files if f.run_id == run_id)
    rows = ArchiveLocation(batch.location).read_rows(file.path, file.sha256)
    return batch, rows


def restore_run(store: EventStore, run_id: str) -> int:
    """Put run ``run_id``'s events back into the live log, at their positions, with its read
    models; returns how many (0: it is live already). Checked against the manifest.

    Raises:
        InvalidArgumentError: no such run, live or archived.
    """
    if run_id not in archived_run_ids(store) and store.stream_version(run_stream(run_id)):
        return 0
    batch, rows = archived_rows(store, run_id)
    records = list(records_of(store.codec, rows))

    def read_models(connection: sa.Connection) -> None:
        apply_restored_events(store, connection, records)

    restored = restore_rows(store, run_id, batch.batch_id, rows, also=read_models)
    if restored:
        store.append(
            ARCHIVE_STREAM,
            [RunRestored(batch_id=batch.batch_id, run_id=run_id, events=restored)],
        )
    return restored


@dataclass(frozen=True, slots=True)
class DroppedFiles:
    """A batch whose Parquet files a retention bound deletes (or would, with ``dry_run``)."""

    batch_id: str
    archived_at: datetime
    files: tuple[str, ...]
    bytes: int


def drop_archived_files(
    store: EventStore, *, archived_before: datetime, dry_run: bool = True
) -> list[DroppedFiles]:
    """Delete the Parquet files of the batches archived before ``archived_before`` (a
    retention bound for the archive itself); with ``dry_run`` (the default) only list them.

    ``ArchiveFilesDropped`` is appended before a batch's files are deleted, so a rerun
    finishes an interrupted drop. The manifests stay (in the store and beside the files): the
    batches' cut, ranges and digests are still proven by ``verify``, and what was there is
    said to have been removed on purpose. Such a batch's runs can no longer be restored.
    """
    history = archive_history(store)
    dropped = []
    for batch in stored_batches(store):
        if batch.archived_at >= archived_before:
            continue
        manifest = batch.manifest
        location = ArchiveLocation(batch.location)
        files = tuple(f.path for f in manifest.files if location.exists(f.path))
        if batch.batch_id in history.dropped and not files:
            continue  # dropped before
        dropped.append(
            DroppedFiles(
                batch.batch_id,
                batch.archived_at,
                files,
                sum(f.bytes for f in manifest.files if f.path in files),
            )
        )
        if dry_run:
            continue
        if batch.batch_id not in history.dropped:
            store.append(
                ARCHIVE_STREAM,
                [
                    ArchiveFilesDropped(
                        batch_id=batch.batch_id,
                        files=tuple(f.path for f in manifest.files),
                        reason=f"retention: archived before {archived_before.isoformat()}",
                    )
                ],
            )
        for path in files:
            location.remove(path)
    return dropped


def archived_stream_ids(store: EventStore, prefix: str) -> list[str]:
    """The archived streams whose id starts with ``prefix``, sorted."""
    column = wg_archive_streams.c.stream_id
    query = sa.select(column).where(column.startswith(prefix, autoescape=True)).order_by(column)
    with store.engine.connect() as connection:
        found = [str(stream) for stream in connection.execute(query).scalars()]
        connection.rollback()
    return found


def archived_stream_records(store: EventStore, stream_id: str) -> list[RecordedEvent]:
    """The events of one archived stream, read from its run's file (checked as
    :func:`archived_rows` checks it).

    Raises:
        InvalidArgumentError: the stream is not in the archive.
        ValueError: the manifest or the file is not what the log says, or was dropped.
    """
    query = sa.select(wg_archive_streams.c.run_id).where(
        wg_archive_streams.c.stream_id == stream_id
    )
    with store.engine.connect() as connection:
        run_id = connection.execute(query).scalar()
        connection.rollback()
    if run_id is None:
        raise InvalidArgumentError(f"stream {stream_id!r} is not in the archive")
    _, rows = archived_rows(store, str(run_id))
    return list(records_of(store.codec, [row for row in rows if row.stream_id == stream_id]))


def archived_group_state(
    store: EventStore,
    group_id: str,
    *,
    version: int | None = None,
    at: datetime | None = None,
) -> WorkerGroupState:
    """An archived worker group's state: at its end, after ``version`` or at the moment ``at``
    (as :func:`~wgstore.projections.queries.worker_group_state` folds a live one).

    Raises:
        InvalidArgumentError: the group is not in the archive.
        StreamNotFoundError: it did not exist yet at ``at``, or never reached ``version``.
    """
    records = archived_stream_records(store, group_stream(group_id))
    kept = [
        r
        for r in records
        if (version is None or r.version <= version) and (at is None or r.recorded_at <= to_utc(at))
    ]
    if not kept or (version is not None and kept[-1].version < version):
        raise StreamNotFoundError(
            f"archived worker group {group_id!r} has no state "
            + (f"at version {version}" if version is not None else f"at {at}")
        )
    return project_worker_group(kept)


def _sqlite_bytes(path: Path) -> int:
    """The database file and its WAL, in bytes."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def vacuum_store(store: EventStore) -> dict[str, Any]:
    """After an archive: on SQLite, VACUUM (the freed pages go back to the file system) and a
    checkpoint that empties the WAL, with the file's bytes before and after; on PostgreSQL
    nothing (the archived rows' space is reused by new rows).

    Raises:
        StoreUnavailableError: VACUUM failed (another process writing the file, say).
    """
    if store.is_postgres:
        return {
            "backend": "postgresql",
            "needed": False,
            "reason": "PostgreSQL reuses the archived rows' space for new rows (autovacuum)",
        }
    path = Path(parse_url(store.url).database or "")
    before = _sqlite_bytes(path)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute("VACUUM")  # isolation_level None: no transaction around it
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            cursor.close()
    except Exception as error:  # noqa: BLE001 - sqlite3's errors: say what was and was not done
        raise StoreUnavailableError(f"VACUUM of {path} failed ({error})") from None
    finally:
        raw.close()
    return {
        "backend": "sqlite",
        "file": str(path),
        "bytes_before": before,
        "bytes_after": _sqlite_bytes(path),
    }


def resolve_group_or_archived(store: EventStore, group: str) -> tuple[str, bool]:
    """The full id of the worker group whose id is ``group`` or starts with it, live
    (:func:`~wgstore.projections.views.resolve_group_id`) or in the archive, and whether it is
    archived. A live group wins.

    Raises:
        InvalidArgumentError: no group matches (the live resolver's message), or more than one
            archived group does.
    """
    try:
        return resolve_group_id(store, group), False
    except InvalidArgumentError:
        prefix = group.strip().removeprefix(GROUP_STREAM_PREFIX)
        if not prefix or "\x00" in prefix:
            raise
        ids = [
            stream[len(GROUP_STREAM_PREFIX) :]
            for stream in archived_stream_ids(store, group_stream(prefix))
        ]
        if prefix in ids or len(ids) == 1:
            return (prefix if prefix in ids else ids[0]), True
        if ids:
            raise InvalidArgumentError(
                f"{group!r} matches {len(ids)} archived groups; give more of the id"
            ) from None
        raise
