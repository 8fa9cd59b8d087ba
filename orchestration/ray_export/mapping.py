"""Ray's export events as wgstore's events: the mapping, pure (no files, no database).

Ray's train state actor exports the whole ``TrainRun`` or ``TrainRunAttempt`` each time it
changes (``EXPORT_TRAIN_RUN``, ``EXPORT_TRAIN_RUN_ATTEMPT``): a series of snapshots, not of
changes. :class:`ExportMapper` keeps, per stream, the state the readers' own fold gives, and
turns each snapshot into the events that take that state to what the snapshot says, the same
events the recording callback writes (``RunCreated``, ``ControllerStateChanged``,
``WorkerGroupStartRequested``, ``WorkersStarted``, ...), each with the metadata
``source="ray_export"``, ``ray_export_event_id`` and ``ray_time_ns``. A snapshot that says
nothing new produces nothing, so a line read twice changes nothing.

What Ray's export events do not carry is left out, not made up: there is no train loop, no
metrics, no checkpoints and no polls, so such a run is listed, watched and audited, never resumed
(``RunState.source``); the placement group and sync actor of an attempt are recorded without ids
(the fold needs the builder's steps; ``""``: not exported). A worker's error is Ray's attempt
status detail (``[Rank N Error Snippet]`` parts, by rank).

Nodes (``EXPORT_NODE``) and driver jobs (``EXPORT_DRIVER_JOB``) become ``RayNodeStarted`` /
``RayNodeDied`` and ``RayJobStarted`` / ``RayJobEnded`` on streams of their own. Ids are in Ray's
hex form (the export files write bytes ids as base64), as Ray's state API and the callback show
them.

A run whose stream the recording callback wrote (``source="ray_train"``) is the callback's: the
mapper writes nothing to its streams (the callback has everything the export says, and more), so a
run recorded both ways is one run. The callback writes its first events only once training has
started (its ``hold_s``, at most 30 s), so a run not yet in the log is held back
(:attr:`ExportMapper.claim_wait_s`, 45 s after Ray started it) before the mapper records it
itself; should the callback still come later, it finds the stream begun and writes nothing
(``BackgroundWriter``), so no stream is ever written by both.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from wgstore.events.ray_cluster import (
    RayExportEventKept,
    RayJobEnded,
    RayJobStarted,
    RayNodeDied,
    RayNodeStarted,
    job_stream,
    kept_stream,
    node_stream,
)
from wgstore.events.records import NewEvent, RecordedEvent
from wgstore.events.run import (
    ControllerStarted,
    ControllerState,
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    RetryDecision,
    RunAborted,
    RunCreated,
    RunErrored,
    RunFinished,
    ScalingConfig,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    GROUP_RESOURCES,
    ErrorInfo,
    PlacementGroupReserved,
    StartStage,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.orchestration.ray_train.stream_guard import StreamGuard
from wgstore.projections.event_time import RAY_EXPORT_SOURCE, RAY_TRAIN_SOURCE
from wgstore.projections.ray_train import DETAILED_STATES
from wgstore.projections.run_state import RunState, evolve_run
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, evolve

__all__ = [
    "EXPORTED_SCHEMA_VERSION",
    "NOT_EXPORTED_TRAIN_FN",
    "RAY_EXPORT_SOURCE",
    "SOURCE_TYPES",
    "ExportEvent",
    "ExportMapper",
    "hex_id",
]

EXPORTED_SCHEMA_VERSION = 4
"""The newest ``schema_version`` of Ray's Train export this wgstore maps whole (Ray 2.60)."""

NOT_EXPORTED_TRAIN_FN = "wgstore.orchestration.ray_export.mapping:train_fn_not_exported"
"""The train function an exported attempt is recorded with: Ray's export has none."""

TRAIN_RUN = "EXPORT_TRAIN_RUN"
TRAIN_RUN_ATTEMPT = "EXPORT_TRAIN_RUN_ATTEMPT"
NODE = "EXPORT_NODE"
DRIVER_JOB = "EXPORT_DRIVER_JOB"
SOURCE_TYPES = (TRAIN_RUN, TRAIN_RUN_ATTEMPT, NODE, DRIVER_JOB)
"""The export source types the mapper reads; lines of any other type are skipped."""

