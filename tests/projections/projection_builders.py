"""Build recorded events by hand, so projection tests need no database."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from wgstore.events.errors import UnknownEventTypeError
from wgstore.events.records import RecordedEvent
from wgstore.events.registry import REGISTRY
from wgstore.events.run import (
    ControllerStateChanged,
    FailureDecisionMade,
    RunAborted,
    RunCreated,
    RunErrored,
    RunFinished,
)
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
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkersStarted,
    WorkerStatusChange,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TRAIN_FN = "examples.train:train_fn"


def record(
    stream_id: str,
    version: int,
    event: Any,
    *,
    position: int | None = None,
    recorded_at: datetime | None = None,
) -> RecordedEvent:
    """A RecordedEvent as the store would return it."""
    try:
        info = REGISTRY.by_class(type(event))
        type_name, schema_version = info.name, info.version
    except UnknownEventTypeError:  # unregistered classes make "unknown event" tests
        type_name, schema_version = type(event).__name__, 1
    return RecordedEvent(
        position=version if position is None else position,
        stream_id=stream_id,
        version=version,
        event_id=uuid.uuid4(),
        type=type_name,
        schema_version=schema_version,
        event=event,
        metadata={},
        recorded_at=T0 + timedelta(seconds=version) if recorded_at is None else recorded_at,
        hash="0" * 64,
    )


def error(message: str = "boom") -> ErrorInfo:
    return ErrorInfo(type="RuntimeError", message=message, traceback="Traceback...\n")


def worker(rank: int, *, per_node: int = 2) -> WorkerInfo:
    node = rank // per_node
    return WorkerInfo(
        world_rank=rank,
        local_rank=rank % per_node,
        node_rank=node,
        local_world_size=per_node,
        world_size=0,
        node_id=f"node-{node}",
        node_ip=f"10.0.0.{node + 1}",
        pid=1000 + rank,
        actor_id=f"actor-{rank}",
        actor_name=f"wgstore-g-{rank}",
        gpu_ids=(str(rank % per_node),),
    )


class Stream:
    """Appends events to an in-memory worker-group stream with versions 1, 2, 3...

    Each event is recorded one second after the previous one; ``position`` is the version plus
    ``offset`` so several streams can interleave in a global order when needed.
    """

    def __init__(
        self,
        group_id: str = "g1",
        *,
        num_workers: int = 2,
        offset: int = 0,
        start: datetime = T0,
        step: timedelta = timedelta(seconds=1),
        run_id: str = "r1",
        attempt: int = 1,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.group_id = group_id
        self.stream_id = f"worker-group-{group_id}"
        self.num_workers = num_workers
        self.offset = offset
        self.start = start
        self.step = step
        self.events: list[RecordedEvent] = []
        self.poll_seq = 0
        self.report_index: dict[int, int] = {}

    @property
    def now(self) -> datetime:
        return self.start + self.step * len(self.events)

    def add(self, event: Any) -> RecordedEvent:
        version = len(self.events) + 1
        recorded = record(
            self.stream_id,
            version,
            event,
            position=version + self.offset,
            recorded_at=self.start + self.step * version,
        )
        self.events.append(recorded)
        return recorded

    # builder steps -------------------------------------------------------------------------
    def requested(self, **context: Any) -> Stream:
        ctx = WorkerGroupContext(num_workers=self.num_workers, train_fn=TRAIN_FN, **context)
        self.add(
            WorkerGroupStartRequested(
                group_id=self.group_id, run_id=self.run_id, attempt=self.attempt, context=ctx
            )
        )
        return self

    def placement_group(self) -> Stream:
        self.add(
            PlacementGroupReserved(
                placement_group_id="pg-1",
                name=f"wgstore-{self.group_id}",
                bundles=tuple({"CPU": 1.0} for _ in range(self.num_workers)),
                strategy="PACK",
                wait_s=0.5,
            )
        )
        return self

    def sync_actor(self) -> Stream:
        self.add(SyncActorStarted(actor_id="sync-1", name=f"wgstore-{self.group_id}-sync"))
        return self

    def workers(self) -> Stream:
        infos = tuple(
            replace(worker(r), world_size=self.num_workers) for r in range(self.num_workers)
        )
        self.add(WorkersStarted(workers=infos))
        return self

    def started(self) -> Stream:
        self.add(WorkerGroupStarted(start_time=self.now, startup_s=2.5))
        return self

    def launched(self) -> Stream:
        self.add(TrainingLaunched(train_fn=TRAIN_FN))
        return self

    def running(self) -> Stream:
        """Requested, every builder step, started and launched."""
        return self.requested().placement_group().sync_actor().workers().started().launched()

    def start_failed(
        self,
        stage: StartStage = StartStage.WORKERS,
        released: tuple[str, ...] = ("placement_group",),
    ) -> Stream:
        self.add(
            WorkerGroupStartFailed(stage=stage, error=error("no resources"), released=released)
        )
        return self

    # running -------------------------------------------------------------------------------
    def polled(self, *changes: WorkerStatusChange, unchanged: int = 0) -> Stream:
        self.poll_seq += unchanged + 1
        since = self.now - timedelta(milliseconds=unchanged) if unchanged else None
        self.add(
            WorkerGroupPolled(
                poll_seq=self.poll_seq,
                polled_at=self.now,
                changes=changes,
                unchanged_polls=unchanged,
                unchanged_since=since,
            )
        )
        return self

    def reported(self, rank: int, checkpoint: str | None = None, **metrics: Any) -> Stream:
        index = self.report_index.get(rank, 0) + 1
        self.report_index[rank] = index
        self.add(
            WorkerReported(world_rank=rank, index=index, metrics=metrics, checkpoint=checkpoint)
        )
        return self

    def shutdown_requested(self, reason: str = "done") -> Stream:
        self.add(WorkerGroupShutdownRequested(reason=reason))
        return self

    def shut_down(self, released: tuple[str, ...] = ("workers", "placement_group")) -> Stream:
        self.add(WorkerGroupShutDown(duration_s=0.25, released=released))
        return self


def stopped(rank: int, err: ErrorInfo | None = None) -> WorkerStatusChange:
    """A change: worker ``rank`` stopped, with ``err`` if given."""
    return WorkerStatusChange(world_rank=rank, running=False, error=err)


class RunStream:
    """Appends events to an in-memory run stream."""

    def __init__(self, run_id: str = "r1") -> None:
        self.run_id = run_id
        self.stream_id = f"run-{run_id}"
        self.events: list[RecordedEvent] = []
        self.controller = "INITIALIZING"

    def add(self, event: Any) -> RunStream:
        self.events.append(record(self.stream_id, len(self.events) + 1, event))
        return self

    def created(self) -> RunStream:
        return self.add(RunCreated(run_id=self.run_id, name="demo"))

    def to(self, state: str, group_id: str | None = None, reason: str = "") -> RunStream:
        self.add(
            ControllerStateChanged(
                from_state=self.controller, to_state=state, reason=reason, group_id=group_id
            )
        )
        self.controller = state
        return self

    def decided(self, decision: str, group_id: str, failures: int = 1) -> RunStream:
        return self.add(
            FailureDecisionMade(
                decision=decision, group_id=group_id, reason="worker died", failures_so_far=failures
            )
        )

    def finished(self, group_id: str | None = None) -> RunStream:
        return self.add(RunFinished(group_id=group_id))

    def errored(self, group_id: str | None = None) -> RunStream:
        return self.add(RunErrored(error=error("fatal"), group_id=group_id))

    def aborted(self, reason: str = "SIGINT") -> RunStream:
        return self.add(RunAborted(reason=reason))


def append_stream(store: Any, stream: Stream, *, one_by_one: bool = False) -> list[RecordedEvent]:
    """Append the events of ``stream`` to a real store; return what the store recorded."""
    events = [recorded.event for recorded in stream.events]
    if not one_by_one:
        return list(store.append(stream.stream_id, events))
    recorded: list[RecordedEvent] = []
    for event in events:
        recorded.extend(store.append(stream.stream_id, [event]))
    return recorded


# ---------------------------------------------------------------------------------- hypothesis

_GROUP_IDS = itertools.count(1)


def lifecycles() -> Any:
    """A hypothesis strategy of valid worker-group streams (as :class:`Stream` objects)."""
    from hypothesis import strategies as st

    # The store refuses NUL characters (Postgres cannot hold them in JSON): only storable text.
    storable_text = st.text(
        st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=3
    )

    @st.composite
    def build(draw: Any) -> Stream:
        n = draw(st.integers(1, 4))
        group = f"h{next(_GROUP_IDS)}"  # unique even when hypothesis replays an example
        stream = Stream(group, num_workers=n).requested()
        steps = draw(st.permutations(["placement_group", "sync_actor", "workers"]))
        ending = draw(
            st.sampled_from(["open", "start_failed", "launch_failed", "shutdown", "shut_down"])
        )
        if ending == "start_failed":
            for step in steps[: draw(st.integers(0, 2))]:
                getattr(stream, step)()
            return stream.start_failed(draw(st.sampled_from(list(StartStage))))
        if ending == "open" and draw(st.booleans()):
            for step in steps[: draw(st.integers(0, 3))]:
                getattr(stream, step)()
            return stream
        for step in steps:
            getattr(stream, step)()
        stream.started()
        if ending == "launch_failed":
            return stream.start_failed(StartStage.LAUNCH)
        if draw(st.booleans()):
            stream.launched()
        running = dict.fromkeys(range(n), True)

        def activity(count: int) -> None:
            for _ in range(count):
                if draw(st.booleans()):
                    ranks = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
                    changes = []
                    for rank in ranks:
                        err = error(f"rank {rank}") if draw(st.booleans()) else None
                        changes.append(stopped(rank, err))
                        running[rank] = False
                    stream.polled(*changes, unchanged=draw(st.integers(0, 50)))
                else:
                    metrics = draw(
                        st.dictionaries(
                            st.sampled_from(["loss", "acc", "step"]),
                            st.one_of(st.integers(-5, 5), st.floats(0, 1), storable_text),
                            max_size=3,
                        )
                    )
                    checkpoint = draw(st.one_of(st.none(), st.just("/ckpt/x")))
                    stream.reported(draw(st.integers(0, n - 1)), checkpoint, **metrics)

        activity(draw(st.integers(0, 12)))
        if ending in ("shutdown", "shut_down"):
            stream.shutdown_requested(draw(st.sampled_from(["done", "user", "failure"])))
            activity(draw(st.integers(0, 3)))
            if ending == "shut_down":
                stream.shut_down()
        return stream

    return build()
