"""The background writer of ``RecordingCallback``, without Ray, on real SQLite and Postgres.

A database that is down is a store that cannot be opened (the writer opens it again on every
retry); a database that is slow is one whose ``wg_events`` another transaction holds locked.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.waiting import wait_until
from wgstore.events import ANY, EventStore, NewEvent, StoreUnavailableError
from wgstore.events.run import RunAborted
from wgstore.orchestration.ray_train.writer import BackgroundWriter, RecordingError


def _events(n: int, tag: str = "e") -> list[NewEvent]:
    return [NewEvent(RunAborted(reason=f"{tag}{i}"), metadata={"source": "test"}) for i in range(n)]


def _reasons(store: EventStore, stream: str) -> list[str]:
    return [r.event.reason for r in store.read_stream(stream)]


def _wait(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


class FlakyOpener:
    """Opens the real store, after ``failures`` opens that fail as a down database does."""

    def __init__(self, url: str, failures: int) -> None:
        self.url = url
        self.failures = failures
        self.calls = 0
        self.up = threading.Event()

    def __call__(self) -> EventStore:
        self.calls += 1
        if self.calls <= self.failures and not self.up.is_set():
            raise StoreUnavailableError("cannot connect: the database is down (test)")
        return EventStore.open(self.url)


@pytest.fixture
def reader(store_url: str) -> Iterator[EventStore]:
    with EventStore.open(store_url) as store:
        yield store


def test_events_are_written_in_order_in_batches_per_stream(
    store_url: str, reader: EventStore
) -> None:
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url, max_batch=50)
    for i in range(20):
        writer.submit("run-a", _events(10, f"a{i}-"))
        writer.submit("run-b", _events(1, f"b{i}-"))
    assert writer.close(timeout_s=30)
    assert writer.stats.written == 220 and writer.stats.dropped == 0
    assert writer.stats.batches < 220  # batched: not one append per event
    assert _reasons(reader, "run-a") == [f"a{i}-{j}" for i in range(20) for j in range(10)]
    assert _reasons(reader, "run-b") == [f"b{i}-0" for i in range(20)]
    assert all(r.metadata["source"] == "test" for r in reader.read_stream("run-a"))


def test_a_database_that_is_down_is_retried_and_nothing_is_lost(
    store_url: str, reader: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    opener = FlakyOpener(store_url, failures=5)
    writer = BackgroundWriter(opener, url=store_url, backoff_s=0.01, max_backoff_s=0.05)
    with caplog.at_level(logging.WARNING, logger="wgstore.ray_train"):
        writer.submit("run-a", _events(3))
        writer.submit("run-a", _events(2, "late"))
        assert writer.flush(timeout_s=30)
    assert writer.close(timeout_s=10)
    assert _reasons(reader, "run-a") == ["e0", "e1", "e2", "late0", "late1"]
    assert writer.stats.retries == 5 and writer.stats.outage_s > 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed" in m and "retrying" in m for m in messages), messages
    assert any("writable again" in m and "nothing lost" in m for m in messages), messages
    writer.check()  # recovered within the retry limit: no failure


def test_an_outage_under_way_counts_up_to_now_and_is_summed_once_it_ends(
    store_url: str, reader: EventStore
) -> None:
    """What the run's end event reports when training ends before the database is back."""
    opener = FlakyOpener(store_url, failures=10**6)  # down until the test lets it up
    writer = BackgroundWriter(opener, url=store_url, backoff_s=0.01, max_backoff_s=0.05)
    assert not writer.failing and writer.outage_so_far_s() == 0.0
    writer.submit("run-a", _events(1))
    _wait(lambda: writer.stats.retries >= 2)
    assert writer.failing and writer.stats.outage_s == 0.0  # not over: not yet summed
    first = writer.outage_so_far_s()
    _wait(lambda: writer.outage_so_far_s() > first)  # it grows while it lasts
    opener.up.set()
    assert writer.flush(timeout_s=30)
    assert not writer.failing
    assert writer.stats.outage_s >= first and writer.outage_so_far_s() == writer.stats.outage_s
    assert writer.close(timeout_s=10)
    assert _reasons(reader, "run-a") == ["e0"]


