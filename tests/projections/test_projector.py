"""The projector keeps the SQL read models equal to the fold, each event exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from projection_builders import RunStream, Stream, append_stream, error, stopped

from wgstore.events.schema import wg_runs, wg_snapshots
from wgstore.projections import (
    catch_up_read_models,
    project_worker_group,
    rebuild_read_models,
)
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION, read_model_rows
from wgstore.projections.read_models import (
    wg_poll_history,
    wg_reports,
    wg_worker_groups,
    wg_workers,
)


def _stream(group_id: str, num_workers: int = 2) -> Stream:
    return Stream(
        group_id, num_workers=num_workers, start=datetime.now(UTC), step=timedelta(milliseconds=1)
    )


def _rows(store: Any, table: sa.Table, **where: Any) -> list[dict[str, Any]]:
    query = sa.select(table).order_by(*table.primary_key.columns)
    for name, value in where.items():
        query = query.where(table.c[name] == value)
    with store.engine.connect() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def _utc(value: datetime) -> datetime:
    """A time read back from SQLite (naive, UTC) or Postgres (aware), as aware UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _all_rows(store: Any) -> Any:
    with store.engine.connect() as connection:
        return read_model_rows(connection)


def _lifecycle(store: Any) -> list[Any]:
    stream = _stream("g1", num_workers=3).running().polled()
    stream.reported(0, "/ckpt/1", loss=0.5).reported(1, loss=0.7).reported(0, loss=0.4)
    stream.polled(stopped(2, error("oom")), unchanged=4).shutdown_requested("failure")
    stream.polled(stopped(0), stopped(1), unchanged=1).shut_down()
    return append_stream(store, stream)


def test_catching_up_writes_one_row_per_group_worker_poll_and_report(store: Any) -> None:
    recorded = _lifecycle(store)
    assert catch_up_read_models(store) == len(recorded)
    state = project_worker_group(recorded)
    (group,) = _rows(store, wg_worker_groups)
    assert group["group_id"] == "g1"
    assert (group["status"], group["outcome"]) == ("SHUT_DOWN", "errored")
    assert (group["run_id"], group["attempt"], group["num_workers"]) == ("r1", 1, 3)
    assert (group["running_workers"], group["errored_workers"]) == (0, 1)
    assert (group["recorded_polls"], group["polls_total"], group["last_poll_seq"]) == (3, 8, 8)
    assert group["reports_total"] == 3
    # rank 2 died before it reported: /ckpt/1 was reported, never committed
    assert group["latest_checkpoint"] is None and group["checkpoint_committed_at"] is None
    assert group["latest_reported_checkpoint"] == "/ckpt/1"
    assert (group["error_type"], group["error_message"]) == ("RuntimeError", "oom")
    assert group["shutdown_reason"] == "failure"
    assert group["stream_version"] == state.version
    assert group["last_position"] == state.position
    assert group["projection_error"] is None
    workers = _rows(store, wg_workers)
    assert [w["world_rank"] for w in workers] == [0, 1, 2]
    assert [w["running"] for w in workers] == [False, False, False]
    assert [w["reports"] for w in workers] == [2, 1, 0]
    assert workers[2]["error_message"] == "oom"
    assert workers[0]["last_checkpoint"] == "/ckpt/1"
    assert workers[0]["stopped_at"] is not None
    polls = _rows(store, wg_poll_history)
    assert [(p["poll_seq"], p["running_workers"], p["errored_workers"]) for p in polls] == [
        (1, 3, 0),
        (6, 2, 1),
        (8, 0, 1),
    ]
    reports = _rows(store, wg_reports)
    assert [(r["world_rank"], r["report_index"]) for r in reports] == [(0, 1), (0, 2), (1, 1)]


def test_catching_up_again_applies_nothing_twice(store: Any) -> None:
    _lifecycle(store)
    catch_up_read_models(store)
    before = _all_rows(store)
    assert catch_up_read_models(store) == 0
    assert _all_rows(store) == before


