"""Time travel, snapshots and poll history read from a real store (SQLite file and Postgres)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projection_builders import RunStream, Stream, append_stream, error, lifecycles, stopped

from wgstore.events.schema import wg_snapshots
from wgstore.events.worker_group import WorkerGroupPolled
from wgstore.projections import (
    ProjectionError,
    RunStatus,
    StreamNotFoundError,
    WorkerGroupStatus,
    fold_poll_history,
    load_snapshot,
    poll_history,
    project_worker_group,
    run_state,
    save_snapshot,
    worker_group_state,
)
from wgstore.projections.snapshots import STATE_SCHEMA


def _now_stream(group_id: str = "g1", num_workers: int = 2) -> Stream:
    return Stream(
        group_id, num_workers=num_workers, start=datetime.now(UTC), step=timedelta(milliseconds=1)
    )


class TestTimeTravel:
    def test_the_latest_state_equals_the_fold_of_the_stored_stream(self, store: Any) -> None:
        stream = _now_stream().running().polled(stopped(0)).reported(1, loss=0.1)
        recorded = append_stream(store, stream)
        state = worker_group_state(store, "g1")
        assert state == project_worker_group(recorded)
        assert state.version == len(recorded)
        assert state.position == recorded[-1].position

    def test_the_state_after_version_k_equals_folding_the_first_k_events(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running().polled().shutdown_requested())
        for k in range(1, len(recorded) + 1):
            assert worker_group_state(store, "g1", version=k) == project_worker_group(recorded[:k])

    def test_the_state_at_a_moment_holds_every_event_recorded_until_then(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running(), one_by_one=True)
        for k, event in enumerate(recorded, start=1):
            assert worker_group_state(store, "g1", at=event.recorded_at).version >= k
        assert worker_group_state(store, "g1", at=recorded[2].recorded_at) == (
            project_worker_group([e for e in recorded if e.recorded_at <= recorded[2].recorded_at])
        )

    def test_a_moment_before_the_group_existed_is_not_found(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().requested())
        with pytest.raises(StreamNotFoundError, match="has no events at"):
            worker_group_state(store, "g1", at=recorded[0].recorded_at - timedelta(seconds=1))

    def test_a_moment_before_the_group_existed_leaves_no_read_open(self, store: Any) -> None:
        """The error's traceback keeps the function's frame: a stream read it stopped early
        must be closed there, not left holding a pooled connection mid-query (on Postgres a
        garbage collection that finalizes that connection first waited on the query's lock
        forever: 300 s of the suite, until pytest-timeout's alarm broke it)."""
        stream = _now_stream().requested()
        for _ in range(5):
            stream.polled()
        recorded = append_stream(store, stream, one_by_one=True)
        held = store.engine.pool.checkedout()  # the store's own writer connection
        with pytest.raises(StreamNotFoundError) as caught:
            worker_group_state(store, "g1", at=recorded[0].recorded_at - timedelta(seconds=1))
        assert caught.value.__traceback__ is not None  # still alive here
        assert store.engine.pool.checkedout() == held

    def test_an_unknown_group_is_not_found(self, store: Any) -> None:
        with pytest.raises(StreamNotFoundError, match="'nope' has no events"):
            worker_group_state(store, "nope")

    def test_a_version_past_the_end_of_the_stream_is_not_found(self, store: Any) -> None:
        append_stream(store, _now_stream().requested())
        with pytest.raises(StreamNotFoundError, match="is at version 1"):
            worker_group_state(store, "g1", version=5)

    def test_a_version_below_one_is_refused(self, store: Any) -> None:
        with pytest.raises(ValueError, match="version must be 1 or more"):
            worker_group_state(store, "g1", version=0)

    def test_a_stored_stream_the_fold_refuses_raises_with_its_position(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running().shut_down())
        with pytest.raises(ProjectionError) as caught:
            worker_group_state(store, "g1")
        assert caught.value.position == recorded[-1].position


class TestSnapshots:
    def test_reading_a_long_stream_saves_a_snapshot_and_later_reads_start_from_it(
        self, store: Any
    ) -> None:
        stream = _now_stream().running()
        for _ in range(30):
            stream.reported(0, loss=1.0)
        recorded = append_stream(store, stream)
        state = worker_group_state(store, "g1", snapshot_every=10)
        snapshot = load_snapshot(store, "worker-group-g1")
        assert snapshot == state
        more = store.append("worker-group-g1", [e.event for e in stream.reported(1).events[-1:]])
        assert worker_group_state(store, "g1") == project_worker_group([*recorded, *more])

    def test_a_snapshot_is_not_used_for_a_moment_before_it(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running(), one_by_one=True)
        save_snapshot(store, project_worker_group(recorded))
        past = worker_group_state(store, "g1", at=recorded[1].recorded_at)
        assert past.version == 2
        assert worker_group_state(store, "g1", version=3).version == 3

    def test_a_snapshot_of_another_schema_is_ignored_and_rebuilt(self, store: Any) -> None:
        stream = _now_stream().running()
        recorded = append_stream(store, stream)
        with store.engine.begin() as connection:
            connection.execute(
                wg_snapshots.insert().values(
                    name="worker_group",
                    stream_id="worker-group-g1",
                    stream_version=len(recorded),
                    schema="WorkerGroupState/0/old",
                    state=_json(connection, {"status": "RUNNING", "lies": True}),
                    created_at=datetime.now(UTC),
                )
            )
        assert load_snapshot(store, "worker-group-g1") is None
        state = worker_group_state(store, "g1", snapshot_every=1)
        assert state == project_worker_group(recorded)
        assert _snapshot_schema(store) == STATE_SCHEMA

    def test_a_snapshot_that_no_longer_decodes_is_ignored(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running())
        with store.engine.begin() as connection:
            connection.execute(
                wg_snapshots.insert().values(
                    name="worker_group",
                    stream_id="worker-group-g1",
                    stream_version=len(recorded),
                    schema=STATE_SCHEMA,
                    state=_json(connection, {"status": 7}),
                    created_at=datetime.now(UTC),
                )
            )
        assert load_snapshot(store, "worker-group-g1") is None
        assert worker_group_state(store, "g1") == project_worker_group(recorded)

    def test_a_snapshot_never_moves_backwards(self, store: Any) -> None:
        recorded = append_stream(store, _now_stream().running())
        save_snapshot(store, project_worker_group(recorded))
        save_snapshot(store, project_worker_group(recorded[:2]))
        snapshot = load_snapshot(store, "worker-group-g1")
        assert snapshot is not None and snapshot.version == len(recorded)

    def test_a_read_only_store_reads_but_never_writes_snapshots(
        self, store: Any, store_url: str
    ) -> None:
        from wgstore.events import EventStore

        stream = _now_stream().running()
        append_stream(store, stream)
        with EventStore.open(store_url, read_only=True) as reader:
            assert worker_group_state(reader, "g1", snapshot_every=1).status is (
                WorkerGroupStatus.RUNNING
            )
        assert load_snapshot(store, "worker-group-g1") is None


def _json(connection: sa.Connection, value: Any) -> Any:
    import json

    return value if connection.dialect.name == "postgresql" else json.dumps(value)


def _snapshot_schema(store: Any) -> str:
    with store.engine.connect() as connection:
        return str(connection.execute(sa.select(wg_snapshots.c.schema)).scalar())


class TestPollHistory:
    def test_the_stored_history_equals_the_pure_fold(self, store: Any) -> None:
        stream = _now_stream(num_workers=3).running().polled().polled(stopped(2, error()))
        recorded = append_stream(store, stream.polled(stopped(0), stopped(1), unchanged=3))
        history = poll_history(store, "g1")
        assert history == fold_poll_history(recorded)
        assert [h.status.num_running for h in history] == [3, 2, 0]

    def test_a_window_gives_the_same_records_as_the_full_history(self, store: Any) -> None:
        stream = _now_stream(num_workers=4).running()
        stream.polled(stopped(3))
        for i in range(40):
            stream.polled(stopped(i % 3) if i == 25 else stopped(3), unchanged=i % 4) if (
                i in (10, 25)
            ) else stream.polled(unchanged=1)
        append_stream(store, stream, one_by_one=True)
        full = poll_history(store, "g1")
        since = full[20].polled_at
        until = full[35].polled_at
        window = poll_history(store, "g1", since=since, until=until)
        assert window == [r for r in full if since <= r.polled_at <= until]
        assert window[0].status == full[20].status

    def test_a_group_that_never_started_workers_has_no_polls(self, store: Any) -> None:
        append_stream(store, _now_stream().requested())
        assert poll_history(store, "g1", since=datetime.now(UTC)) == []
        assert poll_history(store, "g1") == []

    def test_the_history_of_an_unknown_group_is_not_found(self, store: Any) -> None:
        with pytest.raises(StreamNotFoundError):
            poll_history(store, "nope")
        with pytest.raises(StreamNotFoundError):
            poll_history(store, "nope", since=datetime.now(UTC))


def test_the_run_state_is_read_from_its_stream(store: Any) -> None:
    run = RunStream().created().to("SCHEDULING").to("RUNNING", "g1").finished("g1")
    store.append(run.stream_id, [e.event for e in run.events])
    assert run_state(store, "r1").status is RunStatus.FINISHED
    assert run_state(store, "r1", version=2).status is RunStatus.SCHEDULING
    with pytest.raises(StreamNotFoundError):
        run_state(store, "nope")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lifecycles(), st.data())