_KNOWN_FIELDS: Mapping[str, frozenset[str]] = {
    TRAIN_RUN: frozenset(
        [
            "schema_version",
            "id",
            "name",
            "job_id",
            "controller_actor_id",
            "status",
            "status_detail",
            "start_time_ns",
            "end_time_ns",
            "controller_log_file_path",
            "ray_train_version",
            "train_run_panels",
            "train_worker_panels",
            "framework_versions",
            "run_settings",
        ]
    ),
    TRAIN_RUN_ATTEMPT: frozenset(
        [
            "schema_version",
            "run_id",
            "attempt_id",
            "status",
            "status_detail",
            "start_time_ns",
            "end_time_ns",
            "resources",
            "workers",
            "ray_train_version",
        ]
    ),
    NODE: frozenset(
        [
            "node_id",
            "node_manager_address",
            "state",
            "resources_total",
            "node_name",
            "start_time_ms",
            "end_time_ms",
            "is_head_node",
            "labels",
            "death_info",
        ]
    ),
    DRIVER_JOB: frozenset(
        [
            "job_id",
            "is_dead",
            "driver_pid",
            "config",
            "start_time",
            "end_time",
            "entrypoint",
            "driver_ip_address",
        ]
    ),
}
_WORKER_FIELDS = frozenset(
    [
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
    ]
)
_TERMINAL_ATTEMPT = frozenset({"FINISHED", "ERRORED", "ABORTED"})
_RANK_SNIPPET = re.compile(r"^\[Rank(?:s)? ([\d, ]+) Error Snippet\]:\n", re.MULTILINE)


def train_fn_not_exported(config: Mapping[str, Any]) -> None:
    """Stands for the train function of a run recorded from Ray's export events (which carry
    none): such a run is not resumed, and this raises if it is ever called."""
    raise RuntimeError(
        "this run was recorded from Ray's export events, which do not carry the train "
        "function: record it with wgstore's RecordingCallback to resume it"
    )


def hex_id(value: Any) -> str:
    """A Ray id as Ray's state API shows it (hex) from the export's base64 form."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value  # not base64: kept as written


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class ExportEvent:
    """One line of an export file: Ray's envelope and its ``event_data``."""

    event_id: str
    timestamp: int
    source_type: str
    data: Mapping[str, Any]
    where: str = ""
    """``file:line`` it was read from (for what is reported about it)."""

    @property
    def time_ns(self) -> int:
        """When Ray wrote it (the envelope's seconds), in ns."""
        return self.timestamp * 1_000_000_000


@dataclass
class MappedBatch:
    """What a batch of export events produced: new events per stream, in order, and the version
    each touched stream was at before them (the append's expected versions)."""

    events: dict[str, list[NewEvent]] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    held: list[ExportEvent] = field(default_factory=list)
    """Run snapshots held back: the run may still be recorded by the callback."""
    problems: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many events were produced."""
        return sum(len(v) for v in self.events.values())


Loader = Callable[[str], Sequence[RecordedEvent]]
"""Reads a stream's stored events (empty when there is none)."""


@dataclass
class _Stream:
    guard: StreamGuard
    version: int
    owner: str | None  # the source of its first event