def test_submit_returns_while_the_database_cannot_even_be_opened(
    store_url: str, reader: EventStore
) -> None:
    """The caller never waits for the database: the store opens only once the test lets it,
    after submit() returned (a submit that waited would hang here, not be slow)."""
    gate = threading.Event()
    entered = threading.Event()

    def opener() -> EventStore:
        entered.set()
        assert gate.wait(60), "the test never let the database come up"
        return EventStore.open(store_url)

    writer = BackgroundWriter(opener, url=store_url)
    writer.submit("run-a", _events(3))
    assert entered.wait(30)  # the writer's thread is in the open, blocked
    writer.submit("run-a", _events(2, "late"))  # and still nothing waits
    assert writer.pending == 5
    gate.set()
    assert writer.close(timeout_s=30)
    assert _reasons(reader, "run-a") == ["e0", "e1", "e2", "late0", "late1"]


def test_a_lost_reply_retried_writes_nothing_twice(store_url: str, reader: EventStore) -> None:
    events = _events(3)

    class LostReply:
        """The first append is stored, then fails as a dropped connection would."""

        def __init__(self) -> None:
            self.store = EventStore.open(store_url)
            self.lost = False

        def append(
            self, stream: str, batch: list[Any], fence: Any = None, expected_version: Any = ANY
        ) -> Any:
            recorded = self.store.append(
                stream, batch, fence=fence, expected_version=expected_version
            )
            if not self.lost:
                self.lost = True
                raise StoreUnavailableError("connection lost after the commit (test)")
            return recorded

        def close(self) -> None:
            pass

    store = LostReply()
    writer = BackgroundWriter(lambda: store, url=store_url, backoff_s=0.01)
    writer.submit("run-a", events)
    assert writer.close(timeout_s=10)
    store.store.close()
    assert _reasons(reader, "run-a") == ["e0", "e1", "e2"]
    assert writer.stats.retries == 1


def test_strict_check_raises_once_appends_fail_past_the_retry_limit(store_url: str) -> None:
    opener = FlakyOpener(store_url, failures=10**6)
    writer = BackgroundWriter(opener, url=store_url, retry_limit_s=0.2, backoff_s=0.01)
    writer.submit("run-a", _events(1))
    writer.check()  # not yet past the limit
    _wait(lambda: writer.failure is not None)
    with pytest.raises(RecordingError, match="cannot record the Ray Train run") as info:
        writer.check()
    assert "down (test)" in str(info.value) and "strict=False" in str(info.value)
    assert not writer.close(timeout_s=0.2)
    assert writer.stats.dropped == 1


def test_close_is_bounded_and_reports_what_was_not_written(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = BackgroundWriter(FlakyOpener(store_url, failures=10**6), url=store_url, backoff_s=0.01)
    writer.submit("run-a", _events(7))
    with caplog.at_level(logging.ERROR, logger="wgstore.ray_train"):
        started = time.monotonic()
        assert writer.close(timeout_s=0.5) is False
        took = time.monotonic() - started
    assert took < 30.0  # bounded: the store never comes back, so an unbounded close never ends
    assert writer.stats.dropped == 7
    assert any("7 event(s) not recorded" in r.getMessage() for r in caplog.records)


def test_a_slow_database_counts_as_failing_for_strict_and_is_written_when_it_frees(
    store_url: str, reader: EventStore
) -> None:
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url, retry_limit_s=0.3)
    writer.submit("run-a", _events(1, "before"))
    assert writer.flush(timeout_s=30)
    release = _hold_write_lock(store_url)
    try:
        writer.submit("run-a", _events(2, "during"))
        _wait(lambda: writer.failure is not None)
        assert "cannot record" in str(writer.failure)
    finally:
        release()
    assert writer.close(timeout_s=60)
    assert _reasons(reader, "run-a") == ["before0", "during0", "during1"]


def test_events_that_cannot_be_stored_are_dropped_and_reported_not_retried(
    store_url: str, reader: EventStore
) -> None:
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    writer.submit("run-a", [NewEvent(RunAborted(reason=object()))])  # type: ignore[arg-type]
    writer.submit("run-b", _events(1))
    assert writer.close(timeout_s=30) is False
    assert writer.stats.dropped == 1 and writer.stats.retries == 0
    assert "EventEncodeError" in writer.stats.problems[0]
    assert _reasons(reader, "run-b") == ["e0"]
    with pytest.raises(RecordingError):
        writer.check()


