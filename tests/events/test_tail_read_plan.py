"""Postgres: a log's tail is read through its index however the server is set up.

A ``wg_events`` never analyzed (autovacuum off, as on this machine's server, or not run yet)
has no statistics, and the planner read ``position > p ORDER BY position LIMIT n`` (every
stream follower's read, the read models' catch-up) with a sequential scan and a sort: a third
of the server's time per event at 100 runs x 8 (bench/pg_profile.py). The append that takes
position 1,000 analyzes the table once, with or without a key (``wg_append`` and the keyed
path alike); from then on the planner takes the index.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from wgstore.events import AppendRequest, EventStore, NewEvent, event_type
from wgstore.events.postgres_functions import ANALYZE_AT

TAIL = (
    "SELECT position, stream_id, event_type FROM wg_events WHERE position > :after "
    "ORDER BY position LIMIT 1000"
)


@event_type("TailProbe", version=1)
@dataclass(frozen=True)
class Probe:
    n: int


def _query(store: EventStore, sql: str, **params: int) -> list[sa.Row[tuple[object, ...]]]:
    with store.engine.connect() as connection:
        rows = list(connection.execute(sa.text(sql), params))
        connection.rollback()
    return rows


def _analyzed(store: EventStore) -> bool:
    (row,) = _query(
        store,
        "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() "
        "AND tablename = 'wg_events' AND attname = 'position'",
    )
    return bool(row[0])


def _autovacuum(store: EventStore) -> bool:
    (row,) = _query(store, "SHOW autovacuum")
    return row[0] == "on"


def _tail_plan(store: EventStore, after: int) -> str:
    return "\n".join(str(row[0]) for row in _query(store, f"EXPLAIN {TAIL}", after=after))


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["unkeyed", "keyed"])
def test_the_append_at_position_1000_analyzes_the_log_and_tail_reads_take_the_index(
    pg_url: str, key: bytes | None
) -> None:
    with EventStore.open(pg_url, hmac_key=key) as store:
        # batches that straddle the position: 10 streams x 99, then one that takes 991-1089
        for k in range(10):
            store.append_many(
                [AppendRequest(f"tail-{k}", [NewEvent(Probe(n=i)) for i in range(99)])]
            )
        assert store.head() == 990 < ANALYZE_AT
        if not _autovacuum(store):  # else it may have analyzed the table meanwhile
            assert not _analyzed(store)
            assert "Seq Scan" in _tail_plan(store, 985)  # what every tail read did before 0014
        store.append_many([AppendRequest("tail-x", [NewEvent(Probe(n=i)) for i in range(99)])])
        assert store.head() == 1089
        assert _analyzed(store)
        plan = _tail_plan(store, 1080)
        assert "Seq Scan" not in plan and "pk_wg_events" in plan, plan
        # and it stays so as the log grows past what was analyzed
        for k in range(3):
            store.append_many(
                [AppendRequest(f"more-{k}", [NewEvent(Probe(n=i)) for i in range(500)])]
            )
        plan = _tail_plan(store, store.head() - 5)
        assert "Seq Scan" not in plan and "pk_wg_events" in plan, plan
