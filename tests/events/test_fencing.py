"""Leases fence appends, and appends can span streams atomically (both backends).

The database checks the lease in the append's own transaction: a holder that lost its lease
(it paused past it and someone took over) writes nothing, whatever it believes.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.waiting import wait_until
from wgstore.events import (
    ANY,
    NO_STREAM,
    AppendRequest,
    ConcurrencyError,
    EventStore,
    Fence,
    FencedError,
    InvalidArgumentError,
    NewEvent,
    StoreUnavailableError,
)
from wgstore.events._translate import translate_errors
from wgstore.events.leases import (
    acquire_lease,
    lease_of,
    release_lease,
    renew_lease,
    renew_leases,
)
from wgstore.events.worker_group import WorkerGroupShutdownRequested

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _event(reason: str = "x") -> WorkerGroupShutdownRequested:
    return WorkerGroupShutdownRequested(reason=reason)


def _log(store: EventStore) -> list[tuple[str, int]]:
    return [(record.stream_id, record.version) for record in store.read_all()]


def test_epochs_grow_when_a_lease_changes_hands_and_not_when_it_is_renewed(store):
    first = acquire_lease(store, "r1", "a", 10, now=T0)
    assert first is not None and first.epoch == 1
    again = acquire_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=5))
    assert again is not None and again.epoch == 1
    assert renew_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=6))
    taken = acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=16))
    assert taken is not None and taken.epoch == 2
    assert lease_of(store, "r1").fence == Fence("r1", "b", 2)
    back = acquire_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=30))
    assert back is not None and back.epoch == 3


def test_the_holder_appends_with_its_fence(store):
    lease = acquire_lease(store, "r1", "a", 60)
    [record] = store.append("s", [_event()], expected_version=NO_STREAM, fence=lease.fence)
    assert record.version == 1
    assert _log(store) == [("s", 1)]


def test_a_holder_whose_lease_was_taken_over_writes_nothing(store):
    old = acquire_lease(store, "r1", "a", 10, now=T0)
    new = acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=11))
    assert new is not None
    with pytest.raises(FencedError) as refused:
        store.append("s", [_event("late")], fence=old.fence)
    error = refused.value
    assert (error.holder, error.epoch, error.now_holder, error.now_epoch) == ("a", 1, "b", 2)
    assert "lost the lease" in str(error)
    assert _log(store) == []
    store.append("s", [_event("new holder")], fence=new.fence)
    assert _log(store) == [("s", 1)]


def test_a_fence_with_a_stale_epoch_is_refused_even_for_the_same_holder_name(store):
    acquire_lease(store, "r1", "a", 10, now=T0)
    acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=11))
    acquire_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=22))  # epoch 3
    with pytest.raises(FencedError):
        store.append("s", [_event()], fence=Fence("r1", "a", 1))
    assert _log(store) == []


def test_a_released_or_unknown_lease_fences_everything(store):
    lease = acquire_lease(store, "r1", "a", 60)
    assert release_lease(store, "r1", "a")
    with pytest.raises(FencedError) as refused:
        store.append("s", [_event()], fence=lease.fence)
    assert refused.value.now_holder is None
    with pytest.raises(FencedError):
        store.append("s", [_event()], fence=Fence("nobody", "a", 1))
    assert _log(store) == []


def test_an_append_racing_a_takeover_is_either_before_it_or_refused(store_url):
    """Each of many appends of the old holder commits before the takeover or is refused: none
    lands after the new holder's first append (the check and the write are one transaction)."""
    with EventStore.open(store_url) as store:
        old = acquire_lease(store, "race", "old", 60, now=T0)
        go = threading.Barrier(2)
        outcomes: list[str] = []

        def old_holder() -> None:
            with EventStore.open(store_url) as own:
                go.wait()
                for n in range(40):
                    try:
                        own.append("s", [_event(f"old {n}")], fence=old.fence)
                        outcomes.append("ok")
                    except FencedError:
                        outcomes.append("fenced")

        thread = threading.Thread(target=old_holder)
        thread.start()
        go.wait()
        new = acquire_lease(store, "race", "new", 60, now=T0 + timedelta(seconds=61))
        store.append("s", [_event("new holder")], fence=new.fence)
        thread.join()
        reasons = [record.event.reason for record in store.read_stream("s")]
    first_new = reasons.index("new holder")
    assert all(reason.startswith("old") for reason in reasons[:first_new])
    assert all(not reason.startswith("old") for reason in reasons[first_new:])
    # Once fenced, always fenced: no "ok" after the first "fenced".
    if "fenced" in outcomes:
        assert "ok" not in outcomes[outcomes.index("fenced") :]
    assert outcomes.count("ok") == first_new


