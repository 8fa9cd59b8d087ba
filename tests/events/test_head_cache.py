"""The heads an EventStore caches for its next append are never trusted when stale (issue 13).

Two store objects on one database append in turn, to the same streams and to their own: each
one's cached heads go stale at every turn, and the log and every stream must still chain.
"""

from __future__ import annotations

import uuid

import pytest

from wgstore.events import EventStore, NewEvent
from wgstore.events.errors import ConcurrencyError
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def _events(n: int, tag: str) -> list[WorkerGroupShutdownRequested]:
    return [WorkerGroupShutdownRequested(reason=f"{tag}-{i}") for i in range(n)]


@pytest.mark.parametrize("batch", [1, 3])
def test_two_stores_appending_in_turn_keep_every_chain_and_version_intact(
    store_url: str, batch: int
) -> None:
    with EventStore.open(store_url) as first, EventStore.open(store_url) as second:
        for turn in range(6):
            for store, name in ((first, "a"), (second, "b")):
                store.append("shared", _events(batch, f"{name}{turn}"))
                store.append(f"own-{name}", _events(batch, f"{name}{turn}"))
                store.append(f"own-{name}", _events(batch, f"{name}{turn}x"))
        report = first.verify()
        assert report.ok, report
        versions = [r.version for r in first.read_stream("shared")]
        assert versions == list(range(1, 12 * batch + 1))
        positions = [r.position for r in first.read_all()]
        assert positions == sorted(set(positions))


def test_an_expected_version_is_checked_against_the_stream_not_a_stale_cache(
    store_url: str,
) -> None:
    with EventStore.open(store_url) as first, EventStore.open(store_url) as second:
        first.append("s", _events(1, "a"))  # first caches version 1
        second.append("s", _events(1, "b"), expected_version=1)
        with pytest.raises(ConcurrencyError):
            first.append("s", _events(1, "a2"), expected_version=1)
        first.append("s", _events(1, "a3"), expected_version=2)
        assert first.verify().ok


def test_a_retried_batch_after_another_writer_appended_returns_the_stored_records(
    store_url: str,
) -> None:
    with EventStore.open(store_url) as first, EventStore.open(store_url) as second:
        batch = [NewEvent(e) for e in _events(2, "x")]
        fixed = [NewEvent(e.event, event_id=uuid.uuid4()) for e in batch]
        stored = first.append("s", fixed)
        second.append("s", _events(1, "y"))
        again = first.append("s", fixed)
        assert [r.position for r in again] == [r.position for r in stored]
        assert first.verify().ok
