"""The times of a run recorded from Ray Train are Ray's, not the writer's flush.

``RecordingCallback`` holds Ray's hooks in memory and writes them in batches, so a whole start
lands with one ``recorded_at``. Each event carries when Ray called the hook (``ray_time_ns``):
the fold, the read models and the report use it. Here a group and its run are appended as the
writer appends them (one batch), with Ray's times a minute before the append.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wgstore.events import EventStore, NewEvent
from wgstore.events.records import RecordedEvent
from wgstore.events.run import RunCreated
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkersStarted,
)
from wgstore.projections import run_state, worker_group_state
from wgstore.projections.event_time import event_time
from wgstore.projections.projector import catch_up_read_models
from wgstore.projections.timeline import timeline_data
from wgstore.projections.views import summaries_from_read_models

GROUP = "raygroup01"
RUN = "rayrun01"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def _ray(event: Any, moment: datetime, source: str = "ray_train") -> NewEvent:
    return NewEvent(event, metadata={"source": source, "ray_time_ns": _ns(moment)})


def _record(store: EventStore, t0: datetime) -> list[datetime]:
    """A Ray Train attempt from request to shutdown, Ray's hooks a second apart from ``t0``."""
    worker = WorkerInfo(
        world_rank=0,
        local_rank=0,
        node_rank=0,
        local_world_size=1,
        world_size=1,
        node_id="n",
        node_ip="10.0.0.1",
        pid=1,
        actor_id="a",
        actor_name="w",
    )
    events = [
        WorkerGroupStartRequested(
            group_id=GROUP,
            run_id=RUN,
            context=WorkerGroupContext(num_workers=1, train_fn="__main__:train_func"),
        ),
        PlacementGroupReserved(
            placement_group_id="pg", name="pg", bundles=({"CPU": 1},), strategy="PACK"
        ),
        SyncActorStarted(actor_id="s", name="s"),
        WorkersStarted(workers=(worker,)),
        WorkerGroupStarted(start_time=t0 + timedelta(seconds=4), startup_s=4.0),
        TrainingLaunched(train_fn="__main__:train_func"),
        WorkerGroupPolled(poll_seq=1, polled_at=t0 + timedelta(seconds=6)),
        WorkerGroupShutdownRequested(reason="done"),
        WorkerGroupShutDown(duration_s=0.1),
    ]
    times = [t0 + timedelta(seconds=i) for i in range(len(events))]
    store.append(run_stream(RUN), [_ray(RunCreated(run_id=RUN), t0 - timedelta(seconds=1))])
    store.append(group_stream(GROUP), [_ray(e, t) for e, t in zip(events, times, strict=True)])
    return times


@pytest.fixture
def recorded(store: EventStore) -> tuple[EventStore, list[datetime]]:
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    return store, _record(store, t0)


def test_the_group_fold_takes_rays_times_not_the_flush(recorded: Any) -> None:
    store, times = recorded
    state = worker_group_state(store, GROUP)
    flushed = {r.recorded_at for r in store.read_stream(group_stream(GROUP))}
    assert min(flushed) > times[-1] + timedelta(minutes=4)  # the batch landed minutes later
    assert state.requested_at == times[0]
    assert state.started_at == times[4]
    assert state.training_launched_at == times[5]
    assert state.shutdown_requested_at == times[7]
    assert state.shut_down_at == times[8] == state.updated_at


def test_the_run_fold_and_the_read_models_take_rays_times(recorded: Any) -> None:
    store, times = recorded
    assert run_state(store, RUN).created_at == times[0] - timedelta(seconds=1)
    catch_up_read_models(store)
    summaries = summaries_from_read_models(store)
    assert summaries is not None
    (summary,) = summaries
    assert (summary.requested_at, summary.shut_down_at) == (times[0], times[8])


def test_the_report_timeline_has_a_starting_phase_as_long_as_rays(recorded: Any) -> None:
    store, times = recorded
    data = timeline_data(store, GROUP)
    phases = {p["name"]: p for p in data["phases"]}
    assert list(phases) == ["REQUESTED", "STARTING", "RUNNING", "SHUTTING_DOWN", "SHUT_DOWN"]
    starting = phases["STARTING"]
    assert starting["end"] - starting["start"] == 3000.0  # ms: placement group to started
    assert data["t0"] == times[0].timestamp() * 1000.0


def _record_with(metadata: dict[str, Any]) -> RecordedEvent:
    return RecordedEvent(
        position=1,
        stream_id="s",
        version=1,
        event_id=uuid.uuid4(),
        type="X",
        schema_version=1,
        event=None,
        metadata=metadata,
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        hash="",
    )


def test_only_a_ray_train_event_with_an_integer_ray_time_moves_the_time() -> None:
    ray_ns = _ns(datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)) + 789
    moved = event_time(_record_with({"source": "ray_train", "ray_time_ns": ray_ns}))
    assert moved == datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
    recorded = datetime(2026, 1, 1, tzinfo=UTC)
    for metadata in (
        {},
        {"ray_time_ns": ray_ns},  # not from the recorder: the store's time stands
        {"source": "wgstore", "ray_time_ns": ray_ns},
        {"source": "ray_train", "ray_time_ns": str(ray_ns)},
        {"source": "ray_train", "ray_time_ns": True},
    ):
        assert event_time(_record_with(metadata)) == recorded, metadata
