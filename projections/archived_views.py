"""Archived runs read back like live ones: the views of ``wgstore runs``, ``wgstore events --run``
and ``wgstore serve``'s run page, for a run whose events left the live log (issue 43's archive).

- :func:`archived_summaries`: each archived run as a listing shows it, from the manifests the
  database keeps (``wg_archive_batches``) and the archived streams (``wg_archive_streams``):
  run id, batch, archived at. No file is read, so no status: :data:`~wgstore.projections.rows.ARCHIVED`.
- :func:`read_archived_run`: one run's events from its batch's Parquet file (checked against
  the manifest and its SHA-256, :func:`~wgstore.projections.archiving.archived_rows`), decoded
  as a read of the live log gives them (:func:`~wgstore.events.archive_files.records_of`).
- :func:`archived_run_detail`: the :class:`~wgstore.projections.rows.RunDetail` of those events,
  from the folds the live views use (the run's :func:`~wgstore.projections.run_state.project_run`,
  each group's :func:`~wgstore.projections.state.project_worker_group`, and
  :func:`~wgstore.projections.run_views.detail_of`), its ``run`` an
  :class:`~wgstore.projections.rows.ArchivedRunInfo` naming the batch.

What Ray's export recorded beside a run (its driver job, the nodes it lost) is not archived
with it: :func:`archived_run_detail` reads it from the live log, as for a live run. An archived
run has no lease (it ended before it was archived).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from wgstore.events import EventStore, RecordedEvent
from wgstore.events.archive_files import records_of
from wgstore.events.archive_log import StoredBatch, archived_run_ids, stored_batches
from wgstore.events.streams import group_id_of, group_stream, run_stream
from wgstore.projections.archiving import archived_rows
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.rows import ARCHIVED, ArchivedRunInfo, ArchivedRunSummary, RunDetail
from wgstore.projections.run_state import project_run
from wgstore.projections.run_views import detail_of
from wgstore.projections.state import WorkerGroupState, project_worker_group
from wgstore.projections.timeline import (
    GroupTimeline,
    add_report_point,
    group_timeline,
    run_timeline_data,
    thin_points,
)

__all__ = [
    "ArchivedRun",
    "archived_batch",
    "archived_events",
    "archived_group_timeline",
    "archived_run_detail",
    "archived_run_timeline",
    "archived_summaries",
    "read_archived_run",
    "restore_hint",
]

GroupSeries = dict[str, dict[str, list[list[Any]]]]


def restore_hint(run_id: str, batch_id: str, archived_at: datetime) -> str:
    """The line every view shows above an archived run."""
    return (
        f"archived in batch {batch_id} at {archived_at.isoformat(timespec='seconds')} "
        f"(`wgstore restore {run_id}` puts it back)"
    )


def archived_summaries(store: EventStore) -> list[ArchivedRunSummary]:
    """Each run archived now (a restored run is live again), as a listing shows it: the oldest
    batch first, each batch's runs in its manifest's order. Reads the batches' manifests as the
    database keeps them, not the files: its name, times and how it ended (``ended_as``) as the
    manifest says, every other fact None, its status :data:`~wgstore.projections.rows.ARCHIVED`."""
    held = archived_run_ids(store)
    if not held:
        return []
    found = []
    for batch in stored_batches(store):
        files = {file.run_id: file for file in batch.manifest.files}
        for run_id in batch.manifest.runs:
            if held.get(run_id) != batch.batch_id:
                continue
            file = files.get(run_id)
            found.append(
                ArchivedRunSummary(
                    run_id=run_id,
                    status=ARCHIVED,
                    archive_batch=batch.batch_id,
                    archived_at=batch.archived_at,
                    name=(file.name or None) if file else None,
                    ended_as=(file.status or None) if file else None,
                    created_at=_time(file.created_at) if file else None,
                    ended_at=_time(file.ended_at) if file else None,
                )
            )
    return found


def _time(text: str) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def archived_batch(store: EventStore, run_id: str) -> StoredBatch | None:
    """The batch that holds run ``run_id`` now (None: the run is not archived)."""
    batch_id = archived_run_ids(store).get(run_id)
    if batch_id is None:
        return None
    found = stored_batches(store, batch_id)
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class ArchivedRun:
    """One archived run's events, decoded, in log order, and the batch that holds them."""

    run_id: str
    batch: StoredBatch
    records: tuple[RecordedEvent, ...]

    def stream(self, stream_id: str) -> list[RecordedEvent]:
        """The events of one of the run's streams, in stream order."""
        return [r for r in self.records if r.stream_id == stream_id]

    @property
    def group_ids(self) -> set[str]:
        """The worker groups whose streams the run's file holds."""
        return {g for g in (group_id_of(r.stream_id) for r in self.records) if g}

    def group_state(self, group_id: str) -> WorkerGroupState:
        """A group's state, its archived stream folded as the live log's is.

        Raises:
            StreamNotFoundError: the file holds no event of the group.
            ProjectionError: its events cannot be folded.
        """
        records = self.stream(group_stream(group_id))
        if not records:
            raise StreamNotFoundError(
                f"worker group {group_id!r} has no events in run {self.run_id!r}'s archive"
            )
        return project_worker_group(records)

    def group_series(self, group_id: str) -> GroupSeries:
        """A group's metric series as a live run page has them (each numeric metric's
        ``[index, value, epoch ms, step, epoch]`` points per rank, thinned the same way)."""
        series: GroupSeries = {}
        for record in self.stream(group_stream(group_id)):
            add_report_point(series, record)
        return {
            name: {rank: thin_points(points) for rank, points in ranks.items()}
            for name, ranks in series.items()
        }