def test_a_multi_stream_append_writes_every_stream_or_none(store):
    store.append("b", [_event()])
    appended = store.append_many(
        [
            AppendRequest("a", [_event("a1"), _event("a2")], NO_STREAM),
            AppendRequest("b", [_event("b2")], 1),
        ]
    )
    assert [[r.version for r in records] for records in appended] == [[1, 2], [2]]
    positions = [r.position for records in appended for r in records]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert store.verify().ok

    with pytest.raises(ConcurrencyError) as stale:
        store.append_many(
            [AppendRequest("a", [_event("a3")], 2), AppendRequest("b", [_event("b3")], 1)]
        )
    assert stale.value.stream_id == "b" and stale.value.actual == 2
    assert store.stream_version("a") == 2  # "a" was fine, and still nothing was written
    assert store.stream_version("b") == 2


def test_a_fenced_multi_stream_append_is_refused_whole(store):
    old = acquire_lease(store, "r1", "a", 10, now=T0)
    acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=11))
    with pytest.raises(FencedError):
        store.append_many(
            [AppendRequest("run-x", [_event()], ANY), AppendRequest("g", [_event()], NO_STREAM)],
            fence=old.fence,
        )
    assert _log(store) == []


def test_a_retried_multi_stream_append_returns_what_it_stored(store):
    ids = [uuid.uuid4() for _ in range(3)]
    requests = [
        AppendRequest("a", [NewEvent(_event(), event_id=ids[0])], NO_STREAM),
        AppendRequest("b", [NewEvent(_event(), event_id=i) for i in ids[1:]], NO_STREAM),
    ]
    first = store.append_many(requests)
    again = store.append_many(requests)
    assert [[r.position for r in batch] for batch in again] == [
        [r.position for r in batch] for batch in first
    ]
    assert len(_log(store)) == 3
    # The same ids split differently are not a retry.
    from wgstore.events import DuplicateEventError

    with pytest.raises(DuplicateEventError):
        store.append_many(
            [
                AppendRequest("a", [NewEvent(_event(), event_id=ids[0])]),
                AppendRequest("c", [NewEvent(_event(), event_id=uuid.uuid4())]),
            ]
        )
    assert len(_log(store)) == 3


def test_bad_multi_stream_requests_are_refused_before_anything_is_written(store):
    with pytest.raises(InvalidArgumentError, match="named twice"):
        store.append_many([AppendRequest("a", [_event()]), AppendRequest("a", [_event()])])
    with pytest.raises(TypeError, match="AppendRequest"):
        store.append_many([("a", [_event()])])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="Fence"):
        store.append("a", [_event()], fence=("r1", "a", 1))  # type: ignore[arg-type]
    assert store.append_many([AppendRequest("a", [])]) == [[]]
    assert _log(store) == []