def test_small_batches_and_events_arriving_between_them_give_the_same_rows(store: Any) -> None:
    stream = _stream("g1", num_workers=2).running()
    append_stream(store, stream)
    other = _stream("g2", num_workers=1).requested().placement_group()
    append_stream(store, other)
    catch_up_read_models(store, batch_size=2)
    more = stream.polled().reported(1, loss=1.0).polled(stopped(0), stopped(1))
    store.append(stream.stream_id, [e.event for e in more.events[-3:]])
    catch_up_read_models(store, batch_size=2)
    incremental = _all_rows(store)
    rebuild_read_models(store)
    assert _all_rows(store) == incremental
    assert len(incremental["wg_worker_groups"]) == 2


def test_a_rebuild_from_zero_equals_the_rows_kept_incrementally(store: Any) -> None:
    _lifecycle(store)
    catch_up_read_models(store, batch_size=3)
    kept = _all_rows(store)
    assert rebuild_read_models(store) > 0
    assert _all_rows(store) == kept
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()


def _projector_snapshots(store: Any, stream_ids: list[str]) -> dict[str, Any]:
    """The projector's usable snapshots of ``stream_ids`` (sealed to the log as it is now)."""
    from wgstore.projections.projector import PROJECTOR_SNAPSHOT
    from wgstore.projections.snapshots import load_snapshot, load_snapshots

    with store.engine.connect() as connection:
        loaded = load_snapshots(connection, stream_ids, name=PROJECTOR_SNAPSHOT, log=store)
    for sid, state in loaded.items():  # the one-at-a-time reader agrees, and both are the fold
        assert load_snapshot(store, sid, name=PROJECTOR_SNAPSHOT) == state
        assert state == project_worker_group(store.read_stream(sid, to_version=state.version))
    return loaded


def test_the_projector_seals_a_group_s_snapshot_first_every_so_many_events_and_at_its_end(
    store: Any,
) -> None:
    """Sealed to the hash of the last event it folded, each snapshot opens against the log
    (one that did not would be skipped: right, but slow); a group's first batch saves one, later
    batches only when it is :data:`SNAPSHOT_EVERY` events behind, and the group's end always."""
    from wgstore.projections.projector import SNAPSHOT_EVERY

    streams = [_stream(f"g{n}").running().polled() for n in range(3)]
    for stream in streams:
        append_stream(store, stream)
    catch_up_read_models(store, batch_size=4)
    ids = [stream.stream_id for stream in streams]
    assert set(_projector_snapshots(store, ids)) == set(ids)  # every group's first sight
    busy = streams[1]
    behind = []
    for n in range(2 * SNAPSHOT_EVERY + 5):
        store.append(busy.stream_id, [busy.reported(n % 2, loss=float(n)).events[-1].event])
        catch_up_read_models(store)
        snapshot = _projector_snapshots(store, [busy.stream_id])[busy.stream_id]
        behind.append(store.stream_version(busy.stream_id) - snapshot.version)
    assert max(behind) == SNAPSHOT_EVERY - 1  # never further behind than that
    assert behind.count(0) == 2  # sealed twice in 2 x SNAPSHOT_EVERY + 5 events
    ended = busy.shutdown_requested().shut_down()
    store.append(busy.stream_id, [event.event for event in ended.events[-2:]])
    catch_up_read_models(store)
    final = _projector_snapshots(store, [busy.stream_id])[busy.stream_id]
    assert final.version == store.stream_version(busy.stream_id)
    assert final.status.is_terminal