class ExportMapper:
    """Turns export events into wgstore's events, stream by stream, folding as it goes.

    Args:
        load: reads a stream as stored (called once per stream until :meth:`forget`).
        attempts_of: the attempt ids of a run in the log, in order (the groups whose
            ``WorkerGroupStartRequested`` names it): asked once for each run found in the log.
        claim_wait_s: how long after Ray started a run (its ``start_time_ns``) the mapper
            holds the run's lines for the recording callback to record it, before it records
            the run itself, whatever the lines say (the callback writes once training started,
            or at the end of a run that ended before). 0: never wait (no run on the cluster
            uses the callback).
    """

    def __init__(
        self,
        load: Loader,
        *,
        claim_wait_s: float = 45.0,
        attempts_of: Callable[[str], Sequence[str]] = lambda run_id: (),
    ) -> None:
        self._load = load
        self._find_attempts = attempts_of
        self.claim_wait_s = claim_wait_s
        self._streams: dict[str, _Stream] = {}
        self._attempts_of: dict[str, list[str]] = {}
        self._restarts: dict[str, int] = {}

    def forget(self) -> None:
        """Drop every cached stream (after another writer wrote some: read them again)."""
        self._streams.clear()
        self._attempts_of.clear()
        self._restarts.clear()

    def settle(self) -> None:
        """Drop the streams of ended runs (their groups included) once what was mapped is in the
        log: a line about one later reads it again. Keeps a follower's memory (and the garbage
        collector's work) to the runs under way."""
        for stream_id, stream in list(self._streams.items()):
            state = stream.guard.state
            if stream_id.startswith("run-") and isinstance(state, RunState) and state.ended:
                run_id = stream_id[len("run-") :]
                for attempt_id in self._attempts_of.pop(run_id, ()):
                    self._streams.pop(group_stream(attempt_id), None)
                self._restarts.pop(run_id, None)
                del self._streams[stream_id]

    def absent(self, stream_ids: Iterable[str]) -> None:
        """Streams the caller found missing from the log: known empty, not read one by one."""
        for stream_id in stream_ids:
            if stream_id not in self._streams:
                self._streams[stream_id] = _Stream(self._guard(stream_id), 0, None)

    def cached(self, stream_id: str) -> bool:
        """Whether the mapper holds the stream (read or mapped since the last :meth:`forget`)."""
        return stream_id in self._streams

    # ------------------------------------------------------------------ streams

    @staticmethod
    def _guard(stream_id: str) -> StreamGuard:
        if stream_id.startswith("run-"):
            return StreamGuard(stream_id, evolve_run)
        if stream_id.startswith("worker-group-"):
            return StreamGuard(stream_id, evolve)
        return StreamGuard(stream_id, _keep)

    def _stream(self, stream_id: str) -> _Stream:
        known = self._streams.get(stream_id)
        if known is not None:
            return known
        guard = self._guard(stream_id)
        records = list(self._load(stream_id))
        guard.fold_stored(records)
        owner = str(records[0].metadata.get("source") or "") if records else None
        if records and stream_id.startswith("run-"):
            self._attempts_of[stream_id[len("run-") :]] = list(
                self._find_attempts(stream_id[len("run-") :])
            )
        known = _Stream(guard, len(records), owner)
        self._streams[stream_id] = known
        return known

    def _emit(
        self, batch: MappedBatch, stream_id: str, events: Iterable[Any], meta: Mapping[str, Any]
    ) -> None:
        stream = self._stream(stream_id)
        new = [NewEvent(event, metadata=dict(meta)) for event in events]
        if not new:
            return
        admitted, refused = stream.guard.admit(new)
        for reason in refused:
            batch.problems.append(f"{stream_id}: not recorded, its fold refuses {reason}")
        if not admitted:
            return
        if stream_id not in batch.expected:
            batch.expected[stream_id] = stream.version
        if stream.owner is None:
            stream.owner = RAY_EXPORT_SOURCE
        stream.version += len(admitted)
        batch.events.setdefault(stream_id, []).extend(admitted)

    def _callbacks(self, stream_id: str) -> bool:
        """True when the recording callback wrote the stream: it is not the mapper's."""
        return self._stream(stream_id).owner == RAY_TRAIN_SOURCE

    # ------------------------------------------------------------------ mapping

    def map(self, events: Iterable[ExportEvent], now_ns: int) -> MappedBatch:
        """The events ``events`` produce, given every stream as loaded and mapped so far.

        ``now_ns``: the wall clock, for the callback's claim on a run (``claim_wait_s``): every
        line of a run not yet in the log whose claim has not passed is held back, in order
        (:attr:`MappedBatch.held`), to be mapped again later.
        """
        events = list(events)
        batch = MappedBatch()
        ready = self._ready_runs(events, now_ns)
        for event in events:
            run_id = _run_of(event)
            if run_id and run_id not in ready:
                batch.held.append(event)
                continue
            self._kept(batch, event)
            if event.source_type == TRAIN_RUN:
                self._run(batch, event)
            elif event.source_type == TRAIN_RUN_ATTEMPT:
                self._attempt(batch, event)
            elif event.source_type == NODE:
                self._node(batch, event)
            elif event.source_type == DRIVER_JOB:
                self._job(batch, event)
        return batch

    def _ready_runs(self, events: list[ExportEvent], now_ns: int) -> set[str]:
        """The runs whose lines are mapped now: in the log already, or past the callback's
        claim (``claim_wait_s`` after the run started, by Ray's clock)."""
        ready: set[str] = set()
        for event in events:
            run_id = _run_of(event)
            if not run_id or run_id in ready:
                continue
            if self.claim_wait_s <= 0 or self._stream(run_stream(run_id)).guard.state is not None:
                ready.add(run_id)
                continue
            started = _int(event.data.get("start_time_ns")) or event.time_ns
            if now_ns - started >= self.claim_wait_s * 1e9:
                ready.add(run_id)
        return ready

    def _kept(self, batch: MappedBatch, event: ExportEvent) -> None:
        data = event.data
        known = _KNOWN_FIELDS.get(event.source_type, frozenset())
        unknown = sorted(set(data) - known)
        for worker in data.get("workers") or () if event.source_type == TRAIN_RUN_ATTEMPT else ():
            if isinstance(worker, Mapping):
                unknown += sorted(f"workers.{k}" for k in set(worker) - _WORKER_FIELDS)
        version = _int(data.get("schema_version"))
        newer = event.source_type in (TRAIN_RUN, TRAIN_RUN_ATTEMPT) and (
            version > EXPORTED_SCHEMA_VERSION
        )
        if not unknown and not newer:
            return
        kept = RayExportEventKept(
            event_id=event.event_id,
            source_type=event.source_type,
            timestamp=event.timestamp,
            schema_version=version,
            unknown_fields=tuple(sorted(set(unknown))),
            event_data=dict(data),
        )
        self._emit(batch, kept_stream(event.source_type), [kept], _meta(event))

    # -------------------------------------------------------------- runs

    def _run(self, batch: MappedBatch, event: ExportEvent) -> None:
        data = event.data
        run_id = str(data.get("id") or "")
        if not run_id:
            batch.problems.append(f"{event.where}: an EXPORT_TRAIN_RUN without an id")
            return
        stream_id = run_stream(run_id)
        if self._callbacks(stream_id):
            return
        state: RunState | None = self._stream(stream_id).guard.state
        status = str(data.get("status") or "")
        meta = _meta(event)
        out: list[Any] = []
        if state is None:
            started_ns = _int(data.get("start_time_ns")) or event.time_ns  # (ns, not the line's s)
            created = [_run_created(data), _controller_started(data)]
            self._emit(batch, stream_id, created, {**meta, "ray_time_ns": started_ns})
            current = ControllerState.INITIALIZING
        else:
            if state.ended:
                return
            current = state.controller_state
        if status not in ControllerState.__members__ or status == current.value:
            self._emit(batch, stream_id, out, meta)
            if status and status not in ControllerState.__members__:
                batch.problems.append(f"{event.where}: run status {status!r} is not known here")
            return
        target = ControllerState(status)
        attempts = self._attempts_of.get(run_id) or list(_groups_of(state))
        group_id = attempts[-1] if attempts else None
        if target is ControllerState.RESTARTING and group_id is not None:
            failures = self._restarts.get(run_id, _restarts_in(state)) + 1
            self._restarts[run_id] = failures
            failure = _failure_config(data)
            out.append(
                FailureDecisionMade(
                    decision=RetryDecision.RETRY.value,
                    group_id=group_id,
                    reason="Ray Train restarts the run: the attempt failed",
                    failures_so_far=failures,
                    limit=failure.max_failures,
                )
            )
        detail = str(data.get("status_detail") or "")
        out.append(
            ControllerStateChanged(
                from_state=current,
                to_state=target,
                reason=detail if status in DETAILED_STATES else "",
                group_id=group_id,
            )
        )
        end_meta = dict(meta)
        if target.is_terminal and data.get("end_time_ns"):
            end_meta["ray_time_ns"] = _int(data.get("end_time_ns"))
        if target is ControllerState.FINISHED:
            out.append(RunFinished(group_id=group_id))
        elif target is ControllerState.ERRORED:
            error = ErrorInfo(type="TrainingFailedError", message=detail or "unknown")
            out.append(RunErrored(error=error, group_id=group_id))
        elif target is ControllerState.ABORTED:
            out.append(RunAborted(reason=detail or "aborted"))
        self._emit(batch, stream_id, out, end_meta if target.is_terminal else meta)

    # ---------------------------------------------------------- attempts

    def _attempt(self, batch: MappedBatch, event: ExportEvent) -> None:
        data = event.data
        run_id = str(data.get("run_id") or "")
        attempt_id = str(data.get("attempt_id") or "")
        if not run_id or not attempt_id:
            batch.problems.append(f"{event.where}: an attempt without its run or attempt id")
            return
        run_id_stream = run_stream(run_id)
        run = self._stream(run_id_stream)
        if run.owner == RAY_TRAIN_SOURCE:
            return
        status = str(data.get("status") or "PENDING")
        stream_id = group_stream(attempt_id)
        if self._callbacks(stream_id):
            return
        state: WorkerGroupState | None = self._stream(stream_id).guard.state
        meta = {**_meta(event), "ray_attempt_id": attempt_id}
        out: list[Any] = []
        resources = [
            dict((r or {}).get("resources") or {}) if isinstance(r, Mapping) else {}
            for r in data.get("resources") or ()
        ]
        workers = [w for w in data.get("workers") or () if isinstance(w, Mapping)]
        if state is None:
            attempts = self._attempts_of.setdefault(run_id, list(_groups_of(run.guard.state)))
            attempts.append(attempt_id)
            out.append(_start_requested(run, run_id, attempt_id, len(attempts), resources, data))
            start_meta = {**meta, "ray_time_ns": _int(data.get("start_time_ns")) or event.time_ns}
            self._emit(batch, stream_id, out, start_meta)
            out = []
            state = self._stream(stream_id).guard.state
        if state is None or state.status.is_terminal:
            return
        if workers and not state.workers:
            # the builder's steps; WorkersStarted with what Ray's TrainWorker keeps beside the
            # ranks (the callback's metadata keys, which ray_train_run_attempt reads)
            steps = _started(run.guard.state, workers, resources, data, event)
            self._emit(batch, stream_id, steps[:2], meta)
            worker_meta = {
                **meta,
                "ray_worker_log_file_paths": [w.get("log_file_path") for w in workers],
                "ray_worker_resources": [
                    dict(dict(w.get("resources") or {}).get("resources") or {}) for w in workers
                ],
            }
            self._emit(batch, stream_id, steps[2:3], worker_meta)
            out += steps[3:]
        if status in _TERMINAL_ATTEMPT:
            out += _ended(state, workers, status, str(data.get("status_detail") or ""), event)
        end_meta = dict(meta)
        if status in _TERMINAL_ATTEMPT and data.get("end_time_ns"):
            end_meta["ray_time_ns"] = _int(data.get("end_time_ns"))
        self._emit(batch, stream_id, out, end_meta)

    # ------------------------------------------------------- nodes, jobs

    def _node(self, batch: MappedBatch, event: ExportEvent) -> None:
        data = event.data
        node_id = hex_id(data.get("node_id"))
        if not node_id:
            batch.problems.append(f"{event.where}: an EXPORT_NODE without a node id")
            return
        stream_id = node_stream(node_id)
        seen: dict[str, Any] = self._stream(stream_id).guard.state or {}
        out: list[Any] = []
        if "RayNodeStarted" not in seen:
            out.append(
                RayNodeStarted(
                    node_id=node_id,
                    node_ip=str(data.get("node_manager_address") or ""),
                    node_name=str(data.get("node_name") or ""),
                    is_head_node=bool(data.get("is_head_node")),
                    start_time_ms=_int(data.get("start_time_ms")),
                    resources_total={
                        str(k): float(v) for k, v in dict(data.get("resources_total") or {}).items()
                    },
                    labels={str(k): str(v) for k, v in dict(data.get("labels") or {}).items()},
                )
            )
        if str(data.get("state") or "ALIVE") == "DEAD" and "RayNodeDied" not in seen:
            death = dict(data.get("death_info") or {})
            out.append(
                RayNodeDied(
                    node_id=node_id,
                    end_time_ms=_int(data.get("end_time_ms")),
                    reason=str(death.get("reason") or ""),
                    reason_message=str(death.get("reason_message") or ""),
                )
            )
        self._emit(batch, stream_id, out, _meta(event))

    def _job(self, batch: MappedBatch, event: ExportEvent) -> None:
        data = event.data
        job_id = hex_id(data.get("job_id"))
        if not job_id:
            batch.problems.append(f"{event.where}: an EXPORT_DRIVER_JOB without a job id")
            return
        stream_id = job_stream(job_id, _int(data.get("start_time")))
        seen: dict[str, Any] = self._stream(stream_id).guard.state or {}
        out: list[Any] = []
        if "RayJobStarted" not in seen:
            config = dict(data.get("config") or {})
            out.append(
                RayJobStarted(
                    job_id=job_id,
                    entrypoint=str(data.get("entrypoint") or ""),
                    driver_ip=str(data.get("driver_ip_address") or ""),
                    driver_pid=_int(data.get("driver_pid")),
                    start_time_ms=_int(data.get("start_time")),
                    metadata={
                        str(k): str(v) for k, v in dict(config.get("metadata") or {}).items()
                    },
                )
            )
        if data.get("is_dead") and "RayJobEnded" not in seen:
            out.append(RayJobEnded(job_id=job_id, end_time_ms=_int(data.get("end_time"))))
        self._emit(batch, stream_id, out, _meta(event))