def test_fenced_multi_stream_appends_with_an_hmac_key_are_atomic_and_verify(store_url):
    """With a key, appends take the keyed path (MACs computed under the lock, in the client):
    fencing and atomicity hold there too, and every MAC verifies."""
    with EventStore.open(store_url, hmac_key=b"k" * 32) as store:
        old = acquire_lease(store, "r1", "a", 10, now=T0)
        store.append_many(
            [AppendRequest("a", [_event("a1")], NO_STREAM), AppendRequest("b", [_event("b1")])],
            fence=old.fence,
        )
        with pytest.raises(ConcurrencyError) as stale:
            store.append_many(
                [AppendRequest("a", [_event("a2")], 1), AppendRequest("b", [_event("b2")], 5)],
                fence=old.fence,
            )
        assert stale.value.stream_id == "b"
        acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=11))
        with pytest.raises(FencedError):
            store.append("a", [_event("late")], fence=old.fence)
        assert _log(store) == [("a", 1), ("b", 1)]
        report = store.verify()
        assert report.ok, report.problems


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_renewal_of_several_leases_and_a_check_of_their_fences_never_wait_in_a_circle(store):
    """A group of fenced appends checks its leases in their order, each check holding its
    lease row until the commit; a renewal of several leases locks their rows in that order too.
    Were it to lock them as it finds them, it could hold one the group waits for while it waits
    for one the group holds, until Postgres's deadlock check failed one of them."""
    b = acquire_lease(store, "b", "h", 60).fence  # first in the table, last in order
    a = acquire_lease(store, "a", "h", 60).fence
    check = "SELECT wg_check_fence(%s, %s, %s)"
    renewed: dict[str, object] = {}

    def renew() -> None:
        try:
            renewed["ids"] = renew_leases(store, ["b", "a"], "h", 60)
        except Exception as error:  # noqa: BLE001 - the assertion below shows it
            renewed["ids"] = error

    def blocked_by(pid: int) -> int:
        with store.engine.connect() as watcher:  # a new snapshot of the activity each time
            return watcher.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (pid,),
            ).scalar_one()

    with store.engine.connect() as group:
        transaction = group.begin()
        group.exec_driver_sql(check, (a.lease, a.holder, a.epoch))
        pid = group.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        renewal = threading.Thread(target=renew)
        renewal.start()
        wait_until(
            lambda: blocked_by(pid) == 1,
            timeout_s=60,
            what="the renewal waiting for the group's lease row",
        )
        group.exec_driver_sql(check, (b.lease, b.holder, b.epoch))  # the renewal holds none
        transaction.commit()
        renewal.join(timeout=60)
    assert renewed["ids"] == {"a", "b"}


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_deadlock_is_told_as_a_rolled_back_transaction_not_an_unreachable_server(store):
    """Two transactions that lock two lease rows in opposite orders: Postgres fails one of them
    (``DeadlockDetected``, an OperationalError to psycopg), and the user is told the server
    rolled it back and nothing was written, not to check that the server is running."""
    for lease in ("a", "b"):
        acquire_lease(store, lease, "h", 60)
    lock = "SELECT 1 FROM wg_run_leases WHERE run_id = %s FOR UPDATE"
    errors: list[BaseException] = []
    both_hold_one = threading.Barrier(2, timeout=60)

    def lock_both(first: str, second: str) -> None:
        try:
            with translate_errors(store.url), store.engine.begin() as connection:
                connection.exec_driver_sql(lock, (first,))
                both_hold_one.wait()
                connection.exec_driver_sql(lock, (second,))
        except StoreUnavailableError as error:
            errors.append(error)

    threads = [threading.Thread(target=lock_both, args=order) for order in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    (error,) = errors
    assert "rolled the transaction back (deadlock detected" in str(error)
    assert "nothing of it was written: retry" in str(error)
    assert "cannot reach" not in str(error)


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_lock_wait_that_runs_out_names_what_it_waited_for(store):
    """A takeover that waits out its lock_timeout on a lease row (a fenced append of its holder
    not yet committed) is told it waited for the lease's row, not for "the append lock on
    wg_events"; an append that waited for the table lock is told that. The statements are the
    takeover's UPDATE and the append's wg_append, with a short lock_timeout of their own."""
    acquire_lease(store, "r1", "a", 60)
    wg_append = (
        "SELECT * FROM wg_append('s', -1, ARRAY[gen_random_uuid()], ARRAY['T'], "
        "ARRAY[1::smallint], ARRAY['{}'::jsonb], ARRAY['{}'::jsonb], ARRAY[NULL::text], false)"
    )
    errors: dict[str, str] = {}
    with store.engine.connect() as holder, store.engine.connect() as waiter:
        holding = holder.begin()
        holder.exec_driver_sql("SELECT wg_check_fence('r1', 'a', 1)")  # the lease row, FOR SHARE
        holder.exec_driver_sql("LOCK TABLE wg_events IN EXCLUSIVE MODE")  # the append lock
        for name, statement in (
            ("takeover", "UPDATE wg_run_leases SET epoch = epoch + 1 WHERE run_id = 'r1'"),
            ("append", wg_append),
        ):
            # in each statement's transaction: the rollback below undoes a SET made before it
            waiter.exec_driver_sql("SET lock_timeout = 200")
            with pytest.raises(StoreUnavailableError) as waited, translate_errors(store.url):
                waiter.exec_driver_sql(statement)
            errors[name] = str(waited.value)
            waiter.rollback()
        holding.rollback()
    assert "waited too long for a lease's row in wg_run_leases" in errors["takeover"]
    assert "append lock" not in errors["takeover"]
    assert "waited too long for the append lock on wg_events" in errors["append"]
