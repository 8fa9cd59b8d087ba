"""``read_stream`` on PostgreSQL: events are yielded as their rows arrive (chunked mode), and a
connection the server drops in the middle of a page costs no event and repeats none."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from wgstore.events import EventStore, StoreUnavailableError, event_type
from wgstore.events.postgres_recorder import PostgresRecorder, chunked_mode_available


@event_type("StreamingProbe", version=1)
@dataclass(frozen=True)
class Probe:
    n: int


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[EventStore]:
    store = EventStore.open(pg_url)
    try:
        yield store
    finally:
        store.close()


def _dropping(store: EventStore, after: list[int]) -> list[int]:
    """Make the store's streamed reads lose their connection after ``after[i]`` rows of the
    i-th query (then read normally); returns the row count each query got."""
    stream_rows = store._stream_rows
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

    store._stream_rows = dropping
    return got


def test_a_connection_dropped_mid_page_goes_on_from_the_next_event(pg_store: EventStore) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(2500)])
    got = _dropping(pg_store, [300, 0, 1500])
    assert [r.event.n for r in pg_store.read_stream("s-1")] == list(range(2500))
    # 300 rows, dropped (299 events yielded: a row is handed on once the next one is read); a
    # drop before any row (retried: the page before got somewhere); then from event 300 in
    # pages of 1,000 (+1 row, the next page's first)
    assert got == [300, 0, 1001, 1001, 201]
    assert pg_store.engine.pool.checkedout() == 1  # the writer


def test_a_connection_dropped_twice_before_any_event_is_an_error(pg_store: EventStore) -> None:
    pg_store.append("s-1", [Probe(n=i) for i in range(10)])
    got = _dropping(pg_store, [0, 0])
    with pytest.raises(StoreUnavailableError, match="cannot reach the database"):
        list(pg_store.read_stream("s-1"))
    assert got == [0, 0]
    assert [r.event.n for r in pg_store.read_stream("s-1")] == list(range(10))


def test_without_chunked_mode_pages_are_read_whole_with_the_same_events(
    pg_store: EventStore,
) -> None:
    # libpq before 17 (a system libpq under psycopg's C or Python implementation) has no
    # chunked mode: the recorder then offers no stream_rows and read_stream fetches each page.
    pg_store.append("s-1", [Probe(n=i) for i in range(2100)])
    streamed = [(r.version, r.event.n, r.event_id) for r in pg_store.read_stream("s-1")]
    pg_store._stream_rows = None
    fetched = [(r.version, r.event.n, r.event_id) for r in pg_store.read_stream("s-1")]
    assert fetched == streamed and len(fetched) == 2100
    assert [r.event.n for r in pg_store.read_stream("s-1", 1000, 1001)] == [999, 1000]


def test_chunked_mode_is_offered_only_with_a_libpq_that_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert PostgresRecorder().stream_rows is not None  # the psycopg[binary] wheel: libpq 17+
    monkeypatch.setattr(psycopg.pq, "version", lambda: 160004)
    assert not chunked_mode_available()
    assert PostgresRecorder().stream_rows is None