def _keep(state: dict[str, Any] | None, record: RecordedEvent) -> dict[str, Any]:
    """The fold of a fact stream (nodes, jobs, kept events): which event types it has."""
    return {**(state or {}), record.type: record.event}


def streams_of(event: ExportEvent) -> list[str]:
    """The streams mapping ``event`` may read or write (its kept stream aside)."""
    data = event.data
    if event.source_type == TRAIN_RUN:
        return [run_stream(str(data.get("id") or ""))]
    if event.source_type == TRAIN_RUN_ATTEMPT:
        return [
            run_stream(str(data.get("run_id") or "")),
            group_stream(str(data.get("attempt_id") or "")),
        ]
    if event.source_type == NODE:
        return [node_stream(hex_id(data.get("node_id")))]
    if event.source_type == DRIVER_JOB:
        return [job_stream(hex_id(data.get("job_id")), _int(data.get("start_time")))]
    return []


def _run_of(event: ExportEvent) -> str:
    """The run a Train export event is about (``""`` for nodes and jobs)."""
    if event.source_type == TRAIN_RUN:
        return str(event.data.get("id") or "")
    if event.source_type == TRAIN_RUN_ATTEMPT:
        return str(event.data.get("run_id") or "")
    return ""


def _meta(event: ExportEvent) -> dict[str, Any]:
    return {
        "source": RAY_EXPORT_SOURCE,
        "ray_export_event_id": event.event_id,
        "ray_time_ns": event.time_ns,
    }