def read_archived_run(store: EventStore, run_id: str) -> ArchivedRun:
    """Run ``run_id``'s events from the archive (its batch's file, checked against the
    manifest the signed ``LogArchived`` names and the file's SHA-256).

    Raises:
        InvalidArgumentError: the run is not in the archive.
        ValueError: the manifest or the file is not what the log says.
        StoreUnavailableError: the file cannot be read.
    """
    batch, rows = archived_rows(store, run_id)
    return ArchivedRun(run_id, batch, tuple(records_of(store.codec, rows)))


def archived_run_detail(
    store: EventStore,
    run_id: str,
    now: datetime | None = None,
    *,
    run: ArchivedRun | None = None,
    group_state: Callable[[str], WorkerGroupState] | None = None,
) -> RunDetail:
    """Run ``run_id``'s detail folded from its archived events (``run``, read when not given),
    as :func:`~wgstore.projections.run_views.run_detail` folds a live run's; its ``run`` is an
    :class:`~wgstore.projections.rows.ArchivedRunInfo`. ``group_state(group_id)`` replaces
    ``run.group_state`` (a caller that keeps the states).

    Raises:
        InvalidArgumentError: the run is not in the archive.
        StreamNotFoundError: the file holds no event of the run's stream.
        ProjectionError: the run's events cannot be folded.
        ValueError / StoreUnavailableError: as :func:`read_archived_run`.
    """
    run = run or read_archived_run(store, run_id)
    events = run.stream(run_stream(run_id))
    if not events:
        raise StreamNotFoundError(f"run {run_id!r} has no events in its archive file")
    state = project_run(events)
    detail = detail_of(
        store,
        run_id,
        state,
        run.group_ids | set(state.groups),
        group_state or run.group_state,
        lease=None,
        now=now,
    )
    info = detail.run
    marked = ArchivedRunInfo(
        **{f.name: getattr(info, f.name) for f in fields(info)},
        archive_batch=run.batch.batch_id,
        archived_at=run.batch.archived_at,
    )
    return _with_run(detail, marked)


def _with_run(detail: RunDetail, info: ArchivedRunInfo) -> RunDetail:
    values = {f.name: getattr(detail, f.name) for f in fields(detail)}
    values["run"] = info
    return RunDetail(**values)


def archived_events(
    run: ArchivedRun, types: Iterable[str] = (), streams: Iterable[str] | None = None
) -> list[RecordedEvent]:
    """The run's archived events (of ``types``, of ``streams``; all when empty / None), in log
    order, as ``wgstore events --run`` prints a live run's."""
    wanted = set(types)
    kept = None if streams is None else set(streams)
    return [
        r
        for r in run.records
        if (not wanted or r.type in wanted) and (kept is None or r.stream_id in kept)
    ]


def archived_run_timeline(store: EventStore, run_id: str) -> dict[str, Any]:
    """What ``wgstore report --run`` shows of an archived run
    (:func:`~wgstore.projections.timeline.run_timeline_data` over its file's events), its
    ``run`` marked archived.

    Raises:
        as :func:`archived_run_detail`.
    """
    run = read_archived_run(store, run_id)

    def detail(
        store: EventStore, run_id: str, *, group_state: Callable[[EventStore, str], Any]
    ) -> RunDetail:
        return archived_run_detail(
            store, run_id, run=run, group_state=lambda group_id: group_state(store, group_id)
        )

    return run_timeline_data(store, run_id, stream=run.stream, detail_of_run=detail)


def archived_group_timeline(store: EventStore, run: ArchivedRun, group_id: str) -> GroupTimeline:
    """What ``wgstore report GROUP`` shows of one of ``run``'s archived groups."""
    return group_timeline(store, group_id, run.stream(group_stream(group_id)))
