"""``read_stream`` and ``read_all`` on PostgreSQL: events are yielded as their rows arrive
(chunked mode), with the same events as pages read whole; a connection the server drops in the
middle of a page costs no event and repeats none; an iterator dropped early gives its connection
back; without chunked mode (libpq before 17) pages are fetched whole."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from wgstore.events import EventStore, StoreUnavailableError, event_type
from wgstore.events.pooled_recorder import PooledRecorder
from wgstore.events.postgres_recorder import PostgresRecorder, chunked_mode_available


@event_type("StreamedReadProbe", version=1)
@dataclass(frozen=True)
class Probe:
    n: int


@event_type("StreamedReadOther", version=1)
@dataclass(frozen=True)
class Other:
    n: int


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[EventStore]:
    store = EventStore.open(pg_url)
    try:
        assert _recorder(store).stream_rows is not None  # the psycopg[binary] wheel: libpq 17+
        yield store
    finally:
        store.close()


def _recorder(store: EventStore) -> PooledRecorder:
    """The store's recorder, whose ``stream_rows`` hands its reads' rows over."""
    assert isinstance(store.recorder, PooledRecorder)
    return store.recorder


def _dropping(store: EventStore, after: list[int]) -> list[int]:
    """Make the store's streamed reads lose their connection after ``after[i]`` rows of the
    i-th query (then read normally); returns the row count each query got."""
    stream_rows = _recorder(store).stream_rows
    assert stream_rows is not None
    got: list[int] = []

    def dropping(cursor: Any, sql: str, params: Any) -> Generator[Any, None, None]:
        limit = after[len(got)] if len(got) < len(after) else None
        got.append(0)
        rows = stream_rows(cursor, sql, params)
        try:
            for row in rows:
                if got[-1] == limit:
                    break
                got[-1] += 1
                yield row
            else:
                return
        finally:
            rows.close()
        cursor.connection.close()  # what a server restart does to the client
        raise psycopg.OperationalError("the connection was dropped")

    _recorder(store).stream_rows = dropping
    return got


def _interleaved(store: EventStore, total: int) -> None:
    """``total`` events over streams a-0..a-2, b-0, b-1 and c-0, in batches of 7 taken in
    turn, so every page of the log mixes them; every third batch of b- is of type Other."""
    names = ["a-0", "b-0", "a-1", "c-0", "a-2", "b-1"]
    n = 0
    turn = 0
    while n < total:
        stream_id = names[turn % len(names)]
        size = min(7, total - n)
        kind = Other if stream_id.startswith("b-") and turn % 3 == 0 else Probe
        store.append(stream_id, [kind(n=n + i) for i in range(size)])
        n += size
        turn += 1


def _seen(records: Iterator[Any]) -> list[tuple[int, str, int, int]]:
    return [(r.position, r.stream_id, r.version, r.event.n) for r in records]


def test_read_stream_a_connection_dropped_mid_page_goes_on_from_the_next_event(
    pg_store: EventStore,
) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(2500)])
    got = _dropping(pg_store, [300, 0, 1500])
    assert [r.event.n for r in pg_store.read_stream("s-1")] == list(range(2500))
    # 300 rows, dropped (299 events yielded: a row is handed on once the next one is read); a
    # drop before any row (retried: the page before got somewhere); then from event 300 in
    # pages of 1,000 (+1 row, the next page's first)
    assert got == [300, 0, 1001, 1001, 201]
    assert pg_store.engine.pool.checkedout() == 1  # the writer


def test_read_stream_a_connection_dropped_twice_before_any_event_is_an_error(
    pg_store: EventStore,
) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(10)])
    got = _dropping(pg_store, [0, 0])
    with pytest.raises(StoreUnavailableError, match="cannot reach the database"):
        list(pg_store.read_stream("s-1"))
    assert got == [0, 0]
    assert [r.event.n for r in pg_store.read_stream("s-1")] == list(range(10))


def test_read_stream_without_chunked_mode_pages_are_read_whole_with_the_same_events(
    pg_store: EventStore,
) -> None:
    # libpq before 17 (a system libpq under psycopg's C or Python implementation) has no
    # chunked mode: the recorder then offers no stream_rows and read_stream fetches each page.
    pg_store.append("s-1", [Probe(n=i) for i in range(2100)])
    streamed = [(r.version, r.event.n, r.event_id) for r in pg_store.read_stream("s-1")]
    _recorder(pg_store).stream_rows = None
    fetched = [(r.version, r.event.n, r.event_id) for r in pg_store.read_stream("s-1")]
    assert fetched == streamed and len(fetched) == 2100
    assert [r.event.n for r in pg_store.read_stream("s-1", 1000, 1001)] == [999, 1000]


def test_read_stream_chunked_mode_is_offered_only_with_a_libpq_that_has_it(
    pg_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the psycopg[binary] wheel: libpq 17+
    assert PostgresRecorder(pg_store.engine).stream_rows is not None
    monkeypatch.setattr(psycopg.pq, "version", lambda: 160004)
    assert not chunked_mode_available()
    assert PostgresRecorder(pg_store.engine).stream_rows is None


def test_read_all_a_connection_dropped_mid_page_goes_on_from_the_next_event(
    pg_store: EventStore,
) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(2500)])
    got = _dropping(pg_store, [300, 0, 1500])
    assert [r.event.n for r in pg_store.read_all()] == list(range(2500))
    # 300 rows, dropped (299 events yielded: a row is handed on once the next one is read); a
    # drop before any row (retried: the page before got somewhere); then from event 300 in
    # pages of 1,000 (the last one 201 rows)
    assert got == [300, 0, 1000, 1000, 201]
    assert pg_store.engine.pool.checkedout() == 1  # the writer


def test_read_all_a_drop_under_a_stream_filter_and_a_limit_loses_and_repeats_nothing(
    pg_store: EventStore,
) -> None:
    _interleaved(pg_store, 3000)
    expected = [r for r in _seen(pg_store.read_all()) if r[1].startswith("a-")][:1200]
    got = _dropping(pg_store, [10, 999, 0, 700])
    assert _seen(pg_store.read_all(streams="a-", limit=1200)) == expected
    # 9, 998, 0 and 699 rows handed on (1,706, half of them of a- streams), then a page of
    # 1,000 from row 1,707, read to its end though the 1,200th a- event comes before
    assert got == [10, 999, 0, 700, 1000]
    assert pg_store.engine.pool.checkedout() == 1


def test_read_all_a_connection_dropped_twice_before_any_event_is_an_error(
    pg_store: EventStore,
) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(10)])
    got = _dropping(pg_store, [0, 0])
    with pytest.raises(StoreUnavailableError, match="cannot reach the database"):
        list(pg_store.read_all())
    assert got == [0, 0]
    assert [r.event.n for r in pg_store.read_all()] == list(range(10))
    assert pg_store.engine.pool.checkedout() == 1


@pytest.mark.parametrize(
    ("after", "limit", "types", "streams"),
    [
        (0, None, None, None),
        (0, None, None, "a-"),
        (0, None, None, ("b-", "c-")),
        (0, 1, None, "c-"),
        (0, 999, None, None),
        (0, 1000, None, None),
        (0, 1001, None, "a-"),
        (0, 1600, None, "a-"),
        (517, 1500, None, ("a-", "c-")),
        (1003, None, ["ReadAllStreamingOther"], None),
        (0, 40, ["ReadAllStreamingOther"], "b-1"),
        (0, 0, None, "a-"),
        (0, 5, None, "nothing-"),
    ],
)
def test_read_all_filters_and_limits_across_pages_give_the_events_of_whole_pages(
    pg_store: EventStore,
    after: int,
    limit: int | None,
    types: list[str] | None,
    streams: str | tuple[str, ...] | None,
) -> None:
    _interleaved(pg_store, 3100)
    everything = _seen(pg_store.read_all())
    assert [r[0] for r in everything] == list(range(1, 3101))
    expected = [
        r
        for r in _seen(pg_store.read_all(types=types))
        if r[0] > after and (streams is None or r[1].startswith(streams))
    ][:limit]
    streamed = _seen(pg_store.read_all(after, limit, types, streams=streams))
    _recorder(pg_store).stream_rows = None  # libpq before 17: pages are fetched whole
    fetched = _seen(pg_store.read_all(after, limit, types, streams=streams))
    assert streamed == fetched == expected
    assert pg_store.engine.pool.checkedout() == 1


def test_read_all_pages_start_after_their_last_row_not_after_their_last_kept_event(
    pg_store: EventStore,
) -> None:
    _interleaved(pg_store, 2500)
    got = _dropping(pg_store, [])
    kept = _seen(pg_store.read_all(streams="c-"))
    assert kept and all(r[1] == "c-0" for r in kept)
    assert got == [1000, 1000, 500]  # every row read once


def test_read_all_an_iterator_dropped_early_gives_its_connection_back(pg_store: EventStore) -> None:
    _interleaved(pg_store, 2500)
    base = pg_store.engine.pool.checkedout()
    events = pg_store.read_all()
    assert [next(events).position for _ in range(5)] == [1, 2, 3, 4, 5]
    assert pg_store.engine.pool.checkedout() == base + 1  # mid-page: the query is running
    events.close()  # cancels the rest of the page
    assert pg_store.engine.pool.checkedout() == base
    filtered = pg_store.read_all(after=1200, streams="a-", limit=3)
    assert len(list(filtered)) == 3
    assert pg_store.engine.pool.checkedout() == base
    # and the connection given back is a sound one
    assert [r.position for r in pg_store.read_all(after=2497)] == [2498, 2499, 2500]
    assert pg_store.engine.pool.checkedout() == base