def _groups_of(state: RunState | None) -> tuple[str, ...]:
    return () if state is None else state.groups


def _restarts_in(state: RunState | None) -> int:
    return 0 if state is None else len(state.decisions)


def _settings(data: Mapping[str, Any]) -> Mapping[str, Any]:
    settings = data.get("run_settings")
    return settings if isinstance(settings, Mapping) else {}


def _failure_config(data: Mapping[str, Any]) -> FailureConfig:
    failure = dict(dict(_settings(data).get("run_config") or {}).get("failure_config") or {})
    try:
        return FailureConfig(
            max_failures=_int(failure.get("max_failures")),
            controller_failure_limit=int(failure.get("controller_failure_limit", -1)),
        )
    except (TypeError, ValueError):
        return FailureConfig()


def _scaling_config(data: Mapping[str, Any]) -> ScalingConfig | None:
    scaling = dict(_settings(data).get("scaling_config") or {})
    if not scaling:
        return None
    resources = dict(dict(scaling.get("resources_per_worker") or {}).get("values") or {})
    span = dict(scaling.get("num_workers_range") or {})
    try:
        return ScalingConfig(
            num_workers=_int(span.get("max")) if span else _int(scaling.get("num_workers_fixed")),
            resources_per_worker={str(k): float(v) for k, v in resources.items()} or None,
            placement_strategy=str(scaling.get("placement_strategy") or "PACK"),
            min_workers=_int(span.get("min")) if span else None,
        )
    except (TypeError, ValueError):
        return None