def test_time_travel_to_version_k_equals_folding_the_first_k_events(
    store: Any, stream: Stream, data: st.DataObject
) -> None:
    recorded = append_stream(store, stream)
    k = data.draw(st.integers(1, len(recorded)))
    group = stream.group_id
    assert worker_group_state(store, group, version=k) == project_worker_group(recorded[:k])
    save_snapshot(store, project_worker_group(recorded[:k]))
    assert worker_group_state(store, group) == project_worker_group(recorded)


def test_sliding_windows_start_from_a_saved_base_and_match_the_full_history(store: Any) -> None:
    stream = _now_stream(num_workers=3).running()
    append_stream(store, stream)
    for i in range(1, 61):  # polls recorded as a live executor would: polled, then appended
        time.sleep(0.003)
        changes = (stopped(i % 3, error() if i == 41 else None),) if i in (5, 20, 41) else ()
        poll = WorkerGroupPolled(poll_seq=i, polled_at=datetime.now(UTC), changes=changes)
        store.append(stream.stream_id, [poll])
    full = poll_history(store, "g1")
    for first in (10, 30, 25, 50):  # 25 lies before the base saved by 30: rebuilt from scratch
        since = full[first].polled_at
        window = poll_history(store, "g1", since=since, save_base_every=5, clock_skew=timedelta(0))
        assert window == [r for r in full if r.polled_at >= since]
    with store.engine.connect() as connection:
        names = connection.execute(sa.select(wg_snapshots.c.name)).scalars().all()
    assert "poll_history" in names