def test_a_projector_continues_from_memory_and_from_an_older_snapshot_to_the_same_rows(
    store: Any, store_url: str, monkeypatch: Any
) -> None:
    """A process's projector keeps the groups it folded last and reads nothing of them for
    the next batch; a projector of another process (another store object, nothing in memory)
    starts from the snapshot, folds the events since, and writes the same rows as a rebuild."""
    from wgstore.events import EventStore
    from wgstore.projections import projector

    loaded: list[list[str]] = []
    real_load = projector.load_snapshots

    def counted_load(connection: Any, stream_ids: list[str], **kwargs: Any) -> Any:
        loaded.append(list(stream_ids))
        return real_load(connection, stream_ids, **kwargs)

    monkeypatch.setattr(projector, "load_snapshots", counted_load)
    streams = [_stream(f"g{n}").running() for n in range(3)]
    for stream in streams:
        append_stream(store, stream)
    catch_up_read_models(store)

    def report_everywhere(n: int) -> None:
        for stream in streams:
            store.append(stream.stream_id, [stream.reported(n % 2, loss=float(n)).events[-1].event])

    other = EventStore.open(store_url)
    try:
        for n in range(10):
            report_everywhere(n)
            loaded.clear()
            catch_up_read_models(store if n % 3 else other)
            if n % 3 == 2:  # this process folded the batch before: nothing read
                assert loaded == [[]]
            else:  # the other one did (or nobody, in this store object): the snapshots read
                assert sorted(loaded[0]) == sorted(s.stream_id for s in streams)
    finally:
        other.close()
    kept = _all_rows(store)
    assert len(kept["wg_reports"]) == 30
    rebuild_read_models(store)
    assert _all_rows(store) == kept


def test_a_batch_that_did_not_commit_leaves_nothing_in_the_projector_s_memory_used(
    store: Any, monkeypatch: Any
) -> None:
    """The projector remembers a batch's groups as it folds them, before the commit: a batch
    whose write fails must not be the base of the next one (the row's version tells)."""
    from wgstore.projections import projector

    stream = _stream("g1").running()
    append_stream(store, stream)
    catch_up_read_models(store)
    store.append(stream.stream_id, [stream.reported(0, loss=1.0).events[-1].event])
    real_insert = projector._insert_group_rows

    def failing_insert(connection: Any, rows: Any) -> None:
        raise RuntimeError("the database went away mid-batch")

    monkeypatch.setattr(projector, "_insert_group_rows", failing_insert)
    try:
        catch_up_read_models(store)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the failing write was not called")
    monkeypatch.setattr(projector, "_insert_group_rows", real_insert)
    store.append(stream.stream_id, [stream.reported(1, loss=2.0).events[-1].event])
    assert catch_up_read_models(store) == 2
    kept = _all_rows(store)
    assert [row[1:3] for row in kept["wg_reports"]] == [(0, 1), (1, 1)]
    rebuild_read_models(store)
    assert _all_rows(store) == kept


def test_a_lost_projector_snapshot_is_rebuilt_from_the_log(store: Any) -> None:
    stream = _stream("g1").running().polled()
    append_stream(store, stream)
    catch_up_read_models(store)
    with store.engine.begin() as connection:
        connection.execute(wg_snapshots.delete())
    store.append(stream.stream_id, [e.event for e in stream.reported(0, loss=2.0).events[-1:]])
    catch_up_read_models(store)
    kept = _all_rows(store)
    rebuild_read_models(store)
    assert _all_rows(store) == kept
    assert _rows(store, wg_workers, world_rank=0)[0]["reports"] == 1


def test_a_stream_the_fold_refuses_is_marked_and_does_not_stop_other_groups(store: Any) -> None:
    bad = _stream("bad").running()
    append_stream(store, bad)
    bad.shut_down()  # a shut-down without a request: refused
    store.append(bad.stream_id, [bad.events[-1].event])
    bad.add(bad.events[-1].event)
    store.append(bad.stream_id, [bad.events[-1].event])
    append_stream(store, _stream("good").running().polled())
    catch_up_read_models(store)
    rows = {row["group_id"]: row for row in _rows(store, wg_worker_groups)}
    assert rows["good"]["status"] == "RUNNING"
    assert rows["good"]["projection_error"] is None
    assert rows["bad"]["status"] == "RUNNING"  # as of the last good event
    assert "from RUNNING to SHUT_DOWN" in rows["bad"]["projection_error"]
    assert rows["bad"]["stream_version"] == 6
    kept = _all_rows(store)
    rebuild_read_models(store)
    assert _all_rows(store) == kept