def _run_created(data: Mapping[str, Any]) -> RunCreated:
    """``RunCreated`` with what Ray's ``TrainRun`` says (``ray``: the callback's keys)."""
    run_id = str(data.get("id") or "")
    name = str(data.get("name") or "")
    ray: dict[str, Any] = {
        "id": run_id,
        "name": name,
        "job_id": hex_id(data.get("job_id")),
        "controller_actor_id": hex_id(data.get("controller_actor_id")),
        "start_time_ns": _int(data.get("start_time_ns")) or None,
        "controller_log_file_path": data.get("controller_log_file_path"),
        "framework_versions": dict(data.get("framework_versions") or {}),
        "run_settings": dict(_settings(data)),
    }
    return RunCreated(
        run_id=run_id,
        name=name,
        scaling_config=_scaling_config(data),
        failure_config=_failure_config(data),
        context=None,
        ray=ray,
    )


def _controller_started(data: Mapping[str, Any]) -> ControllerStarted:
    """The Ray Train controller, with no lease: nothing of wgstore holds this run."""
    return ControllerStarted(controller_id=hex_id(data.get("controller_actor_id")), lease_s=None)


def _strategy(run: RunState | None) -> str:
    scaling = None if run is None else run.scaling_config
    return scaling.placement_strategy if scaling is not None else "PACK"


