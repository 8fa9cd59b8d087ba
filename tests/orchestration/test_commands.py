"""derive_commands and command_needed, every branch: pure, no Ray."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from wgstore.events import RecordedEvent
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
    WorkersStarted,
)
from wgstore.orchestration.executor.commands import (
    COMMAND_NAMESPACE,
    Command,
    ReleaseResources,
    ShutdownWorkerGroup,
    StartWorkerGroup,
    command_id_for,
    command_needed,
    derive_commands,
)
from wgstore.projections.state import WorkerGroupState, evolve

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONTEXT = WorkerGroupContext(num_workers=1, train_fn="examples.train:train_fn")
WORKER = WorkerInfo(
    world_rank=0,
    local_rank=0,
    node_rank=0,
    local_world_size=1,
    world_size=1,
    node_id="n1",
    node_ip="10.0.0.1",
    pid=1,
    actor_id="a",
    actor_name="wgstore-g-0",
)


class Stream:
    """Builds a valid worker-group stream event by event, folding the state as it goes."""

    def __init__(self) -> None:
        self.state: WorkerGroupState | None = None
        self.records: list[RecordedEvent] = []

    def add(self, event: Any) -> RecordedEvent:
        record = RecordedEvent(
            position=len(self.records) + 1,
            stream_id="worker-group-g",
            version=len(self.records) + 1,
            event_id=uuid.uuid4(),
            type=type(event).__name__,
            schema_version=1,
            event=event,
            metadata={},
            recorded_at=NOW,
            hash="",
        )
        self.records.append(record)
        self.state = evolve(self.state, record)
        return record


def _started_stream() -> Stream:
    s = Stream()
    s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    s.add(
        PlacementGroupReserved(
            placement_group_id="p", name="wgstore-g", bundles=(), strategy="PACK"
        )
    )
    s.add(SyncActorStarted(actor_id="s", name="wgstore-g-sync"))
    s.add(WorkersStarted(workers=(WORKER,)))
    s.add(WorkerGroupStarted(start_time=NOW, startup_s=1.0))
    return s


def test_a_start_request_derives_one_start_command_with_an_id_from_the_event() -> None:
    s = Stream()
    record = s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    commands = derive_commands(record, s.state)
    assert commands == [
        StartWorkerGroup(
            command_id=command_id_for("StartWorkerGroup", record.event_id),
            group_id="g",
            caused_by=record.event_id,
            context=CONTEXT,
        )
    ]
    assert derive_commands(record, s.state) == commands  # deterministic


def test_every_half_done_builder_step_derives_release_resources_naming_the_next_stage() -> None:
    s = Stream()
    s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    expected = {
        "PlacementGroupReserved": StartStage.SYNC_ACTOR,
        "SyncActorStarted": StartStage.WORKERS,
        "WorkersStarted": StartStage.INIT_TRAIN_CONTEXT,
        "WorkerGroupStarted": StartStage.LAUNCH,
    }
    for event in (
        PlacementGroupReserved(
            placement_group_id="p", name="wgstore-g", bundles=(), strategy="PACK"
        ),
        SyncActorStarted(actor_id="s", name="wgstore-g-sync"),
        WorkersStarted(workers=(WORKER,)),
        WorkerGroupStarted(start_time=NOW, startup_s=1.0),
    ):
        record = s.add(event)
        (command,) = derive_commands(record, s.state)
        assert isinstance(command, ReleaseResources)
        assert command.stage is expected[record.type]
        assert command.command_id == command_id_for("ReleaseResources", record.event_id)


def test_a_launched_group_derives_nothing_more_from_its_builder_steps() -> None:
    s = _started_stream()
    s.add(TrainingLaunched(train_fn=CONTEXT.train_fn))
    assert s.state is not None
    for record in s.records:
        for command in derive_commands(record, s.state):
            assert not command_needed(command, s.state)
    polled = s.add(WorkerGroupPolled(poll_seq=1, polled_at=NOW))
    assert derive_commands(polled, s.state) == []


def test_a_shutdown_request_derives_a_shutdown_command_and_is_not_needed_once_shut_down() -> None:
    s = _started_stream()
    s.add(TrainingLaunched(train_fn=CONTEXT.train_fn))
    record = s.add(WorkerGroupShutdownRequested(reason="done"))
    (command,) = derive_commands(record, s.state)
    assert command == ShutdownWorkerGroup(
        command_id=command_id_for("ShutdownWorkerGroup", record.event_id),
        group_id="g",
        caused_by=record.event_id,
        reason="done",
    )
    assert s.state is not None and command_needed(command, s.state)
    s.add(WorkerGroupShutDown(duration_s=0.1))
    assert not command_needed(command, s.state)


def test_a_start_command_is_not_needed_once_the_start_failed() -> None:
    s = Stream()
    record = s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    (command,) = derive_commands(record, s.state)
    s.add(
        WorkerGroupStartFailed(
            stage=StartStage.PLACEMENT_GROUP, error=ErrorInfo(type="E", message="m")
        )
    )
    assert s.state is not None and not command_needed(command, s.state)


def test_a_start_error_pickles_with_its_stage_cause_group_and_released() -> None:
    import pickle

    from wgstore.orchestration import WorkerGroupStartError

    error = WorkerGroupStartError(
        StartStage.WORKERS,
        ErrorInfo(type="ActorDiedError", message="gone", traceback="tb"),
        group_id="g1",
        released=("actor:wgstore-g1-sync",),
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is WorkerGroupStartError
    assert (copy.stage, copy.cause, copy.group_id, copy.released) == (
        error.stage,
        error.cause,
        error.group_id,
        error.released,
    )
    assert str(copy) == str(error) and "g1" in str(copy) and "'workers'" in str(copy)


# ------------------------------------------------- every branch (found by scripts/mutate.py)

EVENT_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")


def test_command_ids_are_pinned_uuid5_values_of_the_command_type_and_event() -> None:
    start = command_id_for("StartWorkerGroup", EVENT_ID)
    assert start == uuid.UUID("7a0343b7-f1de-538f-b116-16fb5a82e2a1")
    assert start.version == 5
    assert start == uuid.uuid5(COMMAND_NAMESPACE, f"StartWorkerGroup:{EVENT_ID}")


def test_command_ids_differ_by_command_type_and_by_event() -> None:
    other_event = uuid.UUID("00000000-0000-4000-8000-000000000002")
    ids = {
        command_id_for(kind, event)
        for kind in ("StartWorkerGroup", "ShutdownWorkerGroup", "ReleaseResources")
        for event in (EVENT_ID, other_event)
    }
    assert len(ids) == 6
    assert all(isinstance(i, uuid.UUID) and i.version == 5 for i in ids)


def test_each_derived_command_has_the_id_of_its_own_type_and_a_stream_id() -> None:
    s = Stream()
    start = s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    (command,) = derive_commands(start, s.state)
    assert command.command_id == uuid.uuid5(COMMAND_NAMESPACE, f"StartWorkerGroup:{start.event_id}")
    assert command.stream_id == "worker-group-g"

    s = _started_stream()
    stop = s.add(WorkerGroupShutdownRequested(reason="user", abort=True))
    (shutdown,) = derive_commands(stop, s.state)
    assert isinstance(shutdown, ShutdownWorkerGroup)
    assert shutdown.abort is True and shutdown.reason == "user"
    assert shutdown.command_id == uuid.uuid5(
        COMMAND_NAMESPACE, f"ShutdownWorkerGroup:{stop.event_id}"
    )
    assert shutdown.caused_by == stop.event_id and shutdown.group_id == "g"


def test_nothing_is_derived_without_a_state() -> None:
    s = Stream()
    record = s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    assert derive_commands(record, None) == []


def test_a_start_request_replayed_against_a_later_state_derives_nothing() -> None:
    s = _started_stream()
    assert s.state is not None
    assert derive_commands(s.records[0], s.state) == []


def test_a_shutdown_request_replayed_after_the_shutdown_derives_nothing() -> None:
    s = _started_stream()
    record = s.add(WorkerGroupShutdownRequested(reason="done"))
    s.add(WorkerGroupShutDown(duration_s=0.1))
    assert derive_commands(record, s.state) == []


def test_builder_steps_of_a_launched_group_derive_no_release() -> None:
    s = _started_stream()
    s.add(TrainingLaunched(train_fn=CONTEXT.train_fn))
    for record in s.records[1:5]:  # the four builder steps
        assert derive_commands(record, s.state) == []


def test_a_non_builder_event_of_a_half_done_start_derives_no_release() -> None:
    s = _started_stream()  # RUNNING, training not launched: half-done
    polled = s.add(WorkerGroupPolled(poll_seq=1, polled_at=NOW))
    assert derive_commands(polled, s.state) == []


def test_a_start_is_needed_only_while_requested() -> None:
    s = Stream()
    record = s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    (command,) = derive_commands(record, s.state)
    assert s.state is not None and command_needed(command, s.state)
    s = _started_stream()
    assert s.state is not None and not command_needed(command, s.state)


def test_a_shutdown_is_needed_only_while_shutting_down() -> None:
    s = _started_stream()
    record = s.add(WorkerGroupShutdownRequested(reason="done"))
    (command,) = derive_commands(record, s.state)
    assert s.state is not None and command_needed(command, s.state)
    running = _started_stream().state
    assert running is not None and not command_needed(command, running)


def test_a_release_is_needed_while_the_start_is_half_done_and_not_after() -> None:
    s = _started_stream()
    (release,) = derive_commands(s.records[1], s.state)
    assert isinstance(release, ReleaseResources)
    assert s.state is not None and command_needed(release, s.state)  # running, not launched
    starting = Stream()
    starting.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    starting.add(s.records[1].event)  # placement group reserved: STARTING
    assert starting.state is not None and command_needed(release, starting.state)
    s.add(TrainingLaunched(train_fn=CONTEXT.train_fn))
    assert not command_needed(release, s.state)
    failed = Stream()
    failed.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    failed.add(
        WorkerGroupStartFailed(stage=StartStage.WORKERS, error=ErrorInfo(type="E", message="m"))
    )
    assert failed.state is not None and not command_needed(release, failed.state)


def test_a_command_of_no_known_kind_is_never_needed() -> None:
    s = Stream()
    s.add(WorkerGroupStartRequested(group_id="g", run_id="r", context=CONTEXT))
    unknown = Command(command_id=EVENT_ID, group_id="g", caused_by=EVENT_ID)
    assert s.state is not None
    assert command_needed(unknown, s.state) is False


@pytest.mark.parametrize("cls", [Command, StartWorkerGroup, ShutdownWorkerGroup, ReleaseResources])
def test_commands_are_frozen_keyword_only_slotted_values(cls: type) -> None:
    fields = {"command_id": EVENT_ID, "group_id": "g", "caused_by": EVENT_ID}
    extra = {
        StartWorkerGroup: {"context": CONTEXT},
        ShutdownWorkerGroup: {"reason": "r"},
        ReleaseResources: {"stage": StartStage.WORKERS},
    }.get(cls, {})
    command = cls(**fields, **extra)
    with pytest.raises(dataclasses.FrozenInstanceError):
        command.group_id = "other"
    assert not hasattr(command, "__dict__")
    with pytest.raises(TypeError):
        cls(*fields.values(), *extra.values())
    if extra:  # a subclass's own fields are keyword-only too
        with pytest.raises(TypeError):
            cls(*extra.values(), **fields)