def test_a_stream_that_does_not_begin_with_a_request_gets_a_row_naming_the_problem(
    store: Any,
) -> None:
    stream = _stream("odd").requested().placement_group()
    store.append(stream.stream_id, [stream.events[1].event])
    catch_up_read_models(store)
    (row,) = _rows(store, wg_worker_groups)
    assert row["status"] is None
    assert "must begin with WorkerGroupStartRequested" in row["projection_error"]


def test_run_streams_make_run_rows_and_no_group_rows(store: Any) -> None:
    run = RunStream().created().to("SCHEDULING")
    store.append(run.stream_id, [e.event for e in run.events])
    assert catch_up_read_models(store) == 2
    assert _rows(store, wg_worker_groups) == []
    assert [(r["run_id"], r["status"]) for r in _rows(store, wg_runs)] == [("r1", "SCHEDULING")]
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()


def test_the_event_log_view_shows_the_log_with_readable_columns(store: Any) -> None:
    recorded = append_stream(store, _stream("g1").requested())
    run = RunStream("r9").created()
    store.append(run.stream_id, [e.event for e in run.events])
    with store.engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT position, stream_kind, group_id, run_id, event_type, host, pid "
                "FROM wg_event_log ORDER BY position"
            )
        ).all()
    assert [tuple(r[:5]) for r in rows] == [
        (recorded[0].position, "worker-group", "g1", None, "WorkerGroupStartRequested"),
        (recorded[0].position + 1, "run", None, "r9", "RunCreated"),
    ]
    assert rows[0][5] and int(rows[0][6]) > 0


def test_the_read_models_show_the_committed_checkpoint_and_the_one_only_reported(
    store: Any,
) -> None:
    # a 2-rank attempt of run r1: both ranks report steps 1-3, rank 0 alone reaches step 4
    run = RunStream("r1").created().to("SCHEDULING", "g1").to("RUNNING", "g1")
    store.append(run.stream_id, [e.event for e in run.events])
    stream = _stream("g1").running()
    for step in (1, 2, 3):
        stream.reported(0, f"/ckpt/step{step}").reported(1, f"/ckpt/step{step}")
    stream.reported(0, "/ckpt/step4")
    recorded = append_stream(store, stream)
    catch_up_read_models(store)
    (group,) = _rows(store, wg_worker_groups)
    committed_by = recorded[-2]  # rank 1's report of step 3
    assert (group["latest_checkpoint"], group["checkpoint_index"]) == ("/ckpt/step3", 3)
    assert _utc(group["checkpoint_committed_at"]) == committed_by.recorded_at
    assert group["latest_reported_checkpoint"] == "/ckpt/step4"
    (row,) = _rows(store, wg_runs)
    assert row["latest_checkpoint"] == "/ckpt/step3"
    assert _utc(row["checkpoint_committed_at"]) == committed_by.recorded_at
    assert row["latest_reported_checkpoint"] == "/ckpt/step4"
    # the same in plain SQL, as a reader would ask it
    with store.engine.connect() as connection:
        found = connection.execute(
            sa.text(
                "SELECT g.latest_checkpoint, r.checkpoint FROM wg_worker_groups g "
                "JOIN wg_reports r ON r.group_id = g.group_id "
                "AND r.report_index = g.checkpoint_index ORDER BY r.world_rank"
            )
        ).all()
    assert [tuple(f) for f in found] == [("/ckpt/step3", "/ckpt/step3")] * 2
    # the fold and the read models agree, whichever way they were built
    rebuild_read_models(store)
    assert _rows(store, wg_worker_groups)[0]["checkpoint_index"] == 3