def _start_requested(
    run: _Stream,
    run_id: str,
    attempt_id: str,
    attempt: int,
    resources: list[dict[str, Any]],
    data: Mapping[str, Any],
) -> WorkerGroupStartRequested:
    state: RunState | None = run.guard.state
    per_worker = {str(k): float(v) for k, v in (resources[0] if resources else {}).items()}
    config = dict(_settings(data).get("train_loop_config") or {})
    if state is not None:
        config = dict(dict(state.ray.get("run_settings") or {}).get("train_loop_config") or {})
    context = WorkerGroupContext(
        num_workers=max(1, len(resources)),
        resources_per_worker=per_worker,
        train_fn=NOT_EXPORTED_TRAIN_FN,
        train_fn_config=config,
        placement_strategy=_strategy(state),
    )
    return WorkerGroupStartRequested(
        group_id=attempt_id, run_id=run_id, attempt=attempt, context=context
    )


def _worker(worker: Mapping[str, Any], size: int, on_node: Mapping[str, int]) -> WorkerInfo:
    node_id = hex_id(worker.get("node_id"))
    return WorkerInfo(
        world_rank=_int(worker.get("world_rank")),
        local_rank=_int(worker.get("local_rank")),
        node_rank=_int(worker.get("node_rank")),
        local_world_size=on_node.get(node_id, 1),
        world_size=size,
        node_id=node_id,
        node_ip=str(worker.get("node_ip") or ""),
        pid=_int(worker.get("pid")),
        actor_id=hex_id(worker.get("actor_id")),
        actor_name="",
        gpu_ids=tuple(str(g) for g in worker.get("gpu_ids") or ()),
    )


