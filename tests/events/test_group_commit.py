"""Group commit on both backends: appends a store's threads make while its writer is busy are
written in one transaction, each with its own outcome, and the log is as if each went alone.

The writer is kept busy the way another process does it: a second connection holds the log's
write lock (SQLite's, through ``BEGIN IMMEDIATE``; on Postgres the table lock ``wg_append``
takes), so the first append waits for it and the others queue behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.waiting import wait_until
from wgstore.events import (
    NO_STREAM,
    AppendRequest,
    ConcurrencyError,
    DuplicateEventError,
    EventStore,
    FencedError,
    NewEvent,
    RecordedEvent,
    event_type,
)
from wgstore.events.leases import acquire_lease

KEY = b"k" * 32
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@event_type("GroupCommitNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Noted:
    text: str


@contextmanager
def log_locked(store: EventStore) -> Iterator[None]:
    """Another connection holds the log's write lock until the block ends."""
    with store.engine.begin() as connection:  # SQLite: BEGIN IMMEDIATE
        if store.engine.dialect.name == "postgresql":
            connection.exec_driver_sql("LOCK TABLE wg_events IN EXCLUSIVE MODE")
        yield


def groups_written(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The streams of every group the store's recorder writes together, as it writes them (the
    real ``_append_group`` runs)."""
    recorder: Any = store.recorder
    write = recorder._append_group
    groups: list[list[str]] = []

    def recording(writer: Any, group: list[Any]) -> Any:
        groups.append([batch.stream_id for write in group for batch in write.batches])
        return write(writer, group)

    monkeypatch.setattr(recorder, "_append_group", recording)
    return groups


def append_while_locked(
    store: EventStore, appends: list[Callable[[], list[RecordedEvent]]]
) -> list[Future[list[RecordedEvent]]]:
    """Run ``appends`` from threads while the log is locked; unlock once all of them wait (the
    first to come, which found the writer free, for the lock; the others queued behind it)."""
    queue: Any = store.recorder._appends  # type: ignore[attr-defined]
    pool = ThreadPoolExecutor(len(appends))
    try:
        with log_locked(store):
            futures = [pool.submit(append) for append in appends]
            wait_until(lambda: len(queue) == len(appends) - 1, timeout_s=60, what="appends queued")
        for future in futures:
            future.exception(timeout=60)
    finally:
        pool.shutdown()
    return futures


def note(
    store: EventStore, stream: str, text: str, **kwargs: Any
) -> Callable[[], list[RecordedEvent]]:
    """An append of one note, to run later."""
    return lambda: store.append(stream, [Noted(text=text)], **kwargs)


def test_appends_that_wait_are_committed_together_each_in_its_own_stream(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = groups_written(store, monkeypatch)
    streams = [f"s-{i}" for i in range(10)]

    futures = append_while_locked(
        store, [note(store, s, f"to {s}", expected_version=NO_STREAM) for s in streams]
    )

    records = [future.result()[0] for future in futures]
    assert [(r.stream_id, r.version, r.event.text) for r in records] == [
        (s, 1, f"to {s}") for s in streams
    ]
    # the first to arrive waited for the lock alone; the nine behind it went in as one group,
    # after it, at consecutive positions
    (group,) = groups
    first = min(records, key=lambda r: r.position)
    assert sorted(group) == sorted(set(streams) - {first.stream_id})
    positions = sorted(r.position for r in records)
    assert positions == list(range(positions[0], positions[0] + 10))
    for stream, record in zip(streams, records, strict=True):
        assert list(store.read_stream(stream)) == [record]
    assert store.verify().ok


def test_an_append_at_the_wrong_version_fails_alone_and_the_others_of_its_group_are_stored(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append("taken", [Noted(text="first")])
    groups = groups_written(store, monkeypatch)
    appends = [note(store, f"s-{i}", "ok", expected_version=NO_STREAM) for i in range(4)]
    appends.insert(2, note(store, "taken", "late", expected_version=NO_STREAM))

    futures = append_while_locked(store, appends)

    error = futures[2].exception()
    assert isinstance(error, ConcurrencyError)
    assert error.stream_id == "taken"
    assert [e.event.text for e in store.read_stream("taken")] == ["first"]
    for i in range(4):
        assert [e.event.text for e in store.read_stream(f"s-{i}")] == ["ok"]
    assert len(groups) == 1  # tried together once, then each alone
    assert len(list(store.read_all())) == 5  # (on Postgres the failed try left a gap)
    assert store.verify().ok


def test_a_retried_append_in_a_group_returns_what_is_stored_and_writes_nothing_twice(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    event_id = uuid.uuid4()
    stored = store.append("retried", [NewEvent(Noted(text="once"), event_id=event_id)])
    groups = groups_written(store, monkeypatch)
    appends = [note(store, f"s-{i}", "new") for i in range(3)]
    appends.append(
        lambda: store.append("retried", [NewEvent(Noted(text="once"), event_id=event_id)])
    )

    futures = append_while_locked(store, appends)

    assert futures[3].result() == stored
    assert [e.event_id for e in store.read_stream("retried")] == [event_id]
    assert all(futures[i].result()[0].version == 1 for i in range(3))
    assert len(groups) == 1 and len(groups[0]) == 3  # the first alone, the other three together
    assert store.head() == 4


def test_a_keyed_store_s_group_carries_every_row_s_mac(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as keyed:
        groups = groups_written(keyed, monkeypatch)
        futures = append_while_locked(keyed, [note(keyed, f"s-{i}", "keyed") for i in range(6)])
        assert all(future.result()[0].version == 1 for future in futures)
        assert [len(group) for group in groups] == [5]
        assert keyed.verify(hmac_key=KEY).ok
        assert not keyed.verify(hmac_key=b"x" * 32).ok


def test_fenced_appends_that_wait_go_in_the_group_with_the_others(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor's or a controller's appends carry a fence: they wait in the same queue and
    are written in the same transaction as the reports, each lease checked in it."""
    fences = [acquire_lease(store, f"lease-{i}", "holder", 60).fence for i in range(3)]
    groups = groups_written(store, monkeypatch)
    appends = [note(store, f"plain-{i}", "plain") for i in range(3)]
    appends += [note(store, f"fenced-{i}", "fenced", fence=fences[i]) for i in range(3)]
    appends.append(note(store, "fenced-again", "fenced", fence=fences[0]))  # a lease twice

    futures = append_while_locked(store, appends)

    records = [future.result()[0] for future in futures]
    assert [r.version for r in records] == [1] * 7
    first = min(records, key=lambda r: r.position)
    (group,) = groups
    assert sorted(group) == sorted({r.stream_id for r in records} - {first.stream_id})
    assert store.verify().ok


