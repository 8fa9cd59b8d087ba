"""Ray's ``TrainRunAttempt`` rebuilt from an attempt's log where no real run is needed: an
attempt still waiting for its workers, and one whose start failed (real SQLite store)."""

from __future__ import annotations

from wgstore.events import EventStore, NewEvent
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupContext,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
)
from wgstore.projections.ray_train import ray_train_run_attempt, scheduling_detail


def _requested(store: EventStore, group: str) -> None:
    context = WorkerGroupContext(
        num_workers=2, resources_per_worker={"CPU": 0.5}, train_fn="__main__:train_func"
    )
    event = WorkerGroupStartRequested(group_id=group, run_id="r1", attempt=1, context=context)
    store.append(group_stream(group), [NewEvent(event, metadata={"ray_time_ns": 123})])


def test_an_attempt_waiting_for_its_workers_is_pending_with_rays_text(sqlite_url: str) -> None:
    with EventStore.open(sqlite_url) as store:
        _requested(store, "a1")
        attempt = ray_train_run_attempt(list(store.read_stream(group_stream("a1"))))
    assert attempt["status"] == "PENDING"
    assert attempt["status_detail"] == "Scheduling 2 workers, each requiring: {'CPU': 0.5}."
    assert attempt["status_detail"] == scheduling_detail(2, {"CPU": 0.5})
    assert (attempt["start_time_ns"], attempt["end_time_ns"]) == (123, None)
    assert attempt["resources"] == [{"resources": {"CPU": 0.5}}] * 2
    assert attempt["workers"] == []


def test_an_attempt_whose_start_failed_is_errored_with_the_error(sqlite_url: str) -> None:
    with EventStore.open(sqlite_url) as store:
        _requested(store, "a2")
        failed = WorkerGroupStartFailed(
            stage=StartStage.PLACEMENT_GROUP,
            error=ErrorInfo(type="WorkerGroupStartupTimeoutError", message="no resources"),
        )
        store.append(group_stream("a2"), [NewEvent(failed, metadata={"ray_time_ns": 456})])
        attempt = ray_train_run_attempt(list(store.read_stream(group_stream("a2"))))
    assert attempt["status"] == "ERRORED"
    assert attempt["status_detail"] == "WorkerGroupStartupTimeoutError: no resources"
    assert attempt["end_time_ns"] == 456