def _started(
    run: RunState | None,
    workers: list[Mapping[str, Any]],
    resources: list[dict[str, Any]],
    data: Mapping[str, Any],
    event: ExportEvent,
) -> list[Any]:
    """The builder's steps of an attempt Ray reports running (ids Ray does not export: ``""``)."""
    on_node: dict[str, int] = {}
    for worker in workers:
        node = hex_id(worker.get("node_id"))
        on_node[node] = on_node.get(node, 0) + 1
    infos = tuple(_worker(w, len(workers), on_node) for w in workers)
    start_ns = _int(data.get("start_time_ns")) or event.time_ns
    started_at = datetime.fromtimestamp(event.timestamp, tz=UTC)
    return [
        PlacementGroupReserved(
            placement_group_id="",
            name="",
            bundles=tuple(resources) or tuple({} for _ in workers),
            strategy=_strategy(run),
        ),
        SyncActorStarted(actor_id="", name=""),
        WorkersStarted(workers=infos),
        WorkerGroupStarted(
            start_time=started_at,
            startup_s=max(0.0, (event.time_ns - start_ns) / 1e9),
        ),
        TrainingLaunched(train_fn=NOT_EXPORTED_TRAIN_FN),
    ]


def rank_errors(detail: str, ranks: Iterable[int]) -> dict[int, ErrorInfo]:
    """The failed ranks' errors in Ray's attempt status detail (``[Rank 0, 1 Error Snippet]:``
    parts); a detail that names no rank is rank 0's."""
    found: dict[int, ErrorInfo] = {}
    marks = list(_RANK_SNIPPET.finditer(detail))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(detail)
        text = detail[mark.end() : end].strip()
        for rank in mark.group(1).split(","):
            if rank.strip().isdigit():
                found[int(rank)] = ErrorInfo(type="RayTrainWorkerError", message=text)
    if not found:
        first = min(ranks, default=0)
        found[first] = ErrorInfo(type="RayTrainWorkerError", message=detail or "unknown")
    return found


def _ended(
    state: WorkerGroupState,
    workers: list[Mapping[str, Any]],
    status: str,
    detail: str,
    event: ExportEvent,
) -> list[Any]:
    """How Ray ended an attempt: its final poll (finished or errored ranks), then the shutdown;
    an attempt that never had workers failed to start (ERRORED) or was stopped."""
    at = datetime.fromtimestamp(event.timestamp, tz=UTC)
    started = bool(state.workers) or bool(workers)
    if not started and status == "ERRORED":
        stage = StartStage.PLACEMENT_GROUP if "placement" in detail.lower() else StartStage.WORKERS
        error = ErrorInfo(type="WorkerGroupStartError", message=detail or "unknown")
        return [WorkerGroupStartFailed(stage=stage, error=error)]
    out: list[Any] = []
    if started and status in ("FINISHED", "ERRORED"):
        ranks = [_int(w.get("world_rank")) for w in workers] or [
            w.world_rank for w in state.workers
        ]
        errors = rank_errors(detail, ranks) if status == "ERRORED" else {}
        out.append(
            WorkerGroupPolled(
                poll_seq=state.last_poll_seq + 1,
                polled_at=at,
                changes=tuple(
                    WorkerStatusChange(world_rank=rank, running=False, error=errors.get(rank))
                    for rank in sorted(set(ranks) | set(errors))
                ),
            )
        )
    if state.status is not WorkerGroupStatus.SHUTTING_DOWN:
        reason = {"FINISHED": "training finished", "ABORTED": detail or "aborted"}.get(
            status, detail
        )
        out.append(WorkerGroupShutdownRequested(reason=reason, abort=status == "ABORTED"))
    out.append(WorkerGroupShutDown(duration_s=0.0, released=GROUP_RESOURCES if started else ()))
    return out
