"""An in-memory log and a scripted "world" for testing the pure ``decide`` without I/O.

``SimLog`` keeps the run stream and the group streams as lists of ``RecordedEvent`` (built with
``projection_builders.record``) and appends the way the store does: ``expected_version`` checked,
a batch whose event ids are all stored already is a no-op. ``World`` plays the executor and the
workers on the current group: starts it (or fails its start), reports, finishes, fails, is
preempted, shuts down when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tests.projections.projection_builders import record, worker
from wgstore.events import NO_STREAM, NewEvent
from wgstore.events.records import RecordedEvent
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_id_of, group_stream, run_stream
from wgstore.events.worker_group import (
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
    WorkerReported,
    WorkersStarted,
    WorkerStatusChange,
)
from wgstore.orchestration.polling.recorder import PREEMPTED_NOTE
from wgstore.orchestration.run.decide import Decision, decide
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import WorkerGroupState, project_worker_group

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TRAIN_FN = "examples.train:train_fn"


class Conflict(Exception):
    """The expected version did not hold."""


@dataclass
class SimLog:
    """The run stream and group streams of one run, in memory."""

    run_id: str = "r1"
    streams: dict[str, list[RecordedEvent]] = field(default_factory=dict)
    position: int = 0

    def create(
        self,
        failure_config: FailureConfig,
        num_workers: int = 2,
        checkpoint: str | None = None,
        scaling: ScalingConfig | None = None,
    ) -> None:
        """A run of ``num_workers``, or of ``scaling`` (an elastic range) when given."""
        scaling = scaling or ScalingConfig(num_workers=num_workers)
        context = WorkerGroupContext(
            num_workers=scaling.num_workers, train_fn=TRAIN_FN, resume_checkpoint=checkpoint
        )
        self.append(
            run_stream(self.run_id),
            [
                RunCreated(
                    run_id=self.run_id,
                    scaling_config=scaling,
                    failure_config=failure_config,
                    context=context,
                )
            ],
            NO_STREAM,
        )

    def append(self, stream_id: str, events: list[Any], expected: Any = None) -> None:
        stream = self.streams.setdefault(stream_id, [])
        new = [e if isinstance(e, NewEvent) else NewEvent(e) for e in events]
        stored = {r.event_id for r in stream}
        if new and all(e.event_id is not None and e.event_id in stored for e in new):
            return  # a retried batch: the store returns what it has
        if expected is NO_STREAM and stream:
            raise Conflict(stream_id)
        if isinstance(expected, int) and expected != len(stream):
            raise Conflict(stream_id)
        for item in new:
            self.position += 1
            recorded = record(
                stream_id,
                len(stream) + 1,
                item.event,
                position=self.position,
                recorded_at=T0 + timedelta(seconds=self.position),
            )
            if item.event_id is not None:
                recorded = msgspec.structs.replace(recorded, event_id=item.event_id)
            stream.append(recorded)

    def run(self, version: int | None = None) -> RunState:
        events = self.streams[run_stream(self.run_id)]
        return project_run(events if version is None else events[:version])

    def group(self, group_id: str | None, version: int | None = None) -> WorkerGroupState | None:
        events = self.streams.get(group_stream(group_id)) if group_id else None
        if not events:
            return None
        return project_worker_group(events if version is None else events[:version])

    def groups(self) -> dict[str, WorkerGroupState]:
        return {
            gid: project_worker_group(events)
            for stream_id, events in self.streams.items()
            if (gid := group_id_of(stream_id)) is not None and events
        }

    def apply(self, decision: Decision, *, crash_before_group: bool = False) -> None:
        """Append a decision as the controller does (run events first, then group events)."""
        run = self.run()
        if decision.run_events:
            self.append(run.stream_id, list(decision.run_events), run.version)
        if decision.group_events and not crash_before_group:
            assert decision.group_id is not None
            self.append(
                group_stream(decision.group_id),
                list(decision.group_events),
                decision.group_expected_version,
            )


def health_error(preempted: bool) -> ErrorInfo:
    note = f"\n{PREEMPTED_NOTE}" if preempted else ""
    return ErrorInfo(
        type="WorkerHealthCheckFailedError",
        message=f"A worker health check failed.\nWorker: w\nActorDiedError: gone{note}",
    )


class World:
    """Plays the executor and the workers on one group stream of a :class:`SimLog`."""

    def __init__(self, log: SimLog) -> None:
        self.log = log
        self.reports: dict[str, int] = {}

    def _add(self, group_id: str, *events: Any) -> None:
        self.log.append(group_stream(group_id), list(events))

    def start(self, group: WorkerGroupState, per_node: int = 2) -> None:
        """Start the group: ``per_node`` workers a node (``node-0``, ``node-1`` ...)."""
        n = group.context.num_workers
        infos = tuple(replace(worker(r, per_node=per_node), world_size=n) for r in range(n))
        self._add(
            group.group_id,
            PlacementGroupReserved(
                placement_group_id="pg", name="pg", bundles=({"CPU": 1.0},) * n, strategy="PACK"
            ),
            SyncActorStarted(actor_id="sync", name="sync"),
            WorkersStarted(workers=infos),
            WorkerGroupStarted(start_time=T0, startup_s=1.0),
            TrainingLaunched(train_fn=TRAIN_FN),
        )

    def fail_start(self, group: WorkerGroupState, retryable: bool) -> None:
        if retryable:
            failure = WorkerGroupStartFailed(
                stage=StartStage.PLACEMENT_GROUP,
                error=ErrorInfo(type="PlacementGroupTimeoutError", message="no room"),
            )
        else:
            failure = WorkerGroupStartFailed(
                stage=StartStage.INIT_TRAIN_CONTEXT,
                error=ErrorInfo(type="TrainFnError", message="cannot import"),
            )
        self._add(group.group_id, failure)

    def report(
        self, group: WorkerGroupState, checkpoint: str | None, ranks: list[int] | None = None
    ) -> None:
        """Report ``index`` on every rank (or only ``ranks``: the others died before it)."""
        index = self.reports.get(group.group_id, 0) + 1
        self.reports[group.group_id] = index
        self._add(
            group.group_id,
            *[
                WorkerReported(world_rank=rank, index=index, checkpoint=checkpoint)
                for rank in (range(group.num_workers) if ranks is None else ranks)
            ],
        )

    def poll(self, group: WorkerGroupState, changes: list[WorkerStatusChange]) -> None:
        self._add(
            group.group_id,
            WorkerGroupPolled(
                poll_seq=group.last_poll_seq + 1, polled_at=T0, changes=tuple(changes)
            ),
        )

    def finish(self, group: WorkerGroupState) -> None:
        self.poll(
            group,
            [WorkerStatusChange(world_rank=r, running=False) for r in range(group.num_workers)],
        )

    def fail(self, group: WorkerGroupState, ranks: list[int], preempted: bool = False) -> None:
        changes = [
            WorkerStatusChange(
                world_rank=r,
                running=False,
                error=health_error(preempted)
                if preempted
                else ErrorInfo(type="RuntimeError", message=f"rank {r}"),
            )
            for r in ranks
        ]
        self.poll(group, changes)

    def shut_down(self, group: WorkerGroupState) -> None:
        self._add(group.group_id, WorkerGroupShutDown(duration_s=0.1))

    def external_shutdown(self, group: WorkerGroupState) -> None:
        self._add(group.group_id, WorkerGroupShutdownRequested(reason="someone"))


def step(
    log: SimLog,
    *,
    crash_before_group: bool = False,
    now: datetime = T0,
    cluster: Any = None,
) -> Decision:
    """One controller step on the log (``now`` and ``cluster``: what the controller saw)."""
    run = log.run()
    decision = decide(run, log.group(run.current_group_id), now, cluster)
    log.apply(decision, crash_before_group=crash_before_group)
    return decision