def test_appends_are_not_held_up_while_a_catch_up_folds_a_batch(
    store: Any, monkeypatch: Any
) -> None:
    """A batch is read and folded before its write transaction opens: on SQLite that
    transaction holds up every append, and folding inside it stalled the fleet's appends for
    35-110 ms a batch. An append that waits at most 0.2 s for the lock goes in while a fold is
    held mid-batch."""
    import threading

    from wgstore.events import EventStore
    from wgstore.projections import projector

    _lifecycle(store)
    folding, go_on = threading.Event(), threading.Event()
    real_fold = projector._fold_group

    def held_fold(*args: Any) -> Any:
        folding.set()
        assert go_on.wait(30)
        return real_fold(*args)

    monkeypatch.setattr(projector, "_fold_group", held_fold)
    caught_up: list[int] = []
    catching_up = threading.Thread(target=lambda: caught_up.append(catch_up_read_models(store)))
    catching_up.start()
    impatient = EventStore.open(store.url, busy_timeout_s=0.2)  # SQLite: fail after 0.2 s
    try:
        assert folding.wait(30)
        append_stream(impatient, _stream("g2", num_workers=1).running())  # must not wait for it
    finally:
        go_on.set()
        catching_up.join(60)
        impatient.close()
    monkeypatch.undo()
    assert caught_up and caught_up[0] > 0
    catch_up_read_models(store)
    incremental = _all_rows(store)
    assert {row[0] for row in incremental["wg_worker_groups"]} == {"g1", "g2"}
    rebuild_read_models(store)
    assert _all_rows(store) == incremental


def test_a_batch_prepared_before_another_projector_applied_it_is_not_applied_twice(
    store: Any, monkeypatch: Any
) -> None:
    """Prepared (read and folded) outside its transaction, a batch is written only if the read
    models have not moved since: here another catch-up applies everything in between, the
    first one's write is refused, and it finds nothing left to do."""
    from wgstore.projections import projector

    recorded = _lifecycle(store)
    real_prepare = projector.prepare_read_model_batch
    others: list[int] = []

    def prepare_then_let_another_apply(own: Any, batch: list[Any]) -> Any:
        prepared = real_prepare(own, batch)
        if not others:
            others.append(-1)  # (the other catch-up prepares through here too)
            others[0] = catch_up_read_models(store)
        return prepared

    monkeypatch.setattr(projector, "prepare_read_model_batch", prepare_then_let_another_apply)
    assert catch_up_read_models(store) == 0  # refused, then nothing new
    monkeypatch.undo()
    assert others == [len(recorded)]
    kept = _all_rows(store)
    assert len(kept["wg_reports"]) == 3
    rebuild_read_models(store)
    assert _all_rows(store) == kept


def test_the_projector_s_memory_hands_a_group_back_only_at_its_version() -> None:
    """No database: an entry is handed out once, only at the version it was folded to; a group
    that ended is not kept; past its capacity the least recently folded group goes first."""
    from wgstore.projections.projector import _Folded, _FoldedGroups

    def folded(group_id: str, ended: bool = False) -> _Folded:
        stream = _stream(group_id).running()
        if ended:
            stream.shutdown_requested().shut_down()
        return _Folded(project_worker_group(stream.events), {}, {}, None)

    memory = _FoldedGroups(capacity=2)
    first = folded("g1")
    memory.keep("g1", first)
    assert memory.take("g1", first.state.version + 1) is None  # its row moved on: unused...
    assert memory.take("g1", first.state.version) is None  # ...and dropped
    memory.keep("g1", first)
    assert memory.take("g1", first.state.version) is first
    assert memory.take("g1", first.state.version) is None  # taken out while a batch folds it
    memory.keep("g9", ended := folded("g9", ended=True))
    assert memory.take("g9", ended.state.version) is None
    entries = {gid: folded(gid) for gid in ("a", "b", "c")}
    for gid in ("a", "b"):
        memory.keep(gid, entries[gid])
    memory.keep("a", entries["a"])  # folded again: now the most recent
    memory.keep("c", entries["c"])  # over capacity: b, the least recent, goes
    assert memory.take("b", entries["b"].state.version) is None
    assert memory.take("a", entries["a"].state.version) is entries["a"]
    assert memory.take("c", entries["c"].state.version) is entries["c"]