class TestAutomaticSnapshots:
    """The projector's per-batch snapshots serve ``worker_group_state`` too: no snapshot call."""

    def test_the_latest_state_starts_from_the_projectors_snapshot_and_stays_exact(
        self, store: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from wgstore.projections import catch_up_read_models

        stream = _now_stream().running().polled(stopped(0)).reported(1, loss=0.1)
        recorded = append_stream(store, stream)
        catch_up_read_models(store)
        assert load_snapshot(store, "worker-group-g1") is None  # nobody saved one by hand
        tail = store.append("worker-group-g1", [stream.reported(1, loss=0.05).events[-1].event])
        read_from: list[int] = []
        read_stream = store.read_stream

        def spy(stream_id: str, from_version: int = 1, to_version: int | None = None) -> Any:
            read_from.append(from_version)  # a spy on the real reader, not a stand-in for it
            return read_stream(stream_id, from_version, to_version)

        monkeypatch.setattr(store, "read_stream", spy)
        state = worker_group_state(store, "g1")
        assert read_from == [len(recorded) + 1]
        assert state == project_worker_group([*recorded, *tail])

    def test_a_snapshot_at_the_streams_version_is_the_state_with_no_read_of_the_stream(
        self, store: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The stream's version comes with the snapshot (one statement): at the snapshot's, the
        stream is not read; one event later, only that event is."""
        from wgstore.projections import catch_up_read_models

        stream = _now_stream().running().polled(stopped(0)).reported(1, loss=0.1)
        recorded = append_stream(store, stream)
        catch_up_read_models(store)  # the projector's snapshot, at the stream's version
        read_from: list[int] = []
        read_stream = store.read_stream

        def spy(stream_id: str, from_version: int = 1, to_version: int | None = None) -> Any:
            read_from.append(from_version)  # a spy on the real reader, not a stand-in for it
            return read_stream(stream_id, from_version, to_version)

        monkeypatch.setattr(store, "read_stream", spy)
        assert worker_group_state(store, "g1") == project_worker_group(recorded)
        assert worker_group_state(store, "g1", version=len(recorded)).version == len(recorded)
        with pytest.raises(StreamNotFoundError):
            worker_group_state(store, "g1", version=len(recorded) + 1)
        assert read_from == []
        tail = store.append("worker-group-g1", [stream.reported(1, loss=0.05).events[-1].event])
        assert worker_group_state(store, "g1") == project_worker_group([*recorded, *tail])
        assert read_from == [len(recorded) + 1]

    def test_the_newer_of_the_two_snapshots_wins(self, store: Any) -> None:
        from wgstore.projections import catch_up_read_models

        recorded = append_stream(store, _now_stream().running().polled(stopped(0)))
        save_snapshot(store, project_worker_group(recorded[:2]))  # an old hand-made snapshot
        catch_up_read_models(store)  # the projector's, at the head
        from wgstore.projections.snapshots import load_latest_snapshot

        latest = load_latest_snapshot(store, "worker-group-g1")
        assert latest is not None and latest.version == len(recorded)
        assert load_latest_snapshot(store, "worker-group-g1", max_version=2) == (
            project_worker_group(recorded[:2])
        )