def test_a_fence_refused_in_a_group_refuses_that_append_alone(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = acquire_lease(store, "held", "holder", 60).fence
    lost = acquire_lease(store, "lost", "old", 10, now=T0).fence
    assert acquire_lease(store, "lost", "new", 10, now=T0 + timedelta(seconds=11)) is not None
    groups = groups_written(store, monkeypatch)
    appends = [note(store, f"s-{i}", "ok", fence=held) for i in range(4)]
    appends.insert(2, note(store, "late", "after the takeover", fence=lost))

    futures = append_while_locked(store, appends)

    error = futures[2].exception()
    assert isinstance(error, FencedError)
    assert (error.holder, error.now_holder) == ("old", "new")
    assert list(store.read_stream("late")) == []
    for i in range(4):
        assert [e.event.text for e in store.read_stream(f"s-{i}")] == ["ok"]
    assert len(groups) == 1  # tried together once, then each alone
    assert store.verify().ok


def test_multi_stream_appends_that_wait_go_in_a_group_each_whole(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fence = acquire_lease(store, "run", "holder", 60).fence
    groups = groups_written(store, monkeypatch)

    def decision(i: int) -> Callable[[], list[RecordedEvent]]:
        requests = [
            AppendRequest(f"run-{i}", [Noted(text="decided")], expected_version=NO_STREAM),
            AppendRequest(f"group-{i}", [Noted(text="start")], expected_version=NO_STREAM),
        ]
        return lambda: [r for rs in store.append_many(requests, fence=fence) for r in rs]

    futures = append_while_locked(store, [decision(i) for i in range(4)])

    for i, future in enumerate(futures):
        run, group = future.result()
        assert (run.stream_id, group.stream_id) == (f"run-{i}", f"group-{i}")
        assert group.position == run.position + 1  # consecutive, in the order of the requests
    (group_streams,) = groups
    assert len(group_streams) == 6  # three appends of two streams each; the first went alone
    assert store.verify().ok


def test_a_half_stored_multi_stream_retry_is_refused_and_the_group_s_others_are_stored(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry whose batches are stored in part is an error (all or nothing), found in the
    group's transaction before its commit; the appends beside it are stored."""
    stored_id, new_id = uuid.uuid4(), uuid.uuid4()
    store.append("a", [NewEvent(Noted(text="stored"), event_id=stored_id)])
    groups = groups_written(store, monkeypatch)
    half = [
        AppendRequest("a", [NewEvent(Noted(text="stored"), event_id=stored_id)]),
        AppendRequest("b", [NewEvent(Noted(text="new"), event_id=new_id)]),
    ]
    appends = [note(store, f"s-{i}", "ok") for i in range(3)]
    appends.insert(1, lambda: store.append_many(half)[0])

    futures = append_while_locked(store, appends)

    error = futures[1].exception()
    assert isinstance(error, DuplicateEventError)
    assert "some of the batches' event ids are already stored" in str(error)
    assert list(store.read_stream("b")) == []
    assert [e.event.text for e in store.read_stream("a")] == ["stored"]
    for i in range(3):
        assert [e.event.text for e in store.read_stream(f"s-{i}")] == ["ok"]
    assert len(groups) == 1
    assert store.verify().ok
