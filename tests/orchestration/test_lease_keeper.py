"""``LeaseKeeper``s of one store share one renewal thread and one statement per renewal (issue
25: a fleet process's controllers renewed their leases one transaction each, 13 % of its CPU).
Real stores on both backends; short leases, waits on conditions with generous deadlines."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.relay import Relay
from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.leases import acquire_lease, lease_of, renew_held
from wgstore.orchestration.leases.keeper import LeaseKeeper

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _renewed_at(store: Any, run_id: str) -> datetime:
    lease = lease_of(store, run_id)
    assert lease is not None
    return lease.renewed_at


def _kept(store: Any, run_id: str, holder: str, lease_s: float = 0.9) -> LeaseKeeper:
    """A keeper of a lease ``holder`` has just taken."""
    lease = acquire_lease(store, run_id, holder, lease_s)
    assert lease is not None
    return LeaseKeeper(store, lease, lease_s)


def _wait_renewed_after(store: Any, run_id: str, moment: datetime, what: str) -> None:
    """Wait (60 s at most) until ``run_id``'s lease was renewed after ``moment``."""
    wait_until(lambda: _renewed_at(store, run_id) > moment, timeout_s=60, what=what)


def _renewal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wgstore-lease-renewals"]


def test_renew_held_renews_only_the_pairs_whose_holder_still_holds(store: Any) -> None:
    assert acquire_lease(store, "r1", "a", 10, now=T0)
    assert acquire_lease(store, "r2", "b", 10, now=T0)
    assert acquire_lease(store, "r3", "c", 10, now=T0)
    assert acquire_lease(store, "r3", "thief", 10, now=T0 + timedelta(seconds=11))  # taken over
    later = T0 + timedelta(seconds=12)
    renewed = renew_held(store, [("r1", "a"), ("r2", "b"), ("r3", "c"), ("r4", "d")], 10, later)
    assert renewed == {("r1", "a"), ("r2", "b")}
    assert _renewed_at(store, "r1") == _renewed_at(store, "r2") == later
    assert lease_of(store, "r1").expires_at == later + timedelta(seconds=10)  # type: ignore[union-attr]
    assert lease_of(store, "r3").holder == "thief"  # type: ignore[union-attr]
    assert _renewed_at(store, "r3") == T0 + timedelta(seconds=11)  # the thief's, untouched
    assert renew_held(store, [], 10, later) == set()


def test_renew_held_takes_ids_with_quotes_and_any_letters(store: Any) -> None:
    odd = ("run 'one\" ,", "holder é 世界 \\")
    assert acquire_lease(store, *odd, 10, now=T0)
    later = T0 + timedelta(seconds=3)
    assert renew_held(store, [odd, ("run 'one\" ,", "someone else")], 10, later) == {odd}
    assert _renewed_at(store, odd[0]) == later


def test_keepers_of_one_store_are_renewed_together_by_one_thread(store: Any) -> None:
    """Five holders, one thread; each renewal of the batch is one statement (one ``now`` for
    every row), and every lease keeps ahead of the clock for several lengths."""
    before = len(_renewal_threads())
    keepers = [_kept(store, f"r{n}", f"holder-{n}") for n in range(5)]
    try:
        assert len(_renewal_threads()) == before + 1
        first = _renewed_at(store, "r0")
        _wait_renewed_after(store, "r0", first + timedelta(seconds=1.2), "several renewals")
        times = {_renewed_at(store, f"r{n}") for n in range(5)}
        assert len(times) == 1, f"the five leases were renewed apart: {times}"
        assert not any(k.lost for k in keepers)
    finally:
        for keeper in keepers:
            keeper.stop(release=True)
    assert all(lease_of(store, f"r{n}") is None for n in range(5))
    wait_until(
        lambda: len(_renewal_threads()) == before,
        timeout_s=60,
        what="the renewal thread to end with its last keeper",
    )


def test_a_lease_taken_over_is_lost_and_the_others_go_on(store: Any) -> None:
    a = _kept(store, "ra", "a")
    b = _kept(store, "rb", "b")
    try:
        ahead = datetime.now(UTC) + timedelta(minutes=5)
        assert acquire_lease(store, "ra", "thief", 0.9, now=ahead)
        wait_until(lambda: a.lost, timeout_s=60, what="the keeper to find its lease taken")
        first = _renewed_at(store, "rb")
        _wait_renewed_after(store, "rb", first, "the other lease to be renewed still")
        assert not b.lost
        assert lease_of(store, "ra").holder == "thief"  # type: ignore[union-attr]
        a.stop(release=True)  # lost: it does not release the thief's lease
        assert lease_of(store, "ra").holder == "thief"  # type: ignore[union-attr]
    finally:
        b.stop()


def test_a_stopped_keeper_renews_no_more_while_the_others_do(store: Any) -> None:
    stopped = _kept(store, "rs", "s")
    going = _kept(store, "rg", "g")
    try:
        stopped.stop()
        last = _renewed_at(store, "rs")
        first = _renewed_at(store, "rg")
        _wait_renewed_after(
            store, "rg", first + timedelta(seconds=0.6), "two renewals of the other keeper"
        )
        assert _renewed_at(store, "rs") == last
        assert lease_of(store, "rs").holder == "s"  # type: ignore[union-attr]  # not released
    finally:
        going.stop()


def test_leases_of_different_lengths_are_each_renewed_at_their_own_pace(store: Any) -> None:
    short = _kept(store, "short", "a", 0.6)
    long_ = _kept(store, "long", "b", 600.0)
    try:
        long_first = _renewed_at(store, "long")
        first = _renewed_at(store, "short")
        _wait_renewed_after(
            store,
            "short",
            first + timedelta(seconds=0.8),
            "the short lease to be renewed several times",
        )
        assert _renewed_at(store, "long") == long_first  # due in 200 s, not taken along
        assert not short.lost and not long_.lost
    finally:
        short.stop()
        long_.stop()


def test_a_renewal_that_meets_the_database_gone_is_tried_again(
    relayed: tuple[str, Relay], caplog: pytest.LogCaptureFixture
) -> None:
    """Postgres goes away (a relay in front of it, cut): the renewal fails and is logged, the
    lease is not taken for lost, and once the database is back the next renewal keeps it."""
    url, relay = relayed
    with EventStore.open(url) as store:
        keeper = _kept(store, "r1", "a")
        try:
            relay.cut()
            wait_until(
                lambda: "could not renew the lease of run(s) r1" in caplog.text,
                timeout_s=60,
                what="a renewal to meet the database gone",
            )
            assert not keeper.lost
            relay.restore()
            failed_at = datetime.now(UTC)
            _wait_renewed_after(store, "r1", failed_at, "a renewal once the database is back")
            assert not keeper.lost
        finally:
            keeper.stop()
