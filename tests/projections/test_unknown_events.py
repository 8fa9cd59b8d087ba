"""Unregistered event types in the log, and a rebuild that fails: the read models stay whole.

The folds step over an :class:`~wgstore.events.UnknownEvent` inside their own stream; the
projector reads only ``worker-group-*`` streams; a rebuild that fails part way rolls back and
leaves every read-model row (and the checkpoint) as it was, on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from projection_builders import RunStream, Stream, append_stream, record, stopped

from wgstore.events import EventDecodeError, EventRegistry, EventStore, UnknownEvent, event_type
from wgstore.events.worker_group import WorkerGroupShutdownRequested
from wgstore.projections import (
    ProjectionError,
    catch_up_read_models,
    project_run,
    project_worker_group,
    rebuild_read_models,
)
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION, read_model_rows
from wgstore.projections.read_models import wg_worker_groups

OTHER_PROGRAM = EventRegistry()


@event_type("CheckpointPinned", version=1, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class CheckpointPinned:
    path: str


# wgstore's streams (run-, worker-group-) take only wgstore's types (events/streams.py), so a type
# this reader does not know gets there from a newer wgstore: this one stands for such a type.
CheckpointPinned.__module__ = "wgstore.events.newer"


def _pinned(stream_id: str, version: int) -> Any:
    """A recorded event of a type this process does not know, as the store returns it."""
    return record(stream_id, version, UnknownEvent("CheckpointPinned", 1, {"path": "/ckpt"}))


def _with_unknown(events: list[Any], at: int) -> list[Any]:
    """``events`` with an unknown event inserted at index ``at`` (later versions shifted)."""
    stream_id = events[0].stream_id
    shifted = [
        record(stream_id, e.version + 1, e.event, recorded_at=e.recorded_at) for e in events[at:]
    ]
    return [*events[:at], _pinned(stream_id, at + 1), *shifted]


# ---------------------------------------------------------------------------------- pure folds


@pytest.mark.parametrize("at", [1, 3, 6, 8])
def test_the_worker_group_fold_steps_over_an_unknown_event_anywhere_after_the_first(
    at: int,
) -> None:
    stream = Stream(num_workers=2).running().polled().reported(0, loss=0.5)
    stream.polled(stopped(0), stopped(1)).shutdown_requested("done").shut_down()
    plain = project_worker_group(stream.events)
    mixed = project_worker_group(_with_unknown(stream.events, at))
    assert mixed.version == plain.version + 1
    assert (mixed.status, mixed.outcome, mixed.reports_total) == (
        plain.status,
        plain.outcome,
        plain.reports_total,
    )


def test_an_unknown_event_after_the_end_of_a_group_is_stepped_over() -> None:
    stream = Stream().running().shutdown_requested("done").shut_down()
    state = project_worker_group(stream.events)
    after = project_worker_group([_pinned(stream.stream_id, state.version + 1)], state)
    assert after.status is state.status and after.version == state.version + 1


def test_a_known_event_out_of_place_is_still_an_error() -> None:
    stream = Stream().running().shutdown_requested("done").shut_down()
    state = project_worker_group(stream.events)
    late = record(stream.stream_id, state.version + 1, WorkerGroupShutdownRequested(reason="x"))
    with pytest.raises(ProjectionError, match="already SHUT_DOWN"):
        project_worker_group([late], state)


def test_an_unknown_event_must_still_come_in_version_order() -> None:
    stream = Stream().running()
    state = project_worker_group(stream.events)
    with pytest.raises(ProjectionError, match="out of order"):
        project_worker_group([_pinned(stream.stream_id, state.version + 2)], state)


@pytest.mark.parametrize("at", [1, 2, 3])
def test_the_run_fold_steps_over_an_unknown_event(at: int) -> None:
    run = RunStream().created().to("SCHEDULING").to("RUNNING", group_id="g1").finished("g1")
    plain = project_run(run.events)
    mixed = project_run(_with_unknown(run.events, at))
    assert (mixed.status, mixed.groups, mixed.version) == (
        plain.status,
        plain.groups,
        plain.version + 1,
    )
    ended = project_run([_pinned(run.stream_id, mixed.version + 1)], mixed)
    assert ended.ended and ended.version == mixed.version + 1


# ---------------------------------------------------------------------------------- the projector


def _stream(group_id: str) -> Stream:
    return Stream(group_id, start=datetime.now(UTC), step=timedelta(milliseconds=1))


def _groups(store: EventStore, count: int) -> int:
    """Append ``count`` whole group lifecycles; return how many events that was."""
    appended = 0
    for index in range(count):
        stream = _stream(f"g{index}").running().polled().reported(0, loss=0.5)
        appended += len(append_stream(store, stream.shutdown_requested("done").shut_down()))
    return appended


def _corrupt_last(store: EventStore, stream_id: str) -> int:
    """Append a known event to ``stream_id`` and make its stored payload undecodable."""
    [recorded] = store.append(stream_id, [WorkerGroupShutdownRequested(reason="fine")])
    with store.engine.begin() as connection:
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events DISABLE TRIGGER USER")
        else:
            connection.exec_driver_sql("DROP TRIGGER IF EXISTS wg_events_no_update")
        connection.execute(
            sa.text("UPDATE wg_events SET data = :data WHERE position = :p").bindparams(
                sa.bindparam("data", type_=sa.JSON if store.is_postgres else sa.Text)
            ),
            {
                "data": {"reason": 42} if store.is_postgres else '{"reason": 42}',
                "p": recorded.position,
            },
        )
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events ENABLE TRIGGER USER")
    return recorded.position


def _read_models(store: EventStore) -> Any:
    with store.engine.connect() as connection:
        return read_model_rows(connection)


def test_a_rebuild_that_fails_midway_leaves_the_read_models_as_they_were(
    store: EventStore,
) -> None:
    _groups(store, 6)
    catch_up_read_models(store)
    before = _read_models(store)
    checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    assert len(before["wg_worker_groups"]) == 6
    # A later group whose stream holds an event of a known type that no longer decodes.
    late = _stream("late").running()
    append_stream(store, late)
    position = _corrupt_last(store, late.stream_id)
    with pytest.raises(EventDecodeError) as raised:
        rebuild_read_models(store, batch_size=4)  # several batches are applied before it
    assert raised.value.position == position
    assert _read_models(store) == before
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == checkpoint
    with store.engine.connect() as connection:
        rows = connection.execute(sa.select(sa.func.count()).select_from(wg_worker_groups))
        assert rows.scalar_one() == 6


def test_the_projector_never_reads_streams_it_does_not_own(store: EventStore) -> None:
    appended = _groups(store, 2)
    # A known type stored corrupt in a stream that is not a worker group's, and unknown types.
    _corrupt_last(store, "audit-1")
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        other.append("run-42", [CheckpointPinned(path="/ckpt/3")])
        other.append("worker-group-g0", [CheckpointPinned(path="/ckpt/g0")])
    # the groups' events and the pinned ones (run-42 is read, and is not a run: no row)
    assert catch_up_read_models(store) == appended + 2
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()
    caught_up = _read_models(store)
    assert [row[0] for row in caught_up["wg_worker_groups"]] == ["g0", "g1"]
    error_at = list(wg_worker_groups.c.keys()).index("projection_error")
    assert all(row[error_at] is None for row in caught_up["wg_worker_groups"])
    rebuild_read_models(store)
    assert _read_models(store) == caught_up
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()


def test_the_checkpoint_reaches_the_head_when_the_log_ends_with_other_streams(
    store: EventStore,
) -> None:
    _groups(store, 1)
    catch_up_read_models(store)
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        for index in range(3):
            other.append(f"notes-{index}", [CheckpointPinned(path=str(index))])
    assert catch_up_read_models(store) == 0
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()


def test_appends_go_on_while_a_rebuild_folds_the_log_and_are_caught_up_after(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wgstore.projections import projector

    _groups(store, 3)
    catch_up_read_models(store)
    impatient = EventStore.open(store.url, busy_timeout_s=0.2)  # SQLite: fail after 0.2 s
    fold_batch = projector.apply_read_model_batch
    appended: list[str] = []

    def append_then_fold(own: EventStore, connection: Any, batch: list[Any]) -> None:
        if len(appended) < 3:  # the first batches: the rebuild is folding the log
            group_id = f"during-{len(appended)}"
            append_stream(impatient, _stream(group_id).running())  # must not wait for it
            appended.append(group_id)
        fold_batch(own, connection, batch)

    monkeypatch.setattr(projector, "apply_read_model_batch", append_then_fold)
    try:
        rebuild_read_models(store, batch_size=8)
    finally:
        impatient.close()
    monkeypatch.undo()
    assert len(appended) == 3
    groups = [row[0] for row in _read_models(store)["wg_worker_groups"]]
    assert set(groups) == {"g0", "g1", "g2", *appended}
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()
    after = _read_models(store)
    rebuild_read_models(store)
    assert _read_models(store) == after