def test_a_full_queue_drops_new_events_instead_of_growing(store_url: str) -> None:
    opener = FlakyOpener(store_url, failures=10**6)
    writer = BackgroundWriter(opener, url=store_url, max_pending=5, backoff_s=0.01)
    writer.submit("run-a", _events(5))
    writer.submit("run-a", _events(3, "x"))
    assert writer.stats.dropped == 3
    assert "more than 5 events waiting" in writer.stats.problems[-1]
    writer.close(timeout_s=0.2)


def _hold_write_lock(url: str) -> Callable[[], None]:
    """Another transaction holds the write lock on the log until the returned call."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1], isolation_level=None, timeout=10)
        conn.execute("BEGIN EXCLUSIVE")
        return lambda: (conn.execute("ROLLBACK"), conn.close())  # type: ignore[func-returns-value]
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    conn = engine.connect()
    transaction = conn.begin()
    conn.execute(sa.text("LOCK TABLE wg_events IN ACCESS EXCLUSIVE MODE"))

    def release() -> None:
        transaction.rollback()
        conn.close()
        engine.dispose()

    return release


class CountingOpener:
    """Opens the real store and counts the opens."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened = threading.Event()

    def __call__(self) -> EventStore:
        self.opened.set()
        return EventStore.open(self.url)


def test_a_held_writer_opens_nothing_until_released_then_writes_everything(
    store_url: str, reader: EventStore
) -> None:
    opener = CountingOpener(store_url)
    writer = BackgroundWriter(opener, linger_s=0.0, hold_s=60.0)
    writer.submit("run-held", _events(3))
    # The hold is the point: nothing opens while it lasts (waited on with a deadline below).
    assert not opener.opened.wait(0.3)
    assert writer.pending == 3
    writer.release()
    _wait(lambda: writer.pending == 0)
    assert _reasons(reader, "run-held") == ["e0", "e1", "e2"]
    assert writer.close(5.0)


def test_the_hold_ends_by_itself_after_hold_s(store_url: str, reader: EventStore) -> None:
    opener = CountingOpener(store_url)
    writer = BackgroundWriter(opener, linger_s=0.0, hold_s=0.5)
    started = time.monotonic()
    writer.submit("run-bound", _events(2))
    assert opener.opened.wait(10.0)
    assert time.monotonic() - started >= 0.45
    _wait(lambda: writer.pending == 0)
    assert _reasons(reader, "run-bound") == ["e0", "e1"]
    assert writer.close(5.0)


@pytest.mark.parametrize("end", ["flush", "close"])
def test_flush_and_close_do_not_wait_for_the_hold(
    store_url: str, reader: EventStore, end: str
) -> None:
    writer = BackgroundWriter(CountingOpener(store_url), hold_s=60.0)
    writer.submit("run-end", _events(4))
    started = time.monotonic()
    done = writer.flush(30.0) if end == "flush" else writer.close(30.0)
    assert done
    assert time.monotonic() - started < 30.0
    assert _reasons(reader, "run-end") == ["e0", "e1", "e2", "e3"]
    writer.close(5.0)


def test_a_store_first_opened_at_close_gets_the_open_s_time_on_top_of_the_flush_bound(
    store_url: str, reader: EventStore
) -> None:
    """A Ray Train run that ends before training starts is recorded by the final flush alone,
    which opens the store first (held until then); under stress --cpu 2 that open outlasted
    the 10 s bound, and the writer stopped after its first batch. The bound is for writing."""

    bound_s = 1.0
    closing_at: list[float] = []

    def open_after_the_bound() -> EventStore:
        """A loaded machine's open (imports, the version check, the lease): it ends half a
        second after the flush bound ran out."""
        wait_until(
            lambda: bool(closing_at) and time.monotonic() > closing_at[0] + bound_s + 0.5,
            timeout_s=60,
            what="close() called and its bound run out",
        )
        return EventStore.open(store_url)

    writer = BackgroundWriter(open_after_the_bound, url=store_url, hold_s=60.0)
    writer.submit("run-a", _events(3, "a"))
    writer.submit("group-b", _events(2, "b"))  # another stream: another batch
    writer.submit("run-a", _events(1, "c"))
    closing_at.append(time.monotonic())
    assert writer.close(timeout_s=bound_s)
    assert writer.stats.dropped == 0
    assert _reasons(reader, "run-a") == ["a0", "a1", "a2", "c0"]
    assert _reasons(reader, "group-b") == ["b0", "b1"]


