"""The typed rows the read-side views hand to the CLI, the HTML report and ``wgstore serve``.

Frozen dataclasses, read by attribute. Each has :meth:`Row.to_json`: the ``--json`` output of
the CLI and the ``/api/...`` answers are derived from it, one dict per row, the keys in
:data:`~wgstore.projections.views.SUMMARY_KEYS` / :data:`~wgstore.projections.run_views.RUN_SUMMARY_KEYS`
order; nested rows become dicts, tuples lists. Times stay :class:`~datetime.datetime` (the JSON
encoders, ``json_default``, write them as ISO 8601).

- :class:`GroupSummary`: one worker group (``wgstore groups``), from
  :func:`~wgstore.projections.views.group_summaries`.
- :class:`WorkerRow`: one worker of a group, from :func:`~wgstore.projections.views.worker_rows`.
- :class:`RunSummary`: one run (``wgstore runs``), from
  :func:`~wgstore.projections.run_views.run_summaries`.
- :class:`RunDetail`: one run with its attempts, decisions, transitions, controllers and resumes
  (``wgstore runs RUN``), from :func:`~wgstore.projections.run_views.run_detail`; its ``run`` is
  a :class:`RunInfo` (the summary and what the listing leaves out).
- :class:`ArchivedRunSummary` / :class:`ArchivedRunInfo`: an archived run, listed from its
  batch's manifest or folded from its archived events
  (:mod:`wgstore.projections.archived_views`); a live run's rows have no ``archived`` key.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from wgstore.events.run import ControllerState
from wgstore.projections.run_rows import Attempt
from wgstore.projections.values import plain

__all__ = [
    "ARCHIVED",
    "UNREADABLE",
    "ArchivedRunInfo",
    "ArchivedRunSummary",
    "AttemptRow",
    "ControllerRow",
    "DecisionRow",
    "FailedRank",
    "GroupSummary",
    "NodeLossRow",
    "PreemptionRow",
    "RayJobRow",
    "ResizeRow",
    "ResumeRow",
    "Row",
    "RunDetail",
    "RunInfo",
    "RunSummary",
    "TransitionRow",
    "WorkerRow",
    "json_value",
]

UNREADABLE = "UNREADABLE"
"""The status of a group or run whose stream cannot be folded (the reason is its ``error``)."""
ARCHIVED = "ARCHIVED"
"""The status a listing gives an archived run (:class:`ArchivedRunSummary`): its events are in
the archive's files, which a listing does not read; ``wgstore runs RUN`` reads them."""


def json_value(value: Any) -> Any:
    """``value`` as the JSON-ready data of a row's field: a row its :meth:`Row.to_json`, a tuple
    or list a list of those; anything else as it is."""
    if isinstance(value, Row):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [json_value(item) for item in value]
    return value


