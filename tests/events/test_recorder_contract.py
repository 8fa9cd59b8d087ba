"""The recorder contract (events/recorder.py), on SQLite and PostgreSQL: every read and write the
store needs, with typed rows between recorder and store, and the SQL inside the recorder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from wgstore.events import EventStore, Fence, FencedError, event_type
from wgstore.events.leases import acquire_lease
from wgstore.events.recorder import (
    AppendResult,
    Batch,
    LogRow,
    Pending,
    Recorder,
    StreamHead,
    StreamRow,
    StreamVersionMismatch,
)


@event_type("RecorderContractNoted", version=1)
@dataclass(frozen=True, slots=True)
class Noted:
    n: int


@pytest.fixture
def opened(store_url: str) -> Iterator[EventStore]:
    with EventStore.open(store_url) as store:
        yield store


def _pending(store: EventStore, *numbers: int) -> list[Pending]:
    pending, _ = store._encode_batch([Noted(n) for n in numbers])
    return pending


def test_appends_hand_back_typed_results_and_a_mismatch_names_the_version(
    opened: EventStore,
) -> None:
    recorder: Recorder = opened.recorder
    results = recorder.append("s-1", -2, _pending(opened, 1, 2), False)
    assert all(type(r) is AppendResult for r in results)
    assert [(r.position, r.version, r.existed) for r in results] == [(1, 1, False), (2, 2, False)]
    assert results[0].recorded_at.tzinfo is not None and len(results[0].hash) == 64
    with pytest.raises(StreamVersionMismatch) as mismatch:
        recorder.append("s-1", 5, _pending(opened, 3), False)
    assert (mismatch.value.actual, mismatch.value.stream_id) == (2, "s-1")
    many = recorder.append_many(
        [Batch("s-2", -2, _pending(opened, 4)), Batch("s-1", 2, _pending(opened, 5))], False, None
    )
    assert [[(r.position, r.version) for r in rows] for rows in many] == [[(3, 1)], [(4, 3)]]


def test_a_retried_batch_comes_back_as_stored(opened: EventStore) -> None:
    pending = _pending(opened, 1, 2)
    first = opened.recorder.append("s-1", -1, pending, True)
    again = opened.recorder.append("s-1", -1, pending, True)
    assert [(r.position, r.version, r.hash) for r in again] == [
        (r.position, r.version, r.hash) for r in first
    ]
    assert [r.existed for r in again] == [True, True]
    assert opened.recorder.max_position() == 2


def test_a_fenced_append_many_is_refused_once_the_lease_moved_on(opened: EventStore) -> None:
    lease = acquire_lease(opened, "run-x", "holder-a", 30.0)
    assert lease is not None
    stale = Fence(lease.fence.lease, lease.fence.holder, lease.fence.epoch - 1)
    with pytest.raises(FencedError):
        opened.recorder.append_many([Batch("s-1", -1, _pending(opened, 1))], False, stale)
    assert opened.recorder.max_position() == 0
    [rows] = opened.recorder.append_many(
        [Batch("s-1", -1, _pending(opened, 1))], False, lease.fence
    )
    assert [r.position for r in rows] == [1]


def test_reads_hand_over_typed_rows(opened: EventStore) -> None:
    recorder = opened.recorder
    opened.append("a-1", [Noted(i) for i in range(3)])
    opened.append("b-1", [Noted(i) for i in range(2)])
    opened.append("a-2", [Noted(9)])
    rows = list(recorder.select_notifications(0, -1, [], None))
    assert all(type(r) is LogRow for r in rows)
    assert [(r.position, r.stream_id, r.version) for r in rows] == [
        (1, "a-1", 1), (2, "a-1", 2), (3, "a-1", 3), (4, "b-1", 1), (5, "b-1", 2), (6, "a-2", 1),
    ]  # fmt: skip
    assert rows[0].type == "RecorderContractNoted" and rows[0].schema_version == 1
    assert str(uuid.UUID(rows[0].event_id)) == rows[0].event_id
    recorded_at = recorder.time_of(rows[0].recorded_at)
    assert abs(recorded_at - datetime.now(UTC)) < timedelta(minutes=5)
    kept = recorder.select_notifications(1, 3, ["RecorderContractNoted"], ("a-", "x-"))
    assert [r.position for r in kept] == [2, 3, 6]
    stream = list(recorder.select_events("a-1", 2, 3))
    assert all(type(r) is StreamRow for r in stream)
    assert [(r.position, r.version) for r in stream] == [(2, 2), (3, 3)]
    assert [r.position for r in recorder.select_positions([5, 1])] == [1, 5]
    assert recorder.max_stream_version("b-1") == 2 and recorder.max_stream_version("c") == 0
    assert recorder.max_position() == 6
    assert recorder.select_streams("a-") == [StreamHead("a-1", 3), StreamHead("a-2", 1)]
    assert recorder.select_streams("a_") == []  # LIKE's wildcards are escaped
    assert (
        recorder.fetch(f"SELECT count(*) FROM wg_events WHERE position > {recorder.param}", (2,))[
            0
        ][0]
        == 4
    )


def test_a_stream_of_whole_pages_is_read_in_pages(opened: EventStore) -> None:
    opened.append("s-1", [Noted(i) for i in range(2001)])
    assert [r.version for r in opened.recorder.select_events("s-1", 1, 2**31 - 1)] == list(
        range(1, 2002)
    )
    assert [r.version for r in opened.recorder.select_events("s-1", 999, 1002)] == [
        999, 1000, 1001, 1002
    ]  # fmt: skip