def test_blobs_are_stored_before_the_event_that_names_them_even_after_a_retry(
    store_url: str, reader: EventStore
) -> None:
    from wgstore.events.blobs import get_blob, sha256_of

    opener = FlakyOpener(store_url, failures=2)
    writer = BackgroundWriter(opener, url=store_url, backoff_s=0.01, max_backoff_s=0.05)
    big = b"x" * 300_000
    writer.submit("run-a", _events(2, "spec"), blobs=[big])
    assert writer.close(timeout_s=30)
    assert opener.calls == 3 and writer.stats.dropped == 0
    assert _reasons(reader, "run-a") == ["spec0", "spec1"]
    assert get_blob(reader, sha256_of(big)) == big


def test_a_writer_whose_lease_passed_to_another_writes_nothing_more(
    store_url: str, reader: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A recording controller paused past its lease (SIGSTOP, a VM pause) while a resume took
    the run over: the database refuses its fenced appends, and it stops, once, loudly."""
    from wgstore.events.leases import acquire_lease

    lease = acquire_lease(reader, "r1", "controller-a", 30.0)
    assert lease is not None
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    writer.fence = lease.fence
    writer.submit("run-r1", _events(3, "before-"))
    assert writer.flush(30)
    taken = acquire_lease(reader, "r1", "resume-b", 30.0, take_from=lease.fence)
    assert taken is not None and taken.epoch == lease.epoch + 1
    reader.append("run-r1", _events(1, "resume-"))  # the new holder writes on
    with caplog.at_level(logging.ERROR, logger="wgstore"):
        writer.submit("run-r1", _events(2, "after-"))
        _wait(lambda: writer.pending == 0)
        writer.submit("run-r1", _events(4, "later-"))  # dropped at once, not said again
    assert not writer.close(timeout_s=30)
    assert _reasons(reader, "run-r1") == ["before-0", "before-1", "before-2", "resume-0"]
    assert writer.stats.dropped == 6 and writer.stats.written == 3
    said = [r.getMessage() for r in caplog.records if "resume-b" in r.getMessage()]
    assert len(said) == 1 and "another process records this run now" in said[0]


def test_a_writer_fenced_off_before_opening_drops_what_it_held(
    store_url: str, reader: EventStore
) -> None:
    """The recorder found the run held by a live process when it opened the store: what it
    queued while holding is dropped, nothing is appended."""
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url, hold_s=60)
    writer.submit("run-r2", _events(5))
    writer.fenced_off("run r2 is held by 'resume-b', a live process: this controller does not")
    writer.submit("run-r2", _events(1))
    assert not writer.close(timeout_s=30)
    assert writer.stats.dropped == 6 and writer.stats.written == 0
    assert reader.stream_version("run-r2") == 0
    assert any("held by 'resume-b'" in p for p in writer.stats.problems)


def _projected(store: EventStore) -> int:
    """Where the read models' checkpoint stands."""
    from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION

    checkpoint: int = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    return checkpoint


def test_the_writer_keeps_the_read_models_current_while_it_writes_and_at_close(
    store_url: str, reader: EventStore
) -> None:
    writer = BackgroundWriter(
        lambda: EventStore.open(store_url), url=store_url, linger_s=0.0, read_models_interval_s=0.1
    )
    writer.submit("run-rm", _events(3))
    # caught up after the interval, with no later write to trigger it
    _wait(lambda: reader.head() == 3 and _projected(reader) == 3)
    writer.submit("run-rm", _events(2, "end"))
    assert writer.close(timeout_s=30)
    assert reader.head() == 5 and _projected(reader) == 5  # the close caught the rest up


def test_without_an_interval_the_writer_leaves_the_read_models_alone(
    store_url: str, reader: EventStore
) -> None:
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    writer.submit("run-rm", _events(3))
    assert writer.close(timeout_s=30)
    assert reader.head() == 3 and _projected(reader) == 0


def test_the_writer_catches_a_backlog_up_a_bounded_amount_at_a_time(
    store_url: str, reader: EventStore
) -> None:
    """A log nobody projected: one catch-up of the writer applies at most READ_MODEL_BATCHES
    batches of 500 (the controller's CPU is not spent on others' backlog in one go)."""
    from wgstore.orchestration.ray_train.writer import READ_MODEL_BATCHES

    backlog = READ_MODEL_BATCHES * 500 + 300
    reader.append("run-old", _events(backlog, "old"))
    writer = BackgroundWriter(
        lambda: EventStore.open(store_url), url=store_url, read_models_interval_s=3600.0
    )
    writer.submit("run-rm", _events(1))
    assert writer.close(timeout_s=60)  # the interval never came: only the final catch-up ran
    assert reader.head() == backlog + 1
    assert _projected(reader) == READ_MODEL_BATCHES * 500


def _block_read_models(store: EventStore, *, blocked: bool) -> None:
    """Make the read models' checkpoint unwritable (a trigger that raises), or writable again."""
    import sqlalchemy as sa

    message = "read models unwritable (test)"
    with store.engine.begin() as connection:
        if store.is_postgres:
            if blocked:
                connection.execute(
                    sa.text(
                        "CREATE FUNCTION wg_test_block() RETURNS trigger LANGUAGE plpgsql AS "
                        f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$"
                    )
                )
                connection.execute(
                    sa.text(
                        "CREATE TRIGGER wg_test_block BEFORE INSERT OR UPDATE ON wg_subscriptions "
                        "FOR EACH ROW EXECUTE FUNCTION wg_test_block()"
                    )
                )
            else:
                connection.execute(sa.text("DROP TRIGGER wg_test_block ON wg_subscriptions"))
                connection.execute(sa.text("DROP FUNCTION wg_test_block()"))
        elif blocked:
            for what in ("INSERT", "UPDATE"):
                connection.execute(
                    sa.text(
                        f"CREATE TRIGGER wg_test_block_{what} BEFORE {what} ON wg_subscriptions "
                        f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
                    )
                )
        else:
            for what in ("INSERT", "UPDATE"):
                connection.execute(sa.text(f"DROP TRIGGER wg_test_block_{what}"))


def test_a_read_model_failure_is_logged_once_loses_no_event_and_is_tried_again(
    store_url: str, reader: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    _block_read_models(reader, blocked=True)
    writer = BackgroundWriter(
        lambda: EventStore.open(store_url), url=store_url, linger_s=0.0, read_models_interval_s=0.05
    )
    with caplog.at_level(logging.WARNING, logger="wgstore.ray_train"):
        writer.submit("run-rm", _events(2))

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if "read models" in r.getMessage()]

        _wait(lambda: len(said()) == 1)
        writer.submit("run-rm", _events(1, "more"))  # writing goes on meanwhile
        _wait(lambda: reader.head() == 3)
        _block_read_models(reader, blocked=False)
        _wait(lambda: _projected(reader) == 3)  # tried again at a later interval
        assert writer.close(timeout_s=30)
    assert _reasons(reader, "run-rm") == ["e0", "e1", "more0"] and writer.stats.dropped == 0
    assert len(said()) == 1 and "projections catch-up" in said()[0]


def test_a_run_already_read_from_rays_export_events_is_not_written_into(
    store_url: str, reader: EventStore
) -> None:
    """`wgstore ingest ray-export` recorded the run first: the callback's RunCreated would be a
    second one (the run unreadable to every reader), so the writer stops instead."""
    from wgstore.events.run import ControllerStarted, RunCreated

    ingested = [NewEvent(RunCreated(run_id="r"), metadata={"source": "ray_export"})]
    reader.append("run-r", ingested)
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    writer.submit(
        "run-r", [NewEvent(RunCreated(run_id="r")), NewEvent(ControllerStarted(controller_id="c"))]
    )
    writer.submit("worker-group-g", _events(2))
    writer.close(timeout_s=30)
    assert [r.metadata["source"] for r in reader.read_stream("run-r")] == ["ray_export"]
    assert reader.stream_version("worker-group-g") == 0
    assert writer.stats.written == 0 and writer.stats.dropped == 4
    assert any("Ray's export events" in p for p in writer.stats.problems)


def test_the_callbacks_first_append_is_retried_idempotently_despite_its_no_stream_check(
    store_url: str, reader: EventStore
) -> None:
    """A RunCreated batch that committed but whose reply was lost is written again as itself:
    the check that the stream is new does not refuse the callback's own retry."""
    from wgstore.events.run import RunCreated

    created = NewEvent(RunCreated(run_id="r2"), event_id=uuid.uuid4())
    reader.append("run-r2", [created])  # the first try committed
    writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    writer.submit("run-r2", [created])
    assert writer.close(timeout_s=30)
    assert writer.stats.written == 1 and not writer.stats.problems
    assert reader.stream_version("run-r2") == 1
