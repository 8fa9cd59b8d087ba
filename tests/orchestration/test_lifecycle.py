"""Worker groups on a real local Ray, recorded on SQLite and Postgres: a whole run's exact event
sequence and the workers' keyed appends on both, the other scenarios on one each, taking turns
(``ON_SQLITE`` / ``ON_POSTGRES``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.orchestration.conftest import (
    ON_POSTGRES,
    ON_SQLITE,
    REPO,
    assert_nothing_left,
    make_context,
)
from wgstore.events.worker_group import stream_id_for_group
from wgstore.orchestration import WorkerGroup
from wgstore.orchestration.executor.commands import command_id_for
from wgstore.orchestration.worker_group import follow_group
from wgstore.projections import TrainingOutcome, WorkerGroupStatus, iter_poll_history

pytestmark = [pytest.mark.ray, pytest.mark.slow]

START_EVENTS = [
    "WorkerGroupStartRequested",
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
    "TrainingLaunched",
]


def events_of(store: Any, group_id: str) -> list[Any]:
    return list(store.read_stream(stream_id_for_group(group_id)))


def test_a_four_worker_run_to_completion_records_the_exact_event_sequence(
    store: Any, executor: Any
) -> None:
    group = WorkerGroup.create(store, make_context(4, config={"steps": 5}), executor=executor)
    assert len(group) == 4
    final = group.wait(timeout_s=60)
    assert final.finished and final.errors == {}
    state = group.shutdown(reason="done")

    events = events_of(store, group.group_id)
    types = [e.type for e in events]
    assert types[:6] == START_EVENTS
    assert types[-2:] == ["WorkerGroupShutdownRequested", "WorkerGroupShutDown"]
    assert set(types[6:-2]) == {"WorkerReported", "WorkerGroupPolled"}

    start_id = str(command_id_for("StartWorkerGroup", events[0].event_id))
    assert [e.metadata["causation_id"] for e in events[1:6]] == [start_id] * 5
    shutdown_id = str(command_id_for("ShutdownWorkerGroup", events[-2].event_id))
    assert events[-1].metadata["causation_id"] == shutdown_id
    for record in (e for e in events if e.type == "WorkerReported"):  # written by the worker
        assert record.metadata["causation_id"] == start_id
        assert record.metadata["source"] == "worker"
        assert record.metadata["world_rank"] == record.event.world_rank
        assert record.metadata["actor"].startswith(f"wgstore-{group.group_id}-")

    workers = events[3].event.workers
    assert [
        (w.world_rank, w.local_rank, w.node_rank, w.world_size, w.local_world_size) for w in workers
    ] == [(rank, rank, 0, 4, 4) for rank in range(4)]
    reports = [e.event for e in events if e.type == "WorkerReported"]
    for rank in range(4):
        assert [r.index for r in reports if r.world_rank == rank] == [0, 1, 2, 3, 4]
        assert [r.metrics["step"] for r in reports if r.world_rank == rank] == [1, 2, 3, 4, 5]
    losses = [r.metrics["loss"] for r in reports if r.world_rank == 0]
    assert losses[-1] < losses[0]  # it really trains

    last_poll = [e.event for e in events if e.type == "WorkerGroupPolled"][-1]
    assert {(c.world_rank, c.running) for c in last_poll.changes} <= {(r, False) for r in range(4)}
    assert state.status is WorkerGroupStatus.SHUT_DOWN
    assert state.outcome is TrainingOutcome.FINISHED
    assert state.reports_total == 20
    assert sorted(state.released) == sorted(
        [f"actor:wgstore-{group.group_id}-{i}" for i in range(4)]
        + [f"actor:wgstore-{group.group_id}-sync", f"placement_group:wgstore-{group.group_id}"]
    )
    assert_nothing_left(group.group_id)


@ON_SQLITE
def test_a_train_fn_raising_on_one_rank_records_the_error_with_its_traceback(
    store: Any, executor: Any
) -> None:
    context = make_context(2, config={"steps": 200, "fail_rank": 1, "fail_at_step": 2})
    group = WorkerGroup.create(store, context, executor=executor)
    status = group.wait(timeout_s=60)

    assert list(status.errors) == [1]
    error = status.errors[1]
    assert error.type == "RuntimeError"
    assert "rank 1 failed at step 2" in error.message
    assert "examples/train.py" in error.traceback and "raise RuntimeError" in error.traceback
    assert not status.worker_statuses[1].running
    assert group.poll_status().errors == status.errors
    # as Ray prints it: the user's traceback, starting at the train function (no wgstore frame)
    text = group.poll_status().get_error_string()
    assert text.startswith("[Rank 1 Error Snippet]:\nTraceback (most recent call last):\n")
    first_frame = text.splitlines()[2]
    assert "examples/train.py" in first_frame, first_frame
    assert text.rstrip().endswith("RuntimeError: rank 1 failed at step 2 (fail_rank)")

    state = group.shutdown(reason="worker error")
    assert state.outcome is TrainingOutcome.ERRORED
    assert state.error is not None and state.error.type == "RuntimeError"
    assert_nothing_left(group.group_id)


@ON_POSTGRES
def test_a_worker_process_that_dies_is_marked_failed_by_the_health_check(
    store: Any, executor: Any
) -> None:
    context = make_context(2, config={"steps": 200, "exit_rank": 0, "fail_at_step": 2})
    group = WorkerGroup.create(store, context, executor=executor)
    status = group.wait(timeout_s=60)

    assert list(status.errors) == [0]
    assert status.errors[0].type == "WorkerHealthCheckFailedError"
    assert "A worker health check failed" in status.errors[0].message
    assert status.worker_statuses[0].running is False
    group.shutdown(reason="worker died")
    assert_nothing_left(group.group_id)


@ON_SQLITE
def test_shutdown_during_training_stops_it_and_releases_everything(
    store: Any, executor: Any
) -> None:
    context = make_context(2, train_fn="examples.train:sleepy_fn", config={"seconds": 120})
    group = WorkerGroup.create(store, context, executor=executor)
    follow_group(store, None, group.group_id, lambda s: s.reports_total >= 2, timeout_s=30)

    began = time.monotonic()
    state = group.shutdown(reason="asked by a person")
    assert time.monotonic() - began < 60  # not the train function's 120 s: it was stopped
    assert state.status is WorkerGroupStatus.SHUT_DOWN
    assert state.shutdown_reason == "asked by a person"
    assert state.outcome is TrainingOutcome.ABORTED
    assert state.poll_status is None or not state.poll_status.finished
    assert_nothing_left(group.group_id)
    assert group.shutdown().status is WorkerGroupStatus.SHUT_DOWN  # idempotent


@ON_POSTGRES
def test_a_steady_run_rebuilds_every_status_change_from_its_poll_history(
    store: Any, executor: Any
) -> None:
    context = make_context(
        3,
        train_fn="examples.train:sleepy_fn",
        config={"seconds": 0.3, "stagger_s": 0.8},
        poll_interval_s=0.1,
    )
    group = WorkerGroup.create(store, context, executor=executor)
    group.wait(timeout_s=60)
    group.shutdown()

    history = list(iter_poll_history(events_of(store, group.group_id)))
    stopped_at = {}
    for record in history:
        for change in record.changes:
            assert change.running is False and change.error is None
            assert change.world_rank not in stopped_at  # each worker stops exactly once
            stopped_at[change.world_rank] = record.poll_seq
    assert sorted(stopped_at) == [0, 1, 2]
    assert stopped_at[0] < stopped_at[1] < stopped_at[2]  # staggered: three separate changes

    previous = 0
    for record in history:  # every poll is accounted for, recorded or counted
        assert record.poll_seq == previous + record.unchanged_polls + 1
        previous = record.poll_seq
    assert sum(r.polls for r in history) == history[-1].poll_seq
    assert len(history) < history[-1].poll_seq / 3  # most polls cost no event at all
    assert history[-1].status.finished


def test_a_poll_hanging_past_the_health_check_timeout_marks_the_worker_failed(
    sqlite_url: str, ray_up: None
) -> None:
    from wgstore.events import EventStore
    from wgstore.orchestration import RayExecutor
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

    context = make_context(
        2, train_fn="examples.train:sleepy_fn", config={"seconds": 60}, health_check_timeout_s=1.0
    )
    with EventStore.open(sqlite_url) as store:
        runtime = RayRuntime(failpoints={"poll_hang": 1})
        executor = RayExecutor(store, runtime=runtime, extra_sys_path=[str(REPO)])
        with executor:
            group = WorkerGroup.create(store, context, executor=executor)
            status = group.wait(timeout_s=60)
            assert list(status.errors) == [1]
            assert status.errors[1].type == "WorkerHealthCheckTimeoutError"
            assert "hanging for more than 1 seconds" in status.errors[1].message
            assert status.worker_statuses[1].running  # as Ray Train: still running, but failed
            assert status.worker_statuses[0] == status.worker_statuses[0].__class__(running=True)
            group.shutdown()
        assert executor.errors == []
    assert_nothing_left(group.group_id)


def test_reports_written_by_workers_carry_the_stores_mac_so_a_keyed_verify_passes(
    store_url: str, ray_up: None
) -> None:
    from wgstore.events import EventStore
    from wgstore.orchestration import RayExecutor

    key = b"test-key-of-the-writers"
    with EventStore.open(store_url, hmac_key=key) as keyed:
        with RayExecutor(keyed, extra_sys_path=[str(REPO)]) as ex:
            group = WorkerGroup.create(keyed, make_context(2, config={"steps": 2}), executor=ex)
            group.wait(timeout_s=60)
            group.shutdown(reason="done")
        assert ex.errors == []
        reports = [e for e in events_of(keyed, group.group_id) if e.type == "WorkerReported"]
        assert len(reports) == 4
        assert {e.metadata["source"] for e in reports} == {"worker"}
        report = keyed.verify(hmac_key=key)
        assert report.ok, report.problems
        wrong = keyed.verify(hmac_key=b"another key")
        assert not wrong.ok


@ON_SQLITE
def test_what_the_train_function_returns_is_recorded_per_rank(store: Any, executor: Any) -> None:
    context = make_context(2, train_fn="tests.orchestration.parity_fns:returning_fn")
    group = WorkerGroup.create(store, context, executor=executor)
    status = group.wait(timeout_s=60)

    assert status.finished and status.errors == {}
    expected = {r: {"rank": r, "loss": 0.5 / (r + 1), "steps": [1, 2]} for r in (0, 1)}
    assert status.return_values == expected
    state = group.shutdown(reason="done")
    assert state.return_values == expected and state.return_value == expected[0]
    # read back from the log alone, as another process would
    from wgstore.projections.state import project_worker_group

    again = project_worker_group(store.read_stream(state.stream_id))
    assert again.return_values == expected
    assert again.poll_status is not None
    assert again.poll_status.worker_statuses[1].return_value == expected[1]


@ON_POSTGRES
def test_a_return_value_the_log_cannot_hold_is_a_clear_worker_error(
    store: Any, executor: Any
) -> None:
    context = make_context(1, train_fn="tests.orchestration.parity_fns:unjsonable_fn")
    group = WorkerGroup.create(store, context, executor=executor)
    status = group.wait(timeout_s=60)

    assert list(status.errors) == [0]
    assert status.errors[0].type == "TypeError"
    assert "returned a value of type 'object'" in status.errors[0].message
    assert "JSON-able" in status.errors[0].message
    assert group.shutdown(reason="done").return_values == {}
