"""The EventStore contract, run against SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import pytest

from wgstore.events import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    ConcurrencyError,
    DuplicateEventError,
    EventStore,
    NewEvent,
    event_type,
)


@event_type("ContractNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Noted:
    text: str
    count: int = 0


def notes(*texts: str) -> list[Noted]:
    return [Noted(text=t) for t in texts]


class TestAppend:
    def test_appends_return_records_with_rising_versions_and_positions(
        self, store: EventStore
    ) -> None:
        first = store.append("s-1", notes("a", "b"), expected_version=NO_STREAM)
        second = store.append("s-1", notes("c"), expected_version=2)
        assert [r.version for r in first + second] == [1, 2, 3]
        positions = [r.position for r in first + second]
        assert positions == sorted(positions) and len(set(positions)) == 3
        assert [r.event.text for r in first + second] == ["a", "b", "c"]
        assert all(r.type == "ContractNoted" and r.schema_version == 1 for r in first)
        assert first[0].recorded_at.tzinfo is not None

    def test_a_large_batch_gets_positions_in_batch_order(self, store: EventStore) -> None:
        store.append("other", notes("x"))
        records = store.append("s-1", [Noted(text=str(i)) for i in range(300)])
        assert [r.version for r in records] == list(range(1, 301))
        assert [r.position for r in records] == list(range(2, 302))
        assert [r.event.text for r in store.read_all(after=1)] == [str(i) for i in range(300)]
        assert store.verify().ok

    def test_records_read_back_equal_the_records_appended(self, store: EventStore) -> None:
        appended = store.append("s-1", notes("a", "b", "c"))
        assert list(store.read_stream("s-1")) == appended
        assert list(store.read_all()) == appended

    def test_rejects_append_with_stale_expected_version(self, store: EventStore) -> None:
        store.append("s-1", notes("a", "b"))
        with pytest.raises(ConcurrencyError) as raised:
            store.append("s-1", notes("c"), expected_version=1)
        assert (raised.value.stream_id, raised.value.expected, raised.value.actual) == ("s-1", 1, 2)
        assert store.stream_version("s-1") == 2

    def test_no_stream_refuses_an_existing_stream(self, store: EventStore) -> None:
        store.append("s-1", notes("a"))
        with pytest.raises(ConcurrencyError, match="NO_STREAM"):
            store.append("s-1", notes("b"), expected_version=NO_STREAM)

    def test_stream_exists_refuses_a_new_stream(self, store: EventStore) -> None:
        with pytest.raises(ConcurrencyError):
            store.append("s-new", notes("a"), expected_version=STREAM_EXISTS)
        store.append("s-new", notes("a"))
        store.append("s-new", notes("b"), expected_version=STREAM_EXISTS)
        assert store.stream_version("s-new") == 2

    def test_any_appends_whatever_the_version(self, store: EventStore) -> None:
        store.append("s-1", notes("a"), expected_version=ANY)
        store.append("s-1", notes("b"), expected_version=ANY)
        assert store.stream_version("s-1") == 2

    def test_expected_version_zero_means_no_stream(self, store: EventStore) -> None:
        store.append("s-1", notes("a"), expected_version=0)
        with pytest.raises(ConcurrencyError):
            store.append("s-1", notes("b"), expected_version=0)

    def test_an_empty_batch_writes_nothing(self, store: EventStore) -> None:
        assert store.append("s-1", []) == []
        assert store.head() == 0

    def test_metadata_carries_the_writer_and_what_the_caller_adds(self, store: EventStore) -> None:
        [record] = store.append(
            "s-1", [NewEvent(Noted(text="a"), metadata={"causation_id": "c-1"})]
        )
        [read] = store.read_stream("s-1")
        assert read.metadata["causation_id"] == "c-1"
        assert {"host", "pid", "wgstore"} <= set(read.metadata)
        assert record.metadata == read.metadata


class TestIdempotency:
    def test_retrying_a_stored_batch_returns_the_stored_records_and_writes_nothing(
        self, store: EventStore
    ) -> None:
        ids = [uuid.uuid4(), uuid.uuid4()]
        batch = [NewEvent(Noted(text=t), event_id=i) for t, i in zip("ab", ids, strict=True)]
        first = store.append("s-1", batch, expected_version=NO_STREAM)
        again = store.append("s-1", batch, expected_version=NO_STREAM)
        assert again == first
        assert store.head() == 2

    def test_an_id_stored_in_another_stream_is_a_duplicate(self, store: EventStore) -> None:
        event_id = uuid.uuid4()
        store.append("s-1", [NewEvent(Noted(text="a"), event_id=event_id)])
        with pytest.raises(DuplicateEventError):
            store.append("s-2", [NewEvent(Noted(text="a"), event_id=event_id)])
        assert store.stream_version("s-2") == 0

    def test_a_batch_mixing_stored_and_new_ids_is_a_duplicate_and_writes_nothing(
        self, store: EventStore
    ) -> None:
        stored = uuid.uuid4()
        store.append("s-1", [NewEvent(Noted(text="a"), event_id=stored)])
        with pytest.raises(DuplicateEventError):
            store.append(
                "s-1",
                [
                    NewEvent(Noted(text="b"), event_id=uuid.uuid4()),
                    NewEvent(Noted(text="a"), event_id=stored),
                ],
            )
        assert store.stream_version("s-1") == 1

    def test_stored_ids_in_another_order_are_a_duplicate(self, store: EventStore) -> None:
        ids = [uuid.uuid4(), uuid.uuid4()]
        store.append("s-1", [NewEvent(Noted(text="x"), event_id=i) for i in ids])
        with pytest.raises(DuplicateEventError):
            store.append("s-1", [NewEvent(Noted(text="x"), event_id=i) for i in reversed(ids)])

    def test_the_same_id_twice_in_one_batch_is_refused(self, store: EventStore) -> None:
        event_id = uuid.uuid4()
        with pytest.raises(DuplicateEventError):
            store.append("s-1", [NewEvent(Noted(text="a"), event_id=event_id)] * 2)
        assert store.head() == 0


class TestReading:
    def test_read_stream_honours_version_bounds(self, store: EventStore) -> None:
        store.append("s-1", notes(*"abcde"))
        assert [
            r.event.text for r in store.read_stream("s-1", from_version=2, to_version=4)
        ] == list("bcd")
        assert list(store.read_stream("missing")) == []

    def test_read_all_pages_through_more_than_a_page(self, store: EventStore) -> None:
        for start in range(0, 2500, 500):
            store.append(f"s-{start}", [Noted(text=str(i)) for i in range(start, start + 500)])
        events = list(store.read_all())
        assert [int(e.event.text) for e in events] == list(range(2500))
        assert [e.event.text for e in store.read_all(after=events[1999].position, limit=3)] == [
            "2000",
            "2001",
            "2002",
        ]
        assert len(list(store.read_all(limit=1500))) == 1500

    def test_read_stream_pages_through_a_long_stream(self, store: EventStore) -> None:
        store.append("long", [Noted(text=str(i)) for i in range(2100)])
        assert [r.version for r in store.read_stream("long", from_version=999)] == list(
            range(999, 2101)
        )

    @pytest.mark.parametrize("length", [999, 1000, 1001])
    def test_read_stream_reads_a_stream_ending_at_a_page_boundary(
        self, store: EventStore, length: int
    ) -> None:
        store.append("edge", [Noted(text=str(i)) for i in range(length)])
        assert [r.version for r in store.read_stream("edge")] == list(range(1, length + 1))
        assert store.stream_version("edge") == length  # the pool's connections are still fine

    def test_read_stream_iterators_dropped_early_give_their_connection_back(
        self, store: EventStore
    ) -> None:
        store.append("long", [Noted(text=str(i)) for i in range(1500)])
        held = store.engine.pool.checkedout()  # the writer's
        for _ in range(50):  # more than the pool holds (8, and 32 overflow)
            assert next(iter(store.read_stream("long"))).version == 1  # mid-page
            assert next(iter(store.read_stream("long", 7, 7))).version == 7  # the last row
        assert store.engine.pool.checkedout() == held
        assert [r.version for r in store.read_stream("long")] == list(range(1, 1501))

    def test_read_all_filters_by_type(self, store: EventStore) -> None:
        from wgstore.events.worker_group import WorkerGroupShutdownRequested

        store.append(
            "s-1", [Noted(text="a"), WorkerGroupShutdownRequested(reason="r"), Noted(text="b")]
        )
        assert [e.type for e in store.read_all(types=[WorkerGroupShutdownRequested])] == [
            "WorkerGroupShutdownRequested"
        ]
        assert len(list(store.read_all(types=["ContractNoted"]))) == 2

    def test_head_and_stream_version_follow_appends(self, store: EventStore) -> None:
        assert (store.head(), store.stream_version("s-1")) == (0, 0)
        records = store.append("s-1", notes("a", "b"))
        assert store.head() == records[-1].position
        assert store.stream_version("s-1") == 2

    def test_streams_lists_streams_by_prefix(self, store: EventStore) -> None:
        store.append("notes-a", notes("x"))
        store.append("note-1", notes("x"))
        store.append("notes-b", notes("x", "y"))
        assert store.streams("notes-") == [("notes-a", 1), ("notes-b", 2)]

    def test_streams_takes_underscores_and_percent_signs_literally(self, store: EventStore) -> None:
        store.append("g_1", notes("x"))
        store.append("gx1", notes("x"))
        store.append("g%2", notes("x"))
        store.append("g\\3", notes("x"))
        assert store.streams("g_") == [("g_1", 1)]
        assert store.streams("g%") == [("g%2", 1)]
        assert store.streams("g\\") == [("g\\3", 1)]


class TestVerify:
    def test_an_untouched_log_verifies(self, store: EventStore) -> None:
        store.append("s-1", notes("a", "b"))
        store.append("s-2", notes("c"))
        report = store.verify()
        assert report.ok and report.problems == [] and report.checked == 3
        assert store.verify("s-2").checked == 1


class TestSubscriptions:
    def test_a_subscription_hands_over_every_event_once_and_remembers_where_it_was(
        self, store: EventStore
    ) -> None:
        store.append("s-1", notes("a", "b", "c"))
        seen: list[str] = []
        subscription = store.subscription("test")
        assert (
            subscription.process(
                lambda batch: seen.extend(e.event.text for e in batch), batch_size=2
            )
            == 3
        )
        store.append("s-1", notes("d"))
        again = store.subscription("test")
        assert again.process(lambda batch: seen.extend(e.event.text for e in batch)) == 1
        assert seen == ["a", "b", "c", "d"]
        assert again.checkpoint() == store.head()

    def test_a_transactional_handler_rolls_back_with_its_checkpoint(
        self, store: EventStore
    ) -> None:
        import sqlalchemy as sa

        with store.engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE seen_texts (text VARCHAR(10))")
        store.append("s-1", notes("a", "b"))

        def failing(connection: sa.Connection, batch: list) -> None:
            for event in batch:
                connection.execute(
                    sa.text("INSERT INTO seen_texts VALUES (:t)"), {"t": event.event.text}
                )
            raise RuntimeError("handler failed after writing")

        subscription = store.subscription("tx")
        with pytest.raises(RuntimeError):
            subscription.process(failing, transactional=True)
        with store.engine.connect() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM seen_texts")).scalar() == 0
        assert subscription.checkpoint() == 0

        def writing(connection: sa.Connection, batch: list) -> None:
            for event in batch:
                connection.execute(
                    sa.text("INSERT INTO seen_texts VALUES (:t)"), {"t": event.event.text}
                )

        assert subscription.process(writing, transactional=True) == 2
        with store.engine.connect() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM seen_texts")).scalar() == 2
        assert subscription.checkpoint() == store.head()

    def test_a_subscription_filtered_by_type_sees_only_those(self, store: EventStore) -> None:
        from wgstore.events.worker_group import WorkerGroupShutdownRequested

        store.append("s-1", [Noted(text="a"), WorkerGroupShutdownRequested(reason="r")])
        seen: list[str] = []
        store.subscription("only-shutdowns", types=["WorkerGroupShutdownRequested"]).process(
            lambda batch: seen.extend(e.type for e in batch)
        )
        assert seen == ["WorkerGroupShutdownRequested"]

    def test_a_reader_overtaken_by_another_reader_of_the_same_name_is_told(
        self, store: EventStore
    ) -> None:
        from wgstore.events import SubscriptionConflictError

        store.append("s-1", notes("a", "b"))
        overtaking = store.subscription("shared")
        taken: list[str] = []

        def slow_handler(batch: list) -> None:  # the other reader finishes meanwhile
            overtaking.process(lambda b: taken.extend(e.event.text for e in b))

        with pytest.raises(SubscriptionConflictError, match=f"up to {store.head()}"):
            store.subscription("shared").process(slow_handler)
        assert taken == ["a", "b"]
        assert overtaking.checkpoint() == store.head()

    def test_reset_replays_from_the_start(self, store: EventStore) -> None:
        store.append("s-1", notes("a", "b"))
        subscription = store.subscription("again")
        subscription.process(lambda batch: None)
        subscription.reset()
        seen: list[str] = []
        subscription.process(lambda batch: seen.extend(e.event.text for e in batch))
        assert seen == ["a", "b"]

    def test_run_follows_the_log_live_until_stopped(
        self, store: EventStore, store_url: str
    ) -> None:
        seen: list[str] = []
        stop = threading.Event()
        subscription = store.subscription("live")
        follower = threading.Thread(
            target=subscription.run,
            args=(lambda batch: seen.extend(e.event.text for e in batch),),
            kwargs={"stop": stop, "wait_s": 0.2},
        )
        follower.start()
        try:
            other = EventStore.open(store_url)  # another writer, as if in another process
            try:
                other.append("s-1", notes("a", "b"))
            finally:
                other.close()
            store.append("s-1", notes("c"))
            for _ in range(200):
                if len(seen) == 3:
                    break
                threading.Event().wait(0.05)
        finally:
            stop.set()
            follower.join(timeout=10)
        assert seen == ["a", "b", "c"]
        assert not follower.is_alive()

    def test_wait_for_new_returns_as_soon_as_another_writer_appends(
        self, store: EventStore, store_url: str
    ) -> None:
        import time

        def append_later() -> None:
            time.sleep(0.3)
            other = EventStore.open(store_url)
            try:
                other.append("s-1", notes("a"))
            finally:
                other.close()

        writer = threading.Thread(target=append_later)
        started = time.monotonic()
        writer.start()
        head = store.wait_for_new(0, timeout_s=10)
        waited = time.monotonic() - started
        writer.join()
        assert head == 1
        assert waited < 5
        assert store.wait_for_new(head, timeout_s=0.1) == head

    def test_wait_for_new_returns_when_its_stop_event_is_set_and_waiters_are_woken(
        self, store: EventStore
    ) -> None:
        import time

        stop = threading.Event()
        returned: list[float] = []

        def wait() -> None:
            started = time.monotonic()
            store.wait_for_new(0, timeout_s=120, stop=stop)
            returned.append(time.monotonic() - started)

        waiter = threading.Thread(target=wait)
        waiter.start()
        stop.set()
        store.wake_waiters()
        waiter.join(timeout=90)
        assert not waiter.is_alive()
        assert returned and returned[0] < 60  # not the 120 s timeout: the stop ended the wait