class Row:
    """What every row has: :meth:`to_json`."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready data: one key per field, in field order (:func:`json_value`)."""
        return {f.name: json_value(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


# ------------------------------------------------------------------------ worker groups


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary(Row):
    """One worker group as ``wgstore groups`` lists it.

    ``run_id`` is None for a group that belongs to no run; a group whose stream cannot be folded
    has status :data:`UNREADABLE`, the reason in ``error`` and every other field None.
    """

    group_id: str
    run_id: str | None = None
    attempt: int | None = None
    status: str
    outcome: str | None = None
    num_workers: int | None = None
    running_workers: int | None = None
    """Workers running now (:func:`~wgstore.projections.views.running_now`)."""
    requested_at: datetime | None = None
    updated_at: datetime | None = None
    shut_down_at: datetime | None = None
    train_fn: str | None = None
    reports: int | None = None
    """Reports of every rank."""
    error: str | None = None

    @classmethod
    def unreadable(cls, group_id: str, error: str) -> GroupSummary:
        """The summary of a group whose stream cannot be folded."""
        return cls(group_id=group_id, status=UNREADABLE, error=error)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRow(Row):
    """One worker of a group: placement, status at the latest poll, reports, latest metrics."""

    rank: int
    node: str
    """``"<node_rank> <node_ip>"``."""
    node_rank: int
    node_ip: str
    pid: int
    status: str
    """``started``, ``running``, ``finished``, ``error``, or how it ended at the shutdown."""
    error: str
    """The first line of its error, ``""`` when none."""
    reports: int
    metrics: Mapping[str, Any]
    """Its latest reported metrics."""


# ------------------------------------------------------------------------ runs


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedRank(Row):
    """One rank's error: in a run's ``failed_ranks`` and in a decision's ``errors``."""

    world_rank: int
    type: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary(Row):
    """One run as ``wgstore runs`` lists it (the columns of ``wg_runs`` it shows, and its lease).

    A run whose stream cannot be folded has status :data:`UNREADABLE`, the reason in ``error``,
    ``orphaned`` False and every other field None.
    """

    run_id: str
    name: str | None = None
    source: str | None = None
    status: str
    controller_state: str | None = None
    attempts: int | None = None
    current_group_id: str | None = None
    worker_group_failures: int | None = None
    max_failures: int | None = None
    start_failures: int | None = None
    controller_failure_limit: int | None = None
    preemption_failures: int | None = None
    max_preemption_failures: int | None = None
    latest_checkpoint: str | None = None
    checkpoint_committed_at: datetime | None = None
    latest_reported_checkpoint: str | None = None
    resumable: bool | None = None
    not_resumable_reason: str | None = None
    min_workers: int | None = None
    """An elastic run's fewest workers (``None``: a fixed run)."""
    current_workers: int | None = None
    """Workers of the attempt holding resources now (0: none)."""
    desired_workers: int | None = None
    """The size the controller last chose (``None`` once the run ended)."""
    orphaned: bool = False
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    """``Type: message`` of the run's error (Ray Train's: its whole ``WorkerGroupError``, every
    rank's traceback); what every view shows in one line is
    :func:`~wgstore.projections.run_facts.run_error_text`."""
    failed_ranks: tuple[FailedRank, ...] = ()
    """Each failed rank's error (``RunErrored.errors``), the user's exceptions."""
    abort_reason: str | None = None

    @classmethod
    def unreadable(cls, run_id: str, error: str) -> RunSummary:
        """The summary of a run whose stream cannot be folded."""
        return cls(run_id=run_id, status=UNREADABLE, error=error)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo(RunSummary):
    """A run's summary and what ``wgstore runs RUN`` shows besides."""

    num_workers: int | None = None
    resources_per_worker: Mapping[str, float] | None = None
    train_fn: str | None = None
    final_group_id: str | None = None
    lease_s: float | None = None
    ray: Mapping[str, Any]
    """What the Ray Train recorder recorded of Ray (job id, ...), ``{}`` for none."""
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedRunSummary(RunSummary):
    """An archived run as a listing shows it, from its batch's manifest alone (the files are not
    read): status :data:`ARCHIVED`, its name, times and how it ended (``ended_as``) from the
    manifest, every other fact None; ``archived_at`` is when its batch left the live log."""

    archived: bool = True
    archive_batch: str
    archived_at: datetime
    ended_as: str | None = None
    """How the run ended (``FINISHED``, ``ERRORED``, ``ABORTED``), as its manifest says."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchivedRunInfo(RunInfo):
    """An archived run's :class:`RunInfo`, folded from its archived events as a live run's is
    from the log, with the batch that holds it and when that batch left the live log."""

    archived: bool = True
    archive_batch: str
    archived_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRow(Row):
    """One decision of the failure policy (``FailureDecisionMade``)."""

    version: int
    at: datetime
    group_id: str
    decision: str
    failure_kind: str
    failures_so_far: int
    limit: int | None
    reason: str
    errors: tuple[FailedRank, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRow(Attempt, Row):
    """One attempt of a run (:class:`~wgstore.projections.run_rows.Attempt`, whose fields come
    first), numbered from 1, with the decisions about it.

    ``status`` is None for a group the controller named whose stream holds no events, and
    :data:`UNREADABLE` (the reason in ``error``) for one that cannot be folded.
    """

    number: int
    decisions: tuple[DecisionRow, ...]

    def to_json(self) -> dict[str, Any]:
        """As :meth:`Row.to_json`, but ``checkpoint_committed_at`` as msgspec writes a time
        (``...Z``), as ``wgstore runs RUN --json`` always printed it."""
        data = Row.to_json(self)
        data["checkpoint_committed_at"] = plain(self.checkpoint_committed_at)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeRow(Row):
    """One size an elastic run's scaling policy chose (``ScalingDecisionMade``)."""

    version: int
    at: datetime
    group_id: str | None
    num_workers: int
    previous_workers: int | None
    cause: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionRow(Row):
    """One preemption notice of nodes under the run's workers (``PreemptionNoticed``)."""

    version: int
    at: datetime
    group_id: str | None
    nodes: Mapping[str, tuple[int, ...]]
    ranks: tuple[int, ...]
    deadline: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLossRow(Row):
    """A Ray node under the run's workers that died (``RayNodeDied``, from Ray's export events:
    ``wgstore ingest ray-export``), with the attempts that had workers on it."""

    at: datetime
    node_id: str
    node_ip: str
    reason: str
    message: str
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RayJobRow(Row):
    """The Ray driver job a run ran under (``RayJobStarted`` / ``RayJobEnded``, from Ray's export
    events): what was run, and where its driver was."""

    job_id: str
    entrypoint: str
    driver_ip: str
    driver_pid: int
    started_at: datetime | None
    ended_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionRow(Row):
    """One change of the controller's state (``ControllerStateChanged``)."""

    version: int
    at: datetime
    from_state: ControllerState
    to_state: ControllerState
    reason: str
    group_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerRow(Row):
    """One controller process that took the run (``ControllerStarted``)."""

    version: int
    at: datetime
    controller_id: str
    host: str
    pid: int
    resumed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeRow(Row):
    """One resume of the run (``RunResumed``)."""

    by: str
    reason: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetail(Row):
    """One run folded from the log: what ``wgstore runs RUN`` and the run pages show."""

    run: RunInfo
    attempts: tuple[AttemptRow, ...]
    decisions: tuple[DecisionRow, ...]
    transitions: tuple[TransitionRow, ...]
    controllers: tuple[ControllerRow, ...]
    resumes: tuple[ResumeRow, ...]
    resizes: tuple[ResizeRow, ...] = ()
    """Every size an elastic run's scaling policy chose, in order."""
    preemptions: tuple[PreemptionRow, ...] = ()
    nodes_lost: tuple[NodeLossRow, ...] = ()
    """Nodes under the run's workers that Ray reported dead (from its export events)."""
    ray_job: RayJobRow | None = None
    """The driver job the run ran under (from Ray's export events), if the log has it."""
